#!/usr/bin/env python3
"""Expected outputs of one Gated DeltaNet layer from transformers' own Qwen3.5 module.

Builds transformers 5.23's Qwen3_5GatedDeltaNet (models/qwen3_5/modeling_qwen3_5.py) from a tiny
Qwen3_5TextConfig (hidden 32, 2 key heads serving 4 value heads, K 8, V 6, conv kernel 4), with
random weights (A_log, dt_bias and the gated norm's weight drawn too), and writes its weights
under their checkpoint names (conv1d.weight, in_proj_qkv.weight, ...), an input of two rows of
23 tokens and the layer's output to tests/fixtures/gated_delta/layer.safetensors, which
tests/test_gated_delta_rule.cpp compares src/tandem/models/gated_deltanet.cpp with. Row 0 packs
two documents (tokens 0..8 and 9..22): transformers' layer runs on each document alone (its
chunked kernel does not separate packed documents) and the outputs are laid back in place.

Deterministic (seeded CPU fp32). From the repository root, in the tools env:
    .venv-tools/bin/python tools/make_gated_deltanet_fixtures.py
"""

import os
import sys

import torch
from transformers.models.qwen3_5 import configuration_qwen3_5, modeling_qwen3_5

sys.path.insert(0, os.path.dirname(__file__))
from fixture_safetensors import write_safetensors  # noqa: E402

OUT = "tests/fixtures/gated_delta/layer.safetensors"


def main():
    torch.manual_seed(36)
    config = configuration_qwen3_5.Qwen3_5TextConfig(
        hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=4, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
        vocab_size=100)
    layer = modeling_qwen3_5.Qwen3_5GatedDeltaNet(config, layer_idx=0).eval()
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            if name == "A_log":
                parameter.copy_(torch.log(torch.empty_like(parameter).uniform_(0.5, 4)))
            elif name == "dt_bias" or name == "norm.weight":
                parameter.copy_(1 + 0.3 * torch.randn_like(parameter))
            else:
                parameter.copy_(0.3 * torch.randn_like(parameter))
        x = torch.randn(2, 23, 32)
        bounds = [[0, 9, 23], [0, 23]]
        out = torch.zeros_like(x)
        for row, row_bounds in enumerate(bounds):
            for begin, end in zip(row_bounds, row_bounds[1:]):
                out[row, begin:end] = layer(x[row:row + 1, begin:end])[0]
    tensors = {f"weight.{name}": p.detach().clone() for name, p in layer.named_parameters()}
    tensors.update({"input": x, "output": out})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    write_safetensors(OUT, tensors, {"generator": "tools/make_gated_deltanet_fixtures.py",
                                     "transformers": __import__("transformers").__version__,
                                     "rms_norm_eps": str(config.rms_norm_eps)})
    print(f"wrote {OUT}: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in sorted(tensors.items())))


if __name__ == "__main__":
    main()
