#!/usr/bin/env python3
"""Generate a tiny MXFP4 checkpoint in the layout of the published openai/gpt-oss-20b / -120b.

Input: the fp32 fixture tests/fixtures/models/gpt_oss (written by make_model_fixtures.py: GptOssForCausalLM,
H 64, 4 layers, 8 experts of intermediate 32, top-4).
Output: tests/fixtures/models/gpt_oss_mxfp4/ (the same model, its experts in MXFP4):

  config.json              the base's config.json plus (as published)
                             "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert":
                               ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                "model.embed_tokens", "lm_head"]}
                           (written with sorted keys; the published config.json also spells its RoPE the
                           transformers-4 way, rope_theta + rope_scaling, and has experts_per_token and
                           initial_context_length; this one keeps the base's rope_parameters)
  generation_config.json   copied from the base
  model.safetensors        per layer L, the experts in MXFP4 (U8), named as published:
                             model.layers.L.mlp.experts.gate_up_proj_blocks  U8 [E, 2I, H/32, 16] = [8, 64, 2, 16]
                             model.layers.L.mlp.experts.gate_up_proj_scales  U8 [E, 2I, H/32]     = [8, 64, 2]
                             model.layers.L.mlp.experts.down_proj_blocks     U8 [E, H, I/32, 16]  = [8, 64, 1, 16]
                             model.layers.L.mlp.experts.down_proj_scales     U8 [E, H, I/32]      = [8, 64, 1]
                           every other tensor F32 under the base's name (published: BF16), among them
                           mlp.experts.gate_up_proj_bias [E, 2I], mlp.experts.down_proj_bias [E, H],
                           mlp.router.{weight, bias}, self_attn.*, self_attn.sinks, the norms,
                           model.embed_tokens.weight, lm_head.weight
  reference.safetensors    input_ids I64 [2, 16] (the base reference's), logits F32 [2, 16, 512], hidden.{i}
                           F32 [2, 16, 64] (raw output of decoder layer i), router_logits.{i} F32 [32, 8]:
                           transformers' eager fp32 forward of GptOssForCausalLM holding the dequantized
                           experts (no attention mask, positions 0..15, use_cache=False, experts_implementation
                           grouped_mm), and
                             dequantized.model.layers.L.mlp.experts.gate_up_proj  F32 [E, H, 2I]
                             dequantized.model.layers.L.mlp.experts.down_proj     F32 [E, I, H]
                           (transformers' in-memory layout: x @ W); __metadata__ says how it was obtained
                           and what the quantization changed against the base

Layout (rows = output features, the transpose of transformers' [E, in, out] parameter):
  W = gate_up_proj[e] [H, 2I] -> rows W^T [2I, H]: row r is output column r of gate_up_proj, so rows
  alternate gate 0, up 0, gate 1, up 1, ... (transformers' interleave: gate = [..., ::2], up = [..., 1::2]);
  down_proj[e] [I, H] -> rows [H, I].  Each row is cut into blocks of 32 consecutive input features;
  block g of row r has one scale byte s = scales[e, r, g] and 16 bytes blocks[e, r, g, :]: byte k holds
  the FP4 (e2m1) codes of elements 2k (low nibble) and 2k+1 (high nibble) of the block.  Code c =
  sign (bit 3), exponent (bits 2-1), mantissa (bit 0): value = (-1)^sign * (exponent == 0 ? mantissa / 2
  : 2^(exponent - 1) * (1 + mantissa / 2)), i.e. codes 0..15 = [0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1,
  -1.5, -2, -3, -4, -6]; the element is value * 2^(s - 127).

Quantizer (written here, independently of transformers and of triton_kernels' downcast_to_mxfp): per
block of 32, amax = max |w|, the shared scale X = 2^e is the smallest power of two with amax <= 6 X
(e from the exact binary exponent of amax: amax = m 2^p, m in [0.5, 1): e = p - 3 if m <= 0.75 else
p - 2; scale byte e + 127); each w / X (exact: X is a power of two) rounds to the nearest of the 8
magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to the even code (mantissa 0), with w's sign bit (so a
negative w that rounds to 0 gives -0, code 8).  |w - deq| <= X/4 where |w/X| < 2, X/2 below 4, X
above (asserted).  Dequantizer (written here too, arithmetically from the nibble bits, not by table)
is asserted bit for bit equal to transformers' integrations.mxfp4.convert_moe_packed_tensors(blocks,
scales, dtype=float32) on every tensor, and to what transformers' own loader makes of this dir.

Spread of scales: the base's expert weights are small (std 0.125 / 0.177: scale bytes 122..124), so
before quantizing, each layer's input features of gate_up_proj are rescaled block-wise by powers of two,
a change of parametrisation that leaves the model's function bit for bit unchanged (asserted: the
float model so reparametrised reproduces the base reference's logits and hidden states exactly):
  post_attention_layernorm.weight[j] *= 2^-k, mlp.router.weight[:, j] *= 2^k, gate_up_proj[:, j, :] *= 2^k
for the features j of input block g (j in 32g .. 32g+31) with k = REPARAM_SHIFTS[L][g] (the norm's
output h_j shrinks by exactly 2^k and both readers of h, router and gate_up_proj, grow by exactly 2^k:
every product h_j * w is the same number).  So model.safetensors' post_attention_layernorm.weight and
mlp.router.weight differ from the base's by those powers of two, and gate_up_proj's scale bytes spread
over 116..132 (127 included; layer 0, unshifted: 122..124); down_proj's input (the SwiGLU output) has no
such freedom: its bytes stay 123..124.  Every one of the 16 codes occurs, -0 (code 8) and +-6 (codes 7,
15) included (asserted; counts in the metadata: code_counts, scale_byte_counts).

The reference is obtained by loading this dir with transformers' own MXFP4 support on CPU
(AutoModelForCausalLM.from_pretrained(dir, quantization_config=Mxfp4Config(dequantize=True),
dtype=float32); without that quantization_config transformers 5.23 first demands accelerate, which
tools/requirements.lock does not install, and then, on CPU without triton kernels, falls back to
dequantize=True: metadata default_load) and asserting
that its experts equal our dequantizer's output bit for bit and every other parameter equals
model.safetensors; the logits are cross-checked against GptOssForCausalLM loaded from a plain fp32 copy
(gate_up_proj / down_proj = the dequantized tensors): bit-identical.

Deterministic: no random draws, CPU, single thread, sorted tensor names, sorted metadata, no time stamps;
running it twice gives byte-identical files.
Run (from the repository root, after make_model_fixtures.py --only gpt_oss):
    <venv-tools>/bin/python tools/make_mxfp4_fixtures.py [--base tests/fixtures/models/gpt_oss]
                                                        [--out tests/fixtures/models/gpt_oss_mxfp4]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import safetensors  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_safetensors import file_sha256, read_safetensors, same_bits, write_safetensors  # noqa: E402

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

GENERATOR = "tools/make_mxfp4_fixtures.py"
BLOCK = 32  # elements per MXFP4 block (one scale byte, 16 code bytes)
FP4_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 0..7; 8..15 the same, negative
QUANTIZATION_CONFIG = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
}
PROJS = ("gate_up_proj", "down_proj")
# per layer, the power-of-two exponent k by which input block g (features 32g .. 32g+31) of gate_up_proj is
# scaled (and post_attention_layernorm.weight / router.weight columns by 2^-k / 2^k): see the docstring
REPARAM_SHIFTS = {0: (0, 0), 1: (3, -4), 2: (6, 1), 3: (-6, 8)}
EXPERTS_IMPL = "grouped_mm"
MIN_ROUTING_GAP = 2e-3  # as make_model_fixtures.py: k-th minus (k+1)-th router logit, every token and layer


# ------------------------------------------------------------------------------------------
# MXFP4 quantizer / dequantizer (independent of transformers)
# ------------------------------------------------------------------------------------------
def block_exponents(amax):
    """Smallest e with amax <= 6 * 2^e, exactly, per element of amax (float32, > 0)."""
    m, p = torch.frexp(amax.double())  # amax = m * 2^p, m in [0.5, 1)
    return torch.where(m <= 0.75, p - 3, p - 2).to(torch.int64)


def quantize_rows(rows):
    """rows [..., K] float32, K a multiple of 32 -> (blocks U8 [..., K/32, 16], scales U8 [..., K/32])."""
    *lead, k = rows.shape
    assert k % BLOCK == 0, rows.shape
    x = rows.double().reshape(*lead, k // BLOCK, BLOCK)
    amax = x.abs().amax(dim=-1)
    assert (amax > 0).all(), "all-zero block"
    e = block_exponents(amax)
    assert (e >= -127).all() and (e <= 127).all(), (e.min(), e.max())
    y = x / torch.pow(2.0, e.double())[..., None]  # exact: a power of two
    assert (y.abs() <= 6).all()
    mags = torch.tensor(FP4_MAGNITUDES, dtype=torch.float64)
    dist = (y.abs()[..., None] - mags).abs()  # [..., 32, 8]
    # nearest magnitude; at a tie (two adjacent magnitudes) the even code (mantissa bit 0)
    nearest = dist == dist.min(dim=-1, keepdim=True).values
    even = nearest & (torch.arange(8) % 2 == 0)
    best = torch.where(even.any(-1), even.to(torch.int8).argmax(-1), nearest.to(torch.int8).argmax(-1))
    sign = torch.signbit(x).to(torch.int64)
    codes = best.to(torch.int64) | (sign << 3)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return packed, (e + 127).to(torch.uint8)


def decode_codes(codes):
    """FP4 e2m1 codes (int64, 0..15) -> float64, from the bits: sign bit 3, exponent bits 2-1, mantissa bit 0."""
    sign = (codes >> 3) & 1
    exponent = (codes >> 1) & 3
    mantissa = (codes & 1).double()
    magnitude = torch.where(exponent == 0, mantissa / 2,
                            torch.pow(2.0, (exponent - 1).double()) * (1 + mantissa / 2))
    return torch.where(sign == 1, -magnitude, magnitude)  # code 8: -0.0


def dequantize_rows(blocks, scales):
    """(blocks U8 [..., G, 16], scales U8 [..., G]) -> rows float32 [..., G*32]: element 2k of a block is
    the low nibble of byte k, element 2k+1 the high one; times 2^(scale - 127)."""
    b = blocks.to(torch.int64)
    lo, hi = decode_codes(b & 0xF), decode_codes(b >> 4)
    vals = torch.stack((lo, hi), dim=-1).flatten(-2)  # [..., G, 32]: lo, hi, lo, hi, ...
    vals = vals * torch.pow(2.0, scales.to(torch.int64).double() - 127)[..., None]
    return vals.flatten(-2).to(torch.float32)  # exact: every value is representable


def quantize_param(w):
    """transformers' [E, in, out] parameter -> (blocks, scales) over rows [E, out, in]."""
    return quantize_rows(w.transpose(1, 2).contiguous())


