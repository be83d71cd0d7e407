#!/usr/bin/env bash
# τ of the demo drafts with its spread: each draft config trained with 3 seeds (training.seed:
# draft initialisation, data order, DFlash and DSpark anchors), each evaluated on the 64 held-out
# prompts (64 new tokens, 7 draft tokens), greedily and at temperature 1 (the rejection rule,
# seed 0); prints every run's τ with its 95% bootstrap interval over prompts, then mean ±
# standard deviation over the seeds, with the date, CPU and commit.
# Needs the regenerated answers of the shipped demo target (scripts/demo.sh makes them).
#
#   scripts/tau_seeds.sh                       # EAGLE-3, DFlash and DSpark, seeds 0 1 2
#   SEEDS="0 1 2 3 4" scripts/tau_seeds.sh configs/demo-eagle3.yaml
#   OVERRIDES="training.steps=480" SEEDS=0 scripts/tau_seeds.sh configs/demo-dflash.yaml
# OVERRIDES are added to every `tandem train` and name the runs (runs/tau-seeds/NAME+OVERRIDES-seedN).
# TANDEM: the binary (default build/tandem), e.g. a copy that a rebuild during the runs keeps.
# EVAL_ONLY=1: evaluate the runs already trained (their export) again, without training.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-"0 1 2"}
tandem=${TANDEM:-build/tandem}
read -r -a overrides <<< "${OVERRIDES:-}"
tag=$(printf '+%s' "${overrides[@]}" | tr '/' '_')
[ -n "${OVERRIDES:-}" ] || tag=""
configs=("$@")
((${#configs[@]})) || configs=(configs/demo-eagle3.yaml configs/demo-dflash.yaml configs/demo-dspark.yaml)
settings=runs/demo-regenerated/chat.jsonl.settings.json
grep -q '"target": "data/demo/target"' "$settings" 2> /dev/null && grep -q '"finished": true' "$settings" ||
  { echo "tau_seeds.sh: $settings does not record a finished regeneration by data/demo/target; run scripts/demo.sh first" >&2; exit 1; }
out=runs/tau-seeds
mkdir -p "$out"
echo "$(date -u +%F), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)," \
     "$(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), binary $tandem"
for config in "${configs[@]}"; do
  name=$(basename "$config" .yaml)$tag
  for seed in $seeds; do
    run="$out/$name-seed$seed"
    if [ "${EVAL_ONLY:-0}" = 1 ]; then
      [ -d "$run/export" ] || { echo "tau_seeds.sh: EVAL_ONLY: $run/export is missing" >&2; exit 1; }
    else
      rm -rf "$run"
      "$tandem" train "$config" "${overrides[@]}" "training.run_dir=$run" "training.seed=$seed" \
        > "$run.train.log" 2>&1 ||
        { echo "tau_seeds.sh: training $name seed $seed failed, see $run.train.log" >&2; exit 1; }
    fi
    eval_args=(--target data/demo/target --draft "$run/export" --data data/demo/chat_heldout.jsonl
      --tokenizer data/demo/tokenizer --max-new-tokens 64 --draft-tokens 7)
    "$tandem" eval "${eval_args[@]}" --out "$run/eval.json" > "$run.eval.log" 2>&1 ||
      { echo "tau_seeds.sh: eval of $name seed $seed failed, see $run.eval.log" >&2; exit 1; }
    "$tandem" eval "${eval_args[@]}" --temperature 1 --seed 0 --no-greedy-check \
      --out "$run/eval-t1.json" > "$run.eval-t1.log" 2>&1 ||
      { echo "tau_seeds.sh: eval at T = 1 of $name seed $seed failed, see $run.eval-t1.log" >&2; exit 1; }
  done
  python3 - "$name" "$out" $seeds <<'PY'
import json, statistics, sys
name, out, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
taus, taus_t1 = [], []
for seed in seeds:
    r = json.load(open(f"{out}/{name}-seed{seed}/eval.json"))
    t1 = json.load(open(f"{out}/{name}-seed{seed}/eval-t1.json"))
    taus.append(r["tau"])
    taus_t1.append(t1["tau"])
    low, high = r["tau_ci95"]
    print(f"  {name} seed {seed}: tau {r['tau']:.2f} (95% interval {low:.2f} to {high:.2f} over "
          f"{r['prompts']} prompts), {r['greedy_identical']}/{r['prompts']} identical to greedy; "
          f"at T = 1: {t1['tau']:.2f} ({t1['tau_ci95'][0]:.2f} to {t1['tau_ci95'][1]:.2f})")
def spread(values):
    return statistics.stdev(values) if len(values) > 1 else 0.0
print(f"{name}: tau {statistics.mean(taus):.2f} ± {spread(taus):.2f}, at T = 1 "
      f"{statistics.mean(taus_t1):.2f} ± {spread(taus_t1):.2f} (mean ± standard deviation over "
      f"{len(taus)} seeds)")
PY
done
