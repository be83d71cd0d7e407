#!/usr/bin/env bash
# End to end through the binary, on the tiny fixture target: EAGLE-3 online training with
# exports at every checkpoint, `tandem export` of an older step, both export formats checked
# against what SGLang / vLLM / speculators read (tools/check_eagle3_export.sh), `tandem capture`
# + offline training (same first-step loss as online; a frozen lm_head survives export), and
# `tandem eval` (output = greedy; with KV caches the same accepted tokens as the uncached
# decoders, prompt by prompt); `tandem export --dtype bf16` casts the weights and keeps the
# vocabulary maps' integer and bool types; an EAGLE-3.1 draft trains, exports (both formats checked
# the same way) and evaluates.
# Usage: tests/e2e_eagle3.sh BUILD_DIR   (run by ctest; needs scripts/setup.sh --tools)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-eagle3-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1

# 12 documents of random ids from the fixture's 512-token vocab, the first 4 tokens unmasked.
python3 - "$work/docs.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as out:
    for _ in range(12):
        n = random.randint(12, 30)
        out.write(json.dumps({"input_ids": [random.randrange(3, 512) for _ in range(n)],
                              "loss_mask": [0] * 4 + [1] * (n - 4)}) + "\n")
PY
cat > "$work/eagle3.yaml" <<YAML
target: {path: tests/fixtures/models/llama3, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: eagle3, run_dir: $work/online, steps: 4, lr: 1.0e-3, save_every: 2,
           keep_last: 3, log_every: 1}
YAML

echo "== online training"
"$tandem" train "$work/eagle3.yaml"
test -f "$work/online/export/sglang/model.safetensors"
test -f "$work/online/export/speculators/config.json"

echo "== tandem export of step 2"
"$tandem" export "$work/online" --step 2 --out "$work/step2" --verifier-name org/target-model
python3 -c "import json,sys; v=json.load(open(sys.argv[1]))['speculators_config']['verifier']; assert v == {'name_or_path': 'org/target-model', 'architectures': ['LlamaForCausalLM']}, v" \
  "$work/step2/speculators/config.json"
if cmp -s "$work/step2/sglang/model.safetensors" "$work/online/export/sglang/model.safetensors"; then
  echo "step 2 export equals the final one: the draft did not train" >&2
  exit 1
fi
tools/check_eagle3_export.sh --sglang "$work/step2/sglang" --speculators "$work/step2/speculators" \
  --target tests/fixtures/models/llama3
tools/check_eagle3_export.sh --sglang "$work/online/export/sglang" \
  --speculators "$work/online/export/speculators" --target tests/fixtures/models/llama3

echo "== capture + offline training"
"$tandem" capture "$work/eagle3.yaml" --out "$work/capture" --shard-documents 5
"$tandem" train "$work/eagle3.yaml" "data.capture=$work/capture" "training.run_dir=$work/offline" \
  training.steps=1 draft.train_lm_head=false
# A frozen draft lm_head is not optimized but is still part of the checkpoint and the export.
"$tandem" export "$work/offline" --out "$work/offline-export"
tools/check_eagle3_export.sh --sglang "$work/offline-export/sglang" \
  --speculators "$work/offline-export/speculators" --no-speculators-lib
cmp "$work/offline-export/sglang/model.safetensors" "$work/offline/export/sglang/model.safetensors"
online_loss=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$work/online/metrics.jsonl")
offline_loss=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$work/offline/metrics.jsonl")
python3 - "$online_loss" "$offline_loss" <<'PY'
import sys
online, offline = map(float, sys.argv[1:])
print(f"first-step loss: online {online:.6f}, offline {offline:.6f}")
assert abs(online - offline) <= 1e-4 * abs(online), "offline loss differs from online"
PY

echo "== eval"
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/online/export" \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 6 --max-new-tokens 12 \
  --draft-tokens 3 --cache-dir "$work/cache" --out "$work/eval.json"
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/online/export" \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 6 --max-new-tokens 12 \
  --draft-tokens 3 --cache-dir "$work/cache" --out "$work/eval-uncached.json" --no-kv-cache
python3 - "$work/eval.json" "$work/eval-uncached.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["greedy_identical"] == r["prompts"] == 6, r
# With KV caches: exactly the tokens the uncached decoders accept, prompt by prompt.
u = json.load(open(sys.argv[2]))
assert r["kv_cache"] and not u["kv_cache"] and u["greedy_identical"] == 6, u
assert [p["accepted"] for p in r["per_prompt"]] == [p["accepted"] for p in u["per_prompt"]]
print("tau", r["tau"], "(uncached", u["tau"], "); accepted per step, prompt 0:", r["per_prompt"][0]["accepted"])
PY
echo "== EAGLE-3.1 (draft.fc_norm, draft.norm_output): both exports as the engines and speculators read them, eval"
"$tandem" train "$work/eagle3.yaml" "training.run_dir=$work/e31" training.steps=2 training.save_every=0 \
  draft.fc_norm=true draft.norm_output=true > "$work/e31.log"
tools/check_eagle3_export.sh --sglang "$work/e31/export/sglang" \
  --speculators "$work/e31/export/speculators" --target tests/fixtures/models/llama3
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/e31/export" \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 3 --max-new-tokens 8 \
  --draft-tokens 3 --cache-dir "$work/cache" --out "$work/eval-e31.json" > /dev/null
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['greedy_identical'] == r['prompts'] == 3, r" \
  "$work/eval-e31.json"
echo "== tandem export --dtype bf16: float weights cast, d2t and t2d keep their types, eval loads it"
"$tandem" export "$work/online" --dtype bf16 --out "$work/bf16"
python3 - "$work/bf16/sglang/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
header.pop("__metadata__", None)
types = {name: info["dtype"] for name, info in header.items()}
assert types.pop("d2t") == "I64" and types.pop("t2d") == "BOOL", types
assert set(types.values()) == {"BF16"}, types
print(f"  {len(types)} weights in BF16, d2t I64, t2d BOOL")
PY
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/bf16" \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 2 --max-new-tokens 8 \
  --draft-tokens 3 --cache-dir "$work/cache" --out "$work/eval-bf16.json" > /dev/null
# In bf16 the greedy check reports its match rate and each first divergence; a difference is not
# an error there (a batched verification and a one-token step round differently).
"$tandem" eval --target tests/fixtures/models/llama3 --draft "$work/online/export" --dtype bf16 \
  --data "$work/docs.jsonl" --format pretokenized --num-prompts 4 --max-new-tokens 12 \
  --draft-tokens 3 --cache-dir "$work/cache" --out "$work/eval-bf16-compute.json" > /dev/null
python3 - "$work/eval-bf16-compute.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["greedy_match_rate"] == r["greedy_identical"] / r["prompts"], r
assert len(r["greedy_mismatches"]) == r["prompts"] - r["greedy_identical"], r
print(f"  bf16: greedy match rate {r['greedy_match_rate']:.2f}, mismatches {r['greedy_mismatches']}")
PY
echo "e2e_eagle3: OK"
