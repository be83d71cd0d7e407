#!/usr/bin/env bash
# End to end through the binary, on the tiny fixture target: DSpark online training with the
# speculators and SGLang exports at every checkpoint, `tandem export` of an older step, both
# speculators exports loaded by speculators 0.9.0's own DSpark classes and compared with an
# independent forward (tools/check_dspark_export.sh), both SGLang exports through SGLang 0.5.16's
# DSpark config parser and head builders (tools/check_dspark_sglang_export.sh), `tandem capture`
# + offline training (same first-step loss as online), `tandem eval` with and without KV caches
# and with the confidence stop (output = greedy; the same accepted tokens prompt by prompt), and
# sharded over 2 ranks against one process.
# Usage: tests/e2e_dspark.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-dspark-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
source "$root/tests/dist_helpers.sh"  # one_vs_sharded, offline_equals_online, eval_both
target=tests/fixtures/models/llama3

# 12 documents of random ids from the fixture's 512-token vocab, the first 4 tokens unmasked.
random_documents "$work/docs.jsonl" 0 12 16 511
# The fixture target has 4 layers and no tokenizer: target layers and the mask token are given.
cat > "$work/dspark.yaml" <<YAML
target: {path: $target, dtype: fp32, name: org/target-model}
draft: {num_layers: 2, target_layer_ids: [0, 2], block_size: 4, mask_token_id: 511,
        intermediate_size: 96, markov_rank: 8}
loss: {max_anchors: 8}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: dspark, run_dir: $work/dspark-online, steps: 4, lr: 1.0e-3, save_every: 2,
           keep_last: 3, log_every: 1}
YAML

echo "== online training"
"$tandem" train "$work/dspark.yaml"
test -f "$work/dspark-online/export/speculators/model.safetensors"
test -f "$work/dspark-online/export/sglang/model.safetensors"
python3 - "$work/dspark-online/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for key in ("loss_ce", "loss_l1", "loss_confidence", "acc_0", "acc_3", "sim_accept_length"):
    assert key in rows[0], key
PY

echo "== tandem export of step 2, both exports through speculators' own classes"
"$tandem" export "$work/dspark-online" --step 2 --out "$work/step2"
if cmp -s "$work/step2/speculators/model.safetensors" \
    "$work/dspark-online/export/speculators/model.safetensors"; then
  echo "step 2 export equals the final one: the draft did not train" >&2
  exit 1
fi
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); v=c['speculators_config']['verifier']; assert v == {'name_or_path': 'org/target-model', 'architectures': ['LlamaForCausalLM']}, v; assert c['aux_hidden_state_layer_ids'] == [1, 3], c" \
  "$work/step2/speculators/config.json"
# speculators' from_pretrained loads the verifier the config names (its embedding and lm_head):
# exported again naming the fixture's directory, for the check.
for step in 2 4; do
  "$tandem" export "$work/dspark-online" --step "$step" --out "$work/check-$step" \
    --verifier-name "$root/$target" 2> /dev/null
  cmp "$work/check-$step/speculators/model.safetensors" \
    "$([ "$step" = 2 ] && echo "$work/step2" || echo "$work/dspark-online/export")/speculators/model.safetensors"
  tools/check_dspark_export.sh --speculators "$work/check-$step/speculators" --target "$target"
  tools/check_dspark_sglang_export.sh --sglang "$work/check-$step/sglang" --target "$target" \
    --speculators "$work/check-$step/speculators"
done

echo "== capture + offline training"
offline_equals_online dspark 5

echo "== eval: KV cache = none, and the confidence stop"
eval_both "$work/dspark-online/export" dspark
"$tandem" eval --target "$target" --draft "$work/dspark-online/export" --data "$work/docs.jsonl" \
  --format pretokenized --num-prompts 6 --max-new-tokens 12 --cache-dir "$work/cache" \
  --confidence-threshold 0.5 --out "$work/eval-stop.json" > /dev/null
python3 - "$work/eval-dspark.json" "$work/eval-stop.json" <<'PY'
import json, sys
full, stop = (json.load(open(p)) for p in sys.argv[1:3])
assert full["draft_type"] == "dspark" and full["draft_tokens"] == 4, full
assert full["drafted_per_step"] == 4 and full["confidence_threshold"] == 0, full
assert stop["greedy_identical"] == stop["prompts"] == 6, stop
assert stop["drafted_per_step"] <= 4 and stop["confidence_threshold"] == 0.5, stop
print(f"  confidence stop 0.5: tau {stop['tau']:.2f}, {stop['drafted_per_step']:.2f} drafted "
      f"per step (4 without)")
PY

echo "== sharded over 2 ranks against one process"
one_vs_sharded sharded "$work/dspark.yaml" training.micro_batches=2
echo "e2e_dspark: OK"
