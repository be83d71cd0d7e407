#!/usr/bin/env bash
# The demo-config results quoted in docs/ (distillation, DPO, GSPO, EAGLE-3 and DFlash on the
# demo target), measured in one go and written with the date, CPU model and commit to
# runs/demo-results/summary.md. Uses the shipped demo target data/demo/target.
#
#   scripts/demo_results.sh                 # every job except the 600-step DFlash run
#   scripts/demo_results.sh --long          # also DFlash for 600 steps (about 25 more minutes)
#   scripts/demo_results.sh --regeneration  # only the drafts with and without regenerated data
#
# Threads: $TANDEM_THREADS (default: the usable cores). Each job writes a fresh run directory
# under runs/demo-results/, so earlier runs are never resumed into these figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
long=0 only_regeneration=0
[ "${1:-}" = "--long" ] && long=1
[ "${1:-}" = "--regeneration" ] && only_regeneration=1
[ -f data/demo/target/config.json ] || {
  echo "demo_results.sh: data/demo/target is missing; it ships in the repository (git checkout data/demo/target, or scripts/train_demo_target.sh)" >&2; exit 1; }

out=runs/demo-results
rm -rf "$out"
mkdir -p "$out"
summary=$out/summary.md
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
  echo "# Demo-config results"
  echo
  echo "$(date -u +%F), $cpu, $(nproc) cores, TANDEM_THREADS=${TANDEM_THREADS:-all}," \
       "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
} > "$summary"

# Runs a command, prints its wall time into the summary under `name`.
timed() {
  local name=$1; shift
  local start; start=$(date +%s.%N)
  "$@" > "$out/$name.log" 2>&1 || { echo "demo_results.sh: $name failed, see $out/$name.log" >&2; exit 1; }
  python3 -c "import sys; print(f'- {sys.argv[1]}: {float(sys.argv[3]) - float(sys.argv[2]):.0f} s')" \
    "$name" "$start" "$(date +%s.%N)" >> "$summary"
}
# Prints the metrics of the given steps from a run's metrics.jsonl.
metrics() {
  python3 - "$@" >> "$summary" <<'PY'
import json, sys
path, keys, steps = sys.argv[1], sys.argv[2].split(","), [int(s) for s in sys.argv[3].split(",")]
rows = {r["step"]: r for r in map(json.loads, open(path)) if "step" in r}
for s in steps:
    r = rows.get(s)
    if r is None:
        continue
    print(f"  - step {s}: " + ", ".join(f"{k} {r[k]:.4g}" for k in keys if k in r))
PY
}
# Prints tau, per-position acceptance and decoding speeds from an eval report.
tau() {
  python3 - "$1" >> "$summary" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
acc = " ".join(f"{a:.2f}" for a in r["acceptance_conditional"])
print(f"  - tau {r['tau']:.2f}, acceptance by draft position (conditional) {acc}, "
      f"{r['greedy_identical']}/{r['prompts']} outputs identical to greedy; batch 1"
      f"{'' if r['kv_cache'] else ' without KV caches'}: speculative "
      f"{r['speculative_tokens_per_s']:.0f} tokens/s ({r['speculative_seconds']:.1f} s), greedy "
      f"{r['greedy_tokens_per_s']:.0f} tokens/s ({r['greedy_seconds']:.1f} s)")
PY
}
train() {  # train NAME CONFIG [overrides...]
  local name=$1 config=$2; shift 2
  timed "$name" build/tandem train "$config" "training.run_dir=$out/$name" "$@"
}
evaluate() {  # evaluate NAME [eval flags]: tandem eval with its defaults on the held-out prompts
  local name=$1; shift
  timed "$name-eval$*" build/tandem eval --target data/demo/target \
    --draft "$out/$name/export" --data data/demo/chat_heldout.jsonl \
    --tokenizer data/demo/tokenizer --out "$out/$name/eval$*.json" "$@"
  tau "$out/$name/eval$*.json"
}
# The drafts on the chat prompts answered by the target (tandem regenerate, as scripts/demo.sh)
# and on the original answers, at equal steps; eval with and without KV caches.
regeneration() {
  timed regenerate build/tandem regenerate configs/demo-eagle3.yaml --data data/demo/chat.jsonl \
    --out "$out/regenerated.jsonl" --max-new-tokens 128 --batch-size 32
  grep -o "[0-9]* new tokens in .*" "$out/regenerate.log" | sed 's/^/  - /' >> "$summary"
  train eagle3 configs/demo-eagle3.yaml "data.path=$out/regenerated.jsonl"
  evaluate eagle3
  evaluate eagle3 --no-kv-cache
  train eagle3-original configs/demo-eagle3.yaml data.path=data/demo/chat.jsonl
  evaluate eagle3-original
  train dflash configs/demo-dflash.yaml "data.path=$out/regenerated.jsonl"
  evaluate dflash
  train dflash-original configs/demo-dflash.yaml data.path=data/demo/chat.jsonl
  evaluate dflash-original
}
if [ "$only_regeneration" = 1 ]; then
  regeneration
  cat "$summary"
  exit 0
fi

train distill configs/demo-distill.yaml
metrics "$out/distill/metrics.jsonl" loss,tokens_per_s 1,50,100
train dpo configs/demo-dpo.yaml
metrics "$out/dpo/metrics.jsonl" loss,rewards/accuracy,rewards/margin 1,5,30
timed gspo-rollout build/tandem rollout --model data/demo/target \
  --tokenizer data/demo/tokenizer --data data/demo/chat.jsonl --num-prompts 32 \
  --samples-per-prompt 4 --max-new-tokens 24 --reward-regex '(?i)\b(she|her)\b' \
  --out "$out/rollouts.jsonl"
train gspo configs/demo-gspo.yaml "data.path=$out/rollouts.jsonl"
metrics "$out/gspo/metrics.jsonl" loss,reward_mean,clipped_fraction,kl_new_old 1,16
regeneration
train dflash-labels configs/demo-dflash.yaml loss.teacher=labels "data.path=$out/regenerated.jsonl"
evaluate dflash-labels
if [ "$long" = 1 ]; then
  train dflash-600 configs/demo-dflash.yaml training.steps=600 "data.path=$out/regenerated.jsonl"
  evaluate dflash-600
fi
cat "$summary"
