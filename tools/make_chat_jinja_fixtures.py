#!/usr/bin/env python3
"""Reference renderings, token ids and loss masks of whole conversations through Jinja chat
templates, for tests/test_chat_jinja.cpp.

Templates: the ones under tests/fixtures/jinja/templates/ (written for these tests in the style
of Qwen3, Qwen3.5, Llama 3.1, gpt-oss's harmony, Mistral, DeepSeek-V3/R1, GLM-4.5, Gemma 3,
Kimi K2 and MiniMax-M2:
tools, tool calls, tool results, reasoning, thinking on and off, content parts), the demo
tokenizer's, and the Qwen2 tokenizer fixture's. Each is rendered by transformers'
own chat-template renderer with each conversation below, with and without the generation prompt
and with the kwargs listed, and tokenized by HF `tokenizers` (the Qwen2 tokenizer fixture, no
special tokens added: templates write their own).

Loss spans, computed here independently of tandem:
  * a template with {% generation %} blocks: the blocks' spans (transformers' tracker);
  * otherwise, for each assistant message i: [len(render(messages[:i], generation prompt)),
    len(render(messages[:i+1])) less trailing newlines and spaces), valid only when both
    renderings are prefixes of the whole conversation's ("prefix_error" when one is not), for
    every assistant turn ("spans") and for the last one alone ("last_spans").
A token is trained when its byte range lies inside a span. A conversation the template refuses
(raise_exception) is recorded with its "error".

Writes tests/fixtures/jinja/chats.json. Deterministic. Run from the repository root:
    .venv-tools/bin/python tools/make_chat_jinja_fixtures.py
"""

import json
import os

import tokenizers
from transformers.utils.chat_template_utils import (_alias_reasoning_fields, _compile_jinja_template,
                                                   _render_with_assistant_indices)

TEMPLATE_DIR = os.path.join("tests", "fixtures", "jinja", "templates")
TOKENIZER = os.path.join("tests", "fixtures", "tokenizers", "qwen2", "tokenizer.json")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                    "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}

CONVERSATIONS = {
    "multi_turn": {"messages": [
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "7."},
        {"role": "user", "content": "  Another one?  "},
        {"role": "assistant", "content": "Eleven, then 13.\n"}]},
    "system_single": {"messages": [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Capital of Norway?"},
        {"role": "assistant", "content": "Oslo"}]},
    "tool_call": {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Is it warm in Lyon?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"unit": "c", "city": "Lyon"}}}]},
        {"role": "tool", "content": "{\"temp\": 24}"},
        {"role": "assistant", "content": "Yes, 24 °C."}]},
    "parallel_tool_calls": {"tools": [WEATHER, TIME], "messages": [
        {"role": "system", "content": "Use tools when useful."},
        {"role": "user", "content": "Weather and time in Tokyo?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "functions.get_weather:0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}},
            {"id": "functions.get_time:1", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "Asia/Tokyo"}}}]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "rain, 18"},
        {"role": "tool", "tool_call_id": "functions.get_time:1", "content": "21:04"},
        {"role": "assistant", "content": "Rainy, 18 degrees; it is 21:04."}]},
    "reasoning_last": {"messages": [
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "reasoning_content": "Add them.", "content": "4"}]},
    "reasoning_multi": {"messages": [
        {"role": "user", "content": "3 * 3?"},
        {"role": "assistant", "reasoning_content": "Multiply.", "content": "9"},
        {"role": "user", "content": "And squared?"},
        {"role": "assistant", "reasoning_content": "9 * 9.", "content": "81"}]},
    "not_alternating": {"messages": [
        {"role": "user", "content": "One"},
        {"role": "user", "content": "Two"},
        {"role": "assistant", "content": "Three"}]},
    "parts": {"messages": [
        {"role": "user", "content": [{"type": "text", "text": " Describe "}, {"type": "image"}, {"type": "text", "text": "this."}]},
        {"role": "assistant", "content": "A cat."}]},
    "thinking_key": {"messages": [
        {"role": "user", "content": "Capital of Peru?"},
        {"role": "assistant", "thinking": "Recall.", "content": "Lima"}]},
    "unicode_empty": {"messages": [
        {"role": "user", "content": "Écris «bonjour» 🙂 日本"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Encore\tune fois"},
        {"role": "assistant", "content": "bonjour — ¡hola!"}]},
}

# (template name, file or None (then `source`), kwargs, conversations)
def load(name):
    with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
        return f.read()


