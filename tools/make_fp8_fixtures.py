#!/usr/bin/env python3
"""Generate a tiny block-wise FP8 checkpoint (DeepSeek-V3 / Kimi-K2 / MiniMax-M2 / Qwen3-FP8 layout).

Input: the fp32 fixture tests/fixtures/models/minimax_m2 (written by make_model_fixtures.py:
MiniMaxM2ForCausalLM, H 64, 4 layers, 8 experts of intermediate 32, top-3 sigmoid routing).
Output: tests/fixtures/models/minimax_m2_fp8/ (same weights, FP8-quantized):

  config.json              the base's config.json plus
                             "quantization_config": {"quant_method": "fp8", "fmt": "e4m3",
                               "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                               "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"]}
                           (block 32 instead of the released 128 so the 64-wide tensors have several
                           blocks. transformers 5.23 ignores "fmt" and also reads the skip-list under the
                           alias "ignored_layers" (FineGrainedFP8Config: "MiniMax ships the skip-list under
                           ignored_layers"); an explicit list replaces its default skips, so it must name
                           lm_head. The router gate is a MiniMaxM2TopKRouter, not an nn.Linear, and the
                           bias a buffer: transformers would not convert them anyway; a loader should
                           decide "quantized" by the presence of X.weight_scale_inv, not by this list)
  generation_config.json   copied from the base
  model.safetensors        every tensor of the base, under the base's names;
                           quantized (F8_E4M3, torch.float8_e4m3fn), each X.weight [out, in] with
                           X.weight_scale_inv F32 [ceil(out/32), ceil(in/32)] next to it:
                             model.layers.N.self_attn.{q,k,v,o}_proj.weight
                             model.layers.N.block_sparse_moe.experts.J.{w1,w2,w3}.weight
                           unquantized, F32 as in the base (released checkpoints keep them bf16):
                             model.embed_tokens.weight, lm_head.weight, all *norm.weight,
                             block_sparse_moe.gate.weight (router), block_sparse_moe.e_score_correction_bias
  dequantized.safetensors  F32, for every quantized X.weight, the dequantized weight under the same name:
                             W[i, j] = float32(q[i, j]) * weight_scale_inv[i // 32, j // 32]
                           (one float32 multiply; the last block of a row / column may be partial)
  reference.safetensors    input_ids I64 [2, 16] (the base reference's), logits F32 [2, 16, 512] and
                           router_logits.{i} F32 [32, 8]: transformers' eager fp32 forward of the
                           dequantized model (no attention mask, positions 0..15, use_cache=False,
                           experts_implementation grouped_mm); __metadata__ says how it was obtained,
                           how far it is from the base's fp32 logits, how many routing choices FP8
                           changed, and the smallest top-3 routing margin of this forward
  odd_blocks.safetensors   a standalone tensor whose dims are NOT multiples of the block (none of the
                           model's are: q [128,64], k/v [64,64], o [64,128], w1/w3 [32,64], w2 [64,32]):
                             odd.weight F8_E4M3 [40, 72], odd.weight_scale_inv F32 [2, 3],
                             odd.dequantized F32 [40, 72] (the formula above), odd.original F32 [40, 72]
                           block size [32, 32] (in its metadata); the edge blocks are 8 rows / 8 columns;
                           block (1, 1) is all zero (scale 1.0); the blocks' magnitudes differ by powers
                           of 2 so a wrong block index gives a wrong value

Quantizer (written here, independently of transformers' Fp8Quantize): per block of 32 x 32 (partial at
the edges), amax = max |W| over the block, scale = amax / 448 (448 = the largest finite e4m3fn) in
float32, or 1.0 for an all-zero block; q = clamp(W / scale, -448, 448).to(torch.float8_e4m3fn)
(round to nearest even); weight_scale_inv = scale. The name is DeepSeek's: it is the inverse of the
quantization scale, i.e. what the stored value is multiplied by.

The reference is obtained by loading this dir with transformers' own FP8 support
(FineGrainedFP8Config(dequantize=True), CPU, dtype float32) and asserting that every loaded weight
equals dequantized.safetensors bit for bit (experts after transformers' merge into gate_up_proj /
down_proj) and every unquantized one equals the base. The FP8 quantizer refuses to start without the
accelerate package, which tools/requirements.lock does not install and the dequantize path does not
use: if it is missing its availability check is patched to True for that load (metadata:
accelerate_check; checked once with accelerate 1.15.0 installed instead: the same tensors, bit for
bit). The logits are cross-checked against the same forward of MiniMaxM2ForCausalLM
loaded from a plain fp32 copy of dequantized.safetensors (must be bit-identical).

Transformers 5.23 facts this layout was checked against (integrations/finegrained_fp8.py,
quantizers/quantizer_finegrained_fp8.py), also asserted on odd_blocks (odd_blocks metadata):
  - FP8Linear allocates weight_scale_inv [ceil(out/B0), ceil(in/B1)] (ceil division), as does
    FP8Experts (_alloc_expert_proj, _cdiv); _dequantize_fp8_weight (backward) repeats each scale
    over B0 rows / B1 columns and truncates: partial edge blocks, same as here.
  - Fp8Dequantize._dequantize_one (the dequantize=True load path) derives the block from the shapes
    (rows // scale_rows, cols // scale_cols): for [40, 72] with a [2, 3] grid it uses 20 x 24 blocks,
    which is wrong (and it raises when the division is not exact). Fine for the model (all dims are
    multiples of 32), not for odd_blocks: a loader must take the block from weight_block_size.
  - Fp8Quantize (save side) leaves a tensor whose dims are not multiples of the block unquantized.

Deterministic: fixed seeds, CPU, single thread, sorted tensor names, sorted metadata, no time
stamps; running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_fp8_fixtures.py [--base tests/fixtures/models/minimax_m2]
                                                      [--out tests/fixtures/models/minimax_m2_fp8]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_safetensors import file_sha256, read_safetensors, same_bits, write_safetensors  # noqa: E402

torch.set_num_threads(1)

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn (S.1111.110 = 1.75 * 2^8)
BLOCK = (32, 32)
QUANTIZATION_CONFIG = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": list(BLOCK),
    "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
}
QUANTIZED_SUFFIXES = (
    ".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
    ".self_attn.o_proj.weight", ".w1.weight", ".w2.weight", ".w3.weight",
)
ODD_SHAPE = (40, 72)
ODD_SEED = 8301
EXPERTS_IMPL = "grouped_mm"


# ------------------------------------------------------------------------------------------
# block-wise FP8 quantizer / dequantizer (independent of transformers)
# ------------------------------------------------------------------------------------------
def ceil_div(a, b):
    return -(-a // b)


def quantize_blockwise(w, block=BLOCK):
    """w [out, in] float -> (q [out, in] float8_e4m3fn, weight_scale_inv [ceil(out/B0), ceil(in/B1)] F32)."""
    assert w.dim() == 2
    w = w.to(torch.float32)
    rows, cols = w.shape
    b0, b1 = block
    q = torch.empty(rows, cols, dtype=FP8)
    s = torch.empty(ceil_div(rows, b0), ceil_div(cols, b1), dtype=torch.float32)
    for bi in range(s.shape[0]):
        for bj in range(s.shape[1]):
            r, c = slice(bi * b0, (bi + 1) * b0), slice(bj * b1, (bj + 1) * b1)
            blk = w[r, c]
            amax = blk.abs().max()
            scale = amax / FP8_MAX if amax > 0 else torch.tensor(1.0, dtype=torch.float32)
            q[r, c] = (blk / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
            s[bi, bj] = scale
    assert torch.isfinite(q.to(torch.float32)).all() and (s > 0).all()
    return q, s


def dequantize_blockwise(q, s, block=BLOCK):
    """W[i, j] = float32(q[i, j]) * s[i // B0, j // B1]; element by element over an expanded scale grid."""
    rows, cols = q.shape
    b0, b1 = block
    assert tuple(s.shape) == (ceil_div(rows, b0), ceil_div(cols, b1)), (q.shape, s.shape)
    ii = torch.arange(rows) // b0
    jj = torch.arange(cols) // b1
    full = s[ii[:, None], jj[None, :]]
    return q.to(torch.float32) * full


def check_error_bound(w, q, s, deq, block=BLOCK):
    """|W - deq| <= half an e4m3 ulp: 2^-4 relative for normals, scale * 2^-10 below 2^-6 * scale."""
    ii = torch.arange(w.shape[0]) // block[0]
    jj = torch.arange(w.shape[1]) // block[1]
    full = s[ii[:, None], jj[None, :]]
    bound = torch.maximum(w.abs() * 2.0 ** -4, full * 2.0 ** -10) * (1 + 1e-6)
    err = (w.to(torch.float32) - deq).abs()
    assert (err <= bound).all(), float((err - bound).max())
    return float(err.max())


def is_quantized_name(name):
    return name.endswith(QUANTIZED_SUFFIXES)


# ------------------------------------------------------------------------------------------
# transformers forward
# ------------------------------------------------------------------------------------------
@torch.no_grad()
def run_forward(model, input_ids):
    """(logits F32 [B, T, V], {layer: router logits [B*T, E]}, {layer: top-k index [B*T, k]})."""
    routed = {}
    handles = []
    for i, layer in enumerate(model.model.layers):
        def gate_hook(_mod, _inp, out, i=i):
            # MiniMaxM2TopKRouter returns (router_logits, top_k_weights, top_k_index)
            routed[i] = (out[0].detach().to(torch.float32).clone(), out[2].detach().clone())
        handles.append(layer.mlp.gate.register_forward_hook(gate_hook))
    try:
        out = model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    assert sorted(routed) == list(range(len(model.model.layers)))
    return (out.logits.detach().to(torch.float32).clone(), {i: routed[i][0] for i in routed},
            {i: routed[i][1] for i in routed})


def routing_margin(model, layer, router_logits, k):
    """Smallest gap between the k-th and (k+1)-th selection score (sigmoid + bias) over the tokens."""
    bias = model.model.layers[layer].mlp.e_score_correction_bias.detach().to(torch.float32)
    scores = torch.sigmoid(router_logits) + bias
    top = scores.topk(k + 1, dim=-1).values
    return float((top[:, k - 1] - top[:, k]).min())


def load_model(path, **kwargs):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation=EXPERTS_IMPL, **kwargs)
    model.eval()
    assert model.config._experts_implementation == EXPERTS_IMPL
    return model


