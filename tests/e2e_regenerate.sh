#!/usr/bin/env bash
# End to end through the binary: `tandem regenerate` on a tiny model SFT-trained here from the
# demo data (a real HF checkpoint with the demo tokenizer), from conversations with bad lines
# mixed in:
#   on_error fail stops at the first bad line naming file and line, keeping the batches before it;
#   rerun with --on-error skip resumes there; every bad line is listed with its reason;
#   a run killed with SIGKILL mid-way (and a torn last line, as a write cut by the kill leaves)
#   resumes to the uninterrupted run's output byte for byte: no duplicate, no gap;
#   continuous batching (the default) writes what --batching static writes, byte for byte;
#   a sampled output begun with one batching is not resumed with the other;
#   the output trains (SFT reads it as conversations) and a finished run is not redone.
# Usage: tests/e2e_regenerate.sh BUILD_DIR   (run by ctest)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tandem="$1/tandem"
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-e2e-regenerate-XXXXXX")
background=""
cleanup() {
  [ -n "$background" ] && kill -9 "$background" 2>/dev/null || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
cd "$root"
export OMP_NUM_THREADS=1 TANDEM_THREADS=1

source "$root/tests/chat_helpers.sh"
tiny_chat_model "$work"
conversations_with_bad_lines "$work/in.jsonl"
common=(--target "$work/base/export" --tokenizer data/demo/tokenizer --data "$work/in.jsonl"
        --max-length 200 --batch-size 3)
args=("${common[@]}" --max-new-tokens 40)

echo "== on_error fail: stops at line 5"
if "$tandem" regenerate "${args[@]}" --out "$work/a.jsonl" > "$work/fail.log" 2>&1; then
  echo "regenerate accepted a malformed line" >&2; exit 1
fi
grep -q "in.jsonl:5: malformed JSON" "$work/fail.log" || { cat "$work/fail.log" >&2; exit 1; }
test "$(wc -l < "$work/a.jsonl")" = 3  # lines 1-3, the batch before the bad line
echo "== resumed with --on-error skip"
"$tandem" regenerate "${args[@]}" --out "$work/a.jsonl" --on-error skip | tee "$work/a.log"
grep -q "resuming .*a.jsonl: 3 conversations written, input lines 1..3 done" "$work/a.log"

echo "== uninterrupted run"
"$tandem" regenerate "${args[@]}" --out "$work/ref.jsonl" --on-error skip > "$work/ref.log" 2>&1
cmp "$work/a.jsonl" "$work/ref.jsonl"
echo "== static batching: the same output (greedy)"
"$tandem" regenerate "${args[@]}" --out "$work/static.jsonl" --on-error skip --batching static \
  > "$work/static.log" 2>&1
for suffix in "" .skipped.jsonl; do cmp "$work/static.jsonl$suffix" "$work/ref.jsonl$suffix"; done
echo "== sampled: continuous batching draws per conversation; resuming as static is refused"
"$tandem" regenerate "${args[@]}" --out "$work/t1.jsonl" --on-error skip --temperature 1 --seed 5 \
  --limit 9 > /dev/null 2>&1
if "$tandem" regenerate "${args[@]}" --out "$work/t1.jsonl" --on-error skip --temperature 1 \
  --seed 5 --limit 9 --batching static > "$work/t1-static.log" 2>&1; then
  echo "a sampled output was resumed with the other batching" >&2; exit 1
fi
grep -q 'draws: "per conversation" there, null now' "$work/t1-static.log"

echo "== killed with SIGKILL, a torn line appended, resumed"
"$tandem" regenerate "${args[@]}" --out "$work/killed.jsonl" --on-error skip \
  > "$work/killed.log" 2>&1 &
background=$!
for _ in $(seq 600); do
  [ -f "$work/killed.jsonl" ] && [ "$(wc -l < "$work/killed.jsonl")" -ge 9 ] && break
  kill -0 "$background" 2>/dev/null || break
  sleep 0.02
done
kill -9 "$background" 2>/dev/null || { echo "the run ended before it was killed" >&2; exit 1; }
wait "$background" 2>/dev/null || true
background=""
written=$(wc -l < "$work/killed.jsonl")
echo "killed with $written lines written"
test "$written" -lt "$(wc -l < "$work/ref.jsonl")"
printf '{"id": "torn", "conversa' >> "$work/killed.jsonl"
"$tandem" regenerate "${args[@]}" --out "$work/killed.jsonl" --on-error skip > "$work/resume.log"
cmp "$work/killed.jsonl" "$work/ref.jsonl"
cmp "$work/killed.jsonl.skipped.jsonl" "$work/ref.jsonl.skipped.jsonl"

python3 - "$work/in.jsonl" "$work/ref.jsonl" <<'PY'
import json, sys
inputs = open(sys.argv[1]).read().splitlines()
out = [json.loads(l) for l in open(sys.argv[2])]
skipped = {json.loads(l)["line"]: json.loads(l)["reason"] for l in open(sys.argv[2] + ".skipped.jsonl")}
assert skipped == {5: "malformed_json", 11: "no_user_turn", 17: "too_long", 23: "unknown_role"}, skipped
lines = [r["regenerated"]["source_line"] for r in out]
assert lines == sorted(set(range(1, 61)) - set(skipped)), lines  # each good line once, in order
for r in out:
    source = json.loads(inputs[r["regenerated"]["source_line"] - 1])
    kept = [m for m in source["conversations"] if m["role"] != "assistant"]
    assert [m for m in r["conversations"] if m["role"] != "assistant"] == kept
    answers = [m for m in r["conversations"] if m["role"] == "assistant"]
    assert len(answers) == len(r["regenerated"]["answer_tokens"]) >= 1
    assert r["id"] == source["id"]
multi = next(r for r in out if r["regenerated"]["source_line"] == 2)
assert [m["role"] for m in multi["conversations"]] == ["user", "assistant", "user", "assistant"]
assert multi["conversations"][3]["content"] != "old second answer"
settings = json.load(open(sys.argv[2] + ".settings.json"))
assert settings["finished"] and settings["conversations"] == 56 and settings["max_new_tokens"] == 40
print("regenerated:", len(out), "conversations;", sum(sum(r["regenerated"]["answer_tokens"]) for r in out),
      "new tokens; skipped", skipped)
PY

echo "== a finished run is not redone; other settings are refused"
"$tandem" regenerate "${args[@]}" --out "$work/ref.jsonl" --on-error skip | grep -q "is complete"
if "$tandem" regenerate "${common[@]}" --out "$work/ref.jsonl" --max-new-tokens 8 > "$work/other.log" 2>&1; then
  echo "regenerate resumed with other settings" >&2; exit 1
fi
grep -q "begun with other settings (max_new_tokens: 40 there, 8 now)" "$work/other.log" || {
  cat "$work/other.log" >&2; exit 1; }

echo "== a Jinja template file with kwargs; tools and tool calls pass through"
cat > "$work/agent.jinja" <<'JINJA'
{%- if enable_thinking is not defined -%}{{ raise_exception('the kwargs did not arrive') }}{%- endif -%}
{%- if messages[0].content == 'refuse me' -%}{{ raise_exception('refused') }}{%- endif -%}
{{- bos_token -}}
{%- if tools -%}<|start_header_id|>system<|end_header_id|>

{{ tools | length }} tools<|eot_id|>{%- endif -%}
{%- for m in messages -%}
<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content or (m.tool_calls | tojson) }}<|eot_id|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>

