#!/usr/bin/env python3
"""Generate tiny random hybrid (Gated DeltaNet + gated attention) Hugging Face checkpoints plus
transformers reference outputs: Qwen3.5, Qwen3.5-MoE and Qwen3-Next.

Writes, for each fixture NAME, tests/fixtures/models/NAME/:
  config.json, generation_config.json, model*.safetensors (+ index when sharded)  -- save_pretrained
  reference.safetensors:
    input_ids          I64 [2, 16]      ids in 3..503 plus 511 (row 0 holds 511, row 1 holds 3 and one
                                        id twice); chosen for robust MoE routing, see below
    logits             F32 [2, 16, V]   fp32 eager forward, no attention mask, positions 0..15
    hidden.{i}         F32 [2, 16, H]   raw output of decoder layer i = 0..4 of the text model (forward
                                        hook, no final norm)
    logits_bf16        F32 [2, 16, V]   the same forward of this dir loaded with dtype=bfloat16, upcast
    hidden_bf16.{i}    F32 [2, 16, H]
    generate_prompt    I64 [2, 6]
    generate_greedy    I64 [2, 16]      model.generate(generate_prompt, do_sample=False, max_new_tokens=10,
                                        min_new_tokens=10), fp32, with transformers' cache: the prompt
                                        then 10 greedy tokens; asserted equal to generate(use_cache=False)
                                        and to a plain argmax loop (so min_new_tokens's eos suppression
                                        changed nothing: eos is never the argmax); top-1 minus top-2 logit
                                        >= 1e-2 at every step
    packed_ids         I64 [1, 16]      document A (7 tokens) then document B (9 tokens)
    packed_logits      F32 [1, 16, V]   fp32 logits of A run alone and of B run alone (positions from 0,
                                        fresh conv / recurrent state), concatenated along T
    __metadata__       generator, versions, seed, fixture, notes, layer_types, reference, generate, packed
  V = 512, H = 64.  MoE fixtures add (all F32), for each sparse layer i:
    router_logits.{i}       [32, 8]  router (mlp.gate) logits of layer i, fp32 forward, rows b*16+t
    router_logits_bf16.{i}  [32, 8]  the same in the bf16 forward, upcast
    aux_loss                []       load_balancing_loss_func(router logits of all MoE layers, 8, 2,
                                     attention_mask=None) of the fp32 forward (out.aux_loss with
                                     output_router_logits=True), NOT multiplied by router_aux_loss_coef
  and the metadata keys num_experts, top_k, moe_layers, moe_note, experts_implementation (grouped_mm,
  transformers' default, requested explicitly), aux_loss, router_logits, routing_gaps.

Common text model: vocab 512, hidden 64, 5 decoder layers, layer_types [linear_attention,
linear_attention, full_attention, linear_attention, full_attention]; intermediate 128; rms_norm_eps
1e-6; bos 1, eos 2; untied lm_head; max_position_embeddings 512.
  linear_attention (layers 0, 1, 3): Gated DeltaNet, 2 key heads (dim 16) serving 4 value heads (dim
    16), causal depthwise conv1d [128, 1, 4] over the q|k|v channels (32 | 32 | 64), A_log [4],
    dt_bias [4], gated RMSNorm linear_attn.norm.weight [16] (w * rmsnorm(x) * silu(z)), out_proj [64, 64].
  full_attention (layers 2, 4): 4 query heads, 2 kv heads, head_dim 32; q_proj [256, 64] whose rows are,
    per head, [32 query | 32 gate] (output * sigmoid(gate) before o_proj [64, 128]); q_norm / k_norm
    [32]; partial RoPE on the first 8 of 32 head dims (partial_rotary_factor 0.25, rope_theta 1e7).
  Every RMSNorm except linear_attn.norm scales by (1 + weight) (weights stored around 0).

Fixtures:
  qwen3_5      Qwen3_5ForConditionalGeneration (model_type qwen3_5, VLM wrapper), bf16, two shards +
               model.safetensors.index.json: model.language_model.* (linear_attn.in_proj_qkv [128, 64],
               in_proj_z [64, 64], in_proj_b [4, 64], in_proj_a [4, 64]; dense mlp.{gate,up}_proj
               [128, 64], down_proj [64, 128] in every layer), model.visual.* (vision tower: depth 1,
               hidden 16, 2 heads, intermediate 32, patch 2, temporal patch 2, merge 2, 16 position
               embeddings, out_hidden_size 64), lm_head.weight; then mtp.fc.weight BF16 [64, 128] and
               mtp.norm.weight BF16 [64] (random, named like the released checkpoints' multi-token-
               prediction head) are added to the last shard and the index; transformers ignores them
               (asserted: same logits, no unexpected / missing keys).
  qwen3_5_moe  Qwen3_5MoeForConditionalGeneration (qwen3_5_moe), fp32, one file, same wrapping and
               vision tower; every layer (0..4) a sparse MoE block: 8 experts, top-2 of softmax,
               renormalised, moe_intermediate 32, plus a shared expert (intermediate 48) scaled by
               sigmoid(shared_expert_gate [1, 64]).
  qwen3_next   Qwen3NextForCausalLM (qwen3_next, not wrapped: model.*), fp32, one file; fused
               linear_attn.in_proj_qkvz [192, 64] (rows per key head: q 16, k 16, v 2*16, z 2*16) and
               in_proj_ba [8, 64] (rows per key head: b 2, a 2); MoE as qwen3_5_moe with norm_topk_prob,
               decoder_sparse_step 1 and mlp_only_layers [1]: layers 0, 2, 3, 4 sparse, layer 1 a dense
               MLP (intermediate 128).
  The two VLM configs carry text_config.rope_parameters mrope_section [2, 1, 1] (the released [11, 11,
  10] scaled to 4 rotary frequencies) and mrope_interleaved true; for text-only input the T, H and W
  positions are equal, so mRoPE is plain RoPE.  Their vision special tokens sit inside the vocabulary
  like the released ones: vision_start 504, vision_end 505, image 507, video 508.
  On disk the MoE experts are per-expert 2-D tensors, as transformers 5.23's save_pretrained writes
  them for both families (the model holds stacked experts.gate_up_proj [8, 64, 64] / down_proj [8, 64,
  32]): ...layers.N.mlp.gate.weight [8, 64]; ...layers.N.mlp.experts.J.{gate_proj,up_proj}.weight
  [32, 64], .down_proj.weight [64, 32]; ...layers.N.mlp.shared_expert.{gate_proj,up_proj}.weight
  [48, 64], .down_proj.weight [64, 48]; ...layers.N.mlp.shared_expert_gate.weight [1, 64].

Weights: reinit_() overwrites every parameter with a healthy spread (logits std ~2): randn / sqrt(fan_in)
for projections, embeddings randn, lm_head 2 * randn / sqrt(64), routers 2 * randn / sqrt(64), (1 + w)
RMSNorm weights 0.1 * randn, gated-norm weight 1 + 0.1 * randn, A = exp(A_log) uniform(1, 16),
softplus(dt_bias) log-uniform in [1e-3, 1e-1] (not dt_bias ~ 0..1: with A up to 16 that decays the
state to ~0 each token): the per-token decay exp(-A * softplus(a + dt_bias)) then spreads from ~0 to
~0.999 (median ~0.91-0.94, over half of it above 0.5: asserted), and changing token 0 moves layer 0's
output at every position 4..15, beyond the conv window where only the recurrent state reaches, by more
than 1e-3 relative (asserted; typically 4-60%).

Robust routing (MoE fixtures): the weights come from the seed alone (SEED_*), but a random choice of
input ids almost never has every token of 5 (4) MoE layers route robustly in both fp32 and bf16 (0 of
300 seeds did), so the text ids are chosen token by token (construct_ids): each position takes the
first candidate (a pending forced id, then a seeded random draw, then further draws) at which, in
every MoE layer, the top-2 vs 3rd softmax gap is >= 4e-3 in the fp32 and the bf16 forward, both bf16
expert implementations (grouped_mm, eager) pick the fp32 experts, and the bf16 router logits have no
near-tie in tests/test_decoder_parity.cpp's sense (2nd and 3rd within 4 bf16 ulps).  The finished
input_ids are then checked as a whole: gap >= 2e-3 in fp32 and in bf16, identical expert choices, no
near-tie (asserted).  generate_prompt and the packed documents are chosen the same way in fp32 only;
the prompt is redrawn until its greedy continuation has a top-1 margin >= 1e-2 and every token of the
16-token sequence a fp32 gap >= 2e-3.  The dense qwen3_5 keeps its first draws.

Deterministic: fixed seeds, CPU, single thread; running it twice gives byte-identical files.  A final
self-check reloads each directory and reproduces logits, hidden states, router logits, aux_loss,
packed_logits and generate_greedy exactly.
Run (from the repository root):
    .venv-tools/bin/python tools/make_hybrid_fixtures.py [--out tests/fixtures/models] [--only NAME ...]"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_model_fixtures as base  # noqa: E402  (also: torch single thread, deterministic algorithms)
import safetensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from fixture_safetensors import write_safetensors  # noqa: E402
from safetensors import safe_open  # noqa: E402
from torch import nn  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeConfig,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

GENERATOR = "tools/make_hybrid_fixtures.py"
BATCH, SEQ = 2, 16
VOCAB, HIDDEN, LAYERS, INTER = 512, 64, 5, 128
LAYER_TYPES = ["linear_attention", "linear_attention", "full_attention", "linear_attention", "full_attention"]
CONV_KERNEL = 4
# Qwen3.5 vision special tokens, inside the tiny vocabulary at the released checkpoints' relative
# places (vision_start, vision_end, [vision_pad], image, video = 248053, 248054, [248055], 248056,
# 248057 there).  Text inputs of every fixture avoid 504..508.
VISION_START, VISION_END, IMAGE_TOKEN, VIDEO_TOKEN = 504, 505, 507, 508
TEXT_ID_LOW, TEXT_ID_HIGH = 3, 503  # inclusive range the random text ids come from (plus VOCAB-1)

PROMPT_LEN, NEW_TOKENS = 6, 10
DOC_A, DOC_B = 7, 9

TEXT_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    layer_types=LAYER_TYPES,
    intermediate_size=INTER,
    hidden_act="silu",
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    attention_bias=False,
    attention_dropout=0.0,
    linear_conv_kernel_dim=CONV_KERNEL,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    rms_norm_eps=1e-6,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
    tie_word_embeddings=False,
)
ROPE = dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25)
# Released Qwen3.5 text configs: head_dim 256 * 0.25 = 64 rotary dims = 32 frequencies split
# [11, 11, 10] (T, H, W), mrope_interleaved true.  Here 32 * 0.25 = 8 rotary dims = 4 frequencies.
MROPE = dict(ROPE, mrope_section=[2, 1, 1], mrope_interleaved=True)
VISION = dict(
    depth=1,
    hidden_size=16,  # 2 heads of 8; the merger MLP is (16 * 2 * 2)^2
    num_heads=2,
    intermediate_size=32,
    out_hidden_size=HIDDEN,
    patch_size=2,
    temporal_patch_size=2,
    spatial_merge_size=2,
    num_position_embeddings=16,  # a 4 x 4 grid of learned position embeddings
    in_channels=3,
)
VLM_TOKENS = dict(vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
                  image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN, tie_word_embeddings=False)
MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
           shared_expert_intermediate_size=48, output_router_logits=False, router_aux_loss_coef=0.001)
MTP_TENSORS = {"mtp.fc.weight": (HIDDEN, 2 * HIDDEN), "mtp.norm.weight": (HIDDEN,)}

SEED_QWEN3_5, SEED_QWEN3_5_MOE, SEED_QWEN3_NEXT = 3000, 3100, 3200
MIN_ROUTING_GAP = base.MIN_ROUTING_GAP  # 2e-3
MIN_GREEDY_MARGIN = 1e-2  # top-1 minus top-2 logit at every greedy step (fp32)
EXPERTS_IMPL = base.EXPERTS_IMPL


def fixture_specs():
    return {
        "qwen3_5": dict(
            seed=SEED_QWEN3_5,
            make_config=lambda: Qwen3_5Config(
                text_config=dict(TEXT_COMMON, rope_parameters=dict(MROPE)),
                vision_config=dict(VISION), **VLM_TOKENS),
            cls=Qwen3_5ForConditionalGeneration,
            save_dtype=torch.bfloat16,
            # bf16 weights total ~637 KB; 400 KB (= 400000 B) per shard -> exactly two shards (asserted):
            # embed_tokens, layers 0-2, part of layer 3's linear_attn and model.visual in the first,
            # the rest of layer 3, layer 4, the final norm and lm_head (then the mtp tensors) in the second.
            max_shard_size="400KB",
            mtp=True,
        ),
        "qwen3_5_moe": dict(
            seed=SEED_QWEN3_5_MOE,
            make_config=lambda: Qwen3_5MoeConfig(
                text_config=dict(TEXT_COMMON, rope_parameters=dict(MROPE), **MOE),
                vision_config=dict(VISION), **VLM_TOKENS),
            cls=Qwen3_5MoeForConditionalGeneration,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
        ),
        "qwen3_next": dict(
            seed=SEED_QWEN3_NEXT,
            make_config=lambda: Qwen3NextConfig(
                **TEXT_COMMON, rope_parameters=dict(ROPE), **MOE, norm_topk_prob=True,
                decoder_sparse_step=1, mlp_only_layers=[1]),
            cls=Qwen3NextForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            moe=True,
        ),
    }


# ---------------------------------------------------------------------------------------------
# model access


def text_model(model):
    """The decoder stack: model.model.language_model (VLM wrappers) or model.model."""
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


def text_config(model):
    return getattr(model.config, "text_config", None) or model.config


def moe_routers(model):
    return {i: layer.mlp.gate for i, layer in enumerate(text_model(model).layers)
            if hasattr(layer.mlp, "experts") and hasattr(layer.mlp, "gate")}


def linear_attn_modules(model):
    return {i: layer.linear_attn for i, layer in enumerate(text_model(model).layers)
            if hasattr(layer, "linear_attn")}


def rotary_buffers(model):
    return {n: b for n, b in model.named_buffers() if n.endswith("inv_freq")}


# ---------------------------------------------------------------------------------------------
# weights

ROUTER_GAIN, LM_HEAD_GAIN = 2.0, 2.0
A_RANGE = (1.0, 16.0)          # A = exp(A_log) ~ uniform(1, 16)
DT_RANGE = (1e-3, 1e-1)        # softplus(dt_bias) ~ log-uniform(1e-3, 1e-1)


def reinit_(model, gen):
    """Overwrite every parameter deterministically (draws in named_parameters() order), by the
    type of the module that owns it:

      *RMSNorm (Qwen3_5RMSNorm / Qwen3_5MoeRMSNorm / Qwen3NextRMSNorm, applied as x * (1 + w),
          initialised to zeros by transformers): input/post_attention/final norms, q_norm, k_norm
          -> w = 0.1 * randn, so the effective scale 1 + w is 1 +- 0.1
      *RMSNormGated (linear_attn.norm, applied as w * x * silu(z)) -> 1 + 0.1 * randn
      GatedDeltaNet A_log -> log(uniform(1, 16)); dt_bias -> softplus^-1(dt), dt log-uniform in
          [1e-3, 1e-1] (the Mamba / FLA initialisation: dt_bias in about [-6.9, -2.3]); the decay
          exp(-exp(A_log) * softplus(a + dt_bias)) then spreads over ~0.05 .. 0.999 per token
      router mlp.gate.weight [E, H] -> 2 * randn / sqrt(H)
      experts gate_up_proj [E, 2I, H] / down_proj [E, H, I] -> randn / sqrt(last dim)
      Embedding (embed_tokens, visual pos_embed) -> randn
      Linear / Conv1d (depthwise conv [C, 1, K]) / Conv3d weights -> randn / sqrt(fan_in)
          (lm_head: 2 * randn / sqrt(H)); biases (vision tower only) -> 0.1 * randn
      LayerNorm (vision tower) -> weight 1 + 0.1 * randn, bias 0.1 * randn
    Anything else is an error; so is any persistent buffer (only RoPE inv_freq buffers exist).
    """
    owners = {}
    for mname, mod in model.named_modules():
        for pname, _ in mod.named_parameters(recurse=False):
            owners[f"{mname}.{pname}" if mname else pname] = (mod, pname)
    with torch.no_grad():
        for name, p in model.named_parameters():
            mod, pname = owners[name]
            kind = type(mod).__name__
            shape = tuple(p.shape)
            r = torch.randn(shape, generator=gen, dtype=torch.float32)
            u = torch.rand(shape, generator=gen, dtype=torch.float32)
            fan_in = math.prod(shape[1:]) if len(shape) > 1 else 1
            if kind.endswith("RMSNormGated"):
                v = 1.0 + 0.1 * r
            elif kind.endswith("RMSNorm"):
                v = 0.1 * r
            elif kind.endswith("GatedDeltaNet") and pname == "A_log":
                v = torch.log(A_RANGE[0] + (A_RANGE[1] - A_RANGE[0]) * u)
            elif kind.endswith("GatedDeltaNet") and pname == "dt_bias":
                lo, hi = math.log(DT_RANGE[0]), math.log(DT_RANGE[1])
                dt = torch.exp(lo + (hi - lo) * u)
                v = dt + torch.log(-torch.expm1(-dt))  # softplus(v) == dt
            elif kind.endswith("TopKRouter") and pname == "weight":
                v = ROUTER_GAIN * r / math.sqrt(shape[1])
            elif kind.endswith("Experts") and pname in ("gate_up_proj", "down_proj"):
                v = r / math.sqrt(shape[-1])
            elif isinstance(mod, nn.Embedding):
                v = r
            elif isinstance(mod, nn.LayerNorm):
                v = 1.0 + 0.1 * r if pname == "weight" else 0.1 * r
            elif isinstance(mod, (nn.Linear, nn.Conv1d, nn.Conv3d)):
                if pname == "bias":
                    v = 0.1 * r
                else:
                    gain = LM_HEAD_GAIN if name == "lm_head.weight" else 1.0
                    v = gain * r / math.sqrt(fan_in)
            else:
                raise RuntimeError(f"unexpected parameter {name} {shape} ({kind})")
            p.copy_(v.to(p.dtype))
        for mod_name, mod in model.named_modules():
            for bname, buf in mod._buffers.items():
                if buf is not None and bname not in mod._non_persistent_buffers_set:
                    raise RuntimeError(f"unexpected persistent buffer {mod_name}.{bname}")


def build_model(spec, seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = spec["make_config"]()
    model = spec["cls"](config).to(torch.float32)
    model.set_attn_implementation("eager")
    reinit_(model, gen)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# forwards


@torch.no_grad()
def run_forward(model, input_ids, moe=False):
    """(logits F32, [hidden F32 per decoder layer], info) with forward hooks on the text model's
    decoder layers (and, moe=True, on each MoE router: info = dict(router_logits={i: [B*T, E] in
    the model dtype}, topk_index={i: [B*T, k]}, aux_loss)); info is None for moe=False."""
    layers = text_model(model).layers
    captured, routed, handles = {}, {}, []
    for i, layer in enumerate(layers):
        def hook(_mod, _inp, out, i=i):
            t = out[0] if isinstance(out, (tuple, list)) else out
            captured[i] = t.detach().to(torch.float32).clone()
        handles.append(layer.register_forward_hook(hook))
    if moe:
        for i, gate in moe_routers(model).items():
            def gate_hook(_mod, _inp, out, i=i):  # router returns (logits, top-k weights, top-k index)
                routed[i] = (out[0].detach().clone(), out[2].detach().clone())
            handles.append(gate.register_forward_hook(gate_hook))
    kwargs = dict(output_router_logits=True) if moe else {}
    try:
        out = model(input_ids=input_ids, use_cache=False, **kwargs)
    finally:
        for h in handles:
            h.remove()
    assert sorted(captured) == list(range(len(layers))), captured.keys()
    logits = out.logits.detach().to(torch.float32).clone()
    hidden = [captured[i] for i in range(len(layers))]
    if not moe:
        return logits, hidden, None
    order = sorted(routed)
    assert order == sorted(moe_routers(model)) and len(out.router_logits) == len(order)
    for i, r in zip(order, out.router_logits):
        assert torch.equal(r, routed[i][0]), i
    info = dict(router_logits={i: routed[i][0] for i in order},
                topk_index={i: routed[i][1] for i in order},
                aux_loss=out.aux_loss.detach().clone())
    return logits, hidden, info


def routing_report(info, top_k):
    """softmax(router logits in float32) -> top-k (Qwen3.5-MoE and Qwen3-Next alike; norm_topk_prob
    only rescales the chosen weights).  Checks the model picked exactly those experts and returns
    (min over tokens and MoE layers of score[k-th] - score[(k+1)-th], {layer: that minimum})."""
    per_layer = {}
    for i, logits in info["router_logits"].items():
        scores = torch.softmax(logits.float(), dim=-1)
        top = scores.topk(top_k + 1, dim=-1).values
        per_layer[i] = (top[:, top_k - 1] - top[:, top_k]).min().item()
        ours = scores.topk(top_k, dim=-1).indices.sort(dim=-1).values
        assert torch.equal(ours, info["topk_index"][i].sort(dim=-1).values), f"layer {i} routing"
    return min(per_layer.values()), per_layer


@torch.no_grad()
def manual_greedy(model, prompt, steps):
    """Greedy decoding by hand: full forward without cache each step, plain argmax over the whole
    vocabulary (nothing suppressed).  Returns (sequences, min over steps of top1 - top2 logit)."""
    seq, margin = prompt.clone(), float("inf")
    for _ in range(steps):
        logits = model(input_ids=seq, use_cache=False).logits[:, -1].float()
        top = logits.topk(2, dim=-1)
        margin = min(margin, (top.values[:, 0] - top.values[:, 1]).min().item())
        seq = torch.cat([seq, top.indices[:, :1]], dim=1)
    return seq, margin


@torch.no_grad()
def hf_generate(model, prompt, use_cache):
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                         max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, use_cache=use_cache,
                         pad_token_id=0)
    if hasattr(model.model, "rope_deltas"):
        model.model.rope_deltas = None  # generate() leaves VLM mRoPE state behind; clear it
    return out


@torch.no_grad()
def packed_logits(model, doc_a, doc_b):
    la = model(input_ids=doc_a[None], use_cache=False).logits.float()
    lb = model(input_ids=doc_b[None], use_cache=False).logits.float()
    return torch.cat([la, lb], dim=1)


def to_bf16_like_load(model):
    """The fp32 model cast to bf16 with the RoPE inv_freq buffers kept float32 (what
    from_pretrained(dtype=bfloat16) gives; asserted in build_fixture)."""
    keep = {n: b.clone() for n, b in rotary_buffers(model).items()}
    m = copy.deepcopy(model).to(torch.bfloat16)
    for n, b in keep.items():
        mod_name, bname = n.rsplit(".", 1)
        setattr(m.get_submodule(mod_name), bname, b)
    return m


# ---------------------------------------------------------------------------------------------
# inputs: random text ids, drawn so that every MoE routing decision is robust


def random_text_ids(gen, shape):
    return torch.randint(TEXT_ID_LOW, TEXT_ID_HIGH + 1, shape, generator=gen, dtype=torch.int64)


def position_gaps(info, top_k, t, length):
    """{row: min over MoE layers of softmax score[k-th] - score[(k+1)-th] at position t}."""
    rows = next(iter(info["router_logits"].values())).shape[0] // length
    out = {}
    for r in range(rows):
        gaps = []
        for logits in info["router_logits"].values():
            top = torch.softmax(logits[r * length + t].float(), dim=-1).topk(top_k + 1).values
            gaps.append((top[top_k - 1] - top[top_k]).item())
        out[r] = min(gaps)
    return out


def near_ties(info_bf16, top_k):
    """[B*T] bool: some MoE layer's bf16 router logits have their k-th and (k+1)-th largest within
    4 bf16 ulps of the k-th (tests/test_decoder_parity.cpp's first_routing_near_ties criterion)."""
    out = None
    for logits in info_bf16["router_logits"].values():
        top = logits.float().sort(dim=-1, descending=True).values
        kth, nxt = top[:, top_k - 1], top[:, top_k]
        ulp = torch.pow(2.0, torch.floor(torch.log2(kth.abs().clamp_min(1e-30))) - 7)
        near = (kth - nxt) <= 4 * ulp
        out = near if out is None else out | near
    return out


def same_experts(info_a, info_b, r, t, length):
    return all(torch.equal(info_a["topk_index"][i][r * length + t].sort().values,
                           info_b["topk_index"][i][r * length + t].sort().values)
               for i in info_a["topk_index"])


class Judge:
    """Decides whether position t of each row of a batch routes robustly (MoE fixtures; for
    dense ones every position passes).  strict=True (input_ids): every MoE layer's top-k softmax
    gap is >= gap in the fp32 and in the bf16 forward, the bf16 forward (grouped_mm, and again with
    experts_implementation="eager") picks the fp32 experts, and the bf16 router logits have no
    near-tie (near_ties).  strict=False (packed documents, generation prompts): the fp32 gap only."""

    def __init__(self, model, model_bf16, moe, top_k):
        self.model, self.model_bf16, self.moe, self.top_k = model, model_bf16, moe, top_k

    def __call__(self, ids, t, gap, strict):
        rows, length = ids.shape
        if not self.moe:
            return [True] * rows
        info = run_forward(self.model, ids, moe=True)[2]
        g = position_gaps(info, self.top_k, t, length)
        ok = [g[r] >= gap for r in range(rows)]
        if strict:
            info_b, info_e = bf16_router_infos(self.model_bf16, ids)
            gb = position_gaps(info_b, self.top_k, t, length)
            tie = near_ties(info_b, self.top_k)
            for r in range(rows):
                ok[r] = (ok[r] and gb[r] >= gap and not bool(tie[r * length + t])
                         and same_experts(info, info_b, r, t, length)
                         and same_experts(info_b, info_e, r, t, length))
        return ok


def construct_ids(judge, gen, shape, gap, strict, forced=()):
    """Random text ids [rows, T], chosen left to right: all positions are first filled with a random
    draw; then, for t = 0..T-1 and each row, candidates are tried at position t -- a pending forced
    token first, then the initial draw, then fresh draws -- until judge() accepts position t
    (causality: later positions do not change it).  forced: (row, first position, token or
    callable(ids) -> token) placed at the first position >= first position where it is accepted."""
    rows, length = shape
    ids = random_text_ids(gen, shape)
    pending = {r: [f for f in forced if f[0] == r] for r in range(rows)}
    for t in range(length):
        queues = []
        for r in range(rows):
            q = []
            if pending[r] and t >= pending[r][0][1]:
                tok = pending[r][0][2]
                q.append(("forced", int(tok(ids) if callable(tok) else tok)))
            q.append(("draw", int(ids[r, t])))
            queues.append(q)
        done, kind = [False] * rows, [None] * rows
        for _ in range(64):
            active = [r for r in range(rows) if not done[r]]
            for r in active:
                nxt = queues[r].pop(0) if queues[r] else ("draw", int(random_text_ids(gen, (1,))))
                kind[r], ids[r, t] = nxt
            ok = judge(ids, t, gap, strict)
            for r in active:
                if ok[r]:
                    done[r] = True
                    if kind[r] == "forced":
                        pending[r].pop(0)
            if all(done):
                break
        else:
            raise RuntimeError(f"no robust token found at position {t}")
    assert not any(pending.values()), pending
    return ids


def bf16_router_infos(model_bf16, ids):
    """The bf16 model's routing info with transformers' grouped experts and with eager ones."""
    info_grouped = run_forward(model_bf16, ids, moe=True)[2]
    model_bf16.set_experts_implementation("eager")
    try:
        info_eager = run_forward(model_bf16, ids, moe=True)[2]
    finally:
        model_bf16.set_experts_implementation(EXPERTS_IMPL)
    return info_grouped, info_eager


def full_report(judge, ids, strict):
    """(fp32 min gap, bf16 min gap, bf16-vs-fp32 differing (token, layer)s, bf16 eager-vs-grouped_mm
    differing ones) over all positions of ids (bf16 items None unless strict)."""
    info = run_forward(judge.model, ids, moe=True)[2]
    gap, per_layer = routing_report(info, judge.top_k)
    out = dict(min_gap=gap, per_layer=per_layer)
    if strict:
        info_b, info_e = bf16_router_infos(judge.model_bf16, ids)
        out["min_gap_bf16"], out["per_layer_bf16"] = routing_report(info_b, judge.top_k)
        out["bf16_vs_fp32_selection_differs"] = base.selection_diffs(info, info_b)
        out["bf16_eager_selection_differs"] = base.selection_diffs(info_e, info_b)
        out["bf16_near_ties"] = int(near_ties(info_b, judge.top_k).sum().item())
    return out


# Construction accepts a position only with CONSTRUCT_GAP (> MIN_ROUTING_GAP) of headroom: the
# batched forward of the final ids can round a little differently (e.g. grouped_mm's per-expert
# group sizes change with the other tokens), and the final ids are checked against MIN_ROUTING_GAP.
CONSTRUCT_GAP = 2 * MIN_ROUTING_GAP


def choose_inputs(judge, seed):
    """input_ids [2, 16], generate_prompt [2, 6] (+ its greedy continuation), packed documents A [7]
    and B [9]; see the module docstring.  Returns (inputs, stats)."""
    moe = judge.moe
    st = {}
    g = torch.Generator().manual_seed(seed + 7)
    forced = [(0, 7, VOCAB - 1), (1, 3, TEXT_ID_LOW), (1, 12, lambda ids: ids[1, 5])]
    for attempt in range(20):
        ids = construct_ids(judge, g, (BATCH, SEQ), CONSTRUCT_GAP, True, forced)
        if not moe:
            break
        rep = full_report(judge, ids, True)
        if (min(rep["min_gap"], rep["min_gap_bf16"]) >= MIN_ROUTING_GAP
                and rep["bf16_vs_fp32_selection_differs"] == 0 and rep["bf16_eager_selection_differs"] == 0
                and rep["bf16_near_ties"] == 0):
            st.update(input_ids_attempts=attempt + 1, **{k: v for k, v in rep.items()})
            break
    else:
        raise RuntimeError("no robust input_ids")

    g = torch.Generator().manual_seed(seed + 11)
    for attempt in range(200):
        prompt = construct_ids(judge, g, (BATCH, PROMPT_LEN), CONSTRUCT_GAP, False)
        seq, margin = manual_greedy(judge.model, prompt, NEW_TOKENS)
        if margin < MIN_GREEDY_MARGIN:
            continue
        if moe:
            gap = full_report(judge, seq, False)["min_gap"]
            if gap < MIN_ROUTING_GAP:
                continue
            st["min_gap_generated"] = gap
        st.update(greedy_margin=margin, prompt_attempts=attempt + 1)
        break
    else:
        raise RuntimeError("no generation prompt with a robust greedy continuation")

    g = torch.Generator().manual_seed(seed + 13)
    docs = []
    for n in (DOC_A, DOC_B):
        doc = construct_ids(judge, g, (1, n), CONSTRUCT_GAP, False)
        if moe:
            st.setdefault("min_gap_packed", 1.0)
            st["min_gap_packed"] = min(st["min_gap_packed"], full_report(judge, doc, False)["min_gap"])
            assert st["min_gap_packed"] >= MIN_ROUTING_GAP, st["min_gap_packed"]
        docs.append(doc[0])
    return dict(input_ids=ids, prompt=prompt, greedy=seq, doc_a=docs[0], doc_b=docs[1]), st


# ---------------------------------------------------------------------------------------------
# linear attention diagnostics


@torch.no_grad()
def decay_stats(model, input_ids):
    """Per-token, per-value-head decay exp(g), g = -exp(A_log) * softplus(a + dt_bias), of every
    linear-attention layer in the reference forward (fp32), from pre-hooks on linear_attn."""
    mods = linear_attn_modules(model)
    inputs, handles = {}, []
    for i, m in mods.items():
        def pre(_m, args, kwargs, i=i):
            inputs[i] = kwargs.get("hidden_states", args[0] if args else None)
        handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    decays = []
    for i, m in mods.items():
        x = inputs[i]
        if hasattr(m, "in_proj_a"):
            a = m.in_proj_a(x)
        else:  # Qwen3-Next: fused in_proj_ba, per key-head group [b..., a...]
            a = m.fix_query_key_value_ordering(m.in_proj_qkvz(x), m.in_proj_ba(x))[5]
        g = -m.A_log.float().exp() * nn.functional.softplus(a.float() + m.dt_bias)
        decays.append(g.exp().flatten())
    d = torch.cat(decays)
    q = torch.quantile(d, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0]))
    return dict(decay_quantiles=[round(v, 4) for v in q.tolist()],
                decay_share_above_half=(d > 0.5).float().mean().item())


