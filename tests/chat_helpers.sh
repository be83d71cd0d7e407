# Helpers for the end-to-end tests that run a tiny chat model (sourced; needs $tandem, run from
# the repository root):
#   tiny_chat_model WORK: a fresh 2-layer Llama with the demo tokenizer's vocabulary, SFT-trained
#     3 steps on the first 40 demo conversations (WORK/chat.jsonl): WORK/base/export;
#   conversations_with_bad_lines OUT: 60 demo conversations (short prompts, line 2 multi-turn)
#     with bad ones at lines 5 (malformed), 11 (no user turn), 17 (too long for --max-length 200)
#     and 23 (unknown role);
#   preference_pairs CHAT OUT COUNT: the first COUNT conversations of CHAT as pairs, the true last
#     answer chosen over the one 5 conversations on.
tiny_chat_model() {
  cp tests/fixtures/models/tiny-chat-model.json "$1/model.json"
  head -n 40 data/demo/chat.jsonl > "$1/chat.jsonl"
  echo "== model (SFT, 3 steps)"
  "$tandem" train /dev/stdin > "$1/sft.log" 2>&1 <<YAML || { cat "$1/sft.log" >&2; return 1; }
model: {config: $1/model.json, dtype: fp32}
data: {path: $1/chat.jsonl, format: conversations, tokenizer: data/demo/tokenizer,
       seq_len: 256, micro_batch_rows: 2, cache_dir: $1/cache}
training: {objective: sft, run_dir: $1/base, steps: 3, lr: 3.0e-3, log_every: 1}
YAML
}

conversations_with_bad_lines() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open("data/demo/chat.jsonl")][100:160]
for row in rows:
    row["conversations"][0]["content"] = row["conversations"][0]["content"][:200]
rows[1]["conversations"] += [{"role": "user", "content": "Go on."},
                             {"role": "assistant", "content": "old second answer"}]
lines = [json.dumps(r) for r in rows]
lines[4] = '{"conversations": [oops'
lines[10] = json.dumps({"conversations": [{"role": "system", "content": "hi"},
                                          {"role": "assistant", "content": "hello"}]})
lines[16] = json.dumps({"conversations": [{"role": "user", "content": "word " * 400},
                                          {"role": "assistant", "content": "x"}]})
lines[22] = json.dumps({"conversations": [{"role": "bot", "content": "x"}]})
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY
}

preference_pairs() {
  python3 - "$@" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])][:int(sys.argv[3])]
with open(sys.argv[2], "w") as out:
    for i, row in enumerate(rows):
        turns = row["conversations"]
        other = rows[(i + 5) % len(rows)]["conversations"][-1]["content"]
        out.write(json.dumps({"prompt": turns[:-1], "chosen": turns[-1]["content"],
                              "rejected": other}) + "\n")
PY
}