{%- endif -%}
JINJA
python3 - "$work/agent.jsonl" <<'PY'
import json, sys
call = {"type": "function", "function": {"name": "lookup", "arguments": {"z": 1, "a": 2}}}
rows = [
    {"id": "agent", "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"z": {}, "a": {}}}}],
     "conversations": [{"role": "user", "content": "Look it up."},
                       {"role": "assistant", "content": None, "tool_calls": [call]},
                       {"role": "tool", "content": "found"},
                       {"role": "assistant", "content": "old"}]},
    {"id": "refused", "conversations": [{"role": "user", "content": "refuse me"}]},
    {"id": "open", "conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                                     {"role": "tool", "content": "x"}]},
]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
"$tandem" regenerate --target "$work/base/export" --tokenizer data/demo/tokenizer --data "$work/agent.jsonl" \
  --chat-template "$work/agent.jinja" --template-kwargs '{"enable_thinking": false}' --max-new-tokens 6 \
  --on-error skip --out "$work/agent-out.jsonl" > "$work/agent.log" 2>&1 || { cat "$work/agent.log" >&2; exit 1; }
python3 - "$work/agent-out.jsonl" <<'PY'
import json, sys
out = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in out] == ["agent", "open"], [r["id"] for r in out]
skipped = [json.loads(l) for l in open(sys.argv[1] + ".skipped.jsonl")]
assert [s["reason"] for s in skipped] == ["template_error"], skipped
agent = out[0]
assert list(agent["tools"][0]["function"]["parameters"]) == ["z", "a"]  # the input's key order
roles = [m["role"] for m in agent["conversations"]]
assert roles == ["user", "assistant", "tool", "assistant"], roles
assert list(agent["conversations"][1]["tool_calls"][0]["function"]["arguments"]) == ["z", "a"]
assert agent["conversations"][3]["content"] != "old" and len(agent["regenerated"]["answer_tokens"]) == 1
assert [m["role"] for m in out[1]["conversations"]] == ["user", "assistant", "tool", "assistant"]
settings = json.load(open(sys.argv[1] + ".settings.json"))
assert settings["template"].startswith("jinja:"), settings
print("agent conversations regenerated with their tools and tool calls kept")
PY

echo "== the output trains"
"$tandem" train /dev/stdin > "$work/sft2.log" <<YAML
model: {path: $work/base/export, dtype: fp32}
data: {path: $work/ref.jsonl, format: conversations, tokenizer: data/demo/tokenizer,
       seq_len: 256, micro_batch_rows: 2, cache_dir: $work/cache}
training: {objective: sft, run_dir: $work/sft2, steps: 2, lr: 1.0e-3, log_every: 1}
YAML
test -f "$work/sft2/export/config.json"
echo "e2e_regenerate: OK"
