#!/usr/bin/env python3
"""Reference chat-template renderings and loss masks for tests/test_chat_template.cpp.

For each template (llama3, chatml, qwen2), each conversation in CONVERSATIONS and
add_generation_prompt in (False, True), transformers' `apply_chat_template` renders the text
with the real published Jinja template; HF `tokenizers` encodes it (add_special_tokens=False:
the templates carry their own BOS). The loss masks are computed here independently of tandem:

  * the byte span of assistant message i is found from the real template alone: render
    messages[:i+1] and messages[:i]; the difference is message i's block, which holds
    `content + end_of_turn` (content after Jinja's `trim` for llama3); the span is that text;
  * token byte ranges come from concatenating the tokens' bytes (GPT-2 byte map; added tokens
    as their content), checked to rebuild the text exactly;
  * a token is trained when its byte range lies inside an assistant span.

Tokenizers: a fixture under tests/fixtures/tokenizers/ holding the template's special tokens;
when none does (no Llama 3 tokenizer is committed), the Qwen2 fixture with the Llama 3 special
tokens appended as added special tokens (listed in the output as `added_special_tokens`).

Templates (used verbatim; a tokenizer fixture's tokenizer_config.json `chat_template` takes
precedence when it is one of these families):
  llama3  chat_template of meta-llama/Meta-Llama-3-8B-Instruct (tokenizer_config.json)
  chatml  chat_template of Qwen/Qwen2.5-7B-Instruct (tokenizer_config.json)
  qwen2   chat_template of Qwen/Qwen2-7B-Instruct (tokenizer_config.json)
  chatml-plain  ChatML without a default system prompt

Writes tests/fixtures/chat/<template>.json. Deterministic. Run from the repository root:
    .venv-tools/bin/python tools/make_chat_template_fixtures.py
"""

import argparse
import glob
import json
import os

import tokenizers
import transformers
from transformers import PreTrainedTokenizerFast

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Generic ChatML with no default system prompt.
PLAIN_CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

TEMPLATES = {
    "llama3": {
        "source": "meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json chat_template",
        "template": LLAMA3_TEMPLATE,
        "end_of_turn": "<|eot_id|>",
        "trim": True,
        "needs": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "family": lambda t: "<|start_header_id|>" in t,
    },
    "chatml": {
        "source": "Qwen/Qwen2.5-7B-Instruct tokenizer_config.json chat_template",
        "template": QWEN25_TEMPLATE,
        "end_of_turn": "<|im_end|>",
        "trim": False,
        "needs": ["<|im_start|>", "<|im_end|>"],
        "family": lambda t: "You are Qwen, created by Alibaba Cloud" in t,
    },
    "qwen2": {
        "source": "Qwen/Qwen2-7B-Instruct tokenizer_config.json chat_template",
        "template": QWEN2_TEMPLATE,
        "end_of_turn": "<|im_end|>",
        "trim": False,
        "needs": ["<|im_start|>", "<|im_end|>"],
        "family": lambda t: "<|im_start|>" in t and "You are a helpful assistant." in t
        and "Alibaba" not in t,
    },
    "chatml-plain": {
        "source": "generic ChatML template, no default system prompt (embedded in this generator)",
        "template": PLAIN_CHATML_TEMPLATE,
        "end_of_turn": "<|im_end|>",
        "trim": False,
        "needs": ["<|im_start|>", "<|im_end|>"],
        "family": lambda t: "<|im_start|>" in t and "You are" not in t and "tools" not in t,
    },
}


def m(role, content):
    return {"role": role, "content": content}


# Multi-turn, with and without system prompts, whitespace that llama3's `trim` removes
# (including Unicode spaces Python strips), content starting with spaces and newlines (BPE
# merges across the header boundary), code, CJK, emoji, an empty assistant reply, a system
# message after the first turn, and a conversation ending on a user turn.
CONVERSATIONS = [
    [m("system", "You are a terse assistant."), m("user", "What is 2+2?"), m("assistant", "4."),
     m("user", "And 3+3?"), m("assistant", "6, obviously.")],
    [m("user", "Hello there!"), m("assistant", "Hi! How can I help you today?"),
     m("user", "Tell me a joke."), m("assistant", "Why did the chicken cross the road?")],
    [m("user", "  padded question \n"), m("assistant", "\n\n  An answer with spaces around.  \n"),
     m("user", "\u3000ideographic space\u00a0"), m("assistant", "\u2003em-space reply\u2028")],
    [m("system", "Réponds en français, s'il te plaît."), m("user", "Café? 咖啡? 🍵"),
     m("assistant", " Oui: café ☕, 咖啡, and 1234567 digits!!! ...")],
    [m("user", "Write code."),
     m("assistant", "```python\ndef f(x):\n    return x * 2\n```\n\tDone.")],
    [m("user", "Say nothing."), m("assistant", ""), m("user", "Now say something."),
     m("assistant", "Something.")],
    [m("user", "First."), m("system", "A late system message."), m("assistant", "Noted.")],
    [m("system", "Be brief."), m("user", "Open question, your turn:")],
    [m("user", "Lines\n\n\nmany"), m("assistant", "\nstarts with newline"), m("user", "ok"),
     m("assistant", "ends with newlines\n\n")],
]


