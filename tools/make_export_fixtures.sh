#!/usr/bin/env bash
# Trains three tiny models with `tandem train` (a Llama fp32, untied; a Qwen3 bf16 with tied
# embeddings and explicit head_dim; a MiniMax-M2-layout mixture of experts, fp32, trained with the
# router's load-balancing loss: its routers and correction biases are written per expert, as the
# hub stores them), keeps their exports under tests/fixtures/exports/, and
# records transformers' logits on each (tools/check_export_in_transformers.py). Run by hand
# after `scripts/setup.sh --tools`; the outputs are committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/data.jsonl" <<'PY'
import json, random, sys
r = random.Random(11)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        n = 8 + r.randrange(24)
        ids = [r.randrange(97) for _ in range(n)]
        f.write(json.dumps({"input_ids": ids, "loss_mask": [1] * n}) + "\n")
PY
for name in llama-fp32 qwen3-bf16 minimax-moe-fp32; do
  cat > "$work/$name.yaml" <<YAML
model:
  config: tests/fixtures/exports/$name.model.json
  dtype: $([ $name = qwen3-bf16 ] && echo bf16 || echo fp32)
  init_std: 0.2
$([ $name = minimax-moe-fp32 ] && echo "loss: {router_aux_loss_coef: 0.01}")
data:
  path: $work/data.jsonl
  format: pretokenized
  seq_len: 48
  micro_batch_rows: 2
  cache_dir: $work/cache
training:
  run_dir: $work/$name
  steps: 20
  lr: 0.003
  seed: 5
YAML
  build/tandem --threads 1 train "$work/$name.yaml" >/dev/null
  rm -rf "tests/fixtures/exports/$name"
  cp -r "$work/$name/export" "tests/fixtures/exports/$name"
  .venv-tools/bin/python tools/check_export_in_transformers.py "tests/fixtures/exports/$name" 2>/dev/null
done
