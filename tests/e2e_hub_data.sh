#!/usr/bin/env bash
# End to end through the binary: configs/demo-eagle3-hub.yaml, the demo's EAGLE-3 draft trained
# from a ShareGPT JSON array plus an UltraChat-style Parquet file (weight 2) with 5% of the
# records held out. Checks that the records training leaves out are exactly those
# `tandem data split` writes to its held-out files (counts, and the same tokens), that the
# Parquet file's records are drawn twice per epoch, and that a run resumed from its step-2
# checkpoint ends byte-identical to the uninterrupted run.
# Usage: tests/e2e_hub_data.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-hub-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
config=configs/demo-eagle3-hub.yaml
sharegpt=data/demo/hub/sharegpt.json
parquet=data/demo/hub/messages.parquet
tokenize=(--tokenizer data/demo/tokenizer --chat-template llama3 --cache-dir "$work/cache")

probe=$("$tandem" data stats --data "$parquet" "${tokenize[@]}" 2>&1 || true)
if grep -q "reads none" <<<"$probe"; then
  echo "SKIP: this build of tandem reads no Parquet (built without Apache Arrow)"
  exit 77
fi

echo "== tandem data split: the held-out records as files"
for name in sharegpt messages; do
  file=$sharegpt; [ $name = messages ] && file=$parquet
  "$tandem" data split --data "$file" --heldout-fraction 0.05 --seed 0 \
    --train "$work/$name-train.jsonl" --heldout "$work/$name-heldout.jsonl"
done
held_sharegpt=$(wc -l < "$work/sharegpt-heldout.jsonl")
held_messages=$(wc -l < "$work/messages-heldout.jsonl")
train_messages=$(wc -l < "$work/messages-train.jsonl")

echo "== dry run: per-file records, held-out counts and draws"
"$tandem" train "$config" --dry-run "training.run_dir=$work/dry" "data.cache_dir=$work/cache" \
  > "$work/dry.log" 2>&1 || { cat "$work/dry.log"; exit 1; }
cat "$work/dry.log"
grep -q "$sharegpt: [0-9,]* records ($held_sharegpt held out), weight 1:" "$work/dry.log"
grep -q "$parquet: $train_messages records ($held_messages held out), weight 2: $((2 * train_messages)) draws per epoch" \
  "$work/dry.log"

echo "== the held-out side tokenizes as the split's held-out files"
tokens() { grep '^tokens ' | sed 's/ (.*//'; }
side=$("$tandem" data stats --data "$sharegpt" "$parquet" "${tokenize[@]}" \
  --heldout-fraction 0.05 --side heldout | tokens)
files=$("$tandem" data stats --data "$work/sharegpt-heldout.jsonl" "$work/messages-heldout.jsonl" \
  "${tokenize[@]}" | tokens)
echo "  held-out side: $side; split files: $files"
if [ -z "$side" ] || [ "$side" != "$files" ]; then
  echo "the held-out side does not tokenize as the split's held-out files" >&2
  exit 1
fi

echo "== 4 steps, and the same run resumed from its step-2 checkpoint"
short=(training.steps=4 training.save_every=2 training.keep_last=3 training.log_every=2
       data.seq_len=128 data.micro_batch_rows=4 "data.cache_dir=$work/cache")
"$tandem" train "$config" "training.run_dir=$work/straight" "${short[@]}" > "$work/straight.log" 2>&1 \
  || { cat "$work/straight.log"; exit 1; }
mkdir -p "$work/resumed"
cp -r "$work/straight/step-00000002" "$work/resumed/"
"$tandem" train "$config" "training.run_dir=$work/resumed" "${short[@]}" > "$work/resumed.log" 2>&1 \
  || { cat "$work/resumed.log"; exit 1; }
grep -q "resuming from .*step-00000002" "$work/resumed.log"
cmp "$work/straight/step-00000004/model.safetensors" "$work/resumed/step-00000004/model.safetensors"
cmp "$work/straight/step-00000004/optimizer.safetensors" \
  "$work/resumed/step-00000004/optimizer.safetensors"
echo "ok"