@torch.no_grad()
def state_reach(model, input_ids):
    """Change token 0 of row 0 and measure how much layer 0's output (a linear-attention layer
    whose only token mixing is the causal conv, window 4, and the recurrent state) moves at
    positions >= 4, relative to its norm: beyond the conv window only the state carries it."""
    ids2 = input_ids.clone()
    ids2[0, 0] = TEXT_ID_LOW + (ids2[0, 0] - TEXT_ID_LOW + 1) % (TEXT_ID_HIGH - TEXT_ID_LOW + 1)
    _, h1, _ = run_forward(model, input_ids)
    _, h2, _ = run_forward(model, ids2)
    rel = ((h1[0][0] - h2[0][0]).norm(dim=-1) / h1[0][0].norm(dim=-1))  # [T]
    # row 1 untouched (up to rounding: in a MoE layer the experts' token groups change size)
    assert (h1[0][1] - h2[0][1]).abs().max().item() < 1e-4
    return dict(state_reach_rel=[round(v, 4) for v in rel[CONV_KERNEL:].tolist()])


@torch.no_grad()
def vision_smoke(model):
    """The vision tower works with this config: one 4x4-patch image (2x2 merged = 4 image tokens)."""
    cfg = model.config
    g = torch.Generator().manual_seed(5)
    v = cfg.vision_config
    pixels = torch.randn(16, v.in_channels * v.temporal_patch_size * v.patch_size ** 2, generator=g)
    ids = torch.tensor([[VISION_START] + [IMAGE_TOKEN] * 4 + [VISION_END, 10, 11, 12]])
    mm = (ids == IMAGE_TOKEN).to(torch.int32)
    with_image = model(input_ids=ids, pixel_values=pixels, image_grid_thw=torch.tensor([[1, 4, 4]]),
                       mm_token_type_ids=mm, use_cache=False).logits
    model.model.rope_deltas = None
    without = model(input_ids=ids, use_cache=False).logits
    assert torch.isfinite(with_image).all()
    return (with_image[0, -1] - without[0, -1]).abs().max().item()


