"""Chat conversations -> speculators' pre-tokenized rows {input_ids, loss_mask}: one row per
assistant turn, rendered with the tokenizer's chat template, loss from the generation-prompt
boundary to the end of the turn, cut at 256 tokens.
Usage: make_pretok.py IN.jsonl OUT.jsonl [TOKENIZER_DIR (default data/demo/tokenizer)]"""
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[3] if len(sys.argv) > 3 else "data/demo/tokenizer")
out = open(sys.argv[2], "w")
for line in open(sys.argv[1]):
    conv = json.loads(line)["conversations"]
    for j, turn in enumerate(conv):
        if turn["role"] != "assistant":
            continue
        prompt = tok.apply_chat_template(conv[:j], add_generation_prompt=True, tokenize=True, return_dict=False)
        full = tok.apply_chat_template(conv[:j+1], tokenize=True, return_dict=False)
        if hasattr(prompt, "input_ids"): prompt, full = prompt["input_ids"], full["input_ids"]
        assert full[:len(prompt)] == prompt
        full = full[:256]
        mask = [0]*len(prompt) + [1]*(len(full)-len(prompt))
        out.write(json.dumps({"input_ids": full, "loss_mask": mask[:len(full)]}) + "\n")
