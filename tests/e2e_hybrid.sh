#!/usr/bin/env bash
# Hybrid targets (Gated DeltaNet + gated attention) end to end through the binary, on the tiny
# Qwen3.5-MoE fixture of tools/make_hybrid_fixtures.py (the vision-language wrapper, a vision
# tower whose tensors are not read):
#  1. EAGLE-3: 20 steps online, exported and checked against what SGLang / vLLM / speculators
#     read; `tandem capture` + offline training has the online first-step loss.
#  1b. The same draft with the target sharded over 2 ranks (distributed.mode: shard, real
#     processes on 127.0.0.1): the Gated DeltaNet weights are gathered like every other weight,
#     and the losses and weights equal one process's.
#  2. DFlash: the same, the export checked as SGLang / vLLM read z-lab drafts.
#  3. `tandem eval` of both drafts with the hybrid cache (conv windows and recurrent states rolled
#     back past rejected tokens): output = greedy, and exactly the tokens the uncached decoders
#     accept, prompt by prompt.
#  4. A hybrid teacher: distillation of the Qwen3-MoE fixture from the Qwen3.5 one; and
#     `tandem train --dry-run` plans a hybrid target (its parameters counted from the headers).
#  5. What is not supported says so: a draft for a target without a dense MLP width needs
#     draft.intermediate_size; training a hybrid model itself (SFT) is refused by name.
# Usage: tests/e2e_hybrid.sh BUILD_DIR   (run by ctest; needs scripts/setup.sh --tools, and
# torchrun from .venv)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-hybrid-XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -n "${KEEP:-}" ] && trap - EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
source "$root/tests/dist_helpers.sh"  # offline_equals_online, losses_fall, eval_both, one_vs_sharded
target=tests/fixtures/models/qwen3_5_moe

# 16 documents of random text ids (below the vision tokens), the first 4 tokens unmasked.
random_documents "$work/docs.jsonl" 36 16 16 500

echo "== 1. EAGLE-3 against the Qwen3.5-MoE target"
cat > "$work/eagle3.yaml" <<YAML
target: {path: $target, dtype: fp32}
draft: {aux_layer_ids: [0, 2, 3], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: eagle3, run_dir: $work/eagle3-online, steps: 20, lr: 3.0e-3, log_every: 1,
           save_every: 20}
YAML
"$tandem" train "$work/eagle3.yaml" > "$work/eagle3-online.log" 2>&1 ||
  { cat "$work/eagle3-online.log" >&2; exit 1; }
grep -q "not read, not part of the decoder: 21 tensors of the vision tower" "$work/eagle3-online.log"
losses_fall "$work/eagle3-online/metrics.jsonl"
tools/check_eagle3_export.sh --sglang "$work/eagle3-online/export/sglang" \
  --speculators "$work/eagle3-online/export/speculators"
offline_equals_online eagle3 5

echo "== 1b. EAGLE-3 with the hybrid target sharded over 2 ranks = one process"
one_vs_sharded eagle3 "$work/eagle3.yaml" training.steps=3 training.save_every=3 \
  training.micro_batches=2

echo "== 2. DFlash against the Qwen3.5-MoE target"
cat > "$work/dflash.yaml" <<YAML
target: {path: $target, dtype: fp32}
draft: {num_layers: 2, target_layer_ids: [0, 3], block_size: 4, intermediate_size: 64,
        mask_token_id: 511}
loss: {max_anchors: 8}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: dflash, run_dir: $work/dflash-online, steps: 20, lr: 3.0e-3, log_every: 1,
           save_every: 20}
YAML
"$tandem" train "$work/dflash.yaml" > "$work/dflash-online.log" 2>&1 ||
  { cat "$work/dflash-online.log" >&2; exit 1; }
losses_fall "$work/dflash-online/metrics.jsonl"
python3 tools/check_dflash_export.py "$work/dflash-online/export"
offline_equals_online dflash 6

echo "== 3. tandem eval with the hybrid cache = without it"
eval_both "$work/eagle3-online/export" eagle3
eval_both "$work/dflash-online/export" dflash

echo "== 4. a hybrid teacher; a dry run with a hybrid target"
"$tandem" train /dev/stdin > "$work/distill.log" 2>&1 <<YAML || { cat "$work/distill.log" >&2; exit 1; }
model: {path: tests/fixtures/models/qwen3_moe, dtype: fp32}
teacher: {path: tests/fixtures/models/qwen3_5, dtype: fp32}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: distill, run_dir: $work/distill, steps: 3, lr: 1.0e-3, log_every: 1}
YAML
grep -q "not read, not part of the decoder: 2 tensors of the multi-token-prediction layers, 21 tensors of the vision tower" \
  "$work/distill.log"
python3 - "$work/distill/metrics.jsonl" <<'PY'
import json, math, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert len(losses) == 3 and all(math.isfinite(x) and x > 0 for x in losses), losses
print("  distillation from the Qwen3.5 teacher, losses", [round(x, 4) for x in losses])
PY
"$tandem" train "$work/eagle3.yaml" --dry-run > "$work/dry.log" 2>&1 || { cat "$work/dry.log" >&2; exit 1; }
grep "frozen: target" "$work/dry.log"
grep -q "frozen: target, 478,920 parameters" "$work/dry.log"

echo "== 5. what is not supported is refused by name"
expect_refusal() {  # PHRASE COMMAND...
  local phrase=$1
  shift
  if "$@" > "$work/refused.log" 2>&1; then echo "expected a refusal: $*" >&2; exit 1; fi
  grep -qF "$phrase" "$work/refused.log" || { cat "$work/refused.log" >&2; exit 1; }
  echo "  refused: $(grep -F "$phrase" "$work/refused.log" | head -1 | cut -c1-150)"
}
# The fixture's text_config states a dense width transformers ignores; a config without one (every
# layer has experts) leaves the draft's MLP width to draft.intermediate_size.
mkdir "$work/no-dense-width"
ln -s "$root/$target/model.safetensors" "$work/no-dense-width/model.safetensors"
python3 - "$target/config.json" "$work/no-dense-width/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
del config["text_config"]["intermediate_size"]
json.dump(config, open(sys.argv[2], "w"))
PY
expect_refusal "target has no dense MLP width (intermediate_size: every layer has experts); set draft.intermediate_size" \
  "$tandem" train "$work/eagle3.yaml" "target.path=$work/no-dense-width" draft.intermediate_size=0 \
  "training.run_dir=$work/no-width"
expect_refusal "is a hybrid (Gated DeltaNet) model, which tandem reads as a frozen target" \
  "$tandem" train /dev/stdin <<YAML
model: {path: tests/fixtures/models/qwen3_next, dtype: fp32}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: sft, run_dir: $work/sft, steps: 1, lr: 1.0e-3}
YAML
echo "e2e_hybrid: OK"
