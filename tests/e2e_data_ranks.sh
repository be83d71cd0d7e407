#!/usr/bin/env bash
# End to end through the binary: the data jobs on 2 ranks under torchrun (data/rank_parts.h) write
# exactly what one process writes.
#   regenerate (60 lines, 6 bad ones skipped, their log in line order): OUT, OUT.skipped.jsonl and OUT.settings.json byte for byte;
#     rank 1 killed with SIGKILL mid-way (a torn line appended) resumes its own part under
#     torchrun to the same bytes; a rerun on 3 ranks or in one process is refused while parts of
#     2 are there; a bad line under on_error fail stops the ranks naming the rank, file and line;
#   capture of an EAGLE-3 config: manifest.json and every shard byte for byte;
#   reference-logprobs of a DPO config: the file byte for byte;
#   eval of an EAGLE-3 draft: the report equal except the timings (and `ranks`).
#   eval at temperature 1 (each prompt its own seeded draws): the same;
#   one-process eval and reference-logprobs refuse an output beside a parts folder.
# Usage: tests/e2e_data_ranks.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-data-ranks-XXXXXX")
background=""
cleanup() {
  [ -n "$background" ] && kill -9 "$background" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
source "$root/tests/dist_helpers.sh"  # torchrun2, random_documents

source "$root/tests/chat_helpers.sh"  # tiny_chat_model, conversations_with_bad_lines
tiny_chat_model "$work"
conversations_with_bad_lines "$work/in.jsonl"
# Line 15 too long as well and line 16 malformed: in the batch of lines 14-17, a line refused
# while generating (15) comes before one refused while reading (16), and the skipped log stays in
# line order.
python3 - "$work/in.jsonl" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
lines[14], lines[15] = lines[16], '{"conversations": [oops'
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
base=(regenerate --target "$work/base/export" --tokenizer data/demo/tokenizer --data "$work/in.jsonl"
      --max-length 200 --batch-size 3 --max-new-tokens 40)
args=("${base[@]}" --on-error skip)
same_regenerated() {  # A B: the three files byte for byte, and no parts left
  for suffix in "" .skipped.jsonl .settings.json; do cmp "$1$suffix" "$2$suffix"; done
  test ! -e "$2.parts"
}

echo "== regenerate: one process, then 2 ranks"
"$tandem" "${args[@]}" --out "$work/one.jsonl" > "$work/one.log" 2>&1
torchrun2 "$work/two.log" "${args[@]}" --out "$work/two.jsonl"
same_regenerated "$work/one.jsonl" "$work/two.jsonl"
python3 -c "import json, sys; lines = [json.loads(l)['line'] for l in open(sys.argv[1])]; assert lines == [5, 11, 15, 16, 17, 23], lines" \
  "$work/two.jsonl.skipped.jsonl"
grep -q "merged the parts of 2 ranks, 54 conversations, 6 lines skipped" "$work/two.log"
echo "  2 ranks: the output, its skipped lines and settings equal one process's byte for byte"

echo "== regenerate: rank 1 killed mid-way, resumed under torchrun"
RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 \
  "$tandem" "${args[@]}" --out "$work/killed.jsonl" > "$work/killed.log" 2>&1 &
background=$!
part="$work/killed.jsonl.parts/rank-1-of-2.jsonl"
for _ in $(seq 1000); do
  [ -f "$part" ] && [ "$(wc -l < "$part")" -ge 5 ] && break
  kill -0 "$background" 2>/dev/null || break
  sleep 0.02
done
kill -9 "$background" 2>/dev/null || { echo "rank 1 ended before it was killed" >&2; exit 1; }
wait "$background" 2>/dev/null || true
background=""
printf '{"id": "torn", "conversa' >> "$part"
echo "  killed after $(grep -c . "$part") lines of its part"
if NPROC=3 torchrun2 "$work/three.log" "${args[@]}" --out "$work/killed.jsonl" 2> /dev/null; then
  echo "a 3-rank rerun continued parts of 2 ranks" >&2; exit 1
fi
grep -q "holds the parts of a job of 2 ranks .* rerun it with 2 ranks" "$work/three.log"
if "$tandem" "${args[@]}" --out "$work/killed.jsonl" > "$work/single.log" 2>&1; then
  echo "one process continued parts of 2 ranks" >&2; exit 1
fi
grep -q "holds the parts of a job run on several ranks" "$work/single.log"
torchrun2 "$work/resumed.log" "${args[@]}" --out "$work/killed.jsonl"
grep -q "rank 1 of 2: resuming" "$work/resumed.log"
same_regenerated "$work/one.jsonl" "$work/killed.jsonl"
echo "  resumed: equal to one process byte for byte; 3 ranks and one process were refused"
torchrun2 "$work/again.log" "${args[@]}" --out "$work/killed.jsonl"
grep -q "is complete; nothing to do" "$work/again.log"

echo "== regenerate: a bad line under on_error fail"
if torchrun2 "$work/fail.log" "${base[@]}" --out "$work/fail.jsonl" 2> /dev/null; then
  echo "the ranks accepted a malformed line" >&2; exit 1
fi
grep -q "error (rank [01] of 2): .*in.jsonl:5: malformed JSON" "$work/fail.log" ||
  { cat "$work/fail.log" >&2; exit 1; }
echo "  stopped: $(grep -m1 -o 'error (rank [01] of 2): [^:]*in.jsonl:5: malformed JSON' "$work/fail.log")"

# Drafts against the fixture target: 16 pretokenized documents.
random_documents "$work/docs.jsonl" 0 16 12 512
cat > "$work/eagle3.yaml" <<YAML
target: {path: tests/fixtures/models/llama3, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}
training: {objective: eagle3, run_dir: $work/eagle3, steps: 2, lr: 1.0e-3, log_every: 1}
YAML

echo "== capture: one process, then 2 ranks"
"$tandem" capture "$work/eagle3.yaml" --out "$work/capture-one" --shard-documents 3 > /dev/null 2>&1
torchrun2 "$work/capture.log" capture "$work/eagle3.yaml" --out "$work/capture-two" --shard-documents 3
diff -r "$work/capture-one" "$work/capture-two"
echo "  2 ranks: manifest.json and $(ls "$work/capture-two" | grep -c shard) shards equal one process's byte for byte"

echo "== reference-logprobs: one process, then 2 ranks"
preference_pairs "$work/chat.jsonl" "$work/pairs.jsonl" 10
cat > "$work/dpo.yaml" <<YAML
model: {path: $work/base/export, dtype: fp32}
reference: {path: $work/base/export, dtype: fp32}
loss: {type: sigmoid, beta: 0.1, chunk_tokens: 256}
data: {path: $work/pairs.jsonl, format: preference, tokenizer: data/demo/tokenizer,
       seq_len: 512, micro_batch_rows: 2, cache_dir: $work/cache}
training: {objective: dpo, run_dir: $work/dpo, steps: 1}
YAML
"$tandem" reference-logprobs "$work/dpo.yaml" --out "$work/ref-one.safetensors" > /dev/null
torchrun2 "$work/ref.log" reference-logprobs "$work/dpo.yaml" --out "$work/ref-two.safetensors"
cmp "$work/ref-one.safetensors" "$work/ref-two.safetensors"
test ! -e "$work/ref-two.safetensors.parts"
echo "  2 ranks: the log-probs file equals one process's byte for byte"

echo "== eval: one process, then 2 ranks"
"$tandem" train "$work/eagle3.yaml" > "$work/eagle3.log" 2>&1
eval_args=(eval --target tests/fixtures/models/llama3 --draft "$work/eagle3/export"
           --data "$work/docs.jsonl" --format pretokenized --num-prompts 7 --max-new-tokens 12
           --cache-dir "$work/cache")
"$tandem" "${eval_args[@]}" --out "$work/eval-one.json" > /dev/null
torchrun2 "$work/eval.log" "${eval_args[@]}" --out "$work/eval-two.json"
"$tandem" "${eval_args[@]}" --temperature 1 --seed 3 --out "$work/eval-t1-one.json" > /dev/null
torchrun2 "$work/eval-t1.log" "${eval_args[@]}" --temperature 1 --seed 3 --out "$work/eval-t1-two.json"
python3 - "$work"/eval{,-t1}-{one,two}.json <<'PY'
import json, sys
one, two, t1_one, t1_two = (json.load(open(p)) for p in sys.argv[1:])
timed = {k for k in {**one, **t1_one} if "seconds" in k or "per_s" in k or k == "speedup"}
timed |= {"ranks"}
assert one["ranks"] == 1 and two["ranks"] == 2, (one["ranks"], two["ranks"])
assert {k: v for k, v in one.items() if k not in timed} == \
       {k: v for k, v in two.items() if k not in timed}, "the merged report differs"
assert one["prompts"] == 7 and one["greedy_identical"] == 7, one
print(f"  2 ranks: the report equals one process's (tau {two['tau']:.3f}, interval "
      f"{two['tau_ci95']}, {two['prompts']} prompts, all per-prompt results) but the timings")
assert {k: v for k, v in t1_one.items() if k not in timed} == \
       {k: v for k, v in t1_two.items() if k not in timed}, "the merged T = 1 report differs"
assert t1_one["temperature"] == 1 and t1_one["per_prompt"] != one["per_prompt"]
print(f"  at T = 1: equal too (tau {t1_two['tau']:.3f}, "
      f"{sum(len(p['tokens']) for p in t1_two['per_prompt'])} sampled tokens)")
PY
echo "== one process refuses an output beside the parts of several ranks"
mkdir "$work/eval-one.json.parts" "$work/ref-one.safetensors.parts"
"$tandem" "${eval_args[@]}" --out "$work/eval-one.json" > "$work/eval-refused.log" 2>&1 &&
  { echo "eval ran beside a parts folder" >&2; exit 1; }
grep -q "eval-one.json.parts holds the parts of a job run on several ranks" "$work/eval-refused.log"
"$tandem" reference-logprobs "$work/dpo.yaml" --out "$work/ref-one.safetensors" \
  > "$work/ref-refused.log" 2>&1 && { echo "reference-logprobs ran beside a parts folder" >&2; exit 1; }
grep -q "ref-one.safetensors.parts holds the parts of a job run on several ranks" "$work/ref-refused.log"
echo "e2e_data_ranks: all checks passed"
