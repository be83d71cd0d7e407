#!/usr/bin/env python3
"""Preference pairs for the DPO demo, derived from the demo conversations (standard library only).

Each conversation of data/demo/chat.jsonl asks to continue the opening of
an Austen passage; its assistant turn is the passage's true continuation. A pair keeps that
prompt, takes the true continuation as "chosen", and as "rejected" the same continuation with the
words of every sentence shuffled (seeded): the same tokens, in an order that is not English. A
preference a small model can learn and carry over to pairs it has not seen, so the demo shows
DPO's margin and accuracy rising on fresh pairs (the true continuation against another
passage's is too subtle for the demo target to generalise in a few dozen steps).

Writes data/demo/preference.jsonl (from the first N_TRAIN conversations), one {"id", "prompt",
"chosen", "rejected"} line each: prompt is a message list, chosen/rejected strings.
Deterministic.
Run from the repository root:  python3 tools/make_demo_preferences.py
"""

import json
import random
import re

N_TRAIN = 512
SEED = 8


def shuffled_sentences(text, rng):
    out = []
    for sentence in re.split(r"(?<=[.!?;])\s+", text):
        words = sentence.split(" ")
        rng.shuffle(words)
        out.append(" ".join(words))
    return " ".join(out)


def pairs(conversations, rng):
    out = []
    for row in conversations:
        turns = row["conversations"]
        chosen = turns[-1]["content"]
        rejected = shuffled_sentences(chosen, rng)
        if rejected == chosen:
            continue
        out.append({"id": row["id"], "prompt": turns[:-1], "chosen": chosen, "rejected": rejected})
    return out


def main():
    rng = random.Random(SEED)
    for source, target, limit in (("data/demo/chat.jsonl", "data/demo/preference.jsonl", N_TRAIN),):
        with open(source) as f:
            rows = [json.loads(line) for line in f][:limit]
        made = pairs(rows, rng)
        with open(target, "w") as out:
            for pair in made:
                out.write(json.dumps(pair, ensure_ascii=False) + "\n")
        print(f"{target}: {len(made)} pairs")


if __name__ == "__main__":
    main()
