#!/usr/bin/env bash
# tandem next to Hugging Face TRL and the HF Trainer on the CPU, on identical batches of the
# shipped demo data, one after the other (never concurrently), THREADS threads each:
#   dpo:     configs/demo-dpo.yaml (the demo target as policy and frozen reference) against TRL's
#            DPOTrainer (tools/side_by_side/trl_dpo.py);
#   distill: configs/demo-distill.yaml (a fresh student, the demo target as frozen teacher,
#            forward KL) against an HF Trainer subclass computing forward KL and TRL's GKDTrainer
#            with lmbda 0 / beta 0 (tools/side_by_side/hf_distill.py).
# tandem trains first (WARMUP + TIMED steps, constant learning rate); the Python side then
# reproduces its steps' records from tandem's sampler and packing, checks them against the run's
# metrics.jsonl (documents, real tokens, pairs per step) and trains on exactly those. The sides
# alternate ROUNDS times. Prints real (non-padding) tokens/s over the TIMED steps after WARMUP
# (median of the rounds, and their range), token slots per step (padding included), peak RSS and
# tandem's speed over each other side's, with the date, CPU and commit.
#
#   bench/bench_vs_trl.sh [--packing packed|best_fit|padded] [--warmup 2] [--timed 10]
#                         [--rounds 3] [--only "dpo distill"] [--no-gkd] [--keep DIR]
#   bench/bench_vs_trl.sh --summary DIR
#   env: BUILD (default build), THREADS (default 2), TANDEM_CACHE (venv and data cache root),
#        WAIT (minutes to wait for a busy machine, default 60), FORCE=1 (time on a busy machine:
#        the figures are then meaningless)
# Each run waits until no other process is running on the machine (sampled every 2 s; kernel
# threads and this bench's own processes aside) and runs again, up to 3 times, when others were
# seen running in 3 samples or more meanwhile. The Python env (about 6 GB) is made on first use
# from tools/side_by_side/requirements.lock in ${TANDEM_CACHE:-~/.cache/tandem}/side-by-side-<hash>.
# --summary DIR prints the table of a run kept with --keep DIR again, running nothing.
# Default packing: best_fit when this build accepts it, else packed. Needs a build (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
packing="" warmup=2 timed=10 rounds=3 only="dpo distill" gkd=1 keep="" summary=""
while (($#)); do
  case "$1" in
    --packing) packing=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --timed) timed=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --no-gkd) gkd=0; shift ;;
    --keep) keep=$2; shift 2 ;;
    --summary) summary=$2; shift 2 ;;
    *) sed -n '2,28p' "$0" >&2; exit 2 ;;
  esac
done
BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
WAIT=${WAIT:-60}
tandem="$BUILD/tandem"

# The Python env, the packing, the work directory and the settings the summary reads.
prepare() {
  [[ -x "$tandem" ]] || { echo "no $tandem: build first (scripts/setup.sh)" >&2; exit 1; }
  # The Python env, keyed on the lock; built in DIR.tmp and renamed, so a broken install is never reused.
  local lock=tools/side_by_side/requirements.lock venv
  venv="${TANDEM_CACHE:-$HOME/.cache/tandem}/side-by-side-$(sha256sum "$lock" | cut -c1-16)"
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "[bench_vs_trl] installing $lock into $venv" >&2
    mkdir -p "$(dirname "$venv")"
    rm -rf "$venv.tmp"
    python3 -m venv "$venv.tmp"
    "$venv.tmp/bin/python" -m pip install -q --disable-pip-version-check -r "$lock" >&2
    mv "$venv.tmp" "$venv"
  fi
  py="$venv/bin/python"  # always run as bin/python (the console scripts name DIR.tmp)
  if [[ -z "$packing" ]]; then
    packing=packed
    "$tandem" train configs/demo-dpo.yaml data.packing=best_fit --dry-run > /dev/null 2>&1 && packing=best_fit
  fi
  work=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/tandem-vs-trl-XXXXXX")}
  mkdir -p "$work"
  [[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT
  export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS TANDEM_THREADS=$THREADS
  export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONWARNINGS=ignore
  steps=$((warmup + timed))
  local header
  header="bench_vs_trl: $(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores,"
  header+=" $THREADS threads per side, commit $(git rev-parse --short HEAD 2> /dev/null || echo unknown)"
  header+="$(git diff --quiet HEAD -- src 2> /dev/null || echo ' (src/ modified)'), tandem data.packing=$packing,"
  header+=" $steps steps (first $warmup not timed), $rounds rounds"
  echo "$header" >&2
  python3 -c 'import json, sys; json.dump({"header": sys.argv[1], "warmup": int(sys.argv[2]),
    "packing": sys.argv[3], "objectives": sys.argv[4].split()}, open(sys.argv[5], "w"))' \
    "$header" "$warmup" "$packing" "$only" "$work/settings.json"
}

