#!/usr/bin/env bash
# Data-parallel training with 2 real processes on 127.0.0.1 (c10d TCPStore + Gloo), through the
# binary, against the one-process run of the same config (SPEC §7, distributed.mode: ddp):
#  - SFT launched by torchrun, EAGLE-3 by Slurm-style variables: per-step losses within 1e-5
#    (relative) and final weights within 1e-6 of the single process; the exports byte for byte;
#  - rank-0 loading: rank 0's log names each weight file it opened, rank 1's says it received
#    every checkpoint and opened none;
#  - resume from a step-2 checkpoint on 2 ranks, on 1, and 1 -> 2: the same final weights;
#  - a rank killed mid-run: the other exits with a [dist] error well within the collective
#    timeout; a rank that hangs (SIGSTOP): the other exits with it once the timeout passes; the
#    last checkpoint still exports in both cases.
# Usage: tests/e2e_distributed.sh BUILD_DIR   (run by ctest; torchrun from .venv, scripts/setup.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-dist-XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    pkill -9 -P "$pid" 2>/dev/null || true
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
torch_python="$root/.venv/bin/python"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# torchrun2 LOG ARGS...: `torchrun --nproc-per-node=2 --no-python tandem ARGS` (bounded).
torchrun2() {
  local log=$1
  shift
  timeout 300 "$torch_python" -m torch.distributed.run --nproc-per-node=2 \
    --master-addr=127.0.0.1 --master-port="$(free_port)" --no-python "$tandem" "$@" > "$log" 2>&1 ||
    { cat "$log" >&2; return 1; }
}

# slurm2 LOG ARGS...: two ranks started the way srun starts tasks (SLURM_* plus MASTER_*),
# each rank's output in LOG.<rank> (bounded).
slurm2() {
  local log=$1
  shift
  local port status=0
  port=$(free_port)
  local started=()
  for rank in 0 1; do
    SLURM_PROCID=$rank SLURM_NTASKS=2 SLURM_LOCALID=$rank SLURM_NTASKS_PER_NODE=2 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$tandem" "$@" > "$log.$rank" 2>&1 &
    started+=($!)
    pids+=($!)
  done
  for pid in "${started[@]}"; do wait "$pid" || status=$?; done
  [ "$status" = 0 ] || { cat "$log.0" "$log.1" >&2; return 1; }
}

# compare A B TOL: every tensor of safetensors files A and B within TOL (max abs difference).
compare() {
  python3 - "$@" <<'PY'
import array, json, struct, sys

def tensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        values = array.array("f" if info["dtype"] == "F32" else "q" if info["dtype"] == "I64" else "B")
        values.frombytes(data[begin:end])
        out[name] = values
    return out

a, b, tol = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), (sorted(a.keys() ^ b.keys()))[:5]
worst = max(max((abs(x - y) for x, y in zip(a[k], b[k])), default=0.0) for k in a)
print(f"  {len(a)} tensors, max |difference| {worst:.3g} (tolerance {tol:g})")
assert worst <= tol, f"{sys.argv[1]} and {sys.argv[2]} differ by {worst}"
PY
}

# same_losses A B: metrics.jsonl of two runs, every step's loss within 1e-5 relative.
same_losses() {
  python3 - "$@" <<'PY'
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a.keys() == b.keys() and a, (a.keys(), b.keys())
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print(f"  losses of {len(a)} steps, max relative difference {worst:.3g}")
assert worst <= 1e-5, (a, b)
PY
}

# Rank-0 loading, seen in the logs: rank 0 opened weight files, rank 1 opened none.
rank0_loaded() {
  grep -q "\[load\] rank 0: opened .*\.safetensors" "$@"
  grep -q "\[load\] rank 1: received " "$@"
  if grep -q "\[load\] rank 1: opened" "$@"; then
    echo "rank 1 opened a weight file" >&2
    return 1
  fi
}

# 24 documents of random ids from the fixture's 512-token vocab, the first 4 tokens unmasked.
python3 - "$work/docs.jsonl" <<'PY'
import json, random, sys
random.seed(1)
with open(sys.argv[1], "w") as out:
    for _ in range(24):
        n = random.randint(12, 30)
        out.write(json.dumps({"input_ids": [random.randrange(3, 512) for _ in range(n)],
                              "loss_mask": [0] * 4 + [1] * (n - 4)}) + "\n")
PY
data="data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}"
cat > "$work/sft.yaml" <<YAML
model: {path: tests/fixtures/models/llama3, dtype: fp32}
$data
training: {objective: sft, steps: 4, micro_batches: 2, lr: 1.0e-3, save_every: 2, keep_last: 3,
           log_every: 1, seed: 3}
