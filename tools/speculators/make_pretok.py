"""Chat conversations -> speculators' pre-tokenized rows {input_ids, loss_mask}: one row per
assistant turn, rendered with the tokenizer's chat template, loss from the generation-prompt
boundary to the end of the turn (its <|eot_id|> included), cut at 256 tokens. This is the token
layout tandem's llama3 template gives the same conversation (checked on the first rows).

--shift-loss-mask writes loss_mask[1:] + [0]: speculators' EAGLE-3 trainer counts the
prediction of token t+1 by loss_mask[t] (the mask of the token it reads), while tandem and
speculators' DFlash count it by loss_mask[t+1]; shifted rows make EAGLE-3 train on the same
predictions as tandem (every answer token and the closing <|eot_id|>).

--next-trained-mask writes loss_mask[t] * loss_mask[t+1]: speculators' DSpark trainer (with
--sample-from-anchor) draws anchors where loss_mask is 1 and counts slot k of anchor a, which
predicts token a+k+1, by loss_mask[a+k]. With these rows an anchor is an answer token followed
by an answer token and slot k counts while token a+k+1 is in the answer: tandem's DSpark rule
(its anchors are trained positions followed by a trained token; a block is supervised on its
answer prefix).

Usage: make_pretok.py IN.jsonl OUT.jsonl [--tokenizer DIR (default data/demo/tokenizer)]
                      [--shift-loss-mask | --next-trained-mask]"""
import argparse
import json

from transformers import AutoTokenizer

parser = argparse.ArgumentParser(usage=__doc__)
parser.add_argument("input")
parser.add_argument("output")
parser.add_argument("--tokenizer", default="data/demo/tokenizer")
shift = parser.add_mutually_exclusive_group()
shift.add_argument("--shift-loss-mask", action="store_true")
shift.add_argument("--next-trained-mask", action="store_true")
args = parser.parse_args()
tok = AutoTokenizer.from_pretrained(args.tokenizer)


def ids_of(rendered):
    return rendered["input_ids"] if hasattr(rendered, "keys") else rendered


with open(args.output, "w") as out:
    for line in open(args.input):
        conv = json.loads(line)["conversations"]
        for j, turn in enumerate(conv):
            if turn["role"] != "assistant":
                continue
            prompt = ids_of(tok.apply_chat_template(conv[:j], add_generation_prompt=True,
                                                    tokenize=True, return_dict=False))
            full = ids_of(tok.apply_chat_template(conv[:j + 1], tokenize=True, return_dict=False))
            assert full[:len(prompt)] == prompt, "the template must extend the prompt"
            full = full[:256]
            mask = ([0] * len(prompt) + [1] * (len(full) - len(prompt)))[:len(full)]
            if args.shift_loss_mask:
                mask = mask[1:] + [0]
            if args.next_trained_mask:
                mask = [a * b for a, b in zip(mask, mask[1:] + [0])]
            out.write(json.dumps({"input_ids": full, "loss_mask": mask}) + "\n")
