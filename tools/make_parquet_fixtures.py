#!/usr/bin/env python3
"""Generate the Parquet reader fixtures with pyarrow, in the shapes hub datasets ship.

Writes under tests/fixtures/parquet/:
  ultrachat.parquet    UltraChat-style conversations: prompt, prompt_id and a `messages` column
                       (list<struct<content, role>>), written with 2 rows per row group so the
                       reader crosses row groups, plus the schema metadata `datasets` writes
  ultrachat.jsonl      the same records as JSONL (`messages` key), which tandem must read alike
  ultrafeedback.parquet  UltraFeedback-binarized-style preference rows: prompt, chosen and rejected
                       conversations that repeat the prompt, score columns tandem does not read
  ultrafeedback.jsonl  the same records as JSONL
  types.parquet        one column per Arrow type the reader converts (integers, floats, booleans,
                       strings, nulls, nested lists and structs, a string-keyed map, a dictionary
                       column), dictionary-encoded and snappy-compressed
  types.json           the JSON each row of types.parquet must become, as pyarrow's to_pylist
                       gives it
  bad_values.parquet   rows with a NaN, binary data and an integer-keyed map (each a bad row)
(fuzz-invalid-utf8-field-name.parquet in the same folder is a fuzzer finding, committed as is.)

Deterministic; needs only pyarrow (scripts/setup.sh's Parquet env). From the repository root:
    .venv-parquet/bin/python tools/make_parquet_fixtures.py
"""

import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = "tests/fixtures/parquet"
MESSAGE = pa.struct([("content", pa.string()), ("role", pa.string())])


def conversation(*turns):
    return [{"content": text, "role": role} for role, text in turns]


def write(table, name, **kwargs):
    pq.write_table(table, f"{ROOT}/{name}", **kwargs)
    print(f"wrote {ROOT}/{name}")


def write_jsonl(rows, name):
    with open(f"{ROOT}/{name}", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {ROOT}/{name}")


def with_hf_metadata(schema):
    # The key `datasets` writes into its Parquet files' schema metadata.
    features = {name: {"_type": "Value"} for name in schema.names}
    return schema.with_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()})


def ultrachat():
    rows = [
        {"prompt": "What is 2 + 2?", "prompt_id": "p0",
         "messages": conversation(("user", "What is 2 + 2?"), ("assistant", "4."))},
        {"prompt": "Name a colour.", "prompt_id": "p1",
         "messages": conversation(("system", "Be brief."), ("user", "Name a colour."),
                                  ("assistant", "Blue."), ("user", "Another?"),
                                  ("assistant", "Green."))},
        {"prompt": "Caf\u00e9?", "prompt_id": "p2",
         "messages": conversation(("user", "Caf\u00e9 \u2615 or t\u00e9? \u4f60\u597d"),
                                  ("assistant", "T\u00e9, \"please\".\nThanks"))},
        {"prompt": "Empty answer", "prompt_id": "p3",
         "messages": conversation(("user", "Say nothing."), ("assistant", "..."))},
        {"prompt": "Last", "prompt_id": "p4",
         "messages": conversation(("user", "Bye"), ("assistant", "Goodbye!"))},
    ]
    schema = with_hf_metadata(pa.schema([("prompt", pa.string()), ("prompt_id", pa.string()),
                                         ("messages", pa.list_(MESSAGE))]))
    write(pa.Table.from_pylist(rows, schema=schema), "ultrachat.parquet", row_group_size=2)
    write_jsonl([{"messages": r["messages"]} for r in rows], "ultrachat.jsonl")


