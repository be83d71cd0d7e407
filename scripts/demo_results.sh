#!/usr/bin/env bash
# The demo-config results quoted in docs/ (distillation, DPO, GSPO, EAGLE-3 and DFlash on the
# demo target), measured in one go and written with the date, CPU model and commit to
# runs/demo-results/summary.md. Needs the demo target (scripts/demo.sh trains it).
#
#   scripts/demo_results.sh            # every job except the 600-step DFlash run
#   scripts/demo_results.sh --long     # also DFlash for 600 steps (about 25 more minutes)
#
# Threads: $TANDEM_THREADS (default: the usable cores). Each job writes a fresh run directory
# under runs/demo-results/, so earlier runs are never resumed into these figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
long=0
[ "${1:-}" = "--long" ] && long=1
[ -f runs/demo-target/export/config.json ] || {
  echo "demo_results.sh: runs/demo-target/export is missing; run scripts/demo.sh first" >&2; exit 1; }

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
# Prints tau and per-position acceptance from an eval report.
tau() {
  python3 - "$1" >> "$summary" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
acc = " ".join(f"{a:.2f}" for a in r["acceptance_conditional"])
print(f"  - tau {r['tau']:.2f}, acceptance by draft position (conditional) {acc}, "
      f"{r['greedy_identical']}/{r['prompts']} outputs identical to greedy")
PY
}
train() {  # train NAME CONFIG [overrides...]
  local name=$1 config=$2; shift 2
  timed "$name" build/tandem train "$config" "training.run_dir=$out/$name" "$@"
}
evaluate() {  # evaluate NAME: tandem eval with its defaults on the held-out prompts
  timed "$1-eval" build/tandem eval --target runs/demo-target/export --draft "$out/$1/export" \
    --data data/demo/chat_heldout.jsonl --tokenizer data/demo/tokenizer --out "$out/$1/eval.json"
  tau "$out/$1/eval.json"
}

train distill configs/demo-distill.yaml
metrics "$out/distill/metrics.jsonl" loss,tokens_per_s 1,50,100
train dpo configs/demo-dpo.yaml
metrics "$out/dpo/metrics.jsonl" loss,rewards/accuracy,rewards/margin 1,5,30
timed gspo-rollout build/tandem rollout --model runs/demo-target/export \
  --tokenizer data/demo/tokenizer --data data/demo/chat.jsonl --num-prompts 32 \
  --samples-per-prompt 4 --max-new-tokens 24 --reward-regex '(?i)\b(she|her)\b' \
  --out "$out/rollouts.jsonl"
train gspo configs/demo-gspo.yaml "data.path=$out/rollouts.jsonl"
metrics "$out/gspo/metrics.jsonl" loss,reward_mean,clipped_fraction,kl_new_old 1,16
train eagle3 configs/demo-eagle3.yaml
evaluate eagle3
train dflash-labels configs/demo-dflash.yaml loss.teacher=labels
evaluate dflash-labels
train dflash configs/demo-dflash.yaml
evaluate dflash
if [ "$long" = 1 ]; then
  train dflash-600 configs/demo-dflash.yaml training.steps=600
  evaluate dflash-600
fi
cat "$summary"
