#!/usr/bin/env python3
"""Reference renderings for tests/test_jinja.cpp: each case's template rendered by transformers'
own chat-template compiler (its sandboxed Jinja environment: trim_blocks, lstrip_blocks, loop
controls, the `{% generation %}` tracker, its tojson, raise_exception, namespace and dict), with
the case's variables, as `apply_chat_template` renders.

Each case is one construct or a combination of them; a case whose template transformers refuses
(raise_exception, an undefined attribute, a sandbox refusal) is recorded with "error": true and
tandem must refuse it too. Generation spans are converted from Python's character indices to
UTF-8 byte offsets.

Writes tests/fixtures/jinja/cases.json. Deterministic. Run from the repository root:
    .venv-tools/bin/python tools/make_jinja_fixtures.py
"""

import json
import os

from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi  there\n"},
    {"role": "assistant", "content": " Hello! "},
    {"role": "user", "content": "Añadir ünïcödé — 日本語 🙂"},
]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                      "parameters": {"type": "object",
                                                     "properties": {"city": {"type": "string"},
                                                                    "days": {"type": "integer", "minimum": 1}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}},
]

TOOL_MESSAGES = [
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two calls.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
                    {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "content": "{\"temp\": 21.5}"},
    {"role": "tool", "content": "cold"},
    {"role": "assistant", "content": "Paris 21.5, Oslo cold."},
]

V = {"messages": MESSAGES, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}