# Other processes running now (state R), outside this bench's process group and the kernel's.
group=$(ps -o pgid= $$ | tr -d ' ')
others() {
  [[ "${FORCE:-0}" == 1 ]] && return 0
  ps -eo pgid=,stat=,comm= | awk -v me="$group" '$1 != me && $1 != 0 && $2 ~ /^R/ {print $3}'
}
# Runs "$@" (one side) on a quiet machine: waits up to WAIT minutes for 3 quiet samples in a row,
# samples every 2 s while it runs, and runs it again when others ran in 3 samples or more.
# Messages go to fd 3, the bench's stderr, whatever "$@" is redirected to.
exec 3>&2
run_quiet() {
  local quiet waited watcher seen="$work/others-seen"
  for _ in 1 2 3; do
    for ((quiet = 0, waited = 0; quiet < 3; waited++)); do
      ((waited < WAIT * 30)) || { echo "the machine has been busy for $WAIT minutes: $(others | sort -u | xargs)" >&3; exit 1; }
      if [[ -z "$(others)" ]]; then quiet=$((quiet + 1)); else quiet=0; fi
      sleep 2
    done
    : > "$seen"
    (while sleep 2; do others >> "$seen"; done) &
    watcher=$!
    "$@" || { kill "$watcher"; return 1; }
    kill "$watcher"
    (($(wc -l < "$seen") < 3)) && return 0
    echo "[bench_vs_trl] other processes ran meanwhile ($(sort -u "$seen" | xargs)): again" >&3
  done
  echo "other processes kept disturbing the runs" >&3
  exit 1
}

# Every round of every objective: tandem's run in $work/tandem-OBJECTIVE-ROUND, each other side's
# result in $work/OBJECTIVE-SIDE-ROUND.json (what the summary reads).
measure() {
  for objective in $only; do
    case "$objective" in
      dpo) sides=("tools/side_by_side/trl_dpo.py") ;;
      distill) sides=("tools/side_by_side/hf_distill.py --trainer hf")
        ((gkd)) && sides+=("tools/side_by_side/hf_distill.py --trainer gkd") ;;
      *) echo "unknown objective $objective" >&2; exit 2 ;;
    esac
    for ((round = 1; round <= rounds; round++)); do
      run="$work/tandem-$objective-$round"
      log="$work/tandem-$objective-$round.log"
      echo "[bench_vs_trl] $objective, round $round: tandem" >&2
      # The demo config with a constant learning rate (the Python side uses the same), every step logged.
      train_tandem() {
        rm -rf "$run"
        "$tandem" --threads "$THREADS" train "configs/demo-$objective.yaml" "training.run_dir=$run" \
          "training.steps=$steps" training.log_every=1 training.save_every=0 training.export=false \
          training.schedule=constant training.warmup_ratio=0 "data.packing=$packing" > "$log" 2>&1
      }
      run_quiet train_tandem || { tail -20 "$log" >&2; exit 1; }
      for i in "${!sides[@]}"; do
        out="$work/$objective-$i-$round.json"
        log="$work/$objective-$i-$round.log"
        echo "[bench_vs_trl] $objective, round $round: ${sides[$i]}" >&2
        # shellcheck disable=SC2086  # the side's arguments split on purpose
        run_quiet "$py" ${sides[$i]} --tandem "$tandem" --tandem-run "$run" --warmup "$warmup" \
          --threads "$THREADS" --out "$out" > "$log" 2>&1 || { tail -20 "$log" >&2; exit 1; }
      done
    done
  done
}

