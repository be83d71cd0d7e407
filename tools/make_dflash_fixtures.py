#!/usr/bin/env python3
"""Independent PyTorch reference for DFlash (block-diffusion) draft training (SPEC section 6),
written from the spec and the published semantics (z-lab/dflash model/dflash.py, SpecForge
specforge/core/dflash.py); all anchors' blocks run in one pass with a dense boolean mask over
[context | blocks], cross-checked against a per-block forward that sees only its own context
slice (no mask at all), in float64.

Target: tests/fixtures/models/llama3 (fp32, 4 decoder layers, H 64, vocab 512); its frozen
embedding is `model.embed_tokens.weight` [512,64] and its lm_head `lm_head.weight` [512,64]
(both in tests/fixtures/models/llama3/model.safetensors, not repeated here).
Batch B=2 x S=24, packed: row 0 = documents of 11 (positions 0..10) and 13 (11..23) tokens;
row 1 = one document of 19 tokens (0..18) + 5 padding tokens (id 0, padding_mask 0, position_ids
counting on, document_ids clamped onto the last real document). position_ids restart at 0 per
document. loss_mask: row 0 idx 2..23 except 16; row 1 idx 3..18 except 10.

Conventions (all indices are row indices 0..S-1 unless said otherwise):
  target_layer_ids = [0, 2]: output of target decoder layer i (= transformers
      hidden_states[i+1]); context_features = cat(raw layer-0 output, raw layer-2 output) [.,128],
      computed per document (positions 0..n-1), zeros on padding.
  context c = hidden_norm(fc(context_features)); it does NOT go through input_layernorm. In every
      draft layer the context supplies keys/values only: K = cat(k_norm(k_proj(c)),
      k_norm(k_proj(h))), V = cat(v_proj(c), v_proj(h)), Q = q_norm(q_proj(h)), where
      h = input_layernorm(block hidden); q_norm/k_norm are per-head RMSNorms over head_dim.
  RoPE (default, theta 10000, rotate-half layout, over all head_dim): context key j at
      position_ids[j]; block slot k of anchor a (query and key) at position_ids[a] + k.
  Block of anchor a: ids [input_ids[a], MASK x (bs-1)], MASK = mask_token_id 511, embedded with
      the target embedding; an invalid anchor slot (anchor_valid 0, anchor stored as 0) is all
      MASK at positions 0..bs-1 and its mask row is all False.
  Mask (attn_mask [B, A*bs, S + A*bs], keys = [context 0..S-1 | block 0 slots | block 1 | ...]):
      query in block i sees context j iff anchor_valid[i] and document_ids[j] ==
      document_ids[a_i] and j < a_i (strictly before the anchor; the anchor's own target hidden
      state is never visible) and padding_mask[j]; it sees all bs slots of its own block
      (bidirectional) and no other block. Fully masked rows (invalid anchors) output 0 from
      attention; their logits are stored as 0 and never reach the loss.
  Anchors (given, sorted, invalid ones last): loss_mask[a] == 1 and a + bs - 1 <= last index of
      a's document (the whole block inside the document; for one unpacked row this is SPEC's
      a <= S - bs).
  Labels: block slot k (1..bs-1) predicts input_ids[a + k]; label_valid iff anchor valid,
      a + k < S, document_ids[a + k] == document_ids[a], padding_mask[a + k] and
      loss_mask[a + k]. Slot 0 (the anchor) never has a loss. labels = input_ids[a+k] (0 where
      a+k >= S or the anchor is invalid).
  Weights w = label_valid * exp(-(k-1)/gamma); gamma 2 for bs 4 (chosen here: SPEC gives none
      for 4), 4 for bs 8 (SPEC). CE = -log_softmax(lm_head(norm(h)))[label].
      loss = sum(w * CE) / sum(w)   (normalised by the sum of weights, as SpecForge; no epsilon)
      acc = #(argmax == label & label_valid) / #label_valid   (unweighted)
      per k: loss_per_k[k] = sum_valid CE / count_per_k[k] (unweighted), acc_per_k, count_per_k;
      index 0 (anchor slot) is 0.

Writes tests/fixtures/dflash/reference.safetensors:
  input_ids, position_ids, document_ids  I64 [2, 24]
  loss_mask, padding_mask                U8  [2, 24]
  context_features    F32 [2, 24, 128]  raw target layer outputs [0, 2], concatenated
  context_projected   F32 [2, 24, 64]   hidden_norm(fc(context_features))
  anchors I64 [2, 4], anchor_valid U8 [2, 4]                  (block_size 4)
  block_input_ids, block_position_ids   I64 [2, 16]    slot k of anchor i at column i*4+k
  attn_mask           BOOL [2, 16, 40]
  labels I64 [2, 4, 4], label_valid U8 [2, 4, 4], loss_weights F32 [2, 4, 4]
  hidden              F32 [2, 4, 4, 64]  norm(final draft hidden); zeros for invalid anchors
  logits              F32 [2, 4, 4, 512] target lm_head(hidden); zeros for invalid anchors
  loss, acc, weight_sum F32 []   count I64 []
  loss_per_k, acc_per_k F32 [4]   count_per_k I64 [4]
  draft.{name}, grad.{name}  F32   every draft weight and d loss / d weight
  bug.shifted_labels.loss F32 []  same forward, slot k labelled with input_ids[a+k+1] (validity
                                  rule applied to a+k+1), same weights by k
  bug.context_le.loss     F32 []  context visible for j <= a (includes the anchor position)
  bs8.anchors, bs8.anchor_valid, bs8.label_valid [2,4,8], bs8.loss_weights [2,4,8], bs8.loss,
  bs8.acc, bs8.weight_sum, bs8.count, bs8.loss_per_k, bs8.acc_per_k, bs8.count_per_k [8],
  bs8.grad.{name} for name in BS8_GRADS: the same batch and weights, block_size 8, gamma 4,
      its own anchors.
Draft (2 layers, rms_norm_eps 1e-6, no biases, SiLU MLP, 6 query heads, 2 KV heads, head_dim 16,
  intermediate 64): fc.weight [64,128], hidden_norm.weight [64], norm.weight [64],
  layers.{i}.self_attn.{q_proj [96,64], k_proj [32,64], v_proj [32,64], o_proj [64,96]}.weight,
  layers.{i}.self_attn.{q_norm,k_norm}.weight [16], layers.{i}.mlp.{gate_proj [64,64],
  up_proj [64,64], down_proj [64,64]}.weight, layers.{i}.{input_layernorm,
  post_attention_layernorm}.weight [64]. Layer: h = x + o_proj(attn(input_layernorm(x), c));
  x' = h + down(silu(gate(n)) * up(n)), n = post_attention_layernorm(h). Output norm(x_last).

Deterministic: fixed seeds, CPU, single thread; running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_dflash_fixtures.py [--out tests/fixtures/dflash]
"""

