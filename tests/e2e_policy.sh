#!/usr/bin/env bash
# End to end through the binary for the objectives that learn against a frozen reference or from
# rollouts, on a tiny model SFT-trained here from the demo data (a real HF checkpoint with the
# demo tokenizer):
#   DPO with the live reference, `tandem reference-logprobs`, DPO with the cached reference
#   (same losses step for step; first-step loss log 2 since policy = reference);
#   `tandem rollout` from the model, then GSPO and GRPO on those rollouts with docs_per_step
#   (on-policy first step: ratio 1, KL 0 -- the sampler's and the trainer's log-probs agree);
#   DPO, GRPO and distillation sharded over 2 ranks (distributed.mode: shard, torchrun): the
#   one-process losses (1e-5 relative) and final weights (1e-6; AdamW eps 1e-2, see
#   e2e_distributed.sh for why).
# Usage: tests/e2e_policy.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-policy-XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
source "$root/tests/dist_helpers.sh"  # one_vs_sharded

source "$root/tests/chat_helpers.sh"
tiny_chat_model "$work"
test -f "$work/base/export/config.json"
# The export as transformers reads it: its config, its generation config (the sampling defaults
# and stop ids vLLM takes from it), its tokenizer.
.venv-tools/bin/python - "$work/base/export" <<'PY'
import sys
from transformers import AutoConfig, AutoTokenizer, GenerationConfig
config = AutoConfig.from_pretrained(sys.argv[1])
generation = GenerationConfig.from_pretrained(sys.argv[1])
AutoTokenizer.from_pretrained(sys.argv[1])
assert generation.eos_token_id == config.eos_token_id, (generation.eos_token_id, config.eos_token_id)
print(f"  transformers reads the export: {config.model_type}, eos {generation.eos_token_id}")
PY

# Preference pairs: the true continuation of a passage is chosen over another passage's.
preference_pairs "$work/chat.jsonl" "$work/pairs.jsonl" 12
cat > "$work/dpo.yaml" <<YAML
model: {path: $work/base/export, dtype: fp32}
reference: {path: $work/base/export, dtype: fp32}
loss: {type: sigmoid, beta: 0.1, chunk_tokens: 256}
data: {path: $work/pairs.jsonl, format: preference, tokenizer: data/demo/tokenizer,
       seq_len: 512, micro_batch_rows: 2, cache_dir: $work/cache}
training: {objective: dpo, run_dir: $work/dpo-live, steps: 3, lr: 1.0e-3, log_every: 1}
YAML
echo "== DPO, live reference"
"$tandem" train "$work/dpo.yaml"
echo "== reference log-probs, then DPO from the cache"
"$tandem" reference-logprobs "$work/dpo.yaml" --out "$work/reference.safetensors"
"$tandem" train "$work/dpo.yaml" "reference.logprobs=$work/reference.safetensors" \
  "training.run_dir=$work/dpo-cached"
python3 - "$work/dpo-live/metrics.jsonl" "$work/dpo-cached/metrics.jsonl" <<'PY'
import json, math, sys
live, cached = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(live) == len(cached) == 3, (len(live), len(cached))
# Policy = reference: Delta = 0 up to fp32 summation order over ~300-token completions.
assert abs(live[0]["loss"] - math.log(2)) < 2e-5, live[0]["loss"]
for a, b in zip(live, cached):
    print(f"step {a['step']}: loss live {a['loss']:.7f} cached {b['loss']:.7f}  "
          f"margin {a['rewards/margin']:+.5f}  accuracy {a['rewards/accuracy']:.3f}")
    assert abs(a["loss"] - b["loss"]) <= 1e-5, "cached reference differs from the live one"
    assert abs(a["rewards/margin"] - b["rewards/margin"]) <= 1e-5
PY

echo "== rollouts, then GSPO and GRPO with docs_per_step"
"$tandem" rollout --model "$work/base/export" --tokenizer data/demo/tokenizer \
  --data "$work/chat.jsonl" --num-prompts 4 --samples-per-prompt 3 --max-new-tokens 10 \
  --reward-regex 'e' --seed 1 --cache-dir "$work/cache" --out "$work/rollouts.jsonl"
test "$(wc -l < "$work/rollouts.jsonl")" -eq 12
for objective in gspo grpo; do
  "$tandem" train /dev/stdin <<YAML
model: {path: $work/base/export, dtype: fp32}
loss: {chunk_tokens: 64}
data: {path: $work/rollouts.jsonl, format: rollout, seq_len: 160, micro_batch_rows: 1}
training: {objective: $objective, run_dir: $work/$objective, steps: 2, lr: 1.0e-3, log_every: 1,
           docs_per_step: 6}
YAML
  python3 - "$work/$objective/metrics.jsonl" "$objective" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
first = steps[0]
print(f"{sys.argv[2]} step 1: ratio_mean {first['ratio_mean']:.7f} kl {first['kl_new_old']:.2e} "
      f"documents {first['num_documents']:.0f} reward_mean {first['reward_mean']:.3f}")
assert abs(first["ratio_mean"] - 1) < 1e-4, "on-policy ratio is not 1"
assert abs(first["kl_new_old"]) < 1e-6
# One rollout per micro-batch here: the step pulls micro-batches until it has 6 documents.
assert [s["num_documents"] for s in steps] == [6, 6], [s["num_documents"] for s in steps]
PY
done
echo "== sharded over 2 ranks against one process: DPO (live reference), GRPO, distillation"
one_vs_sharded dpo "$work/dpo.yaml" training.micro_batches=2
cat > "$work/grpo.yaml" <<YAML
model: {path: $work/base/export, dtype: fp32}
loss: {chunk_tokens: 64}
data: {path: $work/rollouts.jsonl, format: rollout, seq_len: 160, micro_batch_rows: 1}
training: {objective: grpo, steps: 2, lr: 1.0e-3, log_every: 1, docs_per_step: 6}
YAML
# micro_batches, not docs_per_step: a sharded step rounds its micro-batches up to a multiple of
# the ranks, so with docs_per_step it may hold one more than the one-process step.
one_vs_sharded grpo "$work/grpo.yaml" training.docs_per_step=0 training.micro_batches=2
cat > "$work/distill.yaml" <<YAML
model: {config: $work/model.json, dtype: fp32}
teacher: {path: $work/base/export, dtype: fp32}
data: {path: $work/chat.jsonl, format: conversations, tokenizer: data/demo/tokenizer,
       seq_len: 256, micro_batch_rows: 2, cache_dir: $work/cache}
training: {objective: distill, steps: 3, micro_batches: 2, lr: 1.0e-3, log_every: 1}
YAML
one_vs_sharded distill "$work/distill.yaml"
echo "e2e_policy: OK"
