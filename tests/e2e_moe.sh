#!/usr/bin/env bash
# Mixture-of-experts models end to end through the binary, on the tiny fixtures of
# tools/make_model_fixtures.py (real processes on 127.0.0.1 for the sharded runs):
#  1. The seed scenario at small scale: DFlash against the MiniMax-M2-layout target, whose
#     tokenizer has no mask token (a row is grown, the last resort of the mask-token rules in docs/dflash.md), sharded over 2 ranks
#     (distributed.mode: shard): rank 1 opens no weight file; the frozen weights' checksums agree
#     on both ranks and with one process (distributed.check_frozen_weights); the draft (alone) is
#     exported at every checkpoint, and the export left by a run killed with SIGKILL is the
#     step's; the killed run resumes to the same weights as the uninterrupted one, bit for bit;
#     losses and weights equal one process's.
#     DFlash offline (features from `tandem capture`) has the online first-step loss. The same
#     draft against the block-FP8 copy of the target (tools/make_fp8_fixtures.py), sharded with
#     rank-0 loading (FP8 tensors sent as bytes, dequantized on each rank) = one process.
#  2. EAGLE-3 against the Qwen3-MoE target: the online first-step loss equals the offline one
#     (features from `tandem capture`), and `tandem eval` decodes with it (output = greedy).
#  2b. DSpark against the Qwen3-MoE target: sharded over 2 ranks = one process, online = offline,
#     and `tandem eval` decodes with it (output = greedy).
#  3. Trained MoE models: SFT of the Qwen3-MoE fixture with the router's load-balancing loss in
#     the objective (loss.router_aux_loss_coef), sharded = one process; distillation of the Mixtral
#     fixture from the MiniMax-M2 one and DPO of the Qwen3-MoE one report `router_aux_loss`.
# Usage: tests/e2e_moe.sh BUILD_DIR   (run by ctest; torchrun from .venv, scripts/setup.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-moe-XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    pkill -9 -P "$pid" 2>/dev/null || true
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
source "$root/tests/dist_helpers.sh"  # free_port, torchrun2, compare, same_losses, same_first_loss, one_vs_sharded
minimax=tests/fixtures/models/minimax_m2
qwen=tests/fixtures/models/qwen3_moe

# 16 documents of random ids below the fixtures' special tokens, the first 4 tokens unmasked.
random_documents "$work/docs.jsonl" 21 16 16 510

echo "== 1. DFlash against the MiniMax-M2 target: one process, then sharded over 2 ranks"
cat > "$work/dflash.yaml" <<YAML
target: {path: $minimax, dtype: fp32}
draft: {num_layers: 2, target_layer_ids: [0, 2], block_size: 4, intermediate_size: 64}
loss: {max_anchors: 8}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: dflash, run_dir: $work/unused, steps: 6, lr: 1.0e-3, save_every: 2,
           keep_last: 5, log_every: 1, micro_batches: 2}
distributed: {check_frozen_weights: true}
YAML
one_vs_sharded seed "$work/dflash.yaml"
log1="$work/seed-1.log" logs="$work/seed-shard.log"
grep "\[dflash\] mask token" "$log1"
grep -q "\[dflash\] mask token id 512 (grown, <|MASK|>): a row is grown" "$log1"
test -f "$work/seed-shard/export/mask_embedding.safetensors"
compare "$work/seed-1/export/mask_embedding.safetensors" \
  "$work/seed-shard/export/mask_embedding.safetensors" 0
echo "  rank-0 loading: rank 0 opened the weight files, rank 1 none"
grep -q "\[load\] rank 0: opened .*\.safetensors" "$logs"
grep -q "\[load\] rank 1: received " "$logs"
if grep -q "\[load\] rank 1: opened" "$logs"; then echo "rank 1 opened a weight file" >&2; exit 1; fi
python3 - "$log1" "$logs" <<'PY'
import re, sys
pattern = re.compile(r"\[load\] rank (\d+): frozen weights checksum ([0-9a-f]{16}) \((\d+) tensors\)")
one = pattern.findall(open(sys.argv[1]).read())
ranks = pattern.findall(open(sys.argv[2]).read())
assert len(one) == 1 and len(ranks) == 2, (one, ranks)
assert {r[1] for r in ranks} == {one[0][1]}, (one, ranks)
print(f"  frozen weights checksum {one[0][1]} ({one[0][2]} tensors): one process = rank 0 = rank 1")
PY
echo "  the export holds the draft alone (z-lab format), loadable as SGLang / vLLM read it"
python3 tools/check_dflash_export.py "$work/seed-shard/export" --target "$minimax"
python3 - "$work/seed-shard/export/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    names = [n for n in json.loads(f.read(struct.unpack("<Q", f.read(8))[0])) if n != "__metadata__"]
assert names and not any("experts" in n or "block_sparse_moe" in n or "embed_tokens" in n
                         or "lm_head" in n for n in names), names
print(f"  {len(names)} draft tensors, none of the target's")
PY