import argparse
import copy
import math
import os
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import safetensors  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402
from transformers import AutoModelForCausalLM, Qwen3Config  # noqa: E402
from fixture_safetensors import write_safetensors  # noqa: E402
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, rotate_half  # noqa: E402

GENERATOR = "tools/make_dflash_fixtures.py"
SEED = 4004
B, S = 2, 24
DOCS = [[11, 13], [19]]                      # document lengths per row; the rest is padding
LOSS_MASK = [[(2, 24, {16})], [(3, 19, {10})]]   # per row: [start, end) minus holes
TARGET_LAYER_IDS = [0, 2]
MASK_TOKEN_ID = 511
N_LAYERS, N_HEADS, N_KV, HEAD_DIM, INTER = 2, 6, 2, 16, 64
ROPE_THETA, EPS = 10000.0, 1e-6
BS, GAMMA = 4, 2.0
ANCHORS = [[2, 7, 11, 14], [3, 9, 15, -1]]        # -1: invalid slot
BS8, GAMMA8 = 8, 4.0
ANCHORS8 = [[2, 11, 13, 15], [3, 6, 11, -1]]
WARMUP_STEPS, WARMUP_LR = 6, 5e-3     # acc per k strictly between 0 and 1 (bs 4)
BS8_GRADS = ["fc.weight", "hidden_norm.weight", "norm.weight", "layers.0.self_attn.k_proj.weight",
             "layers.0.self_attn.k_norm.weight", "layers.1.self_attn.q_proj.weight",
             "layers.1.mlp.down_proj.weight"]


