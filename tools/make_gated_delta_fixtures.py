#!/usr/bin/env python3
"""Expected outputs of the gated delta rule from transformers' own implementation.

transformers 5.23's Qwen3.5 model (models/qwen3_5/modeling_qwen3_5.py) computes its linear
attention with torch_chunk_gated_delta_rule (prefill) and torch_recurrent_gated_delta_rule
(decoding). This generator draws small random inputs, runs both functions, and writes inputs and
outputs to tests/fixtures/gated_delta/cases.safetensors, which tests/test_gated_delta_rule.cpp
compares tandem's chunked and recurrent kernels (src/tandem/models/gated_delta_rule.cpp) with:

  packed_*   two rows of 37 tokens, 2 key heads serving 4 value heads (K 8, V 6); row 0 packs two
             documents (tokens 0..9 and 10..36), row 1 one. Expected: each document run alone
             through torch_chunk_gated_delta_rule (chunk 16), laid back in place; the final state
             of each row's last document.
  state_*    one row of 21 tokens from a random initial state (a decoding continuation); the
             chunked function's output and final state, and the recurrent one's.

Deterministic (seeded CPU fp32). From the repository root, in the tools env:
    .venv-tools/bin/python tools/make_gated_delta_fixtures.py
"""

import os
import sys

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen35

sys.path.insert(0, os.path.dirname(__file__))
from fixture_safetensors import write_safetensors  # noqa: E402

OUT = "tests/fixtures/gated_delta/cases.safetensors"


def inputs(generator, batch, length, key_heads, value_heads, k_dim, v_dim):
    q = torch.randn(batch, length, key_heads, k_dim, generator=generator)
    k = torch.randn(batch, length, key_heads, k_dim, generator=generator)
    v = torch.randn(batch, length, value_heads, v_dim, generator=generator)
    # As the layer makes them: g = -exp(A_log) * softplus(a + dt_bias) <= 0, beta = sigmoid(b).
    g = -torch.rand(batch, length, value_heads, generator=generator) * 1.5
    beta = torch.sigmoid(torch.randn(batch, length, value_heads, generator=generator))
    return q, k, v, g, beta


def chunked(q, k, v, g, beta, state=None):
    return qwen35.torch_chunk_gated_delta_rule(
        q, k, v, g, beta, chunk_size=16, initial_state=state, output_final_state=True,
        use_qk_l2norm_in_kernel=True)


def main():
    generator = torch.Generator().manual_seed(35)
    tensors = {}

    q, k, v, g, beta = inputs(generator, 2, 37, 2, 4, 8, 6)
    bounds = [[0, 10, 37], [0, 37]]
    out = torch.zeros_like(v)
    final = torch.zeros(2, 4, 8, 6)
    for row, row_bounds in enumerate(bounds):
        for begin, end in zip(row_bounds, row_bounds[1:]):
            part = [x[row:row + 1, begin:end] for x in (q, k, v, g, beta)]
            o, s = chunked(*part)
            out[row, begin:end] = o[0]
            final[row] = s[0]
    tensors.update({"packed_q": q, "packed_k": k, "packed_v": v, "packed_g": g,
                    "packed_beta": beta, "packed_out": out, "packed_final_state": final})

    q, k, v, g, beta = inputs(generator, 1, 21, 2, 4, 8, 6)
    state = torch.randn(1, 4, 8, 6, generator=generator) * 0.5
    o, s = chunked(q, k, v, g, beta, state.clone())
    o_rec, s_rec = qwen35.torch_recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=state.clone(), output_final_state=True,
        use_qk_l2norm_in_kernel=True)
    tensors.update({"state_q": q, "state_k": k, "state_v": v, "state_g": g, "state_beta": beta,
                    "state_initial": state, "state_out": o, "state_final_state": s,
                    "state_recurrent_out": o_rec, "state_recurrent_final_state": s_rec})

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    write_safetensors(OUT, {name: t.contiguous() for name, t in tensors.items()},
                      {"generator": "tools/make_gated_delta_fixtures.py",
                       "transformers": __import__("transformers").__version__})
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
