#!/usr/bin/env python3
"""How good a demo target is, measured with transformers (independent of tandem's code).

    .venv-tools/bin/python tools/demo_target_quality.py TARGET_DIR [TARGET_DIR ...] [--json OUT]

For each HF checkpoint directory (config.json, model.safetensors, tokenizer files):
  * held-out text: mean next-token loss (nats) and perplexity over data/demo/heldout.jsonl
    (documents never trained on), each document tokenized with BOS and cut into windows of 256
    tokens (the demo's training length), every window scored on its own;
  * held-out chat answers: mean loss of the assistant tokens and the closing <|eot_id|> of the 64
    conversations of data/demo/chat_heldout.jsonl through the tokenizer's chat template (their
    original Austen continuations);
  * greedy answers to those 64 prompts (up to 128 new tokens, as the demo regenerates): how many
    end their turn (<|eot_id|> or <|end_of_text|>), mean answer length, distinct 4-grams per
    answer (repetition shows as a low ratio), and the first 3 answers in full.
Runs in fp32 on the CPU; prints a table and writes the figures as JSON with --json.
"""
import argparse
import json
import math
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WINDOW = 256
MAX_NEW_TOKENS = 128


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@torch.no_grad()
def heldout_text_loss(model, tokenizer, documents):
    total, count = 0.0, 0
    for document in documents:
        ids = tokenizer(document["text"], add_special_tokens=True)["input_ids"]
        for start in range(0, len(ids) - 1, WINDOW):
            window = torch.tensor([ids[start:start + WINDOW]])
            if window.shape[1] < 2:
                continue
            logits = model(window).logits[0, :-1].float()
            loss = torch.nn.functional.cross_entropy(logits, window[0, 1:], reduction="sum")
            total += loss.item()
            count += window.shape[1] - 1
    return total / count, count


@torch.no_grad()
def heldout_answer_loss(model, tokenizer, conversations):
    total, count = 0.0, 0
    for conversation in conversations:
        turns = conversation["conversations"]
        prompt = tokenizer.apply_chat_template(turns[:-1], add_generation_prompt=True,
                                               tokenize=False)
        full = tokenizer.apply_chat_template(turns, tokenize=False)
        assert full.startswith(prompt), "the chat template must extend the prompt"
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
        targets = torch.tensor(ids[1:])
        losses = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        answer = losses[len(prompt_ids) - 1:]  # the answer tokens and the closing <|eot_id|>
        total += answer.sum().item()
        count += answer.numel()
    return total / count, count


@torch.no_grad()
def greedy_answers(model, tokenizer, conversations):
    stop_ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|end_of_text|>")]
    answers = []
    for conversation in conversations:
        prompt = tokenizer.apply_chat_template(conversation["conversations"][:-1],
                                               add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        out = model.generate(ids, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                             eos_token_id=stop_ids, pad_token_id=stop_ids[1])
        new = out[0, ids.shape[1]:].tolist()
        ended = bool(new) and new[-1] in stop_ids
        if ended:
            new = new[:-1]
        grams = [tuple(new[i:i + 4]) for i in range(len(new) - 3)]
        answers.append({"ended": ended, "tokens": len(new),
                        "distinct_4grams": len(set(grams)) / len(grams) if grams else 1.0,
                        "text": tokenizer.decode(new)})
    return answers


def measure(target_dir):
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    text_loss, text_tokens = heldout_text_loss(
        model, tokenizer, read_jsonl(os.path.join(ROOT, "data/demo/heldout.jsonl")))
    chats = read_jsonl(os.path.join(ROOT, "data/demo/chat_heldout.jsonl"))
    answer_loss, answer_tokens = heldout_answer_loss(model, tokenizer, chats)
    answers = greedy_answers(model, tokenizer, chats)
    return {
        "target": target_dir,
        "heldout_text_loss": text_loss, "heldout_text_perplexity": math.exp(text_loss),
        "heldout_text_tokens": text_tokens,
        "heldout_answer_loss": answer_loss, "heldout_answer_perplexity": math.exp(answer_loss),
        "heldout_answer_tokens": answer_tokens,
        "greedy_answers_ended": sum(a["ended"] for a in answers),
        "greedy_answers": len(answers),
        "greedy_mean_tokens": sum(a["tokens"] for a in answers) / len(answers),
        "greedy_mean_distinct_4grams": sum(a["distinct_4grams"] for a in answers) / len(answers),
        "samples": [{"prompt": c["conversations"][0]["content"], **a}
                    for c, a in zip(chats[:3], answers[:3])],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="HF checkpoint directories")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("TANDEM_THREADS", os.cpu_count() or 1)))
    results = [measure(t) for t in args.targets]
    for r in results:
        print(f"\n== {r['target']}")
        print(f"  held-out text:    loss {r['heldout_text_loss']:.3f} nats, perplexity "
              f"{r['heldout_text_perplexity']:.1f} ({r['heldout_text_tokens']} tokens)")
        print(f"  held-out answers: loss {r['heldout_answer_loss']:.3f} nats, perplexity "
              f"{r['heldout_answer_perplexity']:.1f} ({r['heldout_answer_tokens']} tokens)")
        print(f"  greedy answers:   {r['greedy_answers_ended']}/{r['greedy_answers']} end their "
              f"turn within {MAX_NEW_TOKENS} tokens, mean {r['greedy_mean_tokens']:.1f} tokens, "
              f"distinct 4-grams {r['greedy_mean_distinct_4grams']:.2f}")
        for s in r["samples"]:
            print(f"  --- prompt: {s['prompt'][:160]!r}")
            print(f"      answer ({s['tokens']} tokens, {'ended' if s['ended'] else 'cut'}): "
                  f"{s['text']!r}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