def dequantize_param(blocks, scales):
    """(blocks, scales) -> transformers' [E, in, out] float32."""
    return dequantize_rows(blocks, scales).transpose(1, 2).contiguous()


def check_error_bound(w, deq, scales):
    """|w - deq| <= X/4 where |w| < 2X, X/2 where |w| < 4X, X beyond (half the e2m1 spacing)."""
    rows_w, rows_d = w.transpose(1, 2), deq.transpose(1, 2)
    x = torch.pow(2.0, scales.to(torch.int64).double() - 127).repeat_interleave(BLOCK, dim=-1)
    a = rows_w.double().abs() / x
    bound = torch.where(a < 2, 0.25, torch.where(a < 4, 0.5, 1.0)) * x
    err = (rows_w.double() - rows_d.double()).abs()
    assert (err <= bound).all(), float((err - bound).max())
    return float((err / x).max())


def reparametrise(tensors, num_layers):
    """The base's float tensors with each layer's gate_up_proj input blocks rescaled (REPARAM_SHIFTS)."""
    out = dict(tensors)
    for layer in range(num_layers):
        p = f"model.layers.{layer}."
        norm, router = p + "post_attention_layernorm.weight", p + "mlp.router.weight"
        gate_up = p + "mlp.experts.gate_up_proj"
        hidden = out[norm].numel()
        shifts = REPARAM_SHIFTS[layer]
        assert hidden == BLOCK * len(shifts), hidden
        k = torch.tensor(shifts, dtype=torch.float64).repeat_interleave(BLOCK)  # [H]
        f = torch.pow(2.0, k).to(torch.float32)
        out[norm] = out[norm] / f
        out[router] = out[router] * f[None, :]
        out[gate_up] = out[gate_up] * f[None, :, None]
    return out


