#!/usr/bin/env bash
# Distributed training on one machine: 1 process against 2 ranks (torchrun, Gloo over
# 127.0.0.1) in each mode (ddp, shard, hybrid 2 x 1) for SFT on the demo target's shape and
# EAGLE-3 against the demo target, same global batch (2 micro-batches of 8 x 256 tokens per
# step). Prints the median step time, each rank's trainable state (parameters + fp32 masters +
# AdamW moments) and frozen weights as the ranks report them, the peak RSS of each rank, and
# the bytes each rank hands to the collectives per step. A larger SFT model (bench/sft-large-model.json,
# 150 M parameters, 4 x 256-token micro-batches) shows the per-rank memory where the weights and optimizer
# state dominate the activations.
# The 2 ranks share this machine's cores (1 thread each on 2 cores, against 2 threads for the
# single process): the times are as measured, the memory is the main figure.
# Usage: bench/bench_distributed.sh BUILD_DIR [STEPS]   (needs data/demo/target: the demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$(cd "$1" && pwd)/tandem"
steps=${2:-6}
cd "$root"
test -f data/demo/target/config.json ||
  { echo "bench_distributed: data/demo/target is missing; it ships in the repository (git checkout data/demo/target)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-bench-dist-XXXXXX")
trap 'rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
common=("training.steps=$steps" training.micro_batches=2 training.save_every=0 training.export=false
        training.log_every=1)

run() {  # run NAME RANKS MODE CONFIG [overrides]
  local name=$1 ranks=$2 mode=$3 config=$4
  shift 4
  if [ "$ranks" = 1 ]; then
    TANDEM_THREADS=2 "$tandem" train "$config" "training.run_dir=$work/$name" "${common[@]}" "$@" \
      > "$work/$name.log" 2>&1 || { tail -5 "$work/$name.log" >&2; exit 1; }
  else
    unset TANDEM_THREADS
    .venv/bin/python -m torch.distributed.run --nproc-per-node=2 --master-addr=127.0.0.1 \
      --master-port="$(port)" --no-python "$tandem" train "$config" "training.run_dir=$work/$name" \
      "${common[@]}" "$@" > "$work/$name.log" 2>&1 || { tail -5 "$work/$name.log" >&2; exit 1; }
  fi
  python3 - "$name" "$ranks" "$mode" "$work/$name/metrics.jsonl" "$work/$name.log" <<'PY'
import json, re, statistics, sys
name, ranks, mode, metrics, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
records = [r for r in map(json.loads, open(metrics)) if "time/step" in r]
times = [r["time/step"] for r in records[1:]]  # the first step warms the allocator
tokens = statistics.median(r["tokens_per_s"] for r in records[1:])
line = re.compile(r"rank (\d+) of \d+: peak RSS ([\d.]+) MiB, trainable state ([\d.]+) MiB, "
                  r"frozen weights ([\d.]+) MiB")
reports = sorted((int(m.group(1)), *map(float, m.groups()[1:])) for m in line.finditer(open(log).read()))
def column(i):
    return " / ".join(f"{r[i]:.1f}" for r in reports) + " MiB"
bytes_per_step = records[-1].get("collective_bytes", 0)
print(f"| {name} | {ranks} | {mode} | {statistics.median(times):.2f} s | {tokens:.0f} | "
      f"{column(2)} | {column(3)} | {column(1)} | {bytes_per_step / 2**20:.1f} MiB |")
PY
}

echo "| job | ranks | mode | step (median) | tokens/s | trainable state per rank | frozen weights per rank | peak RSS per rank | collective bytes per rank per step |"
echo "|---|---|---|---|---|---|---|---|---|"
sft=(model.config=data/demo/target/config.json data.micro_batch_rows=8)  # as first measured
hybrid=(distributed.mode=hybrid distributed.dp_replicate=2 distributed.dp_shard=1)
run sft-1 1 - configs/demo-target.yaml "${sft[@]}"
run sft-ddp 2 ddp configs/demo-target.yaml "${sft[@]}"
run sft-shard 2 shard configs/demo-target.yaml "${sft[@]}" distributed.mode=shard
run sft-hybrid 2 "hybrid 2x1" configs/demo-target.yaml "${sft[@]}" "${hybrid[@]}"
large=(model.config=bench/sft-large-model.json data.micro_batch_rows=4)
run sft-large-1 1 - configs/demo-target.yaml "${large[@]}"
run sft-large-shard 2 shard configs/demo-target.yaml "${large[@]}" distributed.mode=shard
run eagle3-1 1 - configs/demo-eagle3.yaml
run eagle3-ddp 2 ddp configs/demo-eagle3.yaml
run eagle3-shard 2 shard configs/demo-eagle3.yaml distributed.mode=shard
run eagle3-hybrid 2 "hybrid 2x1" configs/demo-eagle3.yaml "${hybrid[@]}"
