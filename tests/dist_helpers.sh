# Helpers for the end-to-end tests that run real ranks (sourced; needs $tandem, $root).
#   free_port, torchrun2 LOG ARGS..., compare A B TOL, same_losses A B,
#   same_first_loss ONLINE OFFLINE, one_vs_sharded JOB CONFIG OVERRIDES... (needs $work);
#   for a draft against $target (config $work/NAME.yaml, run dirs $work/NAME-online / -offline):
#   offline_equals_online NAME SHARD_DOCUMENTS, losses_fall METRICS, eval_both DRAFT_EXPORT NAME
#   (needs $work/docs.jsonl); random_documents OUT SEED COUNT MIN_LENGTH HIGH
torch_python="$root/.venv/bin/python"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# torchrun2 LOG ARGS...: `torchrun --nproc-per-node=2 --no-python tandem ARGS` (bounded);
# NPROC=4 torchrun2 ... for 4 ranks.
torchrun2() {
  local log=$1
  shift
  timeout 300 "$torch_python" -m torch.distributed.run --nproc-per-node="${NPROC:-2}" \
    --master-addr=127.0.0.1 --master-port="$(free_port)" --no-python "$tandem" "$@" > "$log" 2>&1 ||
    { cat "$log" >&2; return 1; }
}

# compare A B TOL: every tensor of checkpoints (or safetensors files) A and B within TOL (max abs
# difference). A checkpoint directory in the sharded layout is reassembled from its shard files.
compare() {
  python3 - "$@" <<'PY'
import array, json, os, struct, sys

def read_file(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        kind = info["dtype"]
        if kind == "BF16":  # the upper half of an fp32: widen it
            halves = array.array("H")
            halves.frombytes(data[begin:end])
            values = array.array("f", struct.unpack(f"<{len(halves)}f",
                                                    struct.pack(f"<{len(halves)}I", *(h << 16 for h in halves))))
        else:
            codes = {"F32": "f", "F64": "d", "I64": "q", "I32": "i", "BOOL": "B", "U8": "B"}
            assert kind in codes, f"{path}: {name} has dtype {kind}, which compare() cannot read"
            values = array.array(codes[kind])
            values.frombytes(data[begin:end])
        out[name] = (kind, values)
    return out

def tensors(path):
    if not os.path.isdir(path):
        return read_file(path)
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return read_file(os.path.join(path, "model.safetensors"))
    meta = json.load(open(os.path.join(path, "shards.json")))
    pieces = [read_file(os.path.join(path, f"model.shard-{s}-of-{meta['shards']}.safetensors"))
              for s in range(meta["shards"])]
    out = {}
    for name in meta["model"]:
        parts = [piece[name] for piece in pieces if name in piece]
        assert parts, f"{path}: no shard file holds {name}"
        kind, values = parts[0][0], array.array(parts[0][1].typecode)
        for part_kind, part in parts:
            assert part_kind == kind, f"{path}: {name} is {kind} in one shard, {part_kind} in another"
            values += part
        out[name] = (kind, values)
    return out

a, b, tol = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), f"tensors in only one of them: {sorted(a.keys() ^ b.keys())[:5]}"
assert a, f"{sys.argv[1]} holds no tensor"
worst = 0.0
for k in a:
    (kind_a, va), (kind_b, vb) = a[k], b[k]
    assert kind_a == kind_b, f"{k}: {kind_a} vs {kind_b}"
    assert len(va) == len(vb), f"{k}: {len(va)} vs {len(vb)} values"  # (zip would truncate)
    worst = max(worst, max((abs(x - y) for x, y in zip(va, vb)), default=0.0))
print(f"  {len(a)} tensors, max |difference| {worst:.3g} (tolerance {tol:g})")
assert worst <= tol, f"{sys.argv[1]} and {sys.argv[2]} differ by {worst}"
PY
}

# same_first_loss ONLINE OFFLINE: metrics.jsonl of an online run and of the same job trained
# offline on its capture, their first-step losses within 1e-5 relative.
first_loss() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$1"; }
same_first_loss() {
  python3 - "$(first_loss "$1")" "$(first_loss "$2")" <<'PY'
import sys
online, offline = map(float, sys.argv[1:])
print(f"  first-step loss: online {online:.6f}, offline {offline:.6f}")
assert abs(online - offline) <= 1e-5 * abs(online), "offline loss differs from online"
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
# Validation metrics (data.validation), when the job has them: the same on every side.
def validated(path):
    return {(r["step"], k): v for r in map(json.loads, open(path)) for k, v in r.items()
            if k.startswith("val/")}
va, vb = validated(sys.argv[1]), validated(sys.argv[2])
assert va.keys() == vb.keys(), (sorted(va.keys() ^ vb.keys()))
if va:
    worst = max(abs(va[k] - vb[k]) / max(1.0, abs(va[k])) for k in va)
    print(f"  {len(va)} validation values, max relative difference {worst:.3g}")
    assert worst <= 1e-5, [(k, va[k], vb[k]) for k in va if abs(va[k] - vb[k]) > 1e-5]
PY
}