# ------------------------------------------------------------------------------------------
# transformers
# ------------------------------------------------------------------------------------------
def load_model(path, **kwargs):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                       experts_implementation=EXPERTS_IMPL,
                                                       output_loading_info=True, **kwargs)
    model.eval()
    assert type(model).__name__ == "GptOssForCausalLM", type(model).__name__
    assert not any(info.values()), info
    assert model.config._experts_implementation == EXPERTS_IMPL
    return model


@torch.no_grad()
def run_forward(model, input_ids):
    """(logits F32 [B, T, V], [hidden after layer i], {layer: router logits [B*T, E]},
    {layer: top-k index [B*T, k]})."""
    hidden, routed, handles = {}, {}, []
    for i, layer in enumerate(model.model.layers):
        def hook(_mod, _inp, out, i=i):
            hidden[i] = (out[0] if isinstance(out, (tuple, list)) else out).detach().float().clone()

        def router_hook(_mod, _inp, out, i=i):  # GptOssTopKRouter: (logits, scores, indices)
            routed[i] = (out[0].detach().float().clone(), out[2].detach().clone())
        handles.append(layer.register_forward_hook(hook))
        handles.append(layer.mlp.router.register_forward_hook(router_hook))
    try:
        out = model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    n = len(model.model.layers)
    assert sorted(hidden) == sorted(routed) == list(range(n))
    return (out.logits.detach().float().clone(), [hidden[i] for i in range(n)],
            {i: routed[i][0] for i in range(n)}, {i: routed[i][1] for i in range(n)})


