#!/usr/bin/env bash
# End to end through the binary, on the tiny fixture target: DFlash online training with the
# z-lab export at every checkpoint, `tandem export` of an older step, the export checked against
# what SGLang / vLLM read (tools/check_dflash_export.py), `tandem capture` + offline training
# (same first-step loss as online), the same with loss.teacher: target (the capture then holds the
# last hidden states), and `tandem eval` with the DFlash export (output = greedy).
# Usage: tests/e2e_dflash.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-dflash-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1

# 12 documents of random ids from the fixture's 512-token vocab, the first 4 tokens unmasked.
python3 - "$work/docs.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as out:
    for _ in range(12):
        n = random.randint(16, 30)
        out.write(json.dumps({"input_ids": [random.randrange(3, 511) for _ in range(n)],
                              "loss_mask": [0] * 4 + [1] * (n - 4)}) + "\n")
PY
# The fixture target has 4 layers and no tokenizer: target layers and the mask token are given.
cat > "$work/dflash.yaml" <<YAML
target: {path: tests/fixtures/models/llama3, dtype: fp32}
draft: {num_layers: 2, target_layer_ids: [0, 2], block_size: 4, mask_token_id: 511,
        intermediate_size: 96}
loss: {max_anchors: 8}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: dflash, run_dir: $work/online, steps: 4, lr: 1.0e-3, save_every: 2,
           keep_last: 3, log_every: 1}
YAML

echo "== online training"
"$tandem" train "$work/dflash.yaml"
test -f "$work/online/export/model.safetensors"

echo "== tandem export of step 2"
"$tandem" export "$work/online" --step 2 --out "$work/step2"
if cmp -s "$work/step2/model.safetensors" "$work/online/export/model.safetensors"; then
  echo "step 2 export equals the final one: the draft did not train" >&2
  exit 1
fi
python3 tools/check_dflash_export.py "$work/step2" --target tests/fixtures/models/llama3
python3 tools/check_dflash_export.py "$work/online/export" --target tests/fixtures/models/llama3

echo "== capture + offline training"
"$tandem" capture "$work/dflash.yaml" --out "$work/capture" --shard-documents 5
"$tandem" train "$work/dflash.yaml" "data.capture=$work/capture" "training.run_dir=$work/offline" \
  training.steps=1
first_loss() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$1"; }
python3 - "$(first_loss "$work/online/metrics.jsonl")" "$(first_loss "$work/offline/metrics.jsonl")" <<'PY'
import sys
online, offline = map(float, sys.argv[1:])
print(f"first-step loss: online {online:.6f}, offline {offline:.6f}")
assert abs(online - offline) <= 1e-5 * abs(online), "offline loss differs from online"
PY

echo "== distillation from the target (loss.teacher: target): capture with last hidden states"
"$tandem" train "$work/dflash.yaml" loss.teacher=target "training.run_dir=$work/distill" \
  training.steps=1
"$tandem" capture "$work/dflash.yaml" loss.teacher=target --out "$work/capture-t" \
  --shard-documents 5
"$tandem" train "$work/dflash.yaml" loss.teacher=target "data.capture=$work/capture-t" \
  "training.run_dir=$work/distill-offline" training.steps=1
if "$tandem" train "$work/dflash.yaml" loss.teacher=target "data.capture=$work/capture" \
    "training.run_dir=$work/bad" training.steps=1 2> "$work/bad.err"; then
  echo "a capture without last hidden states trained a distilled draft" >&2
  exit 1
fi
grep -q "no last hidden states" "$work/bad.err"
python3 - "$(first_loss "$work/distill/metrics.jsonl")" "$(first_loss "$work/distill-offline/metrics.jsonl")" \
  "$work/capture-t/manifest.json" <<'PY'
import json, sys
online, offline = map(float, sys.argv[1:3])
print(f"distilled first-step loss: online {online:.6f}, offline {offline:.6f}")
assert abs(online - offline) <= 1e-5 * abs(online), "offline distilled loss differs from online"
assert json.load(open(sys.argv[3]))["settings"]["last_hidden"] is True
PY

echo "== eval"
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/online/export" \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 6 --max-new-tokens 12 \
  --cache-dir "$work/cache" --out "$work/eval.json"
python3 - "$work/eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["greedy_identical"] == r["prompts"] == 6, r
assert r["draft_type"] == "dflash" and r["draft_tokens"] == 3, r
print("tau", r["tau"])
PY
echo "e2e_dflash: OK"
