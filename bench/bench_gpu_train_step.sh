#!/usr/bin/env bash
# EAGLE-3 and DFlash training steps against a Qwen3-8B-shaped frozen target, measured through
# `tandem train` itself on one device: tokens/s, MFU (the trainer's, against the matmul peak it
# measures at start) and the device's peak allocated memory, from the run's metrics.jsonl.
#
#   bench/bench_gpu_train_step.sh TANDEM OUT_DIR [options]
#     --python PY     a Python with torch, to write the random target (default: the GPU machine's
#                     /opt/torch/.venv/bin/python3, else .venv/bin/python, else python3)
#     --shape S       qwen3-8b (default: hidden 4096, 36 layers, 32/8 heads, intermediate 12288,
#                     vocab 151936) | tiny (a rehearsal on the CPU: hidden 64, 4 layers, vocab 1024)
#     --device D      cuda (default) | cpu
#     --steps N       steps per run (default 8); the figures are the median of the steps after
#                     the first two (which warm up the allocator and the kernels' autotuning)
#     --work DIR      where the random target, data and runs go (default: a temporary folder,
#                     removed at the end)
#     --only NAMES    eagle3,eagle3.1,dflash (default eagle3,dflash; eagle3.1 needs eagle3 in the
#                     list: it is eagle3's run with draft.fc_norm and draft.norm_output)
#     --prepare-only  write the random target and the data into --work, then stop (to overlap
#                     with a build; TANDEM is not run)
#
# The target's weights are random (speed does not depend on them); one random matrix per shape is
# written for every layer. The runs are the example configs' settings (configs/examples/
# qwen3-8b-eagle3.yaml and qwen3-8b-dflash.yaml: bf16 target and draft, EAGLE-3 TTT 7 on one
# 2,048-token row, DFlash 5 layers, blocks of 16, 512 anchors on one 3,072-token row), one
# micro-batch per step, on pretokenized random documents. Each run is killed once it has logged
# its steps: the final checkpoint (GBs of fp32 masters and moments) is not what is measured.
# Writes OUT_DIR/gpu_train_step.txt (the figures, the machine, the date) and the runs' logs.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem=${1:?usage: bench/bench_gpu_train_step.sh TANDEM OUT_DIR [options]}
out=${2:?usage: bench/bench_gpu_train_step.sh TANDEM OUT_DIR [options]}
shift 2
python="" shape=qwen3-8b device=cuda steps=8 work="" only=eagle3,dflash prepare_only=0
while (($#)); do
  case $1 in
    --python) python=$2; shift ;;
    --shape) shape=$2; shift ;;
    --device) device=$2; shift ;;
    --steps) steps=$2; shift ;;
    --work) work=$2; shift ;;
    --only) only=$2; shift ;;
    --prepare-only) prepare_only=1 ;;
    *) echo "bench_gpu_train_step: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ -x "$tandem" ] || { echo "bench_gpu_train_step: no tandem binary at $tandem" >&2; exit 2; }
tandem=$(cd "$(dirname "$tandem")" && pwd)/$(basename "$tandem")
if [ -z "$python" ]; then
  for p in /opt/torch/.venv/bin/python3 "$root/.venv/bin/python" python3; do
    command -v "$p" > /dev/null && { python=$p; break; }
  done
fi
mkdir -p "$out" && out=$(cd "$out" && pwd)
if [ -z "$work" ]; then
  work=$(mktemp -d /tmp/tandem-gpu-step.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work" && work=$(cd "$work" && pwd)
report=$out/gpu_train_step.txt
say() { echo "$*" | tee -a "$report"; }
: > "$report"

case $shape in
  qwen3-8b) hidden=4096 layers=36 heads=32 kv=8 head_dim=128 inter=12288 vocab=151936
    e3_seq=2048 e3_vocab=32000 e3_aux="[1, 17, 32]" df_seq=3072 df_layers=5
    df_ids="[1, 9, 17, 25, 33]" df_block=16 df_anchors=512 ;;
  tiny) hidden=64 layers=4 heads=4 kv=2 head_dim=16 inter=128 vocab=1024
    e3_seq=256 e3_vocab=256 e3_aux="[0, 1, 2]" df_seq=256 df_layers=2 df_ids="[0, 2]"
    df_block=4 df_anchors=32 ;;
  *) echo "bench_gpu_train_step: --shape is qwen3-8b or tiny, not '$shape'" >&2; exit 2 ;;
esac
mask=$((vocab - 1))  # DFlash's mask token: never in the random documents