def make_batch(gen, vocab):
    ids = torch.randint(3, vocab - 16, (B, S), generator=gen, dtype=torch.int64)   # never MASK
    pos = torch.zeros(B, S, dtype=torch.int64)
    doc = torch.zeros(B, S, dtype=torch.int64)
    lmask = torch.zeros(B, S, dtype=torch.uint8)
    pad = torch.zeros(B, S, dtype=torch.uint8)
    for b, lens in enumerate(DOCS):
        t = 0
        for d, n in enumerate(lens):
            pos[b, t:t + n] = torch.arange(n)
            doc[b, t:t + n] = d
            pad[b, t:t + n] = 1
            t += n
        ids[b, t:] = 0
        pos[b, t:] = pos[b, t - 1] + 1 + torch.arange(S - t)
        doc[b, t:] = len(lens) - 1
        for lo, hi, holes in LOSS_MASK[b]:
            for i in range(lo, hi):
                lmask[b, i] = 0 if i in holes else 1
    return dict(input_ids=ids, position_ids=pos, document_ids=doc, loss_mask=lmask, padding_mask=pad)


def doc_last_index(batch, b, a):
    d = batch["document_ids"][b]
    idx = [j for j in range(S) if d[j] == d[a] and batch["padding_mask"][b, j] == 1]
    return max(idx)


def make_anchors(batch, spec, bs):
    anchors = torch.zeros(B, len(spec[0]), dtype=torch.int64)
    valid = torch.zeros(B, len(spec[0]), dtype=torch.uint8)
    for b, row in enumerate(spec):
        for i, a in enumerate(row):
            if a < 0:
                continue
            assert batch["loss_mask"][b, a] == 1 and a + bs - 1 <= doc_last_index(batch, b, a), (b, a)
            anchors[b, i], valid[b, i] = a, 1
        real = [a for a in row if a >= 0]
        assert real == sorted(real) and row[len(real):] == [-1] * (len(row) - len(real))
    return anchors, valid


