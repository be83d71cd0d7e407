#!/usr/bin/env bash
# Distributed training with real processes on 127.0.0.1 (c10d TCPStore + Gloo), through the
# binary, against the one-process run of the same config (docs/distributed.md). distributed.mode: ddp:
#  - SFT launched by torchrun, EAGLE-3 by Slurm-style variables: per-step losses within 1e-5
#    (relative) and final weights within 1e-6 of the single process; the exports byte for byte;
#  - rank-0 loading: rank 0's log names each weight file it opened, rank 1's says it received
#    every checkpoint and opened none;
#  - resume from a step-2 checkpoint on 2 ranks, on 1, and 1 -> 2: the same final weights;
#  - a rank killed mid-run: the other exits with a [dist] error well within the collective
#    timeout; a rank that hangs (SIGSTOP): the other exits with it once the timeout passes; the
#    last checkpoint still exports in both cases.
# distributed.mode: shard (and hybrid):
#  - SFT and EAGLE-3 sharded over 2 ranks: losses within 1e-5 (relative) and final weights within
#    1e-6 of the single process; each rank's trainable state (parameters, masters, moments) and
#    frozen target weights are half the single process's (0.45..0.55, from the ranks' reports);
#    rank-0 loading; `tandem export` of the sharded checkpoint in one process is byte for byte
#    the export the sharded run wrote; SFT's export is byte for byte that of the same sharded job
#    run in one process;
#  - hybrid 2 x 1 on 2 ranks, and hybrid 2 x 2 on 4 ranks (replica groups and shard groups
#    both real): the same losses and weights as one process;
#  - sharded checkpoints resume on 2 ranks, on 1 (sharded and not), and a one-process
#    checkpoint resumes sharded on 2: the same final weights;
#  - offline EAGLE-3 (features from a capture) sharded: the one-process losses and weights, the
#    frozen head halved per rank;
#  - a rank killed mid-run while sharded: the other exits with a [dist] error.
# The configs use AdamW eps 1e-2. A sharded backward sums some activation gradients in another
# order than one process (1-ulp differences), and at eps 1e-8 Adam's m / sqrt(v) blows those up
# for elements whose gradient is near zero (measured at eps 1e-8: losses 6e-8 relative, weights
# 1.5e-5 apart on 6 of 32768 embedding elements after 4 steps; at eps 1e-2: 6e-8). With eps 1e-2
# the update is linear in the gradient, so the 1e-6 bound tests the sharding, not Adam's
# amplification. (ddp sums in the same order and matches exactly at either eps.)
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

source "$root/tests/dist_helpers.sh"  # free_port, torchrun2, compare, same_losses

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
random_documents "$work/docs.jsonl" 1 24 12 512
# Validated every 2 steps: 9 documents in 3 micro-batches, so on 2 ranks one reruns a spare.
random_documents "$work/validation.jsonl" 2 9 12 512
data="data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache, validation: $work/validation.jsonl}"
cat > "$work/sft.yaml" <<YAML
model: {path: tests/fixtures/models/llama3, dtype: fp32}
$data
training: {objective: sft, steps: 4, micro_batches: 2, lr: 1.0e-3, save_every: 2, keep_last: 3,
           log_every: 1, seed: 3, eval_every: 2}