echo "== 1b. a sharded run killed with SIGKILL (every process) after its step-4 checkpoint, resumed"
# 40 steps, so the kill lands mid-run; the uninterrupted sharded run of the same job to compare.
long=(training.steps=40 training.keep_last=3 optimizer.eps=1.0e-2 distributed.mode=shard)
torchrun2 "$work/long.log" train "$work/dflash.yaml" "training.run_dir=$work/long" "${long[@]}"
port=$(free_port)
"$root/.venv/bin/python" -m torch.distributed.run --nproc-per-node=2 --master-addr=127.0.0.1 \
  --master-port="$port" --no-python "$tandem" train "$work/dflash.yaml" \
  "training.run_dir=$work/killed" "${long[@]}" > "$work/killed.log" 2>&1 &
launcher=$!
pids+=($launcher)
for _ in $(seq 3000); do
  [ -d "$work/killed/step-00000004" ] && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.02
done
test -d "$work/killed/step-00000004" || { cat "$work/killed.log" >&2; exit 1; }
# SIGKILL to the launcher and both ranks in one call (they are matched by their run directory):
# no rank gets to save on a stop request.
pkill -9 -f "training.run_dir=$work/killed" || true
wait "$launcher" 2>/dev/null || true
for _ in $(seq 50); do pgrep -f "training.run_dir=$work/killed" > /dev/null || break; sleep 0.1; done
if pgrep -f "training.run_dir=$work/killed" > /dev/null; then
  echo "processes of the killed job survive" >&2
  exit 1
fi
if grep -q "stop requested\|finished at step" "$work/killed.log"; then
  echo "the run stopped by itself instead of being killed" >&2
  exit 1
fi
checkpoints=($(cd "$work/killed" && ls -d step-???????? | sort))
last=${checkpoints[-1]}
echo "  killed after $last (checkpoints ${checkpoints[*]})"
# The export of the last checkpoint, or of the one before when the kill fell between a checkpoint
# and its export: never a half-written one.
exported=""
for step in "${checkpoints[@]}"; do
  "$tandem" export "$work/killed" --step "${step#step-}" --out "$work/killed-export-$step" \
    > /dev/null 2>&1
  if cmp -s "$work/killed/export/model.safetensors" "$work/killed-export-$step/model.safetensors"
  then exported=$step; fi
done
[ "$exported" = "$last" ] || [ "$exported" = "${checkpoints[-2]:-}" ] ||
  { echo "the export left behind is no recent checkpoint's ($exported)" >&2; exit 1; }
echo "  the export left behind is $exported's draft"
torchrun2 "$work/resumed.log" train "$work/dflash.yaml" "training.run_dir=$work/killed" "${long[@]}"
grep -q "resuming from .*$last" "$work/resumed.log"
compare "$work/long/step-00000040" "$work/killed/step-00000040" 0
cmp "$work/long/export/model.safetensors" "$work/killed/export/model.safetensors"
echo "  resumed = uninterrupted, bit for bit (checkpoint and export)"

echo "== 1c. DFlash offline against the MiniMax-M2 target (tandem capture): the online first loss"
"$tandem" capture "$work/dflash.yaml" --out "$work/capture-dflash" --shard-documents 6 > /dev/null
"$tandem" train "$work/dflash.yaml" "data.capture=$work/capture-dflash" \
  "training.run_dir=$work/dflash-offline" training.steps=1 optimizer.eps=1.0e-2 \
  > "$work/dflash-offline.log" 2>&1 || { cat "$work/dflash-offline.log" >&2; exit 1; }
same_first_loss "$work/seed-1/metrics.jsonl" "$work/dflash-offline/metrics.jsonl"

echo "== 1d. the same DFlash against the block-FP8 MiniMax-M2 checkpoint: the FP8 weights travel"
echo "   from rank 0 as bytes and are dequantized on each rank; sharded = one process"
one_vs_sharded fp8 "$work/dflash.yaml" "target.path=tests/fixtures/models/minimax_m2_fp8" \
  training.steps=2 training.save_every=2 draft.mask_token_id=511
grep -q "\[load\] rank 1: received .*minimax_m2_fp8" "$work/fp8-shard.log"

echo "== 2. EAGLE-3 against the Qwen3-MoE target: online = offline, and eval"
cat > "$work/eagle3.yaml" <<YAML
target: {path: $qwen, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: eagle3, run_dir: $work/eagle3-online, steps: 2, lr: 1.0e-3, log_every: 1}
YAML
"$tandem" train "$work/eagle3.yaml" > "$work/eagle3-online.log" 2>&1 ||
  { cat "$work/eagle3-online.log" >&2; exit 1; }
"$tandem" capture "$work/eagle3.yaml" --out "$work/capture" --shard-documents 5
"$tandem" train "$work/eagle3.yaml" "data.capture=$work/capture" \
  "training.run_dir=$work/eagle3-offline" training.steps=1 > "$work/eagle3-offline.log" 2>&1 ||
  { cat "$work/eagle3-offline.log" >&2; exit 1; }
same_first_loss "$work/eagle3-online/metrics.jsonl" "$work/eagle3-offline/metrics.jsonl"
"$tandem" eval --target "$qwen" --draft "$work/eagle3-online/export" --data "$work/docs.jsonl" \
  --format pretokenized --num-prompts 4 --max-new-tokens 10 --cache-dir "$work/cache" \
  --out "$work/eval.json"