@torch.no_grad()
def target_features(model, batch):
    """Run the target on each document alone (positions 0..n-1); concatenate the raw outputs of
    TARGET_LAYER_IDS, laid back packed; zeros on padding."""
    H = model.config.hidden_size
    feats = torch.zeros(B, S, len(TARGET_LAYER_IDS) * H)
    layers = model.model.layers
    for b, lens in enumerate(DOCS):
        t = 0
        for n in lens:
            captured = {}
            hooks = [layer.register_forward_hook(
                lambda _m, _i, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
                for i, layer in enumerate(layers)]
            try:
                out = model(input_ids=batch["input_ids"][b:b + 1, t:t + n],
                            position_ids=torch.arange(n)[None], use_cache=False, output_hidden_states=True)
            finally:
                for h in hooks:
                    h.remove()
            for i in TARGET_LAYER_IDS:      # numbering check: hidden_states[i+1] = output of layer i
                assert i < len(layers) - 1 and torch.equal(out.hidden_states[i + 1], captured[i])
            feats[b, t:t + n] = torch.cat([captured[i][0] for i in TARGET_LAYER_IDS], dim=-1)
            t += n
    return feats


class RMSNorm(nn.Module):
    """weight * x / sqrt(mean(x^2) + eps), in the input's dtype (fp32 or fp64)."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


class Attention(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.q_proj = nn.Linear(H, N_HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(H, N_KV * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(H, N_KV * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(N_HEADS * HEAD_DIM, H, bias=False)
        self.q_norm = RMSNorm(HEAD_DIM)
        self.k_norm = RMSNorm(HEAD_DIM)


class MLP(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.gate_proj = nn.Linear(H, INTER, bias=False)
        self.up_proj = nn.Linear(H, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, H, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.self_attn = Attention(H)
        self.mlp = MLP(H)
        self.input_layernorm = RMSNorm(H)
        self.post_attention_layernorm = RMSNorm(H)


class Draft(nn.Module):
    def __init__(self, H, n_feat):
        super().__init__()
        self.fc = nn.Linear(n_feat * H, H, bias=False)
        self.hidden_norm = RMSNorm(H)
        self.layers = nn.ModuleList([Layer(H) for _ in range(N_LAYERS)])
        self.norm = RMSNorm(H)

    def init_(self, gen):
        with torch.no_grad():
            for name, p in self.named_parameters():
                r = torch.randn(p.shape, generator=gen)
                p.copy_(1.0 + 0.1 * r if name.endswith("norm.weight") else 0.08 * r)


def rope_cos_sin(pos, dtype):
    """cos/sin [..., HEAD_DIM] for integer positions, computed in float64."""
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
    ang = pos.to(torch.float64)[..., None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, pos):
    """x [B, n, heads, hd] rotated at positions pos [B, n] (rotate-half layout)."""
    cos, sin = rope_cos_sin(pos, x.dtype)
    return x * cos[:, :, None] + rotate_half(x) * sin[:, :, None]


def heads(x, n):
    return x.view(*x.shape[:-1], n, HEAD_DIM)


def layer_qkv(layer, c, x, ctx_pos, blk_pos):
    """Returns q [B,nb,nh,hd], K/V [B,nc+nb,nkv,hd] (context keys first) for one draft layer."""
    att = layer.self_attn
    h = layer.input_layernorm(x)
    q = rope(att.q_norm(heads(att.q_proj(h), N_HEADS)), blk_pos)
    kc = rope(att.k_norm(heads(att.k_proj(c), N_KV)), ctx_pos)
    kb = rope(att.k_norm(heads(att.k_proj(h), N_KV)), blk_pos)
    vc, vb = heads(att.v_proj(c), N_KV), heads(att.v_proj(h), N_KV)
    return q, torch.cat([kc, kb], dim=1), torch.cat([vc, vb], dim=1)


def attend(q, k, v, mask):
    """q [B,nq,nh,hd], k/v [B,nk,nkv,hd], mask [B,nq,nk] bool; rows with no visible key -> 0."""
    k = k.repeat_interleave(N_HEADS // N_KV, dim=2)
    v = v.repeat_interleave(N_HEADS // N_KV, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(HEAD_DIM)
    m = mask[:, None]
    any_row = m.any(-1, keepdim=True)
    s = s.masked_fill(~m, float("-inf")).masked_fill(~any_row, 0.0)
    p = torch.softmax(s, dim=-1) * any_row
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def run_layers(draft, c, x, ctx_pos, blk_pos, mask):
    for layer in draft.layers:
        q, k, v = layer_qkv(layer, c, x, ctx_pos, blk_pos)
        a = attend(q, k, v, mask)
        h = x + layer.self_attn.o_proj(a.reshape(*a.shape[:2], N_HEADS * HEAD_DIM))
        x = h + layer.mlp(layer.post_attention_layernorm(h))
    return draft.norm(x)


def block_inputs(batch, anchors, valid, bs):
    A = anchors.shape[1]
    ids = torch.full((B, A, bs), MASK_TOKEN_ID, dtype=torch.int64)
    ids[:, :, 0] = torch.where(valid == 1, batch["input_ids"].gather(1, anchors), MASK_TOKEN_ID)
    pos = batch["position_ids"].gather(1, anchors)[:, :, None] * valid[:, :, None] + torch.arange(bs)
    return ids.view(B, A * bs), pos.view(B, A * bs)


def dense_mask(batch, anchors, valid, bs, le=False):
    """[B, A*bs, S + A*bs]: see the module docstring. le=True: context j <= a (bug variant)."""
    A = anchors.shape[1]
    doc, pad = batch["document_ids"], batch["padding_mask"] == 1
    j = torch.arange(S)
    a = anchors[:, :, None]                                            # [B,A,1]
    before = (j <= a) if le else (j < a)
    ctx = before & (doc[:, None, :] == doc.gather(1, anchors)[:, :, None]) & pad[:, None, :]
    own = torch.eye(A, dtype=torch.bool)[None].repeat_interleave(bs, 2).expand(B, A, A * bs)
    m = torch.cat([ctx, own], dim=2) & (valid[:, :, None] == 1)      # [B,A,S+A*bs]
    return m.repeat_interleave(bs, dim=1)                              # [B,A*bs,S+A*bs]


def forward(draft, embed_w, head_w, feats, batch, anchors, valid, bs, le=False):
    """Dense pass over all blocks: returns (hidden [B,A,bs,H], logits [B,A,bs,V], mask)."""
    A = anchors.shape[1]
    c = draft.hidden_norm(draft.fc(feats))
    ids, bpos = block_inputs(batch, anchors, valid, bs)
    mask = dense_mask(batch, anchors, valid, bs, le)
    out = run_layers(draft, c, embed_w[ids], batch["position_ids"], bpos, mask)
    keep = (valid == 1).repeat_interleave(bs, dim=1)[:, :, None]
    out = out * keep                                                   # invalid blocks: zeros
    return out.view(B, A, bs, -1), (out @ head_w.T).view(B, A, bs, -1), mask


@torch.no_grad()
def per_block_forward(draft, embed_w, head_w, feats, batch, anchors, valid, bs):
    """Inference-style check: each valid block alone, context = its document's rows strictly
    before the anchor (a contiguous slice), no mask at all."""
    A = anchors.shape[1]
    out = torch.zeros(B, A, bs, head_w.shape[0], dtype=head_w.dtype)
    doc, pos = batch["document_ids"], batch["position_ids"]
    for b in range(B):
        for i in range(A):
            if not valid[b, i]:
                continue
            a = anchors[b, i].item()
            js = [j for j in range(a) if doc[b, j] == doc[b, a]]
            assert js == list(range(js[0], a)) if js else True
            c = draft.hidden_norm(draft.fc(feats[b:b + 1, js]))
            ids = torch.tensor([[batch["input_ids"][b, a].item()] + [MASK_TOKEN_ID] * (bs - 1)])
            bpos = pos[b, a] + torch.arange(bs)[None]
            mask = torch.ones(1, bs, len(js) + bs, dtype=torch.bool)
            h = run_layers(draft, c, embed_w[ids], pos[b:b + 1, js], bpos, mask)
            out[b, i] = (h @ head_w.T)[0]
    return out


def labels_for(batch, anchors, valid, bs, shift=0):
    """labels [B,A,bs] = input_ids[a+k+shift], label_valid [B,A,bs] (k >= 1, see docstring)."""
    k = torch.arange(bs)
    u = anchors[:, :, None] + k + shift
    uc = u.clamp(max=S - 1)
    g = lambda t: t.gather(1, uc.view(B, -1)).view(uc.shape)           # noqa: E731
    doc_a = batch["document_ids"].gather(1, anchors)[:, :, None]
    ok = ((k >= 1) & (u < S) & (valid[:, :, None] == 1) & (g(batch["document_ids"]) == doc_a)
          & (g(batch["padding_mask"]) == 1) & (g(batch["loss_mask"]) == 1))
    lab = torch.where((u < S) & (valid[:, :, None] == 1), g(batch["input_ids"]), 0)
    return lab, ok


def dflash_loss(logits, labels, ok, bs, gamma):
    k = torch.arange(bs)
    w = ok * torch.exp(-(k - 1).clamp(min=0).to(logits.dtype) / gamma)
    ce = -torch.log_softmax(logits, dim=-1).gather(-1, labels[..., None])[..., 0]
    wsum = w.sum()
    loss = (w * ce).sum() / wsum
    hit = (logits.argmax(-1) == labels) & ok
    cnt_k = ok.sum(dim=(0, 1))
    m = dict(loss=loss, weights=w.to(logits.dtype), weight_sum=wsum.detach(),
             count=ok.sum(), acc=hit.sum().float() / ok.sum(),
             count_per_k=cnt_k,
             loss_per_k=torch.where(ok, ce, 0).sum(dim=(0, 1)).detach() / cnt_k.clamp(min=1),
             acc_per_k=hit.sum(dim=(0, 1)).float() / cnt_k.clamp(min=1))
    return loss, m


def compute(draft, embed_w, head_w, feats, batch, anchors, valid, bs, gamma):
    hidden, logits, mask = forward(draft, embed_w, head_w, feats, batch, anchors, valid, bs)
    labels, ok = labels_for(batch, anchors, valid, bs)
    loss, m = dflash_loss(logits, labels, ok, bs, gamma)
    m.update(hidden=hidden, logits=logits, mask=mask, labels=labels, ok=ok)
    return loss, m


def top2_gap(x, mask):
    v = x.topk(2, dim=-1).values
    return (v[..., 0] - v[..., 1])[mask].min().item()


def check_rope():
    """Our rotate-half RoPE equals transformers' Qwen3 rotary embedding (default type)."""
    cfg = Qwen3Config(hidden_size=64, num_attention_heads=N_HEADS, num_key_value_heads=N_KV,
                      head_dim=HEAD_DIM, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    p = torch.arange(40)[None]
    cos, sin = Qwen3RotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float32), p)
    c2, s2 = rope_cos_sin(p, torch.float32)
    assert (cos - c2).abs().max() < 1e-5 and (sin - s2).abs().max() < 1e-5