def load_fp8_dequantized(path):
    """transformers' own FP8 loader with dequantize=True (CPU). Returns (model, accelerate_check)."""
    from transformers import FineGrainedFP8Config
    import transformers.quantizers.quantizer_finegrained_fp8 as qmod
    original = qmod.is_accelerate_available
    if original():
        check = "accelerate installed: transformers' checks ran unchanged"
    else:
        qmod.is_accelerate_available = lambda: True
        check = ("accelerate not installed: FineGrainedFP8HfQuantizer.validate_environment's "
                 "is_accelerate_available() patched to True for this load (the dequantize path returns "
                 "right after it and does not use accelerate)")
    try:
        qc = FineGrainedFP8Config(dequantize=True, weight_block_size=list(BLOCK),
                                  modules_to_not_convert=QUANTIZATION_CONFIG["modules_to_not_convert"])
        model = load_model(path, quantization_config=qc)
    finally:
        qmod.is_accelerate_available = original
    return model, check


def check_loaded_weights(model, deq, base_tensors, num_experts):
    """transformers' dequantized parameters == ours (bitwise); unquantized ones == the base."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    seen = set()
    for name, t in sd.items():
        assert t.dtype == torch.float32, (name, t.dtype)
        if name.endswith(".mlp.experts.gate_up_proj") or name.endswith(".mlp.experts.down_proj"):
            prefix = name.rsplit(".mlp.experts.", 1)[0] + ".block_sparse_moe.experts."
            for j in range(num_experts):
                if name.endswith("gate_up_proj"):
                    parts = [prefix + f"{j}.w1.weight", prefix + f"{j}.w3.weight"]
                    want = torch.cat([deq[p] for p in parts], dim=0)
                else:
                    parts = [prefix + f"{j}.w2.weight"]
                    want = deq[parts[0]]
                assert same_bits(t[j].contiguous(), want), (name, j)
                seen.update(parts)
            continue
        src = name.replace(".mlp.e_score_correction_bias", ".block_sparse_moe.e_score_correction_bias")
        src = src.replace(".mlp.gate.", ".block_sparse_moe.gate.")
        if src in deq:
            assert same_bits(t, deq[src]), name
        else:
            assert src in base_tensors, name
            assert same_bits(t, base_tensors[src]), name
        seen.add(src)
    missing = (set(deq) | set(base_tensors)) - seen
    assert not missing, sorted(missing)


# ------------------------------------------------------------------------------------------
# odd_blocks.safetensors
# ------------------------------------------------------------------------------------------
def make_odd_blocks(out_dir):
    rows, cols = ODD_SHAPE
    g = torch.Generator().manual_seed(ODD_SEED)
    w = torch.randn(rows, cols, generator=g, dtype=torch.float32)
    nb0, nb1 = ceil_div(rows, BLOCK[0]), ceil_div(cols, BLOCK[1])
    # per-block magnitudes 2^-6 .. 2^2 in a fixed pattern, block (1, 1) all zero
    for bi in range(nb0):
        for bj in range(nb1):
            r, c = slice(bi * BLOCK[0], (bi + 1) * BLOCK[0]), slice(bj * BLOCK[1], (bj + 1) * BLOCK[1])
            w[r, c] *= 2.0 ** (2 - 2 * (bi * nb1 + bj))
    w[BLOCK[0]:2 * BLOCK[0], BLOCK[1]:2 * BLOCK[1]] = 0.0
    q, s = quantize_blockwise(w)
    deq = dequantize_blockwise(q, s)
    max_err = check_error_bound(w, q, s, deq)
    assert tuple(s.shape) == (2, 3)
    assert float(s[1, 1]) == 1.0 and not deq[32:40, 32:64].any()
    assert len(set(s.flatten().tolist())) == s.numel(), "block scales should differ"

    # transformers 5.23's handling of partial edge blocks
    from transformers.integrations import finegrained_fp8 as tfp8
    notes = {}
    lin = tfp8.FP8Linear(cols, rows, block_size=BLOCK)
    assert tuple(lin.weight_scale_inv.shape) == tuple(s.shape) and lin.weight.dtype == FP8
    notes["FP8Linear"] = (f"FP8Linear(in {cols}, out {rows}, block_size {list(BLOCK)}) allocates "
                          f"weight_scale_inv {list(lin.weight_scale_inv.shape)} (ceil division)")
    bw = tfp8._dequantize_fp8_weight(q.clone(), s.clone(), list(BLOCK), torch.float32)
    assert same_bits(bw, deq)
    notes["_dequantize_fp8_weight"] = ("_dequantize_fp8_weight(q, s, block_size, float32) (FP8 backward) "
                                       "== odd.dequantized bit for bit")
    load = tfp8.Fp8Dequantize(None)._dequantize_one(q, s, output_dtype=torch.float32)
    diff = float((load - deq).abs().max())
    assert diff > 0
    notes["Fp8Dequantize"] = (f"Fp8Dequantize._dequantize_one (the dequantize=True load path) derives "
                              f"blocks of {rows // s.shape[0]} x {cols // s.shape[1]} from the shapes and "
                              f"differs from odd.dequantized by up to {diff:.6g}: do not derive the block "
                              f"from the shapes")
    passthrough = tfp8.Fp8Quantize(_FakeQuantizer())._quantize_one("odd.weight", w)
    assert list(passthrough) == ["odd.weight"] and passthrough["odd.weight"].dtype == torch.float32
    notes["Fp8Quantize"] = "Fp8Quantize._quantize_one leaves a [40, 72] tensor with block [32, 32] unquantized"

    tensors = {"odd.weight": q, "odd.weight_scale_inv": s, "odd.dequantized": deq, "odd.original": w}
    metadata = {
        "generator": "tools/make_fp8_fixtures.py",
        "weight_block_size": json.dumps(list(BLOCK)),
        "seed": str(ODD_SEED),
        "formula": ("odd.dequantized[i, j] = float32(odd.weight[i, j]) * odd.weight_scale_inv[i // 32, j // 32] "
                    "(one float32 multiply); scale grid [ceil(40/32), ceil(72/32)] = [2, 3]; edge blocks "
                    "rows 32..39 and columns 64..71; block (1, 1) all zero with scale 1.0"),
        "quantizer": "scale = amax(|block|) / 448 (1.0 if amax == 0); q = clamp(W / scale, -448, 448) -> e4m3fn",
        "max_abs_quantization_error": f"{max_err:.9g}",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "transformers_facts": json.dumps(notes, sort_keys=True),
    }
    write_safetensors(os.path.join(out_dir, "odd_blocks.safetensors"), tensors, metadata)
    return notes


class _FakeQuantizer:
    """The two attributes Fp8Quantize reads from its hf_quantizer."""
    class quantization_config:  # noqa: N801
        weight_block_size = list(BLOCK)
        scale_fmt = "float"


# ------------------------------------------------------------------------------------------
def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.relpath(os.path.join(here, ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--base", default=os.path.join(root, "tests", "fixtures", "models", "minimax_m2"),
                    help="the fp32 MiniMax-M2 fixture to quantize (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "models", "minimax_m2_fp8"),
                    help="output directory (default: %(default)s)")
    args = ap.parse_args()
    base, out_dir = os.path.normpath(args.base), os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)

    with open(os.path.join(base, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "minimax_m2" and "quantization_config" not in config
    base_tensors, _ = read_safetensors(os.path.join(base, "model.safetensors"))
    base_ref, _ = read_safetensors(os.path.join(base, "reference.safetensors"))
    input_ids = base_ref["input_ids"]

    # ---- quantize ----
    model_tensors, deq, rows = {}, {}, []
    max_err = 0.0
    for name in sorted(base_tensors):
        t = base_tensors[name]
        assert t.dtype == torch.float32, (name, t.dtype)
        if not is_quantized_name(name):
            model_tensors[name] = t
            continue
        q, s = quantize_blockwise(t)
        d = dequantize_blockwise(q, s)
        max_err = max(max_err, check_error_bound(t, q, s, d))
        model_tensors[name] = q
        model_tensors[name + "_scale_inv"] = s
        deq[name] = d
        rows.append(f"{name} {list(t.shape)} scale {list(s.shape)}")
    n_attn = sum(1 for k in deq if ".self_attn." in k)
    n_exp = sum(1 for k in deq if ".experts." in k)
    L, E = config["num_hidden_layers"], config["num_local_experts"]
    assert n_attn == 4 * L and n_exp == 3 * E * L, (n_attn, n_exp)
    odd_dims = [k for k in deq if any(d % b for d, b in zip(deq[k].shape, BLOCK))]
    assert not odd_dims  # hence odd_blocks.safetensors

    qconfig = dict(config)
    qconfig["quantization_config"] = QUANTIZATION_CONFIG
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(qconfig, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(os.path.join(base, "generation_config.json"), os.path.join(out_dir, "generation_config.json"))
    base_sha = file_sha256(os.path.join(base, "model.safetensors"))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), model_tensors, {"format": "pt"})
    write_safetensors(os.path.join(out_dir, "dequantized.safetensors"), deq, {
        "generator": "tools/make_fp8_fixtures.py",
        "formula": "W[i, j] = float32(q[i, j]) * weight_scale_inv[i // 32, j // 32] (one float32 multiply)",
        "weight_block_size": json.dumps(list(BLOCK)),
        "max_abs_quantization_error": f"{max_err:.9g}",
    })

    # ---- reference: transformers' FP8 loader (dequantize=True) ----
    model, accel = load_fp8_dequantized(out_dir)
    check_loaded_weights(model, deq, {k: v for k, v in base_tensors.items() if k not in deq}, E)
    logits, router_logits, topk = run_forward(model, input_ids)
    k = config["num_experts_per_tok"]
    margins = {i: routing_margin(model, i, router_logits[i], k) for i in router_logits}

    # cross-check: MiniMaxM2ForCausalLM from a plain fp32 checkpoint of dequantized.safetensors
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f)
        plain = {n: (deq[n] if n in deq else t) for n, t in base_tensors.items()}
        save_file(plain, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        plain_model = load_model(tmp)
    plain_logits, plain_router, _ = run_forward(plain_model, input_ids)
    assert same_bits(plain_logits, logits)
    for i in router_logits:
        assert same_bits(plain_router[i], router_logits[i])
    del plain_model

    # ---- how far FP8 moves the logits from the base ----
    base_model = load_model(base)
    base_logits, _, base_topk = run_forward(base_model, input_ids)
    base_file_diff = float((base_logits - base_ref["logits"]).abs().max())
    assert base_file_diff < 1e-4, base_file_diff  # the base reference still matches its weights
    d = (logits - base_logits).abs()
    changed = {i: int((topk[i].sort(dim=-1).values != base_topk[i].sort(dim=-1).values).any(-1).sum())
               for i in topk}
    argmax_agree = int((logits.argmax(-1) == base_logits.argmax(-1)).sum())
    same_route = torch.ones(logits.shape[0] * logits.shape[1], dtype=torch.bool)
    for i in topk:
        same_route &= (topk[i].sort(dim=-1).values == base_topk[i].sort(dim=-1).values).all(-1)
    d_same = float(d.reshape(-1, d.shape[-1])[same_route].max())
    del base_model

    notes = make_odd_blocks(out_dir)

    tensors = {"input_ids": input_ids.contiguous(), "logits": logits.contiguous()}
    for i in router_logits:
        tensors[f"router_logits.{i}"] = router_logits[i].contiguous()
    metadata = {
        "generator": "tools/make_fp8_fixtures.py",
        "fixture": "minimax_m2_fp8",
        "architecture": "MiniMaxM2ForCausalLM",
        "base_fixture": "minimax_m2",
        "base_model_sha256": base_sha,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "quantization_config": json.dumps(QUANTIZATION_CONFIG, sort_keys=True),
        "quantized_tensors": json.dumps(rows),
        "unquantized_dtype": "float32 (as the base; released checkpoints keep them bf16)",
        "reference_path": ("transformers FP8 loader: AutoModelForCausalLM.from_pretrained(this dir, "
                           "quantization_config=FineGrainedFP8Config(dequantize=True), dtype=float32) on CPU; "
                           "all its weights asserted bit-identical to dequantized.safetensors / the base; "
                           "logits and router logits asserted bit-identical to MiniMaxM2ForCausalLM loaded "
                           "from a plain fp32 checkpoint of dequantized.safetensors"),
        "accelerate_check": accel,
        "reference": ("eager attention, eval, no attention mask (causal), position_ids 0..15, use_cache=False, "
                      f"experts_implementation {EXPERTS_IMPL}, fp32; input_ids = the base reference's"),
        "max_abs_quantization_error": f"{max_err:.9g}",
        "fp8_vs_base_logits_max_abs_diff": f"{float(d.max()):.6g}",
        "fp8_vs_base_logits_mean_abs_diff": f"{float(d.mean()):.6g}",
        "base_logits_max_abs": f"{float(base_logits.abs().max()):.6g}",
        "fp8_vs_base_logits_max_abs_diff_same_routing": (
            f"{d_same:.6g} (over the {int(same_route.sum())} tokens whose top-3 sets equal the base's in "
            "every layer)"),
        "fp8_vs_base_argmax_agree": f"{argmax_agree}/{logits.shape[0] * logits.shape[1]}",
        "fp8_vs_base_routing_changed_tokens": json.dumps({str(i): changed[i] for i in changed}),
        "routing_min_margin": json.dumps({str(i): float(f"{margins[i]:.6g}") for i in margins}),
        "routing_note": ("routing_min_margin: per layer, the smallest gap between the 3rd and 4th "
                         "sigmoid(router logit) + e_score_correction_bias of this forward; "
                         "fp8_vs_base_routing_changed_tokens: tokens (of 32) whose top-3 set differs "
                         "from the base fp32 model's"),
        "transformers_partial_block_facts": json.dumps(notes, sort_keys=True),
    }
    write_safetensors(os.path.join(out_dir, "reference.safetensors"), tensors, metadata)

    print(f"wrote {out_dir}")
    for name in sorted(os.listdir(out_dir)):
        print(f"  {name:26s} {os.path.getsize(os.path.join(out_dir, name)):9d} bytes")
    print(f"  quantized tensors: {len(rows)}; max |W - deq| {max_err:.4g}")
    print(f"  fp8 vs base logits: max {float(d.max()):.4g} mean {float(d.mean()):.4g} "
          f"(base |logits| max {float(base_logits.abs().max()):.4g}; same-routing tokens {d_same:.4g}); "
          f"argmax agree {argmax_agree}; "
          f"routing changed {changed}; min margins {margins}")
    print(f"  accelerate: {accel}")


if __name__ == "__main__":
    sys.exit(main())