def ultrafeedback():
    rows = []
    for i, (question, good, worse) in enumerate([
            ("Name a prime.", "7", "8"), ("Capital of France?", "Paris.", "Lyon."),
            ("2 * 3?", "6", "5")]):
        rows.append({"prompt": question, "prompt_id": f"u{i}",
                     "chosen": conversation(("user", question), ("assistant", good)),
                     "rejected": conversation(("user", question), ("assistant", worse)),
                     "score_chosen": 9.0, "score_rejected": 3.5})
    schema = pa.schema([("prompt", pa.string()), ("prompt_id", pa.string()),
                        ("chosen", pa.list_(MESSAGE)), ("rejected", pa.list_(MESSAGE)),
                        ("score_chosen", pa.float64()), ("score_rejected", pa.float64())])
    write(pa.Table.from_pylist(rows, schema=schema), "ultrafeedback.parquet", row_group_size=1)
    write_jsonl([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows],
                "ultrafeedback.jsonl")


def types():
    schema = pa.schema([
        ("i8", pa.int8()), ("u64", pa.uint64()), ("i64", pa.int64()), ("f32", pa.float32()),
        ("f64", pa.float64()), ("flag", pa.bool_()), ("text", pa.string()),
        ("large", pa.large_string()), ("nothing", pa.null()),
        ("nested", pa.list_(pa.struct([("name", pa.string()), ("ids", pa.list_(pa.int32()))]))),
        ("fixed", pa.list_(pa.int16(), 2)), ("mapping", pa.map_(pa.string(), pa.int64())),
        ("category", pa.dictionary(pa.int8(), pa.string())),
    ])
    rows = [
        {"i8": -128, "u64": 2**64 - 1, "i64": -(2**63), "f32": 0.5, "f64": 1e300, "flag": True,
         "text": "h\u00e9llo \U0001f600", "large": "x" * 10, "nothing": None,
         "nested": [{"name": "a", "ids": [1, 2]}, {"name": None, "ids": []}], "fixed": [1, -1],
         "mapping": [("k", 1), ("\u00e9", 2)], "category": "red"},
        {"i8": None, "u64": 0, "i64": 7, "f32": -2.25, "f64": -0.0, "flag": False, "text": "",
         "large": None, "nothing": None, "nested": None, "fixed": None, "mapping": [],
         "category": "blue"},
        {"i8": 1, "u64": 1, "i64": 1, "f32": None, "f64": 3.0, "flag": None, "text": None,
         "large": "", "nothing": None, "nested": [], "fixed": [0, 0], "mapping": None,
         "category": "red"},
    ]
    table = pa.Table.from_pylist(rows, schema=schema)
    write(table, "types.parquet", row_group_size=2, compression="snappy", use_dictionary=True)

    def jsonable(value):
        if isinstance(value, list) and value and isinstance(value[0], tuple):
            return {k: v for k, v in value}  # a map: string keys
        if isinstance(value, list):
            return [jsonable(v) for v in value]
        if isinstance(value, dict):
            return {k: jsonable(v) for k, v in value.items()}
        return value

    expected = [{k: jsonable(v) for k, v in row.items()} for row in table.to_pylist()]
    # An empty map reads back from pyarrow as [], which tandem (and JSON) holds as {}.
    for row in expected:
        if row["mapping"] == []:
            row["mapping"] = {}
    with open(f"{ROOT}/types.json", "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {ROOT}/types.json")


def bad_values():
    good = conversation(("user", "Q"), ("assistant", "A"))
    schema = pa.schema([("messages", pa.list_(MESSAGE)), ("score", pa.float64()),
                        ("blob", pa.binary()), ("ids", pa.map_(pa.int32(), pa.string()))])
    rows = [
        {"messages": good, "score": 1.0, "blob": None, "ids": None},
        {"messages": good, "score": float("nan"), "blob": None, "ids": None},
        {"messages": good, "score": 2.0, "blob": b"\x00\xff", "ids": None},
        {"messages": good, "score": 3.0, "blob": None, "ids": [(1, "one")]},
        {"messages": good, "score": 4.0, "blob": None, "ids": None},
    ]
    write(pa.Table.from_pylist(rows, schema=schema), "bad_values.parquet", row_group_size=5)


def main():
    os.makedirs(ROOT, exist_ok=True)
    ultrachat()
    ultrafeedback()
    types()
    bad_values()


if __name__ == "__main__":
    sys.exit(main())