def tokenizer_template(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


TEMPLATES = [
    ("qwen3-style", load("qwen3-style.jinja"), {}, list(CONVERSATIONS)),
    ("qwen3-style-no-thinking", load("qwen3-style.jinja"), {"enable_thinking": False}, ["multi_turn", "tool_call", "reasoning_last"]),
    ("qwen3-style-generation", load("qwen3-style-generation.jinja"), {}, list(CONVERSATIONS)),
    ("llama31-style", load("llama31-style.jinja"), {"date_string": "26 Nov 2026"},
     ["multi_turn", "system_single", "tool_call", "unicode_empty"]),
    ("harmony-style", load("harmony-style.jinja"), {"reasoning_effort": "high"},
     ["multi_turn", "system_single", "tool_call", "parallel_tool_calls", "reasoning_last", "thinking_key"]),
    ("mistral-style", load("mistral-style.jinja"), {},
     ["multi_turn", "system_single", "tool_call", "unicode_empty", "not_alternating"]),
    ("deepseek-style", load("deepseek-style.jinja"), {},
     ["multi_turn", "system_single", "tool_call", "parallel_tool_calls", "unicode_empty"]),
    ("glm-style", load("glm-style.jinja"), {}, list(CONVERSATIONS)),
    ("glm-style-no-thinking", load("glm-style.jinja"), {"enable_thinking": False}, ["multi_turn", "tool_call"]),
    ("gemma-style", load("gemma-style.jinja"), {}, ["multi_turn", "system_single", "unicode_empty", "not_alternating", "parts"]),
    ("kimi-style", load("kimi-style.jinja"), {}, ["multi_turn", "system_single", "tool_call", "parallel_tool_calls"]),
    ("qwen35-style", load("qwen35-style.jinja"), {}, list(CONVERSATIONS)),
    ("qwen35-style-no-thinking", load("qwen35-style.jinja"), {"enable_thinking": False},
     ["multi_turn", "tool_call", "parallel_tool_calls"]),
    ("minimax-style", load("minimax-style.jinja"), {},
     ["multi_turn", "system_single", "tool_call", "parallel_tool_calls", "reasoning_multi", "unicode_empty"]),
    ("demo-llama3", tokenizer_template("data/demo/tokenizer/tokenizer_config.json"), {}, ["multi_turn", "system_single", "unicode_empty"]),
    ("qwen2-fixture", tokenizer_template("tests/fixtures/tokenizers/qwen2/tokenizer_config.json"), {}, ["multi_turn", "system_single", "unicode_empty"]),
]

SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}


def render(template, messages, tools, agp, kwargs):
    # As apply_chat_template does: reasoning under every name templates read, then render.
    compiled = _compile_jinja_template(template)
    return _render_with_assistant_indices(compiled, _alias_reasoning_fields(messages), tools, None, agp,
                                          **SPECIAL, **kwargs)


def byte_len(text):
    return len(text.encode("utf-8"))


def prefix_spans(template, messages, tools, kwargs, full, only_last):
    spans = []
    assistant = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for i in assistant:
        if only_last and i != assistant[-1]:
            continue
        head, _ = render(template, messages[:i], tools, True, kwargs)
        upto, _ = render(template, messages[:i + 1], tools, False, kwargs)
        if not (full.startswith(upto) and upto.startswith(head)):
            return None
        end = len(upto)
        while end > len(head) and upto[end - 1] in "\n ":
            end -= 1
        if end > len(head):
            spans.append([byte_len(upto[:len(head)]), byte_len(upto[:end])])
    return spans


def token_mask(offsets, spans):
    return [1 if any(a <= begin and end <= b for a, b in spans) else 0 for begin, end in offsets]


def main():
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    cases = []
    for name, template, kwargs, conversation_names in TEMPLATES:
        has_generation = "generation" in template and "endgeneration" in template
        for conversation in conversation_names:
            data = CONVERSATIONS[conversation]
            messages, tools = data["messages"], data.get("tools")
            for agp in (False, True):
                case = {"template": name, "conversation": conversation, "add_generation_prompt": agp,
                        "kwargs": kwargs}
                try:
                    text, generation = render(template, messages, tools, agp, kwargs)
                except Exception as e:  # noqa: BLE001 - the template refused the conversation
                    case["error"] = f"{type(e).__name__}: {e}"
                    cases.append(case)
                    continue
                case["text"] = text
                if has_generation:
                    case["spans"] = [[byte_len(text[:a]), byte_len(text[:b])] for a, b in generation if b > a]
                    case["last_spans"] = case["spans"][-1:]
                elif not agp:
                    spans = prefix_spans(template, messages, tools, kwargs, text, False)
                    case["spans"] = spans
                    case["prefix_error"] = spans is None
                    case["last_spans"] = prefix_spans(template, messages, tools, kwargs, text, True)
                encoding = tok.encode(text, add_special_tokens=False)
                # Byte offsets from the tokens' own bytes (the fixture is byte-level).
                case["ids"] = encoding.ids
                offsets = []
                for begin, end in encoding.offsets:
                    b = byte_len(text[:begin]); e = byte_len(text[:end])
                    offsets.append([b, e])
                for key in ("spans", "last_spans"):
                    if case.get(key) is not None:
                        case[key.replace("spans", "mask")] = token_mask(offsets, case[key])
                cases.append(case)
    templates = {name: template for name, template, _, _ in TEMPLATES}
    path = os.path.join("tests", "fixtures", "jinja", "chats.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_chat_jinja_fixtures.py", "special_tokens": SPECIAL,
                   "tokenizer": TOKENIZER, "templates": templates, "conversations": CONVERSATIONS,
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()