say "date: $(date -u +%Y-%m-%dT%H:%MZ)"
say "commit: $(git -C "$root" rev-parse --short HEAD 2> /dev/null)"
say "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
command -v nvidia-smi > /dev/null &&
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
say "target: Qwen3 shape '$shape' (hidden $hidden, $layers layers, heads $heads/$kv, head_dim" \
  "$head_dim, intermediate $inter, vocab $vocab), random bf16 weights; device $device"

# 1. The random target (HF layout: config.json, sharded safetensors and their index) and data.
target=$work/target
if [ ! -f "$target/model.safetensors.index.json" ]; then
  t0=$(date +%s)
  "$python" - "$target" "$device" "$hidden" "$layers" "$heads" "$kv" "$head_dim" "$inter" \
    "$vocab" << 'PY' || { say "FAIL writing the random target"; exit 1; }
import ctypes, json, os, struct, sys, torch
path, device = sys.argv[1], sys.argv[2]
H, L, NH, KV, D, I, V = map(int, sys.argv[3:])
os.makedirs(path, exist_ok=True)
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V,
           "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
           "num_attention_heads": NH, "num_key_value_heads": KV, "head_dim": D,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 40960,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0,
           "eos_token_id": 1, "attention_bias": False}, open(f"{path}/config.json", "w"))
gen = torch.Generator(device=device).manual_seed(0)
cache = {}
def weight(shape, ones=False):  # one random (or ones) bf16 host tensor per shape, reused
    key = (tuple(shape), ones)
    if key not in cache:
        t = torch.ones(shape) if ones else torch.randn(shape, generator=gen, device=device) * 0.02
        cache[key] = t.to(torch.bfloat16).cpu().contiguous()
    return cache[key]
def write(name, tensors):
    header, offset = {}, 0
    for key, t in tensors.items():
        n = t.numel() * t.element_size()
        header[key] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{path}/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for t in tensors.values():
            f.write(ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()))
    return list(tensors)
index, shard = {}, 0
def flush(tensors):
    global shard
    shard += 1
    name = f"model-{shard:05d}.safetensors"
    for key in write(name, tensors): index[key] = name
flush({"model.embed_tokens.weight": weight([V, H]), "model.norm.weight": weight([H], True),
       "lm_head.weight": weight([V, H])})
for first in range(0, L, 4):
    tensors = {}
    for l in range(first, min(first + 4, L)):
        p = f"model.layers.{l}."
        tensors.update({p + "input_layernorm.weight": weight([H], True),
                        p + "post_attention_layernorm.weight": weight([H], True),
                        p + "self_attn.q_proj.weight": weight([NH * D, H]),
                        p + "self_attn.k_proj.weight": weight([KV * D, H]),
                        p + "self_attn.v_proj.weight": weight([KV * D, H]),
                        p + "self_attn.o_proj.weight": weight([H, NH * D]),
                        p + "self_attn.q_norm.weight": weight([D], True),
                        p + "self_attn.k_norm.weight": weight([D], True),
                        p + "mlp.gate_proj.weight": weight([I, H]),
                        p + "mlp.up_proj.weight": weight([I, H]),
                        p + "mlp.down_proj.weight": weight([H, I])})
    flush(tensors)
json.dump({"metadata": {}, "weight_map": index}, open(f"{path}/model.safetensors.index.json", "w"))
PY
  say "random target written in $(($(date +%s) - t0)) s ($(du -sh "$target" | cut -f1))"