# ---------------------------------------------------------------------------------------------
# checkpoint files


def load(cls, path, dtype, moe):
    kwargs = {"experts_implementation": EXPERTS_IMPL} if moe else {}
    model, info = cls.from_pretrained(path, dtype=dtype, attn_implementation="eager",
                                      output_loading_info=True, **kwargs)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), (key, info.get(key))
    model.eval()
    assert text_config(model)._attn_implementation == "eager"
    if moe:
        assert text_config(model)._experts_implementation == EXPERTS_IMPL
    return model


def add_mtp_tensors(out_dir, seed):
    """Append MTP-style tensors to the last shard and to the index (transformers ignores ^mtp.*)."""
    index_path = os.path.join(out_dir, "model.safetensors.index.json")
    with open(index_path) as f:
        text = f.read()
    index = json.loads(text)
    assert json.dumps(index, indent=2, sort_keys=True) + "\n" == text  # transformers' own format
    shards = sorted(set(index["weight_map"].values()))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"], shards
    last = os.path.join(out_dir, shards[-1])
    with safe_open(last, "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert meta == {"format": "pt"}, meta
    g = torch.Generator().manual_seed(seed + 17)
    added = 0
    for name, shape in MTP_TENSORS.items():
        assert name not in tensors and name not in index["weight_map"]
        t = torch.randn(shape, generator=g) / (math.sqrt(shape[1]) if len(shape) == 2 else 10.0)
        tensors[name] = t.to(torch.bfloat16)
        index["weight_map"][name] = shards[-1]
        added += t.numel()
    write_safetensors(last, tensors, meta)
    index["metadata"]["total_size"] += 2 * added
    if "total_parameters" in index["metadata"]:
        index["metadata"]["total_parameters"] += added
    with open(index_path, "w", newline="\n") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return {name: shards[-1] for name in MTP_TENSORS}


def shard_summary(out_dir):
    with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    out = {}
    for k, v in sorted(wm.items()):
        part = k.split(".")[0] if not k.startswith("model.") else ".".join(k.split(".")[:2])
        out.setdefault(v, set()).add(part)
    return {k: sorted(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------


def build_fixture(name, spec, out_root):
    seed, moe, cls = spec["seed"], spec.get("moe", False), spec["cls"]
    model = build_model(spec, seed)
    cfg = text_config(model)
    assert list(cfg.layer_types) == LAYER_TYPES

    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    to_save = model.to(spec["save_dtype"])
    to_save.config.dtype = spec["save_dtype"]
    kwargs = {"max_shard_size": spec["max_shard_size"]} if spec["max_shard_size"] else {}
    to_save.save_pretrained(out_dir, **kwargs)
    del to_save, model

    extra = {}
    files = sorted(os.listdir(out_dir))
    if spec["max_shard_size"]:
        assert files == ["config.json", "generation_config.json", "model-00001-of-00002.safetensors",
                         "model-00002-of-00002.safetensors", "model.safetensors.index.json"], files
    else:
        assert files == ["config.json", "generation_config.json", "model.safetensors"], files

    # References always come from the checkpoint on disk, loaded with dtype float32 / bfloat16.
    model = load(cls, out_dir, torch.float32, moe)
    model_bf16 = load(cls, out_dir, torch.bfloat16, moe)
    for n, b in rotary_buffers(model_bf16).items():
        assert b.dtype == torch.float32, n
    cfg = text_config(model)
    top_k = cfg.num_experts_per_tok if moe else None
    inputs, st = choose_inputs(Judge(model, model_bf16, moe, top_k), seed)
    extra.update(st)

    logits, hidden, info = run_forward(model, inputs["input_ids"], moe=moe)
    logits_bf16, hidden_bf16, info_bf16 = run_forward(model_bf16, inputs["input_ids"], moe=moe)
    assert torch.isfinite(logits).all() and torch.isfinite(logits_bf16).all()
    # the bf16 load == the fp32 model cast to bf16 with RoPE inv_freq kept float32
    cast = to_bf16_like_load(model)
    lc, hc, _ = run_forward(cast, inputs["input_ids"])
    assert torch.equal(lc, logits_bf16) and all(torch.equal(a, b) for a, b in zip(hc, hidden_bf16))
    del cast

    if spec.get("mtp"):
        extra["mtp"] = add_mtp_tensors(out_dir, seed)
        extra["shards"] = shard_summary(out_dir)
        with_mtp = load(cls, out_dir, torch.float32, moe)  # asserts no unexpected / missing keys
        assert not any(n.startswith("mtp") for n, _ in with_mtp.state_dict().items())
        l2, h2, _ = run_forward(with_mtp, inputs["input_ids"])
        assert torch.equal(l2, logits) and all(torch.equal(a, b) for a, b in zip(h2, hidden))
        del with_mtp
    # AutoModelForCausalLM picks a text-only class for the VLM checkpoints; it gives the same logits
    auto = AutoModelForCausalLM.from_pretrained(
        out_dir, dtype=torch.float32, attn_implementation="eager",
        **({"experts_implementation": EXPERTS_IMPL} if moe else {})).eval()
    extra["auto_class"] = type(auto).__name__
    extra["auto_class_max_abs_diff"] = (run_forward(auto, inputs["input_ids"])[0] - logits).abs().max().item()
    assert extra["auto_class_max_abs_diff"] == 0.0, extra["auto_class_max_abs_diff"]
    del auto

    # greedy generation: generate() with cache == without cache == the argmax loop of choose_inputs
    gen_cache = hf_generate(model, inputs["prompt"], use_cache=True)
    gen_nocache = hf_generate(model, inputs["prompt"], use_cache=False)
    assert gen_cache.shape == (BATCH, PROMPT_LEN + NEW_TOKENS), gen_cache.shape
    assert torch.equal(gen_cache, gen_nocache), (gen_cache, gen_nocache)
    assert torch.equal(gen_cache, inputs["greedy"]), (gen_cache, inputs["greedy"])
    assert not (gen_cache[:, PROMPT_LEN:] == cfg.eos_token_id).any()
    l3, _, _ = run_forward(model, inputs["input_ids"], moe=moe)
    assert torch.equal(l3, logits)  # generate() left no state behind

    packed_ids = torch.cat([inputs["doc_a"], inputs["doc_b"]])[None]
    packed = packed_logits(model, inputs["doc_a"], inputs["doc_b"])
    together = model(input_ids=packed_ids, use_cache=False).logits.float()
    # causal: A's part of the unseparated row is A alone (up to rounding: other shapes)
    extra["packed_A_vs_unseparated_max_abs"] = (together[:, :DOC_A] - packed[:, :DOC_A]).abs().max().item()
    assert extra["packed_A_vs_unseparated_max_abs"] < 1e-4
    extra["packed_B_vs_unseparated_max_abs"] = (together[:, DOC_A:] - packed[:, DOC_A:]).abs().max().item()
    assert extra["packed_B_vs_unseparated_max_abs"] > 1e-2  # without the restart, B would see A

    extra.update(decay_stats(model, inputs["input_ids"]))
    extra.update(state_reach(model, inputs["input_ids"]))
    assert extra["decay_share_above_half"] >= 0.25, extra["decay_quantiles"]
    assert min(extra["state_reach_rel"]) > 1e-3, extra["state_reach_rel"]
    if hasattr(model.model, "visual"):
        extra["vision_effect"] = vision_smoke(model)
        assert extra["vision_effect"] > 1e-3

    if moe:
        moe_layers = sorted(info["router_logits"])
        extra["moe_layers"] = moe_layers
        assert routing_report(info, top_k)[0] == extra["min_gap"]
        assert routing_report(info_bf16, top_k)[0] == extra["min_gap_bf16"]
        ours = base.reference_aux_loss(info["router_logits"], cfg.num_experts, top_k)
        extra["aux_loss"] = info["aux_loss"].item()
        assert abs(ours.item() - extra["aux_loss"]) <= 1e-6, (ours.item(), extra["aux_loss"])
        eager = {}
        for dtype, ref in ((torch.float32, logits), (torch.bfloat16, logits_bf16)):
            m = cls.from_pretrained(out_dir, dtype=dtype, attn_implementation="eager",
                                    experts_implementation="eager").eval()
            diff = (run_forward(m, inputs["input_ids"])[0] - ref).abs().max().item()
            eager[str(dtype).replace("torch.", "")] = diff
            del m
        extra["eager_experts_vs_stored_max_abs"] = eager

    tensors = {
        "input_ids": inputs["input_ids"],
        "logits": logits,
        "logits_bf16": logits_bf16,
        "generate_prompt": inputs["prompt"],
        "generate_greedy": gen_cache.to(torch.int64),
        "packed_ids": packed_ids.to(torch.int64),
        "packed_logits": packed,
    }
    for i, h in enumerate(hidden):
        tensors[f"hidden.{i}"] = h
    for i, h in enumerate(hidden_bf16):
        tensors[f"hidden_bf16.{i}"] = h
    metadata = {
        "generator": GENERATOR,
        "fixture": name,
        "seed": str(seed),
        "inputs_seed": f"{seed + 7} (input_ids), {seed + 11} (generate_prompt), "
                       f"{seed + 13} (packed documents)",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "architecture": cls.__name__,
        "checkpoint_dtype": str(spec["save_dtype"]).replace("torch.", ""),
        "num_layers": str(len(hidden)),
        "layer_types": ",".join(cfg.layer_types),
        "reference": "eager attention, eval, no attention mask (causal), positions 0..T-1, use_cache=False; "
                     "logits/hidden: this dir loaded with from_pretrained(dtype=float32); *_bf16: loaded "
                     "with dtype=bfloat16 (== the fp32 model .to(bfloat16) with RoPE inv_freq kept float32), "
                     "outputs upcast to float32; hidden.{i}: raw output of decoder layer i of the text model "
                     "(forward hook, before the final norm)",
        "generate": f"generate_greedy = model.generate(generate_prompt, do_sample=False, max_new_tokens="
                    f"{NEW_TOKENS}, min_new_tokens={NEW_TOKENS}) in fp32 with transformers' cache: the "
                    f"prompt "
                    f"and {NEW_TOKENS} greedy tokens; identical with use_cache=False and to a plain argmax "
                    f"loop (nothing suppressed: eos is never the argmax); min top1-top2 logit margin "
                    f"{st['greedy_margin']:.4f}",
        "packed": f"packed_ids = document A ({DOC_A} tokens) then document B ({DOC_B} tokens); packed_logits "
                  f"= fp32 logits of A run alone and of B run alone (positions restarting at 0, fresh conv "
                  f"and recurrent state), concatenated along T",
        "notes": "hybrid decoder: linear_attention layers are Gated DeltaNet (causal depthwise conv, "
                 "kernel 4, "
                 "then the gated delta rule, a gated RMSNorm and out_proj), full_attention layers are gated "
                 "attention (q_proj rows per head = [query | gate], output * sigmoid(gate)) with q/k RMSNorm "
                 "and partial RoPE (8 of 32 head dims); every RMSNorm except linear_attn.norm scales by "
                 "(1 + weight); text ids are in 3..503 plus 511",
    }
    if cls is not Qwen3NextForCausalLM:
        metadata["notes"] += ("; 504..508 are kept for the vision special tokens (vision_start 504, "
                              "vision_end "
                              "505, image 507, video 508); mRoPE (mrope_section [2, 1, 1], interleaved) "
                              "reduces to plain RoPE for text-only positions (T = H = W = position)")
    if spec.get("mtp"):
        metadata["notes"] += ("; the last shard also holds " + ", ".join(MTP_TENSORS) +
                              " (random, named like the released checkpoints' MTP head), ignored by "
                              "transformers")
    if moe:
        moe_layers = extra["moe_layers"]
        for i in moe_layers:
            tensors[f"router_logits.{i}"] = info["router_logits"][i].float()
            tensors[f"router_logits_bf16.{i}"] = info_bf16["router_logits"][i].float()
        tensors["aux_loss"] = info["aux_loss"].to(torch.float32).reshape(())
        dense = [i for i in range(len(hidden)) if i not in moe_layers]
        metadata.update({
            "num_experts": str(cfg.num_experts),
            "top_k": str(top_k),
            "moe_layers": ",".join(str(i) for i in moe_layers),
            "moe_note": f"layers {moe_layers} are sparse MoE blocks (softmax top-{top_k} of "
                        f"{cfg.num_experts} experts, renormalised, plus a shared expert scaled by "
                        f"sigmoid(shared_expert_gate)); "
                        + (f"layers {dense} are dense MLPs" if dense else "no dense MLP layers"),
            "experts_implementation": f"{EXPERTS_IMPL} (requested explicitly; transformers' default)",
            "aux_loss": "out.aux_loss of the fp32 forward with output_router_logits=True and no "
                        "attention_mask "
                        "= load_balancing_loss_func(router logits of all MoE layers, num_experts, top_k): "
                        "E * sum_e f_e * mean_rows(softmax_e); raw, NOT multiplied by router_aux_loss_coef",
            "router_logits": "router_logits.{i}: [B*T, E] output of decoder layer i's mlp.gate in the fp32 "
                             "forward (rows b*T+t); router_logits_bf16.{i}: the bf16 forward's, upcast",
            "routing_gaps": f"min softmax gap k-th vs (k+1)-th score: input_ids fp32 {st['min_gap']:.3e}, "
                            f"bf16 {st['min_gap_bf16']:.3e} (bf16 picks the fp32 experts everywhere); "
                            f"packed documents {st['min_gap_packed']:.3e}, generated sequences "
                            f"{st['min_gap_generated']:.3e} (fp32); no bf16 router near-tie (k-th and "
                            f"(k+1)-th logit within 4 bf16 ulps) at any input_ids token",
            "input_selection": "input_ids, generate_prompt and the packed documents are random text ids "
                               "chosen token by token so that every routing decision is robust (see the "
                               "generator's docstring); the weights come from the seed alone",
        })
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    write_safetensors(os.path.join(out_dir, "reference.safetensors"), tensors, metadata)

    extra["input_ids"] = inputs["input_ids"].tolist()
    extra["generate_greedy"] = gen_cache.tolist()
    extra["packed_ids"] = packed_ids.tolist()
    return dict(logits_std=logits.std().item(), logits_max_abs=logits.abs().max().item(),
                bf16_vs_fp32_max_abs=(logits_bf16 - logits).abs().max().item(),
                bytes=base.dir_size(out_dir),
                files={f: os.path.getsize(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))},
                **extra)


def self_check(name, spec, out_root):
    """Reload the checkpoint from disk and reproduce every stored reference exactly."""
    out_dir = os.path.join(out_root, name)
    moe = spec.get("moe", False)
    with safe_open(os.path.join(out_dir, "reference.safetensors"), "pt") as f:
        ref = {k: f.get_tensor(k) for k in f.keys()}
    diffs = []
    for dtype, sfx in ((torch.float32, ""), (torch.bfloat16, "_bf16")):
        model = load(spec["cls"], out_dir, dtype, moe)
        logits, hidden, info = run_forward(model, ref["input_ids"], moe=moe)
        d = (logits - ref["logits" + sfx]).abs().max().item()
        dh = max((h - ref[f"hidden{sfx}.{i}"]).abs().max().item() for i, h in enumerate(hidden))
        assert d == 0.0 and dh == 0.0, f"{name}: {dtype} reload mismatch logits {d} hidden {dh}"
        if moe:
            assert sorted(k for k in ref if k.startswith(f"router_logits{sfx}.")) == sorted(
                f"router_logits{sfx}.{i}" for i in info["router_logits"])
            for i, r in info["router_logits"].items():
                assert torch.equal(r.float(), ref[f"router_logits{sfx}.{i}"]), f"{name}: router {i} {dtype}"
            if dtype == torch.float32:
                assert torch.equal(info["aux_loss"].float().reshape(()), ref["aux_loss"]), name
        if dtype == torch.float32:
            a, b = ref["packed_ids"][0, :DOC_A], ref["packed_ids"][0, DOC_A:]
            assert torch.equal(packed_logits(model, a, b), ref["packed_logits"]), name
            assert torch.equal(hf_generate(model, ref["generate_prompt"], True), ref["generate_greedy"]), name
        diffs.append(d)
    return tuple(diffs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "models"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    specs = fixture_specs()
    names = args.only or list(specs)
    out_root = os.path.normpath(args.out)
    os.makedirs(out_root, exist_ok=True)
    for name in names:
        st = build_fixture(name, specs[name], out_root)
        assert 0.5 <= st["logits_std"] <= 5.0, f"{name}: logits std {st['logits_std']}"
        assert st["bytes"] <= 2_400_000, f"{name}: {st['bytes']} bytes"
        print(f"{name}: seed {specs[name]['seed']}  logits std {st['logits_std']:.4f}  "
              f"max|logit| {st['logits_max_abs']:.4f}  "
              f"bf16-vs-fp32 max|diff| {st['bf16_vs_fp32_max_abs']:.4f}  "
              f"size {st['bytes']} B")
        for k, v in st.items():
            if k not in ("logits_std", "logits_max_abs", "bf16_vs_fp32_max_abs", "bytes"):
                print(f"    {k}: {v}")
    for name in names:
        d, db = self_check(name, specs[name], out_root)
        print(f"self-check {name}: reload reproduces logits/hidden/routers/packed/generate "
              f"(max abs diff fp32 {d}, bf16 {db})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