optimizer: {eps: 1.0e-2}
distributed: {timeout_s: 30}
YAML
cat > "$work/eagle3.yaml" <<YAML
target: {path: tests/fixtures/models/llama3, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
$data
training: {objective: eagle3, steps: 4, micro_batches: 2, lr: 1.0e-3, save_every: 2,
           keep_last: 3, log_every: 1, seed: 3, eval_every: 2}
optimizer: {eps: 1.0e-2}
distributed: {timeout_s: 30}
YAML

echo "== refused settings (before joining: MASTER_PORT=1 is never dialled)"
# WORLD_SIZE:SETTINGS (comma-separated)
for case in 1:distributed.mode=hybrid 1:distributed.backend=nccl 2:training.micro_batches=3 \
    2:distributed.mode=hybrid,distributed.dp_replicate=2,distributed.dp_shard=2; do
  IFS=, read -r -a settings <<< "${case#*:}"
  if RANK=0 WORLD_SIZE=${case%%:*} MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$tandem" train \
      "$work/sft.yaml" "${settings[@]}" "training.run_dir=$work/refused" 2> "$work/refused.err"; then
    echo "${case#*:} was accepted" >&2
    exit 1
  fi
  echo "  ${case#*:}: $(head -c 170 "$work/refused.err")"
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


# memory_half ONE_LOG SHARD_LOGS...: each rank's trainable state and frozen weights in the
# sharded run are half those of the one-process run (0.45..0.55, padding included).
memory_half() {
  python3 - "$@" <<'PY'
import re, sys
line = re.compile(r"rank (\d+) of (\d+): peak RSS ([\d.]+) MiB, trainable state ([\d.]+) MiB, "
                  r"frozen weights ([\d.]+) MiB")
def reports(paths):
    return [tuple(map(float, m.groups())) for p in paths for m in line.finditer(open(p).read())]
(_, _, rss1, trainable1, frozen1), = reports(sys.argv[1:2])
ranks = reports(sys.argv[2:])
assert len(ranks) == 2, ranks
print(f"  one process: trainable state {trainable1:.3f} MiB, frozen weights {frozen1:.3f} MiB, "
      f"peak RSS {rss1:.0f} MiB")
for rank, _, rss, trainable, frozen in ranks:
    print(f"  rank {rank:.0f}: trainable state {trainable:.3f} MiB ({trainable / trainable1:.3f}), "
          f"frozen weights {frozen:.3f} MiB ({frozen / frozen1 if frozen1 else 0:.3f}), "
          f"peak RSS {rss:.0f} MiB")
    assert 0.45 <= trainable / trainable1 <= 0.55, trainable / trainable1
    assert frozen1 == 0 or 0.45 <= frozen / frozen1 <= 0.55, frozen / frozen1
PY
}

for job in sft eagle3; do
  echo "== $job: sharded over 2 ranks (distributed.mode: shard)"
  torchrun2 "$work/$job-shard.log" train "$work/$job.yaml" "training.run_dir=$work/$job-shard" \
    distributed.mode=shard
  rank0_loaded "$work/$job-shard.log"
  same_losses "$work/$job-1/metrics.jsonl" "$work/$job-shard/metrics.jsonl"
  compare "$work/$job-1/step-00000004" "$work/$job-shard/step-00000004" 1e-6
  test -f "$work/$job-shard/step-00000004/model.shard-1-of-2.safetensors"
  memory_half "$work/$job-1.log" "$work/$job-shard.log"
  "$tandem" export "$work/$job-shard" --out "$work/$job-shard-export" > /dev/null
  for file in $(cd "$work/$job-shard/export" && find . -name '*.safetensors'); do
    cmp "$work/$job-shard/export/$file" "$work/$job-shard-export/$file"
    echo "  $file: the sharded run's export = tandem export of its sharded checkpoint, byte for byte"
    compare "$work/$job-1/export/$file" "$work/$job-shard/export/$file" 1e-6
  done
  if [ "$job" = sft ]; then
    # The same sharded job in one process sums every gradient in the same order as the 2 ranks
    # (each weight is used once per micro-batch; the clipping norm is summed in fp64), so the
    # two runs agree to the bit.
    "$tandem" train "$work/sft.yaml" "training.run_dir=$work/sft-1shard" distributed.mode=shard \
      > "$work/sft-1shard.log" 2>&1
    cmp "$work/sft-1shard/export/model.safetensors" "$work/sft-shard/export/model.safetensors"
    echo "  ./model.safetensors: 2 sharded ranks = the sharded job in one process, byte for byte"
  fi
  echo "== $job: hybrid 2 x 1 on 2 ranks"
  torchrun2 "$work/$job-hybrid.log" train "$work/$job.yaml" "training.run_dir=$work/$job-hybrid" \
    distributed.mode=hybrid distributed.dp_replicate=2 distributed.dp_shard=1
  same_losses "$work/$job-1/metrics.jsonl" "$work/$job-hybrid/metrics.jsonl"
  compare "$work/$job-1/step-00000004" "$work/$job-hybrid/step-00000004" 1e-6
done

echo "== eagle3 offline (from a capture: only the target's head is loaded, sharded as it loads)"
"$tandem" capture "$work/eagle3.yaml" --out "$work/capture" > /dev/null 2>&1
# Offline drafts are not validated (the capture holds no features of the validation records).
if "$tandem" train "$work/eagle3.yaml" "training.run_dir=$work/refused" "data.capture=$work/capture" \
    2> "$work/refused.err"; then
  echo "an offline draft with data.validation was accepted" >&2
  exit 1
fi
grep -q "data.validation: an offline draft (data.capture)" "$work/refused.err"
one_vs_sharded eagle3-offline "$work/eagle3.yaml" "data.capture=$work/capture" 'data.validation=""'
grep -q "rank 1 of 2: .*frozen weights 0.125 MiB" "$work/eagle3-offline-shard.log"
grep -q "rank 0 of 1: .*frozen weights 0.250 MiB" "$work/eagle3-offline-1.log"

echo "== sft: hybrid 2 x 2 on 4 ranks against one process (4 micro-batches)"
"$tandem" train "$work/sft.yaml" "training.run_dir=$work/sft-1x4" training.micro_batches=4 \
  > "$work/sft-1x4.log" 2>&1
NPROC=4 torchrun2 "$work/sft-hybrid4.log" train "$work/sft.yaml" "training.run_dir=$work/sft-hybrid4" \
  training.micro_batches=4 distributed.mode=hybrid distributed.dp_replicate=2 distributed.dp_shard=2
same_losses "$work/sft-1x4/metrics.jsonl" "$work/sft-hybrid4/metrics.jsonl"
compare "$work/sft-1x4/step-00000004" "$work/sft-hybrid4/step-00000004" 1e-6

echo "== the collectives each mode issues (rank 0's bytes per step, by kind; W = 4 x parameters)"
# ddp all-reduces every gradient (W bytes, plus the flags and metrics) and gathers nothing;
# shard gathers its weights and reduce-scatters full fp32 gradients (W), all-reducing only
# metrics; hybrid 2 x 2 does both, its gradient all-reduce over half slices (W / 2).
python3 - "$work/sft-1/step-00000004/model.safetensors" ddp:"$work/sft-2/metrics.jsonl" \
  shard:"$work/sft-shard/metrics.jsonl" ddp:"$work/sft-hybrid/metrics.jsonl" \
  hybrid2x2:"$work/sft-hybrid4/metrics.jsonl" <<'PY'
import json, math, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
W = 4 * sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
kinds = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
for arg in sys.argv[2:]:
    mode, path = arg.split(":", 1)
    steps = [r for r in map(json.loads, open(path)) if "collective_bytes/all_reduce" in r]
    assert len(steps) == 4, (path, len(steps))
    for r in steps:
        b = {k: r["collective_bytes/" + k] for k in kinds}
        assert r["collective_bytes"] == sum(b.values()), (path, r)
        if mode == "ddp":
            ok = b["all_gather"] == 0 and b["reduce_scatter"] == 0 and b["all_reduce"] >= W
        elif mode == "shard":
            ok = b["all_gather"] >= W / 2 and b["reduce_scatter"] >= W and b["all_reduce"] < W / 10
        else:
            ok = b["all_gather"] >= W / 4 and b["reduce_scatter"] >= W and b["all_reduce"] >= W / 2
        assert ok, (mode, path, b, W)
    print(f"  {mode:9s} {path.split('/')[-2]:12s} per step: " +
          ", ".join(f"{k} {b[k] / W:.2f} W" for k in kinds) + f" (W = {W} bytes)")
PY

echo "== sharded resume from step 2: on 2 ranks, on 1 (sharded and not), one process -> 2 sharded"
for case in "s2to2 sft-shard shard 2" "s2to1 sft-shard shard 1" "s2to1plain sft-shard ddp 1" \
    "1to2shard sft-1 shard 2"; do
  set -- $case
  mkdir -p "$work/resume-$1"
  cp -r "$work/$2/step-00000002" "$work/resume-$1/"
  if [ "$4" = 1 ]; then
    "$tandem" train "$work/sft.yaml" "training.run_dir=$work/resume-$1" "distributed.mode=$3" \
      > "$work/resume-$1.log" 2>&1
  else
    torchrun2 "$work/resume-$1.log" train "$work/sft.yaml" "training.run_dir=$work/resume-$1" \
      "distributed.mode=$3"
  fi
  grep -q "resuming from .*step-00000002" "$work/resume-$1.log"
  echo "  $1:"
  compare "$work/sft-1/step-00000004" "$work/resume-$1/step-00000004" 1e-6
done
echo "  resumed on the same 2 sharded ranks = the uninterrupted sharded run, exactly:"
compare "$work/sft-shard/step-00000004" "$work/resume-s2to2/step-00000004" 0

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

# interrupt NAME SIGNAL TIMEOUT LIMIT [MODE]: a 2-rank run with collective timeout TIMEOUT s; once
# it has committed a checkpoint of step 4 or later, SIGNAL goes to rank 1 (KILL: it dies; STOP:
# it hangs). Rank 0 must exit with a [dist] error (not by the test's own timeout) within LIMIT s,
# and the last checkpoint must still export.
interrupt() {
  local name=$1 signal=$2 timeout_s=$3 limit=$4 mode=${5:-ddp} port rank0 rank1 start status=0 elapsed
  port=$(free_port)
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$tandem" train \
      "$work/sft.yaml" "training.run_dir=$work/$name" training.steps=100000 training.save_every=2 \
      "distributed.timeout_s=$timeout_s" "distributed.mode=$mode" > "$work/$name.$rank" 2>&1 &
    pids+=($!)
  done
  rank0=${pids[-2]}
  rank1=${pids[-1]}
  # `latest` names the newest commit (step-4 itself may already be pruned: keep_last 3).
  saved_past_4() { [ -f "$work/$name/latest" ] && [ "$(sed 's/^step-0*//' "$work/$name/latest")" -ge 4 ]; }
  for _ in $(seq 600); do
    saved_past_4 && break
    sleep 0.1
  done
  saved_past_4
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
echo "== a rank killed mid-run while sharded"
interrupt killed-shard KILL 20 10 shard
echo "e2e_distributed: OK"