def byte_decoder():
    # GPT-2's byte -> printable-unicode map, inverted.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_byte_ranges(tok: tokenizers.Tokenizer, ids, text):
    decoder = byte_decoder()
    added = {t.content: True for t in tok.get_added_tokens_decoder().values()}
    ranges, position, rebuilt = [], 0, b""
    for i in ids:
        piece = tok.id_to_token(i)
        data = piece.encode() if piece in added else bytes(decoder[c] for c in piece)
        ranges.append((position, position + len(data)))
        position += len(data)
        rebuilt += data
    assert rebuilt == text.encode(), "token bytes do not rebuild the text"
    return ranges


def assistant_spans(render, messages, spec):
    """Byte spans of assistant content + end-of-turn, from the real template alone."""
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        full = render(messages[: i + 1])
        prefix = render(messages[:i]) if i > 0 else ""
        assert full.startswith(prefix), "template is not append-only"
        content = message["content"].strip() if spec["trim"] else message["content"]
        piece = content + spec["end_of_turn"]
        at = full.rfind(piece)
        assert at >= len(prefix), (full, piece)
        begin = len(full[:at].encode())
        spans.append((begin, begin + len(piece.encode())))
    return spans


def mask_from(ranges, spans):
    return [int(any(b >= s and e <= t for s, t in spans)) for b, e in ranges]


def find_tokenizer(fixtures, spec):
    """A tokenizer fixture that has the template's special tokens; else the first fixture with
    ChatML's, with the missing ones appended as added special tokens (returned as `extra`, which
    the C++ test appends the same way)."""
    paths = sorted(glob.glob(os.path.join(fixtures, "*", "tokenizer.json")))
    for path in paths:
        tok = tokenizers.Tokenizer.from_file(path)
        if all(tok.token_to_id(t) is not None for t in spec["needs"]):
            return os.path.dirname(path), tok, []
    for path in paths:
        config = json.load(open(path, encoding="utf-8"))
        contents = {t["content"] for t in config["added_tokens"]}
        if "<|im_end|>" not in contents:
            continue
        next_id = max([t["id"] for t in config["added_tokens"]] + list(config["model"]["vocab"].values())) + 1
        extra = []
        for content in spec["needs"]:
            if content not in contents:
                extra.append({"id": next_id, "content": content})
                next_id += 1
        config["added_tokens"] += [
            {"id": t["id"], "content": t["content"], "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True} for t in extra]
        return os.path.dirname(path), tokenizers.Tokenizer.from_str(json.dumps(config)), extra
    raise SystemExit(f"no tokenizer under {fixtures} has {spec['needs']} or ChatML's tokens")


def configured_template(directory, spec):
    path = os.path.join(directory, "tokenizer_config.json")
    if os.path.exists(path):
        template = json.load(open(path, encoding="utf-8")).get("chat_template")
        if isinstance(template, str) and spec["family"](template):
            return template, os.path.relpath(path)
    return spec["template"], spec["source"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizers", default="tests/fixtures/tokenizers")
    parser.add_argument("--out", default="tests/fixtures/chat")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, spec in TEMPLATES.items():
        directory, tok, extra = find_tokenizer(args.tokenizers, spec)
        template, source = configured_template(directory, spec) if not extra else (
            spec["template"], spec["source"])
        hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>")

        def render(messages, add_generation_prompt=False):
            return hf.apply_chat_template(messages, chat_template=template, tokenize=False,
                                          add_generation_prompt=add_generation_prompt)

        cases = []
        for messages in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                text = render(messages, add_generation_prompt)
                ids = tok.encode(text, add_special_tokens=False).ids
                ranges = token_byte_ranges(tok, ids, text)
                spans = assistant_spans(render, messages, spec)
                cases.append({
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "text": text,
                    "assistant_spans": spans,
                    "ids": ids,
                    "loss_mask": mask_from(ranges, spans),
                    "loss_mask_last_turn": mask_from(ranges, spans[-1:]),
                })
        out = {
            "generator": "tools/make_chat_template_fixtures.py",
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "template_name": name,
            "template_source": source,
            "template": template,
            "tokenizer": os.path.relpath(directory),
            "added_special_tokens": extra,
            "cases": cases,
        }
        path = os.path.join(args.out, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {path}: {len(cases)} cases, tokenizer {os.path.relpath(directory)}")


if __name__ == "__main__":
    main()