# (name, template, extra variables)
CASES = [
    # text and whitespace control
    ("text_only", "plain text\nwith lines\n", {}),
    ("trim_blocks", "{% if true %}\nA\n{% endif %}\nB", {}),
    ("lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz", {}),
    ("lstrip_not_after_text", "x  {% if true %}y{% endif %}", {}),
    ("minus_left", "a   \n  {{- 'b' }}", {}),
    ("minus_right", "{{ 'a' -}}   \n  b", {}),
    ("minus_block", "a\n  {%- if true -%}\n  b  \n{%- endif -%}\n  c", {}),
    ("plus_no_lstrip", "x\n    {%+ if true %}y{% endif %}", {}),
    ("plus_no_trim", "{% if true +%}\nA{% endif %}", {}),
    ("comment", "a{# a comment #}b\n  {# own line #}\nc{#- strip -#}  d", {}),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %}!", {}),
    ("crlf", "{% if true %}\r\nA\r\n{% endif %}\r\nB", {}),
    ("variable_newline_kept", "{{ 'a' }}\nb", {}),
    # literals and output
    ("literals", "{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1e3 }} {{ 2.0 }} {{ 1e-5 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ true }} {{ none }} {{ 'q' }} {{ \"d\" }}", {}),
    ("string_escapes", "{{ 'a\\nb\\t\\'c\\' \\\\ \\u00e9 \\x41' }}", {}),
    ("list_repr", "{{ [1, 'a', none, true, 1.5, [2], {'k': \"it's\"}] }}", {}),
    ("tuple_repr", "{{ (1, 'a') }} {{ (1,) }}", {}),
    ("dict_repr", "{{ {'a': 1, 'b': [1, 2], 'c': {'d': none}} }}", {}),
    ("undefined_prints_empty", "[{{ missing }}]", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    # operators
    ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 3 - 5 }} {{ 2 * 3.5 }} {{ 1 + true }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none ~ missing }} {{ [1] + [2, 3] }}", {}),
    ("comparisons", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ none == none }} {{ 1 != 'a' }}", {}),
    ("in_operator", "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}", {}),
    ("logic_values", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ not [] }} {{ none or none }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ (1 + 2) }} {{ 2 * 3 ~ 'x' }}", {}),
    ("conditional_expr", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]", {}),
    # attribute, item, slice
    ("attribute_and_item", "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ messages.0.role }}", V),
    ("missing_is_undefined", "{{ messages[0].nothing is defined }} {{ messages[10] is defined }} {{ none.x is defined }}", V),
    ("slices", "{{ messages[1:3] | length }} {{ 'hello'[1:-1] }} {{ 'hello'[::-1] }} {{ [1,2,3,4,5][::2] }} {{ 'añb'[1] }} {{ 'héllo'[:2] }}", V),
    ("dict_method_beats_key", "{{ d.items is defined }} {{ d['items'] }}", {"d": {"items": "key"}}),
    # statements
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
    ("for_loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("for_prev_next", "{% for x in [1, 2, 3] %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }} {% endfor %}", {}),
    ("for_cycle", "{% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("for_filter", "{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ m.content | trim }};{% endfor %}", V),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}", {}),
    ("for_dict_keys", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("loop_scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("if_scoping", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(count=0, last=none) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.count }} {{ ns.last }}", V),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}", {}),
    ("set_block", "{% set block %}\n  inner {{ 1 + 1 }}\n{% endset %}[{{ block }}]", {}),
    ("set_block_filter", "{% set block | upper | trim %}  shout  {% endset %}[{{ block }}]", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }}", {}),
    ("macro_missing_arg", "{% macro f(a, b) %}[{{ a }}|{{ b }}]{% endmacro %}{{ f(1) }}", {}),
    ("macro_recursion", "{% macro render(v) %}{% if v is mapping %}{{ '{' }}{% for k, x in v.items() %}{{ k }}:{{ render(x) }},{% endfor %}{{ '}' }}{% elif v is iterable and v is not string %}[{% for x in v %}{{ render(x) }} {% endfor %}]{% else %}{{ v }}{% endif %}{% endmacro %}{{ render({'a': [1, {'b': 'c'}], 'd': 2}) }}", {}),
    ("macro_sees_globals", "{% macro f() %}{{ bos_token }}{% endmacro %}{{ f() }}", V),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}", {}),
    ("call_block_args", "{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each([1, 2]) %}<{{ x }}>{% endcall %}", {}),
    ("filter_block", "{% filter upper %}quiet {{ 'words' }}{% endfilter %}", {}),
    ("generation", "{% for m in messages %}{% if m.role == 'assistant' %}A: {% generation %}{{ m.content }}</s>{% endgeneration %}\n{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}", V),
    ("generation_unicode", "é{% generation %}ü🙂{% endgeneration %}x{% generation %}{% endgeneration %}", {}),
    # filters
    ("filter_trim", "[{{ '  a b \n' | trim }}] [{{ 'xxaxx' | trim('x') }}]", {}),
    ("filter_tojson", "{{ tools | tojson }}", {"tools": TOOLS}),
    ("filter_tojson_indent", "{{ tools[0] | tojson(indent=2) }}", {"tools": TOOLS}),
    ("filter_tojson_options", "{{ {'b': 1, 'a': 'é'} | tojson(ensure_ascii=true, sort_keys=true) }} {{ {'a': [1, 2]} | tojson(separators=(',', ':')) }} {{ [1.0, 2.5, none, true, 'q\"'] | tojson }}", {}),
    ("filter_length", "{{ messages | length }} {{ 'añb' | length }} {{ {'a': 1} | count }}", V),
    ("filter_join", "{{ [1, 2, 3] | join(', ') }} {{ messages | join('|', attribute='role') }} {{ 'abc' | join('-') }}", V),
    ("filter_replace", "{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }}", {}),
    ("filter_case", "{{ 'Hello World' | lower }} {{ 'x' | upper }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}", {}),
    ("filter_items", "{% for k, v in {'x': 1, 'y': 2} | items %}{{ k }}{{ v }}{% endfor %}", {}),
    ("filter_selectattr", "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list | length }} {{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | join(',') }}", V),
    ("filter_selectattr_truthy", "{{ [{'a': 1}, {'a': 0}, {'b': 2}] | selectattr('a') | list | length }}", {}),
    ("filter_select", "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [0, 1, '', 'x'] | reject | list }} {{ [1, 5, 9] | select('gt', 3) | list }}", {}),
    ("filter_map_filter", "{{ ['a', 'b'] | map('upper') | join }} {{ [' x ', 'y '] | map('trim') | list }}", {}),
    ("filter_first_last", "{{ messages | first | attr('role') }} {{ (messages | last).role }} {{ 'abc' | first }} {{ 'abc' | last }}", V),
    ("filter_default", "{{ missing | default('d') }} {{ '' | default('e') }} {{ '' | default('f', true) }} {{ none | default('g') }} {{ missing | d('h') }}", {}),
    ("filter_indent", "{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(4, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}|{{ 'x\n' | indent }}", {}),
    ("filter_list_string", "{{ 'ab' | list }} {{ 12 | string }} {{ (1, 2) | list }}", {}),
    ("filter_numbers", "{{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }}", {}),
    ("filter_sequences", "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1] | unique | list }} {{ [1, 2] | reverse | list }} {{ [4, 2, 8] | min }} {{ [4, 2, 8] | max }} {{ [1, 2, 3] | sum }}", {}),
    ("filter_dictsort", "{{ {'b': 1, 'a': 2} | dictsort }}", {}),
    ("filter_escape_safe", "{{ '<a href=\"x\">&</a>' | e }} {{ '<b>' | safe }}", {}),
    # tests
    ("tests_types", "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ none is none }} {{ true is boolean }} {{ [] is sequence }} {{ range is callable }}", {}),
    ("tests_values", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 2 is in [1, 2] }} {{ 'a' is lower }} {{ 'A' is upper }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 1 is ne 2 }} {{ x is sameas none }} {{ true is true }} {{ 0 is false }}", {"x": None}),
    ("tests_defined", "{{ missing is defined }} {{ missing is undefined }} {{ messages is defined }} {{ messages is not none }}", V),
    # methods
    ("string_methods", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a.b.c'.rsplit('.', 1) }} {{ '  x  '.strip() }} {{ 'xxyxx'.lstrip('x') }} {{ 'xxyxx'.rstrip('x') }}", {}),
    ("string_methods2", "{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'Hello'.lower() }} {{ 'Hello'.upper() }} {{ 'a-b'.replace('-', '_') }} {{ 'hello'.find('l') }} {{ 'hello'.count('l') }} {{ ', '.join(['a', 'b']) }} {{ 'hello world'.title() }} {{ 'x\ny'.splitlines() }}", {}),
    ("dict_methods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}", {"d": {"a": 1, "b": 2}}),
    ("list_methods", "{{ [1, 2, 2].count(2) }} {{ ['a', 'b'].index('b') }}", {}),
    ("globals", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1, b=2) }} {% set ns = namespace(x=1) %}{{ ns.x }}", {}),
    # errors transformers raises too
    ("error_raise_exception", "{% if true %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}", {}),
    ("error_undefined_attribute", "{{ missing.attribute }}", {}),
    ("error_list_append", "{% set x = [] %}{{ x.append(1) }}", {}),
    ("error_namespace_underscore", "{% set ns = namespace(_x=1) %}{{ ns._x }}", {}),
    ("error_add_string_int", "{{ 'a' + 1 }}", {}),
    ("error_unknown_filter", "{{ 'a' | no_such_filter }}", {}),
    ("error_syntax", "{% if %}", {}),
    ("error_unclosed", "{% for x in y %}", {}),
    ("error_none_iteration", "{% for x in none %}{% endfor %}", {}),
    # chat-shaped
    ("chat_tools_and_reasoning",
     "{%- if tools %}<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools>\n{% endif %}"
     "{%- for m in messages %}"
     "{%- if m.role == 'assistant' %}<|assistant|>{% generation %}"
     "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
     "{{- m.content }}"
     "{%- for call in m.tool_calls | default([]) %}\n<call>{\"name\": \"{{ call.function.name }}\", \"arguments\": "
     "{% if call.function.arguments is string %}{{ call.function.arguments }}{% else %}{{ call.function.arguments | tojson }}{% endif %}}</call>"
     "{%- endfor %}<|end|>{% endgeneration %}\n"
     "{%- elif m.role == 'tool' %}{% if loop.previtem is not defined or loop.previtem.role != 'tool' %}<|tool|>{% endif %}"
     "<response>{{ m.content }}</response>{% if loop.nextitem is not defined or loop.nextitem.role != 'tool' %}<|end|>\n{% endif %}"
     "{%- else %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endif %}"
     "{%- endfor %}{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}",
     {"messages": TOOL_MESSAGES, "tools": TOOLS, "add_generation_prompt": True, "enable_thinking": False}),
]


def byte_offset(text, index):
    return len(text[:index].encode("utf-8"))


def main():
    out = []
    for name, template, variables in CASES:
        case = {"name": name, "template": template, "variables": variables}
        try:
            compiled = _compile_jinja_template(template)
            rendered, spans = _render_with_assistant_indices(compiled, variables.get("messages"),
                                                            variables.get("tools"), None,
                                                            variables.get("add_generation_prompt", False),
                                                            **{k: v for k, v in variables.items()
                                                               if k not in ("messages", "tools", "add_generation_prompt")})
            case["text"] = rendered
            case["generation_spans"] = [[byte_offset(rendered, a), byte_offset(rendered, b)] for a, b in spans]
            case["error"] = False
        except Exception as e:  # noqa: BLE001 - any refusal is recorded as one
            case["error"] = True
            case["reference_error"] = f"{type(e).__name__}: {e}"
        if name.startswith("error_") != case["error"]:
            raise SystemExit(f"case {name}: expected error={name.startswith('error_')}, got {case}")
        out.append(case)
    path = os.path.join("tests", "fixtures", "jinja", "cases.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_jinja_fixtures.py", "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} cases to {path}")


if __name__ == "__main__":
    main()