python3 - "$work/eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["greedy_identical"] == r["prompts"] == 4, r
print(f"  eval: tau {r['tau']:.2f}, output = greedy decoding of the MoE target")
PY

echo "== 2b. DSpark against the Qwen3-MoE target: sharded = one process, online = offline, eval"
cat > "$work/dspark.yaml" <<YAML
target: {path: $qwen, dtype: fp32}
draft: {num_layers: 2, target_layer_ids: [0, 2], block_size: 4, mask_token_id: 511,
        intermediate_size: 96, markov_rank: 8}
loss: {max_anchors: 8}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: dspark, run_dir: $work/unused, steps: 4, lr: 1.0e-3, save_every: 2,
           log_every: 1}
YAML
one_vs_sharded dspark "$work/dspark.yaml" training.micro_batches=2
"$tandem" capture "$work/dspark.yaml" --out "$work/capture-dspark" --shard-documents 6 > /dev/null
"$tandem" train "$work/dspark.yaml" "data.capture=$work/capture-dspark" \
  "training.run_dir=$work/dspark-offline" training.steps=1 training.micro_batches=2 \
  optimizer.eps=1.0e-2 > "$work/dspark-offline.log" 2>&1 ||
  { cat "$work/dspark-offline.log" >&2; exit 1; }
same_first_loss "$work/dspark-1/metrics.jsonl" "$work/dspark-offline/metrics.jsonl"
"$tandem" eval --target "$qwen" --draft "$work/dspark-1/export" --data "$work/docs.jsonl" \
  --format pretokenized --num-prompts 4 --max-new-tokens 10 --cache-dir "$work/cache" \
  --out "$work/eval-dspark.json"
python3 - "$work/eval-dspark.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["greedy_identical"] == r["prompts"] == 4 and r["draft_type"] == "dspark", r
print(f"  eval: tau {r['tau']:.2f}, output = greedy decoding of the MoE target")
PY

echo "== 3. trained MoE models: SFT with the load-balancing loss, sharded = one process"
cat > "$work/sft.yaml" <<YAML
model: {path: $qwen, dtype: fp32}
loss: {router_aux_loss_coef: 0.01}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: sft, run_dir: $work/unused, steps: 3, lr: 1.0e-3, save_every: 3,
           log_every: 1, micro_batches: 2}
YAML
one_vs_sharded sft "$work/sft.yaml"
python3 - "$work/sft-1/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "router_aux_loss" in r]
assert len(rows) == 3 and all(1.0 <= r["router_aux_loss"] <= 8.0 for r in rows), rows
print("  router_aux_loss per step:", [round(r["router_aux_loss"], 4) for r in rows])
PY

echo "== 3b. distillation (Mixtral student, MiniMax-M2 teacher) and DPO of the Qwen3-MoE policy"
"$tandem" train /dev/stdin > "$work/distill.log" 2>&1 <<YAML || { cat "$work/distill.log" >&2; exit 1; }
model: {path: tests/fixtures/models/mixtral, dtype: fp32}
teacher: {path: $minimax, dtype: fp32}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: distill, run_dir: $work/distill, steps: 2, lr: 1.0e-3, log_every: 1}
YAML
mkdir -p "$work/tokenizer"
cp "$minimax/tokenizer.json" "$work/tokenizer/"
python3 - "$work/tokenizer/tokenizer_config.json" "$work/pairs.jsonl" <<'PY'
import json, random, sys
template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}")
json.dump({"chat_template": template, "eos_token": "</s>", "bos_token": "<s>"}, open(sys.argv[1], "w"))
random.seed(3)
words = ["tea", "river", "stone", "paper", "light", "north", "salt", "bread", "glass"]
with open(sys.argv[2], "w") as out:
    for i in range(8):
        say = lambda n: " ".join(random.choice(words) for _ in range(n))
        out.write(json.dumps({"prompt": say(6), "chosen": say(8), "rejected": say(8)}) + "\n")
PY
"$tandem" train /dev/stdin > "$work/dpo.log" 2>&1 <<YAML || { cat "$work/dpo.log" >&2; exit 1; }
model: {path: $qwen, dtype: fp32}
reference: {path: $qwen, dtype: fp32}
loss: {beta: 0.1, router_aux_loss_coef: 0.01}
data: {path: $work/pairs.jsonl, format: preference, tokenizer: $work/tokenizer, seq_len: 128,
       micro_batch_rows: 2, cache_dir: $work/cache-dpo}
training: {objective: dpo, run_dir: $work/dpo, steps: 2, lr: 1.0e-3, log_every: 1}
YAML
python3 - "$work/distill/metrics.jsonl" "$work/dpo/metrics.jsonl" <<'PY'
import json, sys
for path in sys.argv[1:]:
    rows = [r for r in map(json.loads, open(path)) if "loss" in r]
    assert rows and all("router_aux_loss" in r for r in rows), rows
    print(f"  {path.split('/')[-2]}: router_aux_loss", [round(r["router_aux_loss"], 4) for r in rows])
PY
echo "e2e_moe: OK"
