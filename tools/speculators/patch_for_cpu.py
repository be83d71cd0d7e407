#!/usr/bin/env python3
"""Copy an installed speculators 0.9.0 package and make its trainer run on the CPU.

    patch_for_cpu.py OUT_DIR [--adam-beta2 B] [--fp32-checkpoints]
    # then: PYTHONPATH=OUT_DIR python -m speculators train ...

speculators' Trainer (speculators/train/trainer.py) assumes an accelerator: it moves the model
and every batch to `self.local_rank` (a CUDA device index), picks the autocast device type from
`torch.accelerator.current_accelerator()` (which names cuda even when none is usable), and
synchronises the accelerator in its step timer. Three edits, each checked to apply exactly as
many times as expected, so a different speculators version fails here instead of misbehaving:
  1. `.to(self.local_rank` -> `.to("cpu"` (model set-up with and without DDP, train and val
     batches: 4 places);
  2. the autocast device type is "cpu" unless an accelerator is available;
  3. the timer's `torch.accelerator.synchronize()` runs only when an accelerator is available.
Two optional edits for a like-for-like comparison with tandem's demo recipe (none of them is
a speculators option):
  --adam-beta2 B      AdamW's beta2 (speculators leaves torch's default 0.999; tandem's demo
                      configs use 0.95): betas=(0.9, B) in both AdamW constructions;
  --fp32-checkpoints  checkpoints keep the float32 weights (speculators casts them to bf16 on
                      save, which would round the trained draft before it is evaluated).
The installed package is not modified.
"""
import argparse
import importlib.util
import os
import re
import shutil
import sys


def edit(text, pattern, replacement, expected, what):
    new, count = re.subn(pattern, replacement, text)
    if count != expected:
        sys.exit(f"patch_for_cpu.py: {what}: expected {expected} matches, found {count} "
                 "(is this speculators 0.9.0?)")
    return new


def main():
    parser = argparse.ArgumentParser(usage=__doc__)
    parser.add_argument("out_dir")
    parser.add_argument("--adam-beta2", type=float)
    parser.add_argument("--fp32-checkpoints", action="store_true")
    args = parser.parse_args()
    spec = importlib.util.find_spec("speculators")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("patch_for_cpu.py: speculators is not installed in this Python")
    source = spec.submodule_search_locations[0]
    out = os.path.join(args.out_dir, "speculators")
    if os.path.exists(out):
        shutil.rmtree(out)
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("__pycache__"))
    path = os.path.join(out, "train", "trainer.py")
    text = open(path).read()
    text = edit(text, r"\.to\(self\.local_rank", '.to("cpu"', 4, "device moves")
    text = edit(text, r"acc\.type if acc is not None else \"cuda\"",
                'acc.type if acc is not None and torch.accelerator.is_available() else "cpu"', 1,
                "autocast device type")
    text = edit(text, r"(\n\s*)torch\.accelerator\.synchronize\(\)",
                r"\1if torch.accelerator.is_available(): torch.accelerator.synchronize()", 2,
                "timer synchronisation")
    if args.fp32_checkpoints:
        text = edit(text, r"save_checkpoint\(self\.model, self\.optimizers, epoch\)",
                    "save_checkpoint(self.model, self.optimizers, epoch, float_dtype=torch.float32)",
                    2, "checkpoint dtype")
    open(path, "w").write(text)
    if args.adam_beta2 is not None:
        path = os.path.join(out, "train", "optimizers.py")
        text = open(path).read()
        text = edit(text, r"lr=config\.lr,", f"lr=config.lr, betas=(0.9, {args.adam_beta2}),", 2,
                    "AdamW betas")
        open(path, "w").write(text)
    print(f"patched copy of {source} in {out}")


if __name__ == "__main__":
    main()
