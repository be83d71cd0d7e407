#!/usr/bin/env bash
# What each data.packing mode makes of the demo's data, in one run on one machine: the demo
# configs of distillation (text), DPO (preference pairs) and EAGLE-3 (chat, original answers),
# each with its own rows and with fewer, longer rows of the same tokens per micro-batch, under
# `packed` (first fit in sampler order), `best_fit` and `padded` (one document per row, padded to
# the micro-batch's longest; left out with one row per micro-batch):
#   - fill: real tokens / row slots over one whole pass, as `tandem train --dry-run` plans it;
#   - a short training run (STEPS steps, the first SKIP left out): real tokens/s, step time, MFU
#     against the fp32 matmul peak the trainer measures at start (training.mfu=true), peak RSS.
# Every mode trains on the same records in the same sampler order; real tokens exclude padding.
#
#   bench/bench_packing.sh               # after a build (BUILD=build); STEPS=8 SKIP=2
#   CASES="distill:256:8 dpo:4096:1" MODES="packed best_fit" bench/bench_packing.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-8}
SKIP=${SKIP:-2}
CASES=${CASES:-distill:256:8 dpo:512:8 dpo:4096:1 eagle3:256:8 eagle3:2048:1}  # objective:seq_len:rows
MODES=${MODES:-packed best_fit padded}
THREADS=${THREADS:-$(nproc)}
[[ -x "$BUILD/tandem" ]] || { echo "no $BUILD/tandem: build first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-bench-packing-XXXXXX")
trap 'rm -rf "$work"' EXIT

declare -A config=([distill]=configs/demo-distill.yaml [dpo]=configs/demo-dpo.yaml
  [eagle3]=configs/demo-eagle3.yaml)
declare -A data=([distill]=data/demo/corpus.jsonl [dpo]=data/demo/preference.jsonl
  [eagle3]=data/demo/chat.jsonl)

# Mean over the timed steps of one run's metrics.jsonl, printed as one table line.
summary='
import json, sys
path, skip, rss_kib, objective, mode, shape, fill, per_epoch = sys.argv[1:]
rows = [json.loads(line) for line in open(path)][int(skip):]
seconds = sum(r["time/step"] for r in rows)
tokens = sum(r["tokens_per_s"] * r["time/step"] for r in rows)
mfu = sum(r.get("mfu", 0) * r["time/step"] for r in rows) / seconds
print(f"{objective:<8} {mode:<9} {shape:<8} {fill + chr(37):>7} {per_epoch:>8} "
      f"{seconds / len(rows):>7.2f} {tokens / seconds:>10.0f} {100 * mfu:>6.1f}% "
      f"{int(rss_kib) / 1048576:>5.2f} GiB")
'

echo "bench_packing: $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "$THREADS threads, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
  "$STEPS steps per run (first $SKIP left out)"
printf '%-8s %-9s %-8s %7s %8s %7s %10s %7s %9s\n' objective packing rows fill steps/ep \
  "step s" "real tok/s" MFU "peak RSS"
for case in $CASES; do
  IFS=: read -r objective seq_len rows <<< "$case"
  # The config without its step count, so that training.epochs can plan one pass.
  grep -v '^  steps:' "${config[$objective]}" > "$work/$objective.yaml"
  for mode in $MODES; do
    [[ $mode == padded && $rows == 1 ]] && continue
    args=("$work/$objective.yaml" "data.path=${data[$objective]}" "data.packing=$mode"
      "data.seq_len=$seq_len" "data.micro_batch_rows=$rows" "data.cache_dir=$work/cache")
    plan=$("$BUILD/tandem" --threads "$THREADS" train "${args[@]}" training.epochs=1 --dry-run \
      2>&1) || { echo "$plan" >&2; exit 1; }
    steps_per_epoch=$(sed -nE 's/.*1 epoch: ([0-9]+) steps planned.*/\1/p' <<< "$plan")
    fill=$(sed -nE 's/.* ([0-9.]+)% of their row slots real tokens.*/\1/p' <<< "$plan")
    run="$work/run-$objective-$mode-$seq_len"
    /usr/bin/time -f "%M" -o "$work/rss" "$BUILD/tandem" --threads "$THREADS" train "${args[@]}" \
      "training.run_dir=$run" "training.steps=$STEPS" training.log_every=1 \
      "training.save_every=$STEPS" training.export=false training.mfu=true \
      > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
    python3 -c "$summary" "$run/metrics.jsonl" "$SKIP" "$(cat "$work/rss")" "$objective" "$mode" \
      "${rows}x$seq_len" "$fill" "$steps_per_epoch"
  done
done
