#!/usr/bin/env python3
"""Load a causal LM exported by tandem with transformers and record its logits.

Proves the export format (config.json + safetensors names) is what transformers expects: the
C++ test `ExportParity` runs `tandem forward` on the same directory and compares with the
logits written here.

    .venv-tools/bin/python tools/check_export_in_transformers.py EXPORT_DIR [--ids 1,2,3;4,5,6]

Writes EXPORT_DIR/transformers_logits.safetensors with `input_ids` (I64 [B, T]) and `logits`
(F32 [B, T, V]), and prints the max |logit| so a flat model is noticed.
"""
import argparse
import os

import torch
import transformers
from safetensors.torch import save_file

torch.set_num_threads(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("export_dir")
    parser.add_argument("--ids", default="1,5,9,13,17,21,25,29;3,1,4,1,5,9,2,6")
    args = parser.parse_args()
    rows = [[int(x) for x in row.split(",")] for row in args.ids.split(";")]
    ids = torch.tensor(rows, dtype=torch.long)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.export_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().contiguous()
    out = os.path.join(args.export_dir, "transformers_logits.safetensors")
    save_file({"input_ids": ids.contiguous(), "logits": logits}, out,
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "tool": "tools/check_export_in_transformers.py"})
    print(f"{type(model).__name__} loaded from {args.export_dir}; logits {tuple(logits.shape)}, "
          f"max |logit| {logits.abs().max().item():.3f}, std {logits.std().item():.3f}; wrote {out}")


if __name__ == "__main__":
    main()