distributed: {timeout_s: 30}
YAML
cat > "$work/eagle3.yaml" <<YAML
target: {path: tests/fixtures/models/llama3, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
$data
training: {objective: eagle3, steps: 4, micro_batches: 2, lr: 1.0e-3, save_every: 2,
           keep_last: 3, log_every: 1, seed: 3}
distributed: {timeout_s: 30}
YAML

echo "== refused settings"
for setting in distributed.mode=shard distributed.backend=nccl training.micro_batches=3; do
  if RANK=0 WORLD_SIZE=$([ "$setting" = training.micro_batches=3 ] && echo 2 || echo 1) \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$tandem" train "$work/sft.yaml" "$setting" \
      "training.run_dir=$work/refused" 2> "$work/refused.err"; then
    echo "$setting was accepted" >&2
    exit 1
  fi
  echo "  $setting: $(head -c 150 "$work/refused.err")"
done
test ! -e "$work/refused"

for job in sft eagle3; do
  echo "== $job: one process"
  "$tandem" train "$work/$job.yaml" "training.run_dir=$work/$job-1" > "$work/$job-1.log" 2>&1
  if [ "$job" = sft ]; then
    echo "== $job: 2 ranks (torchrun)"
    torchrun2 "$work/$job-2.log" train "$work/$job.yaml" "training.run_dir=$work/$job-2"
    logs=("$work/$job-2.log")
  else
    echo "== $job: 2 ranks (Slurm variables)"
    slurm2 "$work/$job-2.log" train "$work/$job.yaml" "training.run_dir=$work/$job-2"
    logs=("$work/$job-2.log.0" "$work/$job-2.log.1")
  fi
  grep -q "\[dist\] 2 ranks" "${logs[@]}"
  rank0_loaded "${logs[@]}"
  same_losses "$work/$job-1/metrics.jsonl" "$work/$job-2/metrics.jsonl"
  compare "$work/$job-1/step-00000004/model.safetensors" "$work/$job-2/step-00000004/model.safetensors" 1e-6
  echo "  exports:"
  for file in $(cd "$work/$job-1/export" && find . -name '*.safetensors'); do
    cmp "$work/$job-1/export/$file" "$work/$job-2/export/$file"
    echo "  $file identical"
  done
done

echo "== resume from step 2: on 2 ranks, on 1, and 1 -> 2 (sft)"
for case in "2to2 sft-2" "2to1 sft-2" "1to2 sft-1"; do
  set -- $case
  mkdir -p "$work/resume-$1"
  cp -r "$work/$2/step-00000002" "$work/resume-$1/"
  if [ "$1" = 2to1 ]; then
    "$tandem" train "$work/sft.yaml" "training.run_dir=$work/resume-$1" > "$work/resume-$1.log" 2>&1
  else
    torchrun2 "$work/resume-$1.log" train "$work/sft.yaml" "training.run_dir=$work/resume-$1"
  fi
  grep -q "resuming from .*step-00000002" "$work/resume-$1.log"
  echo "  $1:"
  compare "$work/sft-1/step-00000004/model.safetensors" "$work/resume-$1/step-00000004/model.safetensors" 1e-6
done

# interrupt NAME SIGNAL TIMEOUT LIMIT: a 2-rank run with collective timeout TIMEOUT s; once its
# step-4 checkpoint exists, SIGNAL goes to rank 1 (KILL: it dies; STOP: it hangs). Rank 0 must
# exit with a [dist] error (not by the test's own timeout) within LIMIT s, and the last
# checkpoint must still export.
interrupt() {
  local name=$1 signal=$2 timeout_s=$3 limit=$4 port rank0 rank1 start status=0 elapsed
  port=$(free_port)
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$tandem" train \
      "$work/sft.yaml" "training.run_dir=$work/$name" training.steps=100000 training.save_every=2 \
      "distributed.timeout_s=$timeout_s" > "$work/$name.$rank" 2>&1 &
    pids+=($!)
  done
  rank0=${pids[-2]}
  rank1=${pids[-1]}
  for _ in $(seq 600); do
    [ -d "$work/$name/step-00000004" ] && break
    sleep 0.1
  done
  test -d "$work/$name/step-00000004"
  pkill "-$signal" -P "$rank1"  # the tandem process under rank 1's `timeout`
  start=$(date +%s.%N)
  wait "$rank0" || status=$?
  elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" \
    "$start" "$(date +%s.%N)")
  pkill -9 -P "$rank1" || true
  echo "  rank 0 exited with status $status, $elapsed s after SIG$signal to rank 1 (timeout $timeout_s s)"
  [ "$status" != 0 ] && [ "$status" != 124 ]
  python3 -c "import sys; assert float(sys.argv[1]) < float(sys.argv[2]), sys.argv[1]" "$elapsed" "$limit"
  grep "\[dist\] rank 0 of 2: .* failed" "$work/$name.0" | head -1 | cut -c1-200
  "$tandem" export "$work/$name" --out "$work/$name-export" > /dev/null
  test -f "$work/$name-export/model.safetensors"
  echo "  the last checkpoint exports"
}

echo "== a rank killed mid-run (it dies: the other fails at once)"
interrupt killed KILL 20 10
echo "== a rank that hangs mid-run (SIGSTOP: the other fails when the 5 s timeout passes)"
interrupt hung STOP 5 15
echo "e2e_distributed: OK"
