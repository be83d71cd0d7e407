#!/usr/bin/env bash
# End to end through the binary, on the tiny fixture target: DFlash online training with the
# z-lab export at every checkpoint, `tandem export` of an older step, the export checked against
# what SGLang / vLLM read (tools/check_dflash_export.py), `tandem capture` + offline training
# (same first-step loss as online), the same with loss.teacher: target (the capture then holds the
# last hidden states), and `tandem eval` with the DFlash export (output = greedy; with KV caches the same accepted
# tokens as the uncached decoders, prompt by prompt); sharded over 2
# ranks (distributed.mode: shard) with a grown mask row and with loss.teacher: target, against
# one process.
# Usage: tests/e2e_dflash.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-dflash-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
source "$root/tests/dist_helpers.sh"  # one_vs_sharded, compare

# 12 documents of random ids from the fixture's 512-token vocab, the first 4 tokens unmasked.
random_documents "$work/docs.jsonl" 0 12 16 511
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
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/online/export" \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 6 --max-new-tokens 12 \
  --cache-dir "$work/cache" --out "$work/eval-uncached.json" --no-kv-cache
python3 - "$work/eval.json" "$work/eval-uncached.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["greedy_identical"] == r["prompts"] == 6, r
assert r["draft_type"] == "dflash" and r["draft_tokens"] == 3, r
# With KV caches: exactly the tokens the uncached decoders accept, prompt by prompt.
u = json.load(open(sys.argv[2]))
assert r["kv_cache"] and not u["kv_cache"] and u["greedy_identical"] == 6, u
assert [p["accepted"] for p in r["per_prompt"]] == [p["accepted"] for p in u["per_prompt"]]
print("tau", r["tau"], "(uncached", u["tau"], "); accepted per step, prompt 0:", r["per_prompt"][0]["accepted"])
PY
echo "== sharded over 2 ranks against one process: a grown mask row, and loss.teacher: target"
# The fixture target plus a 512-token byte-level tokenizer with no spare token: a row is grown.
mkdir -p "$work/target-full-vocab"
cp tests/fixtures/models/llama3/* "$work/target-full-vocab/"
python3 - "$work/target-full-vocab/tokenizer.json" <<'PY'
import json, sys
printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
codes = {b: b for b in printable}
for b in range(256):  # GPT-2's byte-to-unicode map for the rest
    if b not in codes:
        codes[b] = 256 + len([x for x in codes if x not in printable])
vocab = {chr(codes[b]): b for b in range(256)}
vocab.update({f"t{i}": i for i in range(256, 512)})
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(sys.argv[1], "w"))
PY
sed -e 's/, mask_token_id: 511//' -e "s|tests/fixtures/models/llama3|$work/target-full-vocab|" \
  "$work/dflash.yaml" > "$work/dflash-grown.yaml"
one_vs_sharded grown "$work/dflash-grown.yaml" training.micro_batches=2
test -f "$work/grown-shard/export/mask_embedding.safetensors"
compare "$work/grown-1/export/mask_embedding.safetensors" \
  "$work/grown-shard/export/mask_embedding.safetensors" 0
one_vs_sharded target "$work/dflash.yaml" training.micro_batches=2 loss.teacher=target
echo "e2e_dflash: OK"