def routing_gap(router_logits, k):
    """min over tokens of the k-th minus the (k+1)-th router logit (what GptOssTopKRouter ranks)."""
    top = router_logits.topk(k + 1, dim=-1).values
    return float((top[:, k - 1] - top[:, k]).min())


def write_plain_checkpoint(path, config, tensors):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    write_safetensors(os.path.join(path, "model.safetensors"), tensors, {"format": "pt"})


# ------------------------------------------------------------------------------------------
def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.relpath(os.path.join(here, ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--base", default=os.path.join(root, "tests", "fixtures", "models", "gpt_oss"),
                    help="the fp32 gpt-oss fixture to quantize (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "models", "gpt_oss_mxfp4"),
                    help="output directory (default: %(default)s)")
    args = ap.parse_args()
    base, out_dir = os.path.normpath(args.base), os.path.normpath(args.out)
    transformers.logging.set_verbosity_error()
    from transformers import Mxfp4Config
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    with open(os.path.join(base, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "gpt_oss" and "quantization_config" not in config
    L, E, H, I = (config["num_hidden_layers"], config["num_local_experts"], config["hidden_size"],
                  config["intermediate_size"])
    assert H % BLOCK == 0 and I % BLOCK == 0
    base_tensors, _ = read_safetensors(os.path.join(base, "model.safetensors"))
    base_ref, _ = read_safetensors(os.path.join(base, "reference.safetensors"))
    input_ids = base_ref["input_ids"]
    assert all(t.dtype == torch.float32 for t in base_tensors.values())

    # ---- the reparametrised float model computes exactly what the base computes ----
    float_tensors = reparametrise(base_tensors, L)
    with tempfile.TemporaryDirectory() as tmp:
        write_plain_checkpoint(tmp, config, float_tensors)
        rep_logits, rep_hidden, rep_router, _ = run_forward(load_model(tmp), input_ids)
    assert same_bits(rep_logits, base_ref["logits"]), "reparametrisation changed the logits"
    assert all(same_bits(h, base_ref[f"hidden.{i}"]) for i, h in enumerate(rep_hidden))
    for i, r in rep_router.items():  # the router logits too (the router reads the rescaled h)
        assert same_bits(r, base_ref[f"router_logits.{i}"]), i

    # ---- quantize ----
    model_tensors, deq, rows = {}, {}, []
    code_counts, scale_counts, max_err = torch.zeros(16, dtype=torch.int64), {}, 0.0
    for name in sorted(float_tensors):
        t = float_tensors[name]
        proj = name.rsplit(".", 1)[-1]
        if ".mlp.experts." not in name or proj not in PROJS:
            model_tensors[name] = t
            continue
        blocks, scales = quantize_param(t)
        d = dequantize_param(blocks, scales)
        ref = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
        assert same_bits(d, ref), f"{name}: our dequantizer != transformers' convert_moe_packed_tensors"
        assert d.shape == t.shape
        max_err = max(max_err, check_error_bound(t, d, scales))
        model_tensors[name + "_blocks"], model_tensors[name + "_scales"] = blocks, scales
        deq[name] = d
        b = blocks.to(torch.int64)
        code_counts += torch.bincount(torch.cat([(b & 0xF).flatten(), (b >> 4).flatten()]), minlength=16)
        for s, c in zip(*torch.unique(scales.to(torch.int64), return_counts=True)):
            key = f"{proj} {int(s)}"
            scale_counts[key] = scale_counts.get(key, 0) + int(c)
        rows.append(f"{name}_blocks {list(blocks.shape)} U8, {name}_scales {list(scales.shape)} U8 "
                    f"(bytes {int(scales.min())}..{int(scales.max())})")
    assert len(deq) == 2 * L
    assert (code_counts > 0).all(), f"not every FP4 code occurs: {code_counts.tolist()}"
    all_scales = torch.cat([model_tensors[n + "_scales"].flatten() for n in deq]).to(torch.int64)
    assert all_scales.min() < 127 < all_scales.max(), (all_scales.min(), all_scales.max())
    for layer in range(L):
        p = f"model.layers.{layer}.mlp.experts."
        assert model_tensors[p + "gate_up_proj_blocks"].shape == (E, 2 * I, H // BLOCK, 16)
        assert model_tensors[p + "gate_up_proj_scales"].shape == (E, 2 * I, H // BLOCK)
        assert model_tensors[p + "down_proj_blocks"].shape == (E, H, I // BLOCK, 16)
        assert model_tensors[p + "down_proj_scales"].shape == (E, H, I // BLOCK)

    # ---- write ----
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    qconfig = dict(config)
    qconfig["quantization_config"] = QUANTIZATION_CONFIG
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        f.write(json.dumps(qconfig, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(os.path.join(base, "generation_config.json"),
                    os.path.join(out_dir, "generation_config.json"))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), model_tensors, {"format": "pt"})

    # ---- reference: transformers' MXFP4 loader (dequantize=True) ----
    model = load_model(out_dir, quantization_config=Mxfp4Config(dequantize=True))
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    assert sorted(sd) == sorted(float_tensors), sorted(set(sd) ^ set(float_tensors))
    for name, t in sd.items():
        want = deq[name] if name in deq else model_tensors[name]
        assert same_bits(t.contiguous(), want), name
    logits, hidden, router_logits, topk = run_forward(model, input_ids)
    k = config["num_experts_per_tok"]
    gaps = {i: routing_gap(r, k) for i, r in router_logits.items()}
    assert min(gaps.values()) >= MIN_ROUTING_GAP, gaps
    # the default load (no quantization_config given): transformers 5.23's Mxfp4HfQuantizer.validate_environment
    # demands accelerate before it reaches its CPU fallback to dequantize=True
    try:
        auto = load_model(out_dir)
    except ImportError as e:
        assert "accelerate" in str(e).lower(), e
        default_load = ("from_pretrained(this dir) without a quantization_config raises ImportError here "
                        f"({str(e).strip()!r}: accelerate is not in tools/requirements.lock); with "
                        "accelerate, on CPU without triton kernels, transformers falls back to "
                        "dequantize=True (quantizer_mxfp4.py, not run here)")
    else:
        assert same_bits(run_forward(auto, input_ids)[0], logits)
        default_load = ("from_pretrained(this dir) without a quantization_config (accelerate installed) "
                        "dequantizes on CPU too: the same logits, bit for bit")
        del auto

    # cross-check: GptOssForCausalLM from a plain fp32 checkpoint holding the dequantized experts
    with tempfile.TemporaryDirectory() as tmp:
        write_plain_checkpoint(tmp, config, {n: (deq[n] if n in deq else t) for n, t in float_tensors.items()})
        plain_logits, plain_hidden, plain_router, _ = run_forward(load_model(tmp), input_ids)
    assert same_bits(plain_logits, logits)
    assert all(same_bits(a, b) for a, b in zip(plain_hidden, hidden))
    assert all(same_bits(plain_router[i], router_logits[i]) for i in router_logits)

    # ---- what MXFP4 changed against the base ----
    base_logits = base_ref["logits"]
    d = (logits - base_logits).abs()
    base_topk = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_plain_checkpoint(tmp, config, base_tensors)
        _, _, _, base_topk = run_forward(load_model(tmp), input_ids)
    changed = {i: int((topk[i].sort(-1).values != base_topk[i].sort(-1).values).any(-1).sum()) for i in topk}
    argmax_agree = int((logits.argmax(-1) == base_logits.argmax(-1)).sum())
    same_route = torch.ones(logits.shape[0] * logits.shape[1], dtype=torch.bool)
    for i in topk:
        same_route &= (topk[i].sort(-1).values == base_topk[i].sort(-1).values).all(-1)
    d_same = float(d.reshape(-1, d.shape[-1])[same_route].max()) if same_route.any() else float("nan")
    rel_w = {name: float((deq[name] - float_tensors[name]).norm() / float_tensors[name].norm()) for name in deq}

    tensors = {"input_ids": input_ids.contiguous(), "logits": logits.contiguous()}
    for i, h in enumerate(hidden):
        tensors[f"hidden.{i}"] = h.contiguous()
    for i, r in router_logits.items():
        tensors[f"router_logits.{i}"] = r.contiguous()
    for name, t in deq.items():
        tensors[f"dequantized.{name}"] = t
    codes = {f"{c} ({v:+g})": int(code_counts[c]) for c, v in
             enumerate(decode_codes(torch.arange(16)).tolist())}
    metadata = {
        "generator": GENERATOR,
        "fixture": "gpt_oss_mxfp4",
        "architecture": "GptOssForCausalLM",
        "base_fixture": "gpt_oss",
        "base_model_sha256": file_sha256(os.path.join(base, "model.safetensors")),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "safetensors_version": safetensors.__version__,
        "quantization_config": json.dumps(QUANTIZATION_CONFIG, sort_keys=True),
        "quantized_tensors": json.dumps(rows),
        "unquantized_dtype": "float32 (as the base; the published checkpoints keep them bf16)",
        "layout": ("X_blocks U8 [E, rows, K/32, 16], X_scales U8 [E, rows, K/32], rows = output features "
                   "(gate_up_proj: 2I, interleaved gate 0, up 0, gate 1, ...: transformers' [E, H, 2I] "
                   "transposed; down_proj: H), K = input features (H, I); byte j of a block = codes of "
                   "elements 2j (low nibble) and 2j+1 (high nibble); code bits sign | exponent (2) | "
                   "mantissa: [0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6]; element = "
                   "value * 2^(scale - 127); dequantized = transformers' convert_moe_packed_tensors(blocks, "
                   "scales, dtype=float32) = dequantized.* here (asserted bit for bit)"),
        "quantizer": ("per block of 32: X = the smallest power of two with max|w| <= 6 X, scale byte "
                      "log2(X) + 127; code = nearest e2m1 magnitude of |w| / X (ties to the even code), "
                      "sign of w (negative zero -> code 8)"),
        "reparametrisation": (
            "before quantizing, per layer L and input block g of gate_up_proj (features 32g .. 32g+31), "
            f"shift k = REPARAM_SHIFTS[L][g] = "
            f"{json.dumps({str(a): list(b) for a, b in REPARAM_SHIFTS.items()})}: "
            "post_attention_layernorm.weight[j] *= 2^-k, mlp.router.weight[:, j] *= 2^k, "
            "mlp.experts.gate_up_proj[:, j, :] *= 2^k (so model.safetensors' post_attention_layernorm.weight "
            "and mlp.router.weight differ from the base's by these powers of two); the float model so "
            "changed reproduces the base reference's logits, hidden.{i} and router_logits.{i} bit for bit "
            "(asserted); it spreads gate_up_proj's scale bytes below and above 127"),
        "code_counts": json.dumps(codes),
        "scale_byte_counts": json.dumps(dict(sorted(scale_counts.items()))),
        "max_quantization_error_in_scale_units": f"{max_err:.9g}",
        "relative_weight_error": json.dumps({k: float(f"{v:.6g}") for k, v in sorted(rel_w.items())}),
        "reference_path": ("transformers MXFP4 loader: AutoModelForCausalLM.from_pretrained(this dir, "
                           "quantization_config=Mxfp4Config(dequantize=True), dtype=float32, "
                           "attn_implementation='eager', experts_implementation='grouped_mm') on CPU; its "
                           "experts asserted bit-identical to "
                           "dequantized.*, every other parameter to model.safetensors; logits, hidden and "
                           "router logits bit-identical to GptOssForCausalLM loaded from a plain fp32 "
                           "checkpoint holding dequantized.*"),
        "default_load": default_load,
        "reference": ("eager attention, eval, no attention mask (causal), position_ids 0..15, use_cache=False, "
                      f"experts_implementation {EXPERTS_IMPL}, fp32; input_ids = the base reference's; "
                      "hidden.{i}: raw output of model.model.layers[i]; router_logits.{i}: [B*T, E] output "
                      "of model.model.layers[i].mlp.router (bias included)"),
        "mxfp4_vs_base_logits_max_abs_diff": f"{float(d.max()):.6g}",
        "mxfp4_vs_base_logits_mean_abs_diff": f"{float(d.mean()):.6g}",
        "base_logits_max_abs": f"{float(base_logits.abs().max()):.6g}",
        "mxfp4_vs_base_logits_max_abs_diff_same_routing": (
            f"{d_same:.6g} (over the {int(same_route.sum())} tokens whose top-{k} sets equal the base's in "
            "every layer)"),
        "mxfp4_vs_base_argmax_agree": f"{argmax_agree}/{logits.shape[0] * logits.shape[1]}",
        "mxfp4_vs_base_routing_changed_tokens": json.dumps({str(i): changed[i] for i in changed}),
        "routing_min_gap": json.dumps({str(i): float(f"{gaps[i]:.6g}") for i in gaps}),
        "routing_note": (f"routing_min_gap: per layer, the smallest gap between the {k}-th and {k + 1}-th "
                         f"router logit of this forward (>= {MIN_ROUTING_GAP}: asserted); "
                         "mxfp4_vs_base_routing_changed_tokens: tokens (of 32) whose top-k set differs from "
                         "the base model's"),
    }
    write_safetensors(os.path.join(out_dir, "reference.safetensors"), tensors, metadata)

    print(f"wrote {out_dir}")
    for name in sorted(os.listdir(out_dir)):
        print(f"  {name:26s} {os.path.getsize(os.path.join(out_dir, name)):9d} bytes")
    for r in rows:
        print(f"  {r}")
    print(f"  codes {codes}")
    print(f"  scale bytes {dict(sorted(scale_counts.items()))}")
    print(f"  max |w - deq| / X {max_err:.4g}; relative weight error {min(rel_w.values()):.4f}.."
          f"{max(rel_w.values()):.4f}")
    print(f"  mxfp4 vs base logits: max {float(d.max()):.4g} mean {float(d.mean()):.4g} (base |logits| max "
          f"{float(base_logits.abs().max()):.4g}; same-routing tokens {d_same:.4g}); argmax agree "
          f"{argmax_agree}; "
          f"routing changed {changed}; min routing gaps {gaps}")


if __name__ == "__main__":
    sys.exit(main())