# one_vs_sharded JOB CONFIG OVERRIDES...: the job in one process, then sharded over 2 ranks
# (distributed.mode: shard), in $work/JOB-1 and $work/JOB-shard: the same losses and final
# weights. AdamW eps 1e-2 (e2e_distributed.sh says why).
one_vs_sharded() {
  local job=$1 config=$2
  shift 2
  "$tandem" train "$config" "training.run_dir=$work/$job-1" optimizer.eps=1.0e-2 "$@" \
    > "$work/$job-1.log" 2>&1 || { cat "$work/$job-1.log" >&2; return 1; }
  torchrun2 "$work/$job-shard.log" train "$config" "training.run_dir=$work/$job-shard" \
    optimizer.eps=1.0e-2 distributed.mode=shard "$@"
  local last
  last=$(cd "$work/$job-1" && ls -d step-* | tail -1)
  same_losses "$work/$job-1/metrics.jsonl" "$work/$job-shard/metrics.jsonl"
  compare "$work/$job-1/$last" "$work/$job-shard/$last" 1e-6
}

offline_equals_online() {  # NAME SHARD_DOCUMENTS: capture, train 1 step offline, compare
  "$tandem" capture "$work/$1.yaml" --out "$work/capture-$1" --shard-documents "$2" > /dev/null
  "$tandem" train "$work/$1.yaml" "data.capture=$work/capture-$1" \
    "training.run_dir=$work/$1-offline" training.steps=1 > "$work/$1-offline.log" 2>&1 ||
    { cat "$work/$1-offline.log" >&2; exit 1; }
  same_first_loss "$work/$1-online/metrics.jsonl" "$work/$1-offline/metrics.jsonl"
}
# METRICS [METRIC]: the mean of the last 5 losses below the mean of the first 5, or with METRIC
# an accuracy (acc_0, ...) whose last 5 mean is above its first 5 mean.
losses_fall() {
  python3 - "$1" "${2:-loss}" <<'PY'
import json, sys
name = sys.argv[2]
values = [r[name] for r in map(json.loads, open(sys.argv[1])) if name in r]
assert len(values) == 20, len(values)
first, last = sum(values[:5]) / 5, sum(values[-5:]) / 5
print(f"  20 steps: mean {name} of steps 1-5 {first:.4f}, of steps 16-20 {last:.4f}")
assert (last > first) if name.startswith("acc") else (last < first), "the draft did not learn"
PY
}
eval_both() {  # DRAFT_EXPORT NAME
  for cache in "" --no-kv-cache; do
    "$tandem" eval --target "$target" --draft "$1" --data "$work/docs.jsonl" \
      --format pretokenized --num-prompts 6 --max-new-tokens 12 --cache-dir "$work/cache" \
      --out "$work/eval-$2${cache:+-uncached}.json" $cache > /dev/null 2>&1 ||
      { echo "eval $2 $cache failed" >&2; exit 1; }
  done
  python3 - "$work/eval-$2.json" "$work/eval-$2-uncached.json" "$2" <<'PY'
import json, sys
r, u = (json.load(open(p)) for p in sys.argv[1:3])
assert r["greedy_identical"] == r["prompts"] == 6 and u["greedy_identical"] == 6, (r, u)
assert r["kv_cache"] and not u["kv_cache"]
assert [p["accepted"] for p in r["per_prompt"]] == [p["accepted"] for p in u["per_prompt"]]
print(f"  {sys.argv[3]}: tau {r['tau']:.2f} with the cache = {u['tau']:.2f} without; "
      f"accepted per step, prompt 0: {r['per_prompt'][0]['accepted']}")
PY
}

# random_documents OUT SEED COUNT MIN_LENGTH HIGH: COUNT pretokenized documents of MIN_LENGTH..30
# ids drawn from 3..HIGH-1, the first 4 tokens unmasked; the same lines for the same arguments.
random_documents() {
  python3 - "$@" <<'PY'
import json, random, sys
path, (seed, count, low, high) = sys.argv[1], map(int, sys.argv[2:6])
random.seed(seed)
with open(path, "w") as out:
    for _ in range(count):
        n = random.randint(low, 30)
        out.write(json.dumps({"input_ids": [random.randrange(3, high) for _ in range(n)],
                              "loss_mask": [0] * 4 + [1] * (n - 4)}) + "\n")
PY
}