def finite_difference_check(d64, e64, h64, f64, batch, anchors, valid):
    """Central differences in float64 on a few coordinates vs autograd (float64)."""
    d64.zero_grad()
    loss, _ = compute(d64, e64, h64, f64, batch, anchors, valid, BS, GAMMA)
    loss.backward()
    params = dict(d64.named_parameters())
    coords = [("fc.weight", (5, 77)), ("hidden_norm.weight", (9,)), ("norm.weight", (30,)),
              ("layers.0.self_attn.k_proj.weight", (3, 40)), ("layers.0.self_attn.k_norm.weight", (7,)),
              ("layers.0.self_attn.q_norm.weight", (2,)), ("layers.0.input_layernorm.weight", (11,)),
              ("layers.1.self_attn.v_proj.weight", (17, 5)), ("layers.1.self_attn.o_proj.weight", (60, 90)),
              ("layers.1.mlp.gate_proj.weight", (12, 33)), ("layers.1.post_attention_layernorm.weight", (50,))]
    eps, worst = 1e-6, 0.0
    for name, idx in coords:
        p = params[name]
        with torch.no_grad():
            orig = p[idx].item()
            p[idx] = orig + eps
            lp = compute(d64, e64, h64, f64, batch, anchors, valid, BS, GAMMA)[0].item()
            p[idx] = orig - eps
            lm = compute(d64, e64, h64, f64, batch, anchors, valid, BS, GAMMA)[0].item()
            p[idx] = orig
        fd, ag = (lp - lm) / (2 * eps), p.grad[idx].item()
        err = abs(fd - ag) / max(1e-4, abs(ag))
        worst = max(worst, err)
        assert err < 1e-5 and abs(ag) > 1e-7, (name, idx, fd, ag)
    return worst, {n: p.grad.clone() for n, p in params.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "dflash"))
    ap.add_argument("--target", default=os.path.join(here, "..", "tests", "fixtures", "models", "llama3"))
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)
    check_rope()

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tcfg = model.config
    for p in model.parameters():
        p.requires_grad_(False)
    assert MASK_TOKEN_ID < tcfg.vocab_size and N_LAYERS <= tcfg.num_hidden_layers
    batch = make_batch(gen, tcfg.vocab_size)
    feats = target_features(model, batch)
    embed_w = model.model.embed_tokens.weight.detach()
    head_w = model.lm_head.weight.detach()
    anchors, valid = make_anchors(batch, ANCHORS, BS)
    anchors8, valid8 = make_anchors(batch, ANCHORS8, BS8)

    draft = Draft(tcfg.hidden_size, len(TARGET_LAYER_IDS))
    draft.init_(gen)

    # Warm-up: deterministic Adam steps on this batch (both block sizes), so that the stored
    # draft predicts some labels (random weights give acc == 0) and uses its context.
    opt = torch.optim.Adam(draft.parameters(), lr=WARMUP_LR)
    for _ in range(WARMUP_STEPS):
        opt.zero_grad()
        l4 = compute(draft, embed_w, head_w, feats, batch, anchors, valid, BS, GAMMA)[0]
        l8 = compute(draft, embed_w, head_w, feats, batch, anchors8, valid8, BS8, GAMMA8)[0]
        (l4 + l8).backward()
        opt.step()
    del opt
    names = [n for n, _ in draft.named_parameters()]

    # --- main case, block size 4 ---
    draft.zero_grad()
    loss, m = compute(draft, embed_w, head_w, feats, batch, anchors, valid, BS, GAMMA)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in draft.named_parameters()}
    ok = m["ok"]
    hits = round(m["acc"].item() * m["count"].item())
    assert 0 < hits < m["count"].item(), f"want some hits and misses, got {hits}/{m['count'].item()}"
    for k in range(1, BS):
        hk = round(m["acc_per_k"][k].item() * m["count_per_k"][k].item())
        assert 0 < hk < m["count_per_k"][k].item(), f"k={k}: want hits and misses"
    assert top2_gap(m["logits"].detach(), ok) > 1e-3, "argmax near-tie"
    # every rule is exercised: zero-context block, a hole inside a block, an invalid slot
    assert (~ok[:, :, 1:]).any() and not valid.all()
    assert not m["mask"][0, 2 * BS, :S].any(), "anchor at a document start sees no context"

    # float64 twin: dense vs per-block (no mask) forward, fp32 vs fp64, finite differences
    d64 = copy.deepcopy(draft).double()
    e64, h64, f64 = embed_w.double(), head_w.double(), feats.double()
    with torch.no_grad():
        loss64, m64 = compute(d64, e64, h64, f64, batch, anchors, valid, BS, GAMMA)
        ref = per_block_forward(d64, e64, h64, f64, batch, anchors, valid, BS)
        ref32 = per_block_forward(draft, embed_w, head_w, feats, batch, anchors, valid, BS)
    d_dense64 = (m64["logits"] - ref).abs().max().item()
    d_dense32 = (m["logits"].detach().double() - ref).abs().max().item()
    d_loop32 = (ref32.double() - ref).abs().max().item()
    assert d_dense64 < 1e-10 and d_dense32 < 1e-4 and d_loop32 < 1e-4, (d_dense64, d_dense32, d_loop32)
    d_loss = abs(loss.item() - loss64.item())
    assert d_loss < 1e-5 * max(1.0, loss64.item()), d_loss
    fd_worst, g64 = finite_difference_check(d64, e64, h64, f64, batch, anchors, valid)
    g_err = max((grads[n].double() - g64[n]).abs().max().item() / max(1e-6, g64[n].abs().max().item())
                for n in names)
    assert g_err < 1e-4, g_err
    print(f"checks: dense-vs-block fp64 {d_dense64:.1e} fp32 {d_dense32:.1e} (loop fp32 {d_loop32:.1e}); "
          f"loss fp32-fp64 {d_loss:.1e}; grads fp32 vs fp64 rel {g_err:.1e}; finite diff rel {fd_worst:.1e}")

    # --- bug variants (same weights) ---
    with torch.no_grad():
        lab_s, ok_s = labels_for(batch, anchors, valid, BS, shift=1)
        bug_shift, _ = dflash_loss(m["logits"].detach(), lab_s, ok_s, BS, GAMMA)
        _, logits_le, mask_le = forward(draft, embed_w, head_w, feats, batch, anchors, valid, BS, le=True)
        bug_le, _ = dflash_loss(logits_le, m["labels"], ok, BS, GAMMA)
    assert (mask_le & ~m["mask"]).sum() == int(valid.sum()) * BS   # exactly the anchor column added
    for nm, v in (("shifted_labels", bug_shift), ("context_le", bug_le)):
        rel = abs(v.item() - loss.item()) / loss.item()
        print(f"bug.{nm}.loss {v.item():.6f} (correct {loss.item():.6f}, rel diff {rel:.3f})")
        assert rel > 0.05, f"bug variant {nm} too close to the correct loss"

    # --- block size 8 ---
    draft.zero_grad()
    loss8, m8 = compute(draft, embed_w, head_w, feats, batch, anchors8, valid8, BS8, GAMMA8)
    loss8.backward()
    with torch.no_grad():
        loss8_64, m8_64 = compute(d64, e64, h64, f64, batch, anchors8, valid8, BS8, GAMMA8)
        ref8 = per_block_forward(d64, e64, h64, f64, batch, anchors8, valid8, BS8)
    assert (m8_64["logits"] - ref8).abs().max().item() < 1e-10
    assert abs(loss8.item() - loss8_64.item()) < 1e-5 * max(1.0, loss8_64.item())
    assert top2_gap(m8["logits"].detach(), m8["ok"]) > 1e-3, "argmax near-tie (bs 8)"

    tensors = dict(batch)
    tensors.update(context_features=feats, anchors=anchors, anchor_valid=valid)
    with torch.no_grad():
        tensors["context_projected"] = draft.hidden_norm(draft.fc(feats))
    bids, bpos = block_inputs(batch, anchors, valid, BS)
    tensors.update(block_input_ids=bids, block_position_ids=bpos, attn_mask=m["mask"],
                   labels=m["labels"], label_valid=ok.to(torch.uint8), loss_weights=m["weights"].detach(),
                   hidden=m["hidden"].detach(), logits=m["logits"].detach(), loss=loss.detach(),
                   acc=m["acc"], weight_sum=m["weight_sum"], count=m["count"],
                   loss_per_k=m["loss_per_k"], acc_per_k=m["acc_per_k"], count_per_k=m["count_per_k"])
    tensors.update({f"draft.{n}": p.detach().clone() for n, p in draft.named_parameters()})
    tensors.update({f"grad.{n}": g for n, g in grads.items()})
    tensors["bug.shifted_labels.loss"] = bug_shift
    tensors["bug.context_le.loss"] = bug_le
    tensors.update({"bs8.anchors": anchors8, "bs8.anchor_valid": valid8,
                    "bs8.label_valid": m8["ok"].to(torch.uint8), "bs8.loss_weights": m8["weights"].detach(),
                    "bs8.loss": loss8.detach(), "bs8.acc": m8["acc"], "bs8.weight_sum": m8["weight_sum"],
                    "bs8.count": m8["count"], "bs8.loss_per_k": m8["loss_per_k"],
                    "bs8.acc_per_k": m8["acc_per_k"], "bs8.count_per_k": m8["count_per_k"]})
    params = dict(draft.named_parameters())
    tensors.update({f"bs8.grad.{n}": params[n].grad.clone() for n in BS8_GRADS})
    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())

    print(f"bs4: loss {loss.item():.6f} acc {m['acc'].item():.4f} count {m['count'].item()} "
          f"weight_sum {m['weight_sum'].item():.4f} per-k count {m['count_per_k'].tolist()} "
          f"acc {[round(x, 3) for x in m['acc_per_k'].tolist()]}")
    print(f"bs8: loss {loss8.item():.6f} acc {m8['acc'].item():.4f} count {m8['count'].item()} "
          f"per-k count {m8['count_per_k'].tolist()} acc {[round(x, 3) for x in m8['acc_per_k'].tolist()]}")

    metadata = {
        "generator": GENERATOR,
        "seed": str(SEED),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "target": "tests/fixtures/models/llama3 (fp32, eager); embed model.embed_tokens.weight, "
                  "lm_head lm_head.weight",
        "target_layer_ids": str(TARGET_LAYER_IDS),
        "mask_token_id": str(MASK_TOKEN_ID),
        "block_size": str(BS),
        "gamma": str(GAMMA),
        "bs8_block_size": str(BS8),
        "bs8_gamma": str(GAMMA8),
        "bs8_grads": ",".join(BS8_GRADS),
        "draft_config": f"num_hidden_layers {N_LAYERS}, hidden 64, num_attention_heads {N_HEADS}, "
                        f"num_key_value_heads {N_KV}, head_dim {HEAD_DIM}, intermediate {INTER}, "
                        f"rms_norm_eps {EPS}, rope default theta {ROPE_THETA}, silu, no bias",
        "draft_weights": f"seeded 1+0.1*randn (norms) / 0.08*randn (matrices), then {WARMUP_STEPS} Adam "
                         f"steps (lr {WARMUP_LR}) on this batch's bs{BS}+bs{BS8} losses; stored weights "
                         "are final",
        "notes": "context c = hidden_norm(fc(context_features)); per layer K = cat(k_norm(k_proj(c)), "
                 "k_norm(k_proj(input_layernorm(x)))), V likewise without norm, Q from the block only; RoPE: "
                 "context j at position_ids[j], block slot k at position_ids[a]+k; mask: context j visible "
                 "iff same document and j < a (and real), own block bidirectional, other blocks never; "
                 "labels slot k>=1 -> input_ids[a+k] if a+k<S, same doc, real, loss-masked; "
                 "w = exp(-(k-1)/gamma); loss = sum(w*CE)/sum(w); acc unweighted over label_valid.",
    }
    path = os.path.join(args.out, "reference.safetensors")
    write_safetensors(path, tensors, metadata)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} B")


if __name__ == "__main__":
    sys.exit(main())
