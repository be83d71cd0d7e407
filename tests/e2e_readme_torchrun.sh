#!/usr/bin/env bash
# The torchrun lines of the README and of docs/generation.md, run as written (8 ranks) with the
# project env's torchrun first on PATH, from a directory laid out as they assume: build/tandem, a
# run.yaml (an EAGLE-3 draft of a tiny 4-layer target SFT-trained here on demo conversations), chat.jsonl,
# heldout.jsonl and dpo.yaml; TARGET and RUN_DIR, the lines' placeholders, name the target and
# the run. Each line must exit 0 and leave its output; the data jobs must leave no parts behind.
# Usage: tests/e2e_readme_torchrun.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-readme-torchrun-XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
export PATH="$root/.venv/bin:$PATH"
# torchrun's own rendezvous port (its --master-port default, read from PET_MASTER_PORT): a free
# one, so that tests running beside this one do not collide on 29500.
PET_MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PET_MASTER_PORT
command -v torchrun | grep -q "$root/.venv/bin/torchrun" ||
  { echo "the env's torchrun is not first on PATH" >&2; exit 1; }

cd "$work"
mkdir build
ln -s "$build/tandem" build/tandem
python3 - "$root/tests/fixtures/models/tiny-chat-model.json" <<'PY'  # 4 layers: aux layers 0..2
import json, sys
config = json.load(open(sys.argv[1]))
config["num_hidden_layers"] = 4
json.dump(config, open("model.json", "w"))
PY
head -n 24 "$root/data/demo/chat.jsonl" > chat.jsonl
sed -n 200,208p "$root/data/demo/chat.jsonl" > heldout.jsonl
build/tandem train /dev/stdin > sft.log 2>&1 <<YAML
model: {config: model.json, dtype: fp32}
data: {path: chat.jsonl, format: conversations, tokenizer: $root/data/demo/tokenizer,
       seq_len: 256, micro_batch_rows: 2, cache_dir: cache}
training: {objective: sft, run_dir: target, steps: 3, lr: 3.0e-3}
YAML
cat > run.yaml <<YAML
target: {path: target/export, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 2, draft_vocab_size: 256, intermediate_size: 64}
data: {path: chat.jsonl, format: conversations, tokenizer: target/export, seq_len: 256,
       micro_batch_rows: 1, cache_dir: cache}
training: {objective: eagle3, run_dir: run, steps: 2, micro_batches: 8, lr: 1.0e-3}
YAML
python3 - <<'PY'
import json
rows = [json.loads(line) for line in open("chat.jsonl")][:8]
with open("pairs.jsonl", "w") as out:
    for i, row in enumerate(rows):
        turns = row["conversations"]
        other = rows[(i + 3) % len(rows)]["conversations"][-1]["content"]
        out.write(json.dumps({"prompt": turns[:-1], "chosen": turns[-1]["content"],
                              "rejected": other}) + "\n")
PY
cat > dpo.yaml <<YAML
model: {path: target/export, dtype: fp32}
reference: {path: target/export, dtype: fp32}
data: {path: pairs.jsonl, format: preference, tokenizer: target/export, seq_len: 512,
       micro_batch_rows: 1, cache_dir: cache}
training: {objective: dpo, run_dir: dpo, steps: 1}
YAML

# The lines: the README's torchrun training line, then generation.md's data jobs.
mapfile -t lines < <(grep -h '^torchrun ' "$root/README.md" "$root/docs/generation.md")
((${#lines[@]} == 5)) || { echo "expected 5 torchrun lines, found ${#lines[@]}" >&2; exit 1; }
for line in "${lines[@]}"; do
  command=${line%%#*}                       # without its trailing comment
  command=${command//TARGET/target/export}  # the placeholders
  command=${command//RUN_DIR/run}
  echo "== $command"
  timeout 300 bash -c "$command" > line.log 2>&1 || { cat line.log >&2; exit 1; }
done
test -f run/export/speculators/config.json
grep -q '"source_line"' chat.regenerated.jsonl
test "$(grep -c . chat.regenerated.jsonl)" = 24
python3 -c "import json; m = json.load(open('capture/manifest.json')); assert m['complete'], m"
python3 -c "import json; r = json.load(open('eval.json')); assert r['ranks'] == 8 and r['prompts'] == 9, r"
test -f reference.safetensors
test ! -e chat.regenerated.jsonl.parts && test ! -e capture/ranks && test ! -e eval.json.parts &&
  test ! -e reference.safetensors.parts
echo "e2e_readme_torchrun: the README's and generation.md's torchrun lines run as written on 8 ranks"