if [[ -n "$summary" ]]; then
  work=$summary
else
  prepare
  measure
fi
python3 - "$work" << 'EOF'
import glob, json, os, re, statistics, sys
work = sys.argv[1]
settings = json.load(open(f"{work}/settings.json"))
warmup, packing = settings["warmup"], settings["packing"]
print(settings["header"])
entries = []  # (objective, tandem run, side's result), in objective, round, side order
for out in glob.glob(f"{work}/*-*-*.json"):
    objective, side, round_ = re.match(r"(\w+)-(\d+)-(\d+)\.json$", os.path.basename(out)).groups()
    entries.append((settings["objectives"].index(objective), int(round_), int(side), objective,
                    f"{work}/tandem-{objective}-{round_}", out))
entries = [e[3:] for e in sorted(entries)]

def tandem_figures(run):
    rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
    seen = [0] + [r["tokens_seen"] for r in rows]
    tokens = [b - a for a, b in zip(seen, seen[1:])][warmup:]
    seconds = [r["time/step"] for r in rows][warmup:]
    return {"steps_timed": len(seconds), "tokens_per_step": sum(tokens) / len(tokens),
            "tokens_per_s": sum(tokens) / sum(seconds), "peak_rss_mib": rows[-1]["peak_rss_mib"],
            "losses": [r["loss"] for r in rows]}

sides = {}  # (objective, side) -> the rounds' figures, in order of appearance
for objective, run, out in entries:
    other = json.load(open(out))
    versions = other["versions"]
    ours = tandem_figures(run)
    ours["slots_per_step"] = sum(other["tandem_slots_per_step"][warmup:]) / ours["steps_timed"]
    if run not in {r.get("run") for r in sides.get((objective, "tandem"), [])}:
        sides.setdefault((objective, "tandem"), []).append(dict(ours, run=run))
    sides.setdefault((objective, other["side"]), []).append(other)

def median_rate(figures):
    return statistics.median(f["tokens_per_s"] for f in figures)

def ratios(objective, figures):  # tandem's tokens/s over the side's, round by round
    ours = sides[(objective, "tandem")]
    return [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ours, figures)]

print(f"| objective | side | steps timed × rounds | real tokens/step | token slots/step | tokens/s, median (range) | peak RSS | tandem / side (by round) |")
print("|---|---|---|---|---|---|---|---|")
for (objective, side), figures in sides.items():
    rates = [f["tokens_per_s"] for f in figures]
    name = f"tandem (data.packing {packing})" if side == "tandem" else side
    by_round = ratios(objective, figures)
    ratio = "—" if side == "tandem" else (f"**{median_rate(sides[(objective, 'tandem')]) / median_rate(figures):.2f}×** "
                                          f"({min(by_round):.2f}–{max(by_round):.2f})")
    first = figures[0]
    print(f"| {objective} | {name} | {first['steps_timed']} × {len(figures)} | {first['tokens_per_step']:,.0f} | "
          f"{first['slots_per_step']:,.0f} | {median_rate(figures):,.0f} ({min(rates):,.0f}–{max(rates):,.0f}) | "
          f"{max(f['peak_rss_mib'] for f in figures) / 1024:.2f} GiB | {ratio} |")
print("\nversions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
print("loss by step, first round (first step, after warm-up, last):")
for (objective, side), figures in sides.items():
    values = figures[0]["losses"]
    picks = [values[0], values[min(warmup, len(values) - 1)], values[-1]]
    print(f"  {objective:8} {side:34} " + "  ".join(f"{v:.4f}" for v in picks))
EOF
