#!/usr/bin/env python3
"""Write the demo's chat conversations in the two shapes hub datasets ship most.

From data/demo/chat.jsonl (tools/make_demo_data.py), deterministic, under data/demo/hub/:
  sharegpt.json    conversations 0..767 as ShareGPT downloads them: one JSON array (not JSONL)
                   of {"id", "conversations": [{"from": "human"|"gpt", "value": ...}]}
  messages.parquet conversations 768..1023 as UltraChat's Parquet files hold them: columns
                   prompt, prompt_id and messages (list<struct<content, role>>), 64 rows per row
                   group
configs/demo-eagle3-hub.yaml trains from both with a held-out split. Needs only pyarrow
(scripts/setup.sh's Parquet env). From the repository root:
    .venv-parquet/bin/python tools/make_demo_hub_data.py
"""

import hashlib
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

SOURCE = "data/demo/chat.jsonl"
OUT = "data/demo/hub"
SHAREGPT = range(0, 768)
PARQUET = range(768, 1024)
SHAREGPT_ROLE = {"user": "human", "assistant": "gpt", "system": "system"}
MESSAGE = pa.struct([("content", pa.string()), ("role", pa.string())])


def main():
    with open(SOURCE, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    os.makedirs(OUT, exist_ok=True)

    sharegpt = [{"id": records[i]["id"],
                 "conversations": [{"from": SHAREGPT_ROLE[m["role"]], "value": m["content"]}
                                   for m in records[i]["conversations"]]}
                for i in SHAREGPT]
    with open(f"{OUT}/sharegpt.json", "w", encoding="utf-8") as f:
        json.dump(sharegpt, f, ensure_ascii=False, indent=1)
        f.write("\n")

    rows = []
    for i in PARQUET:
        messages = [{"content": m["content"], "role": m["role"]} for m in records[i]["conversations"]]
        prompt = messages[0]["content"]
        rows.append({"prompt": prompt, "prompt_id": hashlib.sha256(prompt.encode()).hexdigest(),
                     "messages": messages})
    schema = pa.schema([("prompt", pa.string()), ("prompt_id", pa.string()),
                        ("messages", pa.list_(MESSAGE))])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), f"{OUT}/messages.parquet",
                   row_group_size=64, compression="snappy")
    for name in ("sharegpt.json", "messages.parquet"):
        print(f"wrote {OUT}/{name} ({os.path.getsize(f'{OUT}/{name}')} bytes)")


if __name__ == "__main__":
    main()