fi
"$python" - "$work/docs.jsonl" "$vocab" "$((steps * 3 + 4))" "$df_seq" << 'PY'
import json, random, sys
path, vocab, count, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
random.seed(0)
with open(path, "w") as out:
    for _ in range(count):  # one document per row; the first 1/16 untrained, as a prompt would be
        ids = [random.randrange(2, vocab - 1) for _ in range(length)]
        out.write(json.dumps({"input_ids": ids,
                              "loss_mask": [0] * (length // 16) + [1] * (length - length // 16)}) + "\n")
PY
((prepare_only)) && exit 0

# 2. One run: train until metrics.jsonl holds `steps` lines, then kill it (no final checkpoint).
common_data() {  # SEQ_LEN
  echo "data: {path: $work/docs.jsonl, format: pretokenized, seq_len: $1, micro_batch_rows: 1,
       packing: packed, overlong: truncate, cache_dir: $work/cache}"
}
common_training() {  # OBJECTIVE RUN_DIR
  echo "training: {objective: $1, run_dir: $2, device: $device, steps: 100000, seed: 0, lr: 1.0e-4,
           schedule: constant, micro_batches: 1, save_every: 0, log_every: 1, export: false}
optimizer: {beta1: 0.9, beta2: 0.999, weight_decay: 0.0, max_grad_norm: 1.0}"
}
run_one() {  # NAME CONFIG
  local name=$1 config=$2 run=$work/runs/$1 log=$out/$1.log pid
  rm -rf "$run"
  local t0
  t0=$(date +%s)
  "$tandem" train "$config" > "$log" 2>&1 &
  pid=$!
  trap 'kill -KILL $pid 2> /dev/null; exit 1' TERM INT
  while kill -0 "$pid" 2> /dev/null; do
    if [ -f "$run/metrics.jsonl" ] && [ "$(wc -l < "$run/metrics.jsonl")" -ge "$steps" ]; then
      kill -KILL "$pid" 2> /dev/null
      break
    fi
    sleep 0.5
  done
  wait "$pid" 2> /dev/null
  trap - TERM INT
  cp "$run/metrics.jsonl" "$out/$name.metrics.jsonl" 2> /dev/null
  if [ ! -f "$run/metrics.jsonl" ] || [ "$(wc -l < "$run/metrics.jsonl")" -lt "$steps" ]; then
    say "FAIL $name: the run ended before $steps steps (last lines of $log):"
    tail -n 15 "$log" | tee -a "$report"
    return 1
  fi
  "$python" - "$run/metrics.jsonl" "$name" "$(($(date +%s) - t0))" << 'PY' | tee -a "$report"
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = lines[2:] or lines
def median(key):
    values = [l[key] for l in steady if key in l]
    return statistics.median(values) if values else float("nan")
peak = max((l.get("cuda/peak_allocated_mib", 0) for l in lines), default=0)
print(f"{sys.argv[2]}: {median('tokens_per_s'):.0f} tokens/s, step {median('time/step'):.3f} s "
      f"(forward {median('time/forward'):.3f}, backward {median('time/backward'):.3f}, "
      f"optimizer {median('time/optimizer'):.3f}), MFU {100 * median('mfu'):.1f}%, "
      f"peak allocated {peak / 1024:.1f} GiB; median of steps 3..{len(lines)}; "
      f"{sys.argv[3]} s with loading")
PY
  grep -m6 '^\[' "$log" | sed "s/^/  $name log: /" | tee -a "$report"
}

status=0
if [[ ,$only, == *,eagle3,* ]]; then
  cat > "$work/eagle3.yaml" << YAML
target: {path: $target, dtype: bf16}
draft: {aux_layer_ids: $e3_aux, ttt_length: 7, decay: 0.8, draft_vocab_size: $e3_vocab,
        intermediate_size: 0, train_lm_head: true, dtype: bf16}
loss: {chunk_tokens: 1024}
$(common_data "$e3_seq")
$(common_training eagle3 "$work/runs/eagle3")
YAML
  say "eagle3: TTT 7, draft vocab $e3_vocab, 1 x $e3_seq tokens per step, bf16 target and draft"
  run_one eagle3 "$work/eagle3.yaml" || status=1
fi
if [[ ,$only, == *,eagle3.1,* ]]; then  # the same run with EAGLE-3.1's two norms
  sed -e 's/train_lm_head: true, dtype: bf16}/train_lm_head: true, dtype: bf16,\n        fc_norm: true, norm_output: true}/' \
    -e "s#$work/runs/eagle3#$work/runs/eagle3.1#" "$work/eagle3.yaml" > "$work/eagle3.1.yaml" 2> /dev/null ||
    true
  say "eagle3.1: as eagle3, with draft.fc_norm and draft.norm_output"
  run_one eagle3.1 "$work/eagle3.1.yaml" || status=1
fi
if [[ ,$only, == *,dflash,* ]]; then
  cat > "$work/dflash.yaml" << YAML
target: {path: $target, dtype: bf16}
draft: {num_layers: $df_layers, target_layer_ids: $df_ids, block_size: $df_block,
        mask_token_id: $mask, intermediate_size: 0, dtype: bf16}
loss: {gamma: 7.0, max_anchors: $df_anchors, teacher: labels, chunk_tokens: 1024}
$(common_data "$df_seq")
$(common_training dflash "$work/runs/dflash")
YAML
  say "dflash: $df_layers layers, blocks of $df_block, $df_anchors anchors, 1 x $df_seq tokens" \
    "per step, bf16 target and draft"
  run_one dflash "$work/dflash.yaml" || status=1
fi
exit $status
