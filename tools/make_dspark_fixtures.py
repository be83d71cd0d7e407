#!/usr/bin/env python3
"""Independent PyTorch reference for DSpark draft training: a DFlash-style block draft whose
every slot predicts (slot k of anchor a -> token a+k+1), a low-rank Markov head that adds a
bias from the previous token to each slot's logits, and a confidence head that predicts each
slot's acceptance rate. Written from the published semantics (deepseek-ai/DeepSpec
deepspec/modeling/dspark/{qwen3/modeling.py, common.py, markov_head.py, loss.py},
deepspec/eval/dspark/draft_ops.py); all anchors' blocks run in one pass with a dense boolean
mask over [context | blocks], cross-checked in float64 against a per-block forward that sees
only its own context slice (no mask at all).

Target: tests/fixtures/models/llama3 (fp32, 4 decoder layers, H 64, vocab 512); its frozen
embedding is `model.embed_tokens.weight` [512,64], its final norm `model.norm.weight` and its
lm_head `lm_head.weight` [512,64] (in tests/fixtures/models/llama3/model.safetensors, not
repeated here). The draft shares the embedding and the lm_head (frozen).
Batch B=2 x S=24, packed, the same as tests/fixtures/dflash (same seed, same input_ids):
row 0 = documents of 11 (positions 0..10) and 13 (11..23) tokens; row 1 = one document of 19
tokens (0..18) + 5 padding tokens (id 0, padding_mask 0, position_ids counting on,
document_ids clamped onto the last real document). position_ids restart at 0 per document.
loss_mask: row 0 idx 2..23 except 16; row 1 idx 3..18 except 10.

Conventions (all indices are row indices 0..S-1 unless said otherwise; bs = block size 4):
  target_layer_ids = [0, 2]: output of target decoder layer i (= transformers
      hidden_states[i+1]); context_features = cat(raw layer-0 output, raw layer-2 output) [.,128],
      computed per document (positions 0..n-1), zeros on padding.
  Target logits per row index j: lm_head(final_norm(last decoder layer output at j)) of the
      target run on j's document alone (its distribution for the token at j+1); zeros on padding.
  context c = hidden_norm(fc(context_features)); it does NOT go through input_layernorm. In every
      draft layer the context supplies keys/values only: K = cat(k_norm(k_proj(c)),
      k_norm(k_proj(h))), V = cat(v_proj(c), v_proj(h)), Q = q_norm(q_proj(h)), where
      h = input_layernorm(block hidden); q_norm/k_norm are per-head RMSNorms over head_dim;
      scores scaled by head_dim^-0.5; GQA (query head n uses kv head n // 2).
  RoPE (default, theta 10000, rotate-half layout, over all head_dim): context key j at
      position_ids[j]; block slot k of anchor a (query and key) at position_ids[a] + k.
  Block of anchor a: ids [input_ids[a], MASK x (bs-1)], MASK = mask_token_id 511, embedded with
      the target embedding; an invalid anchor slot (anchor_valid 0, anchor stored as 0) is all
      MASK at positions 0..bs-1 and its mask row is all False.
  Mask (attn_mask [B, A*bs, S + A*bs], keys = [context 0..S-1 | block 0 slots | block 1 | ...]):
      query in block i sees context j iff anchor_valid[i] and document_ids[j] ==
      document_ids[a_i] and j < a_i (strictly before the anchor) and padding_mask[j]; it sees all
      bs slots of its own block (bidirectional) and no other block. Rows of invalid anchors see
      nothing; their attention output is 0 and every per-slot output of theirs is stored as 0.
  hidden h_k = norm(final draft hidden) of slot k; base_logits_k = lm_head(h_k).
  Anchors (given, sorted, invalid ones last): loss_mask[a] == 1 and a+1 is a real, loss-masked
      token of a's document (DeepSpec's candidate rule loss_mask[a] & loss_mask[a+1], plus the
      same-document condition packing needs), so slot 0 is always supervised.
  Labels (every slot, the anchor slot included): labels[k] = input_ids[min(a+k+1, S-1)]
      (DeepSpec clamps the index to the row; the clamp only matters on masked slots);
      0 for invalid anchors.
  eval_mask[k] = cumprod over k' <= k of (anchor valid, a+k'+1 < S, document_ids[a+k'+1] ==
      document_ids[a], padding_mask[a+k'+1], loss_mask[a+k'+1]): only the contiguous valid
      prefix of a block is supervised (a slot after a hole / document end / row end never is).
  prev_ids (Markov head input, teacher forcing): prev[0] = input_ids[a] (the anchor token),
      prev[k] = labels[k-1] for k >= 1 (= input_ids[a+k], clamped to the row); 0 for invalid.
  Markov bias (vanilla, rank r 8): bias_k = markov_w2 @ markov_w1[prev_k]  (markov_w1 is an
      Embedding [V, r], markov_w2 a Linear r -> V without bias, weight [V, r]);
      corrected_logits_k = base_logits_k + bias_k (raw logits; no temperature anywhere).
  Confidence head: confidence_logits_k = proj.weight . cat(h_k, markov_w1[prev_k]) + proj.bias
      (h_k the final-normed draft hidden; gradients flow into the backbone and markov_w1 too).
  target_logits[k] = target logits at row index min(a+k+1, S-1) - 1 (= a+k on every supervised
      slot; DeepSpec's clamp makes it S-2 past the row end); zeros for invalid anchors.
  p_d = softmax(corrected_logits), p_t = softmax(target_logits) (fp32);
      l1_k = sum_v |p_d - p_t|;  confidence_target c*_k = clamp(1 - l1_k / 2, 0, 1), DETACHED.
  Weights w_k = eval_mask_k * exp(-k / gamma), gamma 4 (k = 0 for the anchor slot: weight 1).
      den = sum(w) + 1e-6 (DeepSpec adds 1e-6 to every denominator)
      loss_ce   = sum(w * CE(corrected_logits, labels)) / den
      loss_l1   = sum(w * l1) / den
      loss_conf = sum(w * BCEWithLogits(confidence_logits, c*)) / den
      loss      = 0.1 * loss_ce + 0.9 * loss_l1 + 1.0 * loss_conf
  acc_per_k[k] = #(argmax corrected_logits == label & eval_mask) / count_per_k[k],
      count_per_k[k] = #eval_mask at slot k (unweighted); acc/count the same over all slots.
  Inference (greedy, one backbone pass per valid anchor): prev_0 = anchor token; for
      k = 0..bs-1: corrected = base_logits_k + bias(prev_k), token_k = argmax(corrected),
      confidence = sigmoid(conf head(h_k, markov_w1[prev_k])), prev_{k+1} = token_k.

Writes tests/fixtures/dspark/reference.safetensors:
  input_ids, position_ids, document_ids  I64 [2, 24]
  loss_mask, padding_mask                U8  [2, 24]
  context_features    F32 [2, 24, 128]  raw target layer outputs [0, 2], concatenated
  context_projected   F32 [2, 24, 64]   hidden_norm(fc(context_features))
  anchors I64 [2, 4], anchor_valid U8 [2, 4]                  (block_size 4)
  block_input_ids, block_position_ids   I64 [2, 16]    slot k of anchor i at column i*4+k
  attn_mask           BOOL [2, 16, 40]
  labels, prev_ids    I64 [2, 4, 4]
  eval_mask           U8  [2, 4, 4]    the cumprod validity
  loss_weights        F32 [2, 4, 4]    eval_mask * exp(-k/gamma)
  hidden              F32 [2, 4, 4, 64]   h_k (final-normed draft hidden); zeros for invalid anchors
  base_logits, corrected_logits, target_logits  F32 [2, 4, 4, 512]; zeros for invalid anchors
  confidence_logits, confidence_target          F32 [2, 4, 4];       zeros for invalid anchors
  loss_ce, loss_l1, loss_conf, loss, weight_sum (= sum(w), no epsilon), acc  F32 []
  count I64 []   acc_per_k F32 [4]   count_per_k I64 [4]
  greedy_chain        I64 [2, 4, 4]   inference tokens per valid anchor; 0 for invalid anchors
  greedy_chain_confidence F32 [2, 4, 4]  sigmoid of the confidence head with inference prevs
  draft.{name}, grad.{name}  F32   every draft weight and d loss / d weight
Draft (2 layers, rms_norm_eps 1e-6, no biases except the confidence head's, SiLU MLP, 4 query
  heads, 2 KV heads, head_dim 16, intermediate 96, markov rank 8): fc.weight [64,128],
  hidden_norm.weight [64], norm.weight [64], layers.{i}.self_attn.{q_proj [64,64],
  k_proj [32,64], v_proj [32,64], o_proj [64,64]}.weight, layers.{i}.self_attn.{q_norm,
  k_norm}.weight [16], layers.{i}.mlp.{gate_proj [96,64], up_proj [96,64],
  down_proj [64,96]}.weight, layers.{i}.{input_layernorm, post_attention_layernorm}.weight [64],
  markov_head.markov_w1.weight [512,8], markov_head.markov_w2.weight [512,8],
  confidence_head.proj.weight [1,72], confidence_head.proj.bias [1].
  Layer: h = x + o_proj(attn(input_layernorm(x), c)); x' = h + down(silu(gate(n)) * up(n)),
  n = post_attention_layernorm(h). Output norm(x_last).

Deterministic: fixed seeds, CPU, single thread; the whole fixture is built twice in-process and
compared bit for bit, and running the script twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_dspark_fixtures.py [--out tests/fixtures/dspark]
"""

import argparse
import copy
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
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding  # noqa: E402
from fixture_safetensors import read_safetensors, same_bits, write_safetensors  # noqa: E402

GENERATOR = "tools/make_dspark_fixtures.py"
BATCH_SEED = 4004          # the DFlash fixture's seed: its first draw is the same input_ids
DRAFT_SEED = 5005
B, S = 2, 24
DOCS = [[11, 13], [19]]                          # document lengths per row; the rest is padding
LOSS_MASK = [[(2, 24, {16})], [(3, 19, {10})]]   # per row: [start, end) minus holes
TARGET_LAYER_IDS = [0, 2]
MASK_TOKEN_ID = 511
N_LAYERS, N_HEADS, N_KV, HEAD_DIM, INTER = 2, 4, 2, 16, 96
ROPE_THETA, EPS = 10000.0, 1e-6
BS, GAMMA, RANK = 4, 4.0, 8
CE_ALPHA, L1_ALPHA, CONF_ALPHA, DEN_EPS = 0.1, 0.9, 1.0, 1e-6
# row 0: 2 full block; 8 runs past its document's end (labels 9, 10 | 11 is the next document);
#        11 document start (no context), full; 20 runs past the row end (labels 21..23 | 24).
# row 1: 3 full; 8 hits the loss-mask hole at 10 (labels 9 | 10, and 11, 12 are cut by cumprod);
#        15 runs into padding (labels 16..18 | 19); one invalid slot.
ANCHORS = [[2, 8, 11, 20], [3, 8, 15, -1]]
WARMUP_STEPS, WARMUP_LR = 12, 1e-2   # acc per k strictly between 0 and 1
MARKOV_STD = (0.3, 0.3)    # init std of markov_w1, markov_w2: the bias flips some argmaxes


# ----------------------------------------------------------------------------- batch, target

def make_batch(gen, vocab):
    ids = torch.randint(3, vocab - 16, (B, S), generator=gen, dtype=torch.int64)   # never MASK
    pos = torch.zeros(B, S, dtype=torch.int64)
    doc = torch.zeros(B, S, dtype=torch.int64)
    lmask = torch.zeros(B, S, dtype=torch.uint8)
    pad = torch.zeros(B, S, dtype=torch.uint8)
    for b, lens in enumerate(DOCS):
        start = 0
        for d, n in enumerate(lens):
            pos[b, start:start + n] = torch.arange(n)
            doc[b, start:start + n] = d
            pad[b, start:start + n] = 1
            start += n
        ids[b, start:] = 0
        pos[b, start:] = pos[b, start - 1] + 1 + torch.arange(S - start)
        doc[b, start:] = len(lens) - 1
        for lo, hi, holes in LOSS_MASK[b]:
            for i in range(lo, hi):
                lmask[b, i] = 0 if i in holes else 1
    return dict(input_ids=ids, position_ids=pos, document_ids=doc, loss_mask=lmask, padding_mask=pad)


def same_doc_real(batch, b, a, j):
    return (0 <= j < S and batch["padding_mask"][b, j] == 1
            and batch["document_ids"][b, j] == batch["document_ids"][b, a])


def make_anchors(batch):
    A = len(ANCHORS[0])
    anchors = torch.zeros(B, A, dtype=torch.int64)
    valid = torch.zeros(B, A, dtype=torch.uint8)
    for b, row in enumerate(ANCHORS):
        real = [a for a in row if a >= 0]
        assert real == sorted(real) and row[len(real):] == [-1] * (len(row) - len(real))
        for i, a in enumerate(real):
            assert batch["loss_mask"][b, a] == 1 and batch["loss_mask"][b, a + 1] == 1, (b, a)
            assert same_doc_real(batch, b, a, a + 1), (b, a)
            anchors[b, i], valid[b, i] = a, 1
    return anchors, valid


@torch.no_grad()
def run_target(model, batch):
    """Each document alone (positions 0..n-1): context features (raw outputs of
    TARGET_LAYER_IDS, concatenated) and the target's logits, laid back packed; zeros on padding."""
    H, V = model.config.hidden_size, model.config.vocab_size
    feats = torch.zeros(B, S, len(TARGET_LAYER_IDS) * H)
    tlogits = torch.zeros(B, S, V)
    layers = model.model.layers
    for b, lens in enumerate(DOCS):
        start = 0
        for n in lens:
            got = {}
            hooks = [layer.register_forward_hook(
                lambda _m, _i, out, i=i: got.__setitem__(i, out[0] if isinstance(out, tuple) else out))
                for i, layer in enumerate(layers)]
            try:
                out = model(input_ids=batch["input_ids"][b:b + 1, start:start + n],
                            position_ids=torch.arange(n)[None], use_cache=False, output_hidden_states=True)
            finally:
                for h in hooks:
                    h.remove()
            for i in TARGET_LAYER_IDS:      # numbering check: hidden_states[i+1] = output of layer i
                assert i < len(layers) - 1 and torch.equal(out.hidden_states[i + 1], got[i])
            last = got[len(layers) - 1]
            by_hand = model.model.norm(last) @ model.lm_head.weight.T
            assert (by_hand - out.logits).abs().max() < 1e-5
            feats[b, start:start + n] = torch.cat([got[i][0] for i in TARGET_LAYER_IDS], dim=-1)
            tlogits[b, start:start + n] = out.logits[0]
            start += n
    return feats, tlogits


# ----------------------------------------------------------------------------- draft model

class Norm(nn.Module):
    """RMSNorm over the last axis: weight * x / sqrt(mean(x^2) + eps)."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return self.weight * x * (x.square().mean(-1, keepdim=True) + EPS).rsqrt()


class SelfAttn(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.q_proj = nn.Linear(H, N_HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(H, N_KV * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(H, N_KV * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(N_HEADS * HEAD_DIM, H, bias=False)
        self.q_norm = Norm(HEAD_DIM)
        self.k_norm = Norm(HEAD_DIM)


class FeedForward(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.gate_proj = nn.Linear(H, INTER, bias=False)
        self.up_proj = nn.Linear(H, INTER, bias=False)
        self.down_proj = nn.Linear(INTER, H, bias=False)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, H):
        super().__init__()
        self.self_attn = SelfAttn(H)
        self.mlp = FeedForward(H)
        self.input_layernorm = Norm(H)
        self.post_attention_layernorm = Norm(H)


class MarkovHead(nn.Module):
    def __init__(self, V, r):
        super().__init__()
        self.markov_w1 = nn.Embedding(V, r)
        self.markov_w2 = nn.Linear(r, V, bias=False)

    def bias(self, prev):
        return self.markov_w1.weight[prev] @ self.markov_w2.weight.T


class ConfidenceHead(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.proj = nn.Linear(n_in, 1)

    def forward(self, h, e):
        return (torch.cat([h, e], dim=-1) @ self.proj.weight[0]) + self.proj.bias[0]


class DSparkDraft(nn.Module):
    def __init__(self, H, n_feat, V):
        super().__init__()
        self.fc = nn.Linear(n_feat * H, H, bias=False)
        self.hidden_norm = Norm(H)
        self.layers = nn.ModuleList([DecoderLayer(H) for _ in range(N_LAYERS)])
        self.norm = Norm(H)
        self.markov_head = MarkovHead(V, RANK)
        self.confidence_head = ConfidenceHead(H + RANK)

    def init_(self, gen):
        with torch.no_grad():
            for name, p in self.named_parameters():
                r = torch.randn(p.shape, generator=gen)
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * r)
                elif name == "confidence_head.proj.bias":
                    p.fill_(0.1)
                elif name.startswith("markov_head.markov_w"):
                    p.copy_(MARKOV_STD[int(name[len("markov_head.markov_w")]) - 1] * r)
                else:
                    p.copy_(0.05 * r)


def rope_tables(pos, dtype):
    """cos, sin [..., HEAD_DIM] for integer positions (angles in float64), rotate-half layout."""
    freq = ROPE_THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    ang = pos.to(torch.float64).unsqueeze(-1) * freq
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, pos):
    """x [B, n, heads, hd] at positions pos [B, n]."""
    cos, sin = rope_tables(pos, x.dtype)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    half = HEAD_DIM // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


def split_heads(x, n):
    return x.reshape(*x.shape[:-1], n, HEAD_DIM)


def masked_attention(q, k, v, mask):
    """q [B,nq,H_q,hd], k/v [B,nk,H_kv,hd], mask [B,nq,nk] (True = visible). GQA by grouping
    query heads: head n reads kv head n // (H_q/H_kv). Rows without a visible key give 0."""
    Bn, nq = q.shape[:2]
    g = N_HEADS // N_KV
    qg = q.reshape(Bn, nq, N_KV, g, HEAD_DIM)
    scores = torch.einsum("bqkgd,bjkd->bkgqj", qg, k) * HEAD_DIM ** -0.5
    vis = mask[:, None, None]
    scores = scores.masked_fill(~vis, float("-inf"))
    has_key = vis.any(-1, keepdim=True)
    probs = torch.softmax(torch.where(has_key, scores, torch.zeros_like(scores)), dim=-1)
    probs = probs * has_key
    out = torch.einsum("bkgqj,bjkd->bqkgd", probs, v)
    return out.reshape(Bn, nq, N_HEADS * HEAD_DIM)


def backbone(draft, c, x, ctx_pos, blk_pos, mask):
    """c [B,nc,H] projected context, x [B,nb,H] block embeddings -> norm(final hidden) [B,nb,H]."""
    for layer in draft.layers:
        att = layer.self_attn
        h = layer.input_layernorm(x)
        q = apply_rope(att.q_norm(split_heads(att.q_proj(h), N_HEADS)), blk_pos)
        k = torch.cat([apply_rope(att.k_norm(split_heads(att.k_proj(c), N_KV)), ctx_pos),
                       apply_rope(att.k_norm(split_heads(att.k_proj(h), N_KV)), blk_pos)], dim=1)
        v = torch.cat([split_heads(att.v_proj(c), N_KV), split_heads(att.v_proj(h), N_KV)], dim=1)
        x = x + att.o_proj(masked_attention(q, k, v, mask))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return draft.norm(x)


# ----------------------------------------------------------------------------- blocks, labels

def block_tensors(batch, anchors, valid):
    """block ids/positions [B, A*bs] (see docstring)."""
    A = anchors.shape[1]
    ids = torch.full((B, A, BS), MASK_TOKEN_ID, dtype=torch.int64)
    ids[:, :, 0] = torch.where(valid == 1, batch["input_ids"].gather(1, anchors),
                               torch.full_like(anchors, MASK_TOKEN_ID))
    pos = (batch["position_ids"].gather(1, anchors) * valid)[:, :, None] + torch.arange(BS)
    return ids.reshape(B, A * BS), pos.reshape(B, A * BS)


def attention_mask(batch, anchors, valid):
    A = anchors.shape[1]
    doc = batch["document_ids"]
    real = batch["padding_mask"] == 1
    j = torch.arange(S)
    ctx = ((j[None, None, :] < anchors[:, :, None])
           & (doc[:, None, :] == doc.gather(1, anchors)[:, :, None]) & real[:, None, :])
    own = (torch.arange(A)[:, None] == torch.arange(A * BS)[None, :] // BS)      # [A, A*bs]
    m = torch.cat([ctx, own[None].expand(B, A, A * BS)], dim=2) & (valid[:, :, None] == 1)
    return m.repeat_interleave(BS, dim=1)


def supervision(batch, anchors, valid):
    """labels, prev_ids, eval_mask [B,A,bs] and the target-logit row index [B,A,bs]."""
    ids, doc = batch["input_ids"], batch["document_ids"]
    ok = valid[:, :, None] == 1
    u = anchors[:, :, None] + 1 + torch.arange(BS)          # label row index a+k+1
    uc = u.clamp(max=S - 1)
    take = lambda t: t.gather(1, uc.reshape(B, -1)).reshape(uc.shape)   # noqa: E731
    labels = torch.where(ok, take(ids), torch.zeros_like(u))
    anchor_tok = torch.where(ok[..., 0], ids.gather(1, anchors), torch.zeros_like(anchors))
    prev = torch.cat([anchor_tok[:, :, None], labels[:, :, :-1]], dim=2)
    step_ok = (ok & (u < S) & (take(doc) == doc.gather(1, anchors)[:, :, None])
               & (take(batch["padding_mask"]) == 1) & (take(batch["loss_mask"]) == 1))
    eval_mask = torch.cumprod(step_ok.to(torch.int64), dim=2).to(torch.bool)
    t_index = uc - 1
    return labels, prev, eval_mask, step_ok, t_index


# ----------------------------------------------------------------------------- forward, loss

def forward(draft, embed_w, head_w, feats, batch, anchors, valid, prev):
    """Dense pass: hidden [B,A,bs,H], base/corrected logits [B,A,bs,V], confidence [B,A,bs]."""
    A = anchors.shape[1]
    c = draft.hidden_norm(draft.fc(feats))
    ids, bpos = block_tensors(batch, anchors, valid)
    mask = attention_mask(batch, anchors, valid)
    h = backbone(draft, c, embed_w[ids], batch["position_ids"], bpos, mask).reshape(B, A, BS, -1)
    keep = (valid == 1)[:, :, None, None].to(h.dtype)
    h = h * keep
    base = h @ head_w.T
    corrected = (base + draft.markov_head.bias(prev)) * keep
    conf = draft.confidence_head(h, draft.markov_head.markov_w1.weight[prev]) * keep[..., 0]
    return dict(hidden=h, base=base, corrected=corrected, conf=conf, mask=mask, c=c)


def gather_target(tlogits_rows, t_index, valid):
    A = t_index.shape[1]
    idx = t_index.reshape(B, -1, 1).expand(-1, -1, tlogits_rows.shape[-1])
    t = tlogits_rows.gather(1, idx).reshape(B, A, BS, -1)
    return t * (valid == 1)[:, :, None, None].to(t.dtype)


def dspark_loss(corrected, conf, tlogits, labels, eval_mask, valid, cstar=None):
    """DeepSpec's three terms (see docstring). cstar: use this confidence target instead of the
    one computed here (for finite differences, where the detached target must stay fixed)."""
    k = torch.arange(BS, dtype=corrected.dtype)
    w = eval_mask.to(corrected.dtype) * torch.exp(-k / GAMMA)
    logp = torch.log_softmax(corrected, dim=-1)
    ce = -logp.gather(-1, labels[..., None])[..., 0]
    l1 = (logp.exp() - torch.softmax(tlogits, dim=-1)).abs().sum(-1)
    if cstar is None:
        cstar = (1.0 - 0.5 * l1).clamp(0.0, 1.0).detach()
    cstar = cstar * (valid == 1)[:, :, None].to(cstar.dtype)
    bce = conf.clamp(min=0) - conf * cstar + torch.log1p(torch.exp(-conf.abs()))
    den = w.sum() + DEN_EPS
    loss_ce, loss_l1, loss_conf = (w * ce).sum() / den, (w * l1).sum() / den, (w * bce).sum() / den
    loss = CE_ALPHA * loss_ce + L1_ALPHA * loss_l1 + CONF_ALPHA * loss_conf
    hit = (corrected.argmax(-1) == labels) & eval_mask
    cnt_k = eval_mask.sum(dim=(0, 1))
    return loss, dict(loss_ce=loss_ce, loss_l1=loss_l1, loss_conf=loss_conf, weights=w, cstar=cstar,
                      weight_sum=w.sum().detach(), count=eval_mask.sum(),
                      acc=hit.sum().to(torch.float32) / eval_mask.sum(),
                      count_per_k=cnt_k, acc_per_k=hit.sum(dim=(0, 1)).to(torch.float32) / cnt_k.clamp(min=1))


def compute(draft, fixed, cstar=None):
    out = forward(draft, fixed["embed_w"], fixed["head_w"], fixed["feats"], fixed["batch"],
                  fixed["anchors"], fixed["valid"], fixed["prev"])
    loss, m = dspark_loss(out["corrected"], out["conf"], fixed["tlogits"], fixed["labels"],
                          fixed["eval_mask"], fixed["valid"], cstar)
    m.update(out)
    return loss, m


def as_double(fixed):
    return {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in fixed.items()}


# ----------------------------------------------------------------------------- references

@torch.no_grad()
def per_block(draft, fixed):
    """Inference-style pass per valid anchor: context = its document's rows strictly before the
    anchor (a contiguous slice), block [anchor, MASK...], no mask. Returns hidden [B,A,bs,H]."""
    batch, anchors, valid = fixed["batch"], fixed["anchors"], fixed["valid"]
    head_w = fixed["head_w"]
    A = anchors.shape[1]
    out = torch.zeros(B, A, BS, head_w.shape[1], dtype=head_w.dtype)
    pos = batch["position_ids"]
    for b in range(B):
        for i in range(A):
            if not valid[b, i]:
                continue
            a = int(anchors[b, i])
            js = [j for j in range(a) if same_doc_real(batch, b, a, j)]
            assert js == list(range(js[0], a)) if js else True
            c = draft.hidden_norm(draft.fc(fixed["feats"][b:b + 1, js]))
            ids = torch.tensor([[int(batch["input_ids"][b, a])] + [MASK_TOKEN_ID] * (BS - 1)])
            bpos = pos[b, a] + torch.arange(BS)[None]
            m = torch.ones(1, BS, len(js) + BS, dtype=torch.bool)
            out[b, i] = backbone(draft, c, fixed["embed_w"][ids], pos[b:b + 1, js], bpos, m)[0]
    return out


@torch.no_grad()
def greedy_chain(draft, fixed, hidden):
    """Sequential Markov chain per valid anchor from the one-pass hidden (see docstring)."""
    anchors, valid, head_w = fixed["anchors"], fixed["valid"], fixed["head_w"]
    A = anchors.shape[1]
    tokens = torch.zeros(B, A, BS, dtype=torch.int64)
    conf = torch.zeros(B, A, BS, dtype=hidden.dtype)
    margin = float("inf")
    w1 = draft.markov_head.markov_w1.weight
    for b in range(B):
        for i in range(A):
            if not valid[b, i]:
                continue
            prev = int(fixed["batch"]["input_ids"][b, anchors[b, i]])
            for k in range(BS):
                h = hidden[b, i, k]
                logits = h @ head_w.T + draft.markov_head.bias(torch.tensor(prev))
                top = logits.topk(2).values
                margin = min(margin, (top[0] - top[1]).item())
                conf[b, i, k] = torch.sigmoid(draft.confidence_head(h, w1[prev]))
                prev = int(logits.argmax())
                tokens[b, i, k] = prev
    return tokens, conf, margin


def top2_gap(x, mask):
    v = x.topk(2, dim=-1).values
    return (v[..., 0] - v[..., 1])[mask].min().item()


def check_rope():
    """Our rotate-half RoPE equals transformers' Qwen3 rotary embedding (default type)."""
    cfg = Qwen3Config(hidden_size=64, num_attention_heads=N_HEADS, num_key_value_heads=N_KV,
                      head_dim=HEAD_DIM, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA})
    p = torch.arange(40)[None]
    cos, sin = Qwen3RotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float32), p)
    c2, s2 = rope_tables(p, torch.float32)
    assert (cos - c2).abs().max() < 1e-5 and (sin - s2).abs().max() < 1e-5


FD_COORDS = [("fc.weight", (5, 77)), ("hidden_norm.weight", (9,)), ("norm.weight", (30,)),
             ("layers.0.self_attn.k_proj.weight", (3, 40)), ("layers.0.self_attn.q_norm.weight", (2,)),
             ("layers.1.self_attn.v_proj.weight", (17, 5)), ("layers.1.mlp.down_proj.weight", (12, 80)),
             ("markov_head.markov_w1.weight", None), ("markov_head.markov_w2.weight", None),
             ("confidence_head.proj.weight", (0, 3)), ("confidence_head.proj.weight", (0, 68)),
             ("confidence_head.proj.bias", (0,))]


def finite_differences(d64, fixed64):
    """Central differences in float64 (confidence target held fixed: it is detached) vs autograd."""
    d64.zero_grad()
    loss, m = compute(d64, fixed64)
    loss.backward()
    cstar = m["cstar"].detach()
    params = dict(d64.named_parameters())
    # Markov rows that matter: the anchor token of the first block and the label of its slot 1
    tok = int(fixed64["prev"][0, 0, 1])
    lab = int(fixed64["labels"][0, 0, 1])
    eps, worst = 1e-6, 0.0
    for name, idx in FD_COORDS:
        if name == "markov_head.markov_w1.weight":
            idx = (tok, 3)
        elif name == "markov_head.markov_w2.weight":
            idx = (lab, 5)
        p = params[name]
        with torch.no_grad():
            orig = p[idx].item()
            p[idx] = orig + eps
            lp = compute(d64, fixed64, cstar)[0].item()
            p[idx] = orig - eps
            lm = compute(d64, fixed64, cstar)[0].item()
            p[idx] = orig
        fd, ag = (lp - lm) / (2 * eps), p.grad[idx].item()
        err = abs(fd - ag) / max(1e-4, abs(ag))
        worst = max(worst, err)
        assert err < 1e-5 and abs(ag) > 1e-7, (name, idx, fd, ag)
    return worst, {n: p.grad.clone() for n, p in params.items()}


# ----------------------------------------------------------------------------- build

def build(target_dir):
    torch.manual_seed(DRAFT_SEED)
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    tcfg = model.config
    V, H = tcfg.vocab_size, tcfg.hidden_size
    assert MASK_TOKEN_ID < V
    batch = make_batch(torch.Generator().manual_seed(BATCH_SEED), V)
    feats, tlogits_rows = run_target(model, batch)
    anchors, valid = make_anchors(batch)
    labels, prev, eval_mask, step_ok, t_index = supervision(batch, anchors, valid)
    fixed = dict(batch=batch, feats=feats, anchors=anchors, valid=valid, labels=labels, prev=prev,
                 eval_mask=eval_mask, embed_w=model.model.embed_tokens.weight.detach(),
                 head_w=model.lm_head.weight.detach(),
                 tlogits=gather_target(tlogits_rows, t_index, valid))

    # every rule is exercised
    assert not valid.all()
    assert (step_ok & ~eval_mask).any(), "cumprod must cut a slot the plain mask would keep"
    assert (eval_mask[:, :, 0] == (valid == 1)).all(), "slot 0 of every valid block is supervised"
    truncated = (valid == 1) & ~eval_mask.all(-1)
    assert truncated.sum() >= 3 and (eval_mask.all(-1)).sum() >= 2
    assert (anchors[:, :, None] + torch.arange(BS) + 1 >= S)[valid == 1].any(), "a block past the row end"

    draft = DSparkDraft(H, len(TARGET_LAYER_IDS), V)
    draft.init_(torch.Generator().manual_seed(DRAFT_SEED))
    # Warm-up: deterministic Adam steps on this batch's DSpark loss, so that the stored draft
    # predicts some labels (random weights give acc 0) and its Markov/confidence heads have moved.
    opt = torch.optim.Adam(draft.parameters(), lr=WARMUP_LR)
    for _ in range(WARMUP_STEPS):
        opt.zero_grad()
        compute(draft, fixed)[0].backward()
        opt.step()
    del opt

    draft.zero_grad()
    loss, m = compute(draft, fixed)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in draft.named_parameters()}
    names = list(grads)
    chain, chain_conf, chain_margin = greedy_chain(draft, fixed, m["hidden"].detach())
    return dict(model=model, batch=batch, fixed=fixed, draft=draft, loss=loss, m=m, grads=grads,
                names=names, chain=chain, chain_conf=chain_conf, chain_margin=chain_margin,
                tlogits_rows=tlogits_rows, step_ok=step_ok)


def fixture_tensors(r):
    fixed, m, draft = r["fixed"], r["m"], r["draft"]
    ids, bpos = block_tensors(fixed["batch"], fixed["anchors"], fixed["valid"])
    t = dict(r["batch"])
    t.update(context_features=fixed["feats"], context_projected=m["c"], anchors=fixed["anchors"],
             anchor_valid=fixed["valid"], block_input_ids=ids, block_position_ids=bpos,
             attn_mask=m["mask"], labels=fixed["labels"], prev_ids=fixed["prev"],
             eval_mask=fixed["eval_mask"].to(torch.uint8), loss_weights=m["weights"],
             hidden=m["hidden"], base_logits=m["base"], corrected_logits=m["corrected"],
             target_logits=fixed["tlogits"], confidence_logits=m["conf"], confidence_target=m["cstar"],
             loss_ce=m["loss_ce"], loss_l1=m["loss_l1"], loss_conf=m["loss_conf"], loss=r["loss"],
             weight_sum=m["weight_sum"], acc=m["acc"], count=m["count"],
             acc_per_k=m["acc_per_k"], count_per_k=m["count_per_k"],
             greedy_chain=r["chain"], greedy_chain_confidence=r["chain_conf"])
    t.update({f"draft.{n}": p for n, p in draft.named_parameters()})
    t.update({f"grad.{n}": g for n, g in r["grads"].items()})
    t = {k: v.detach().clone().contiguous() for k, v in t.items()}
    for k, v in t.items():
        assert v.dtype in (torch.float32, torch.int64, torch.uint8, torch.bool), k
        assert torch.isfinite(v.float()).all(), k
    return t


def run_checks(r):
    draft, fixed, m, loss, grads = r["draft"], r["fixed"], r["m"], r["loss"], r["grads"]
    valid, eval_mask = fixed["valid"], fixed["eval_mask"]
    # nonzero terms, the Markov head moves the logits, hits and misses
    for k in ("loss_ce", "loss_l1", "loss_conf"):
        assert m[k].item() > 1e-3, k
    vb = (valid == 1)
    markov_move = (m["corrected"] - m["base"]).detach()[vb].abs().max().item()
    assert markov_move > 1e-2, markov_move
    hits = round(m["acc"].item() * m["count"].item())
    assert 0 < hits < m["count"].item(), f"want hits and misses, got {hits}/{m['count'].item()}"
    for k in range(BS):
        hk = round(m["acc_per_k"][k].item() * m["count_per_k"][k].item())
        assert 0 < hk < m["count_per_k"][k].item(), f"k={k}: want hits and misses"
    assert top2_gap(m["corrected"].detach(), eval_mask) > 1e-3, "argmax near-tie"
    # the inference chain: the Markov bias flips some argmaxes of the base logits, and the chain's
    # own prevs give other tokens than teacher forcing somewhere
    chain_vs_base = ((r["chain"] != m["base"].detach().argmax(-1)) & vb[:, :, None]).sum().item()
    chain_vs_tf = ((r["chain"] != m["corrected"].detach().argmax(-1)) & vb[:, :, None]).sum().item()
    assert chain_vs_base > 0 and chain_vs_tf > 0, (chain_vs_base, chain_vs_tf)
    assert r["chain_margin"] > 1e-3, "greedy chain near-tie"
    cs = m["cstar"][eval_mask]
    assert (cs > 0).all() and (cs < 1).all()
    assert all(g.abs().max() > 0 for g in grads.values())
    # the block of a document-start anchor sees no context
    assert not m["mask"][0, 2 * BS, :S].any()

    # float64 twin: dense vs per-block (no mask), fp32 vs fp64, finite differences
    d64 = copy.deepcopy(draft).double()
    f64 = as_double(fixed)
    with torch.no_grad():
        loss64, m64 = compute(d64, f64)
        ref64 = per_block(d64, f64)
        ref32 = per_block(draft, fixed)
    d_dense64 = (m64["hidden"] - ref64).abs().max().item()
    d_logit64 = (m64["base"] - ref64 @ f64["head_w"].T * vb[:, :, None, None]).abs().max().item()
    d_dense32 = (m["hidden"].detach().double() - ref64).abs().max().item()
    d_loop32 = (ref32.double() - ref64).abs().max().item()
    assert d_dense64 < 1e-12 and d_logit64 < 1e-11 and d_dense32 < 1e-4 and d_loop32 < 1e-4, \
        (d_dense64, d_logit64, d_dense32, d_loop32)
    d_loss = abs(loss.item() - loss64.item())
    assert d_loss < 1e-5 * max(1.0, loss64.item()), d_loss
    fd_worst, g64 = finite_differences(d64, f64)
    g_err = max((grads[n].double() - g64[n]).abs().max().item() / max(1e-6, g64[n].abs().max().item())
                for n in r["names"])
    assert g_err < 1e-4, g_err
    # inference chain from the per-block (inference-style) hidden states gives the same tokens
    chain_pb, conf_pb, _ = greedy_chain(draft, fixed, ref32)
    assert torch.equal(chain_pb, r["chain"]) and (conf_pb - r["chain_conf"]).abs().max() < 1e-5
    print(f"checks: dense-vs-block hidden fp64 {d_dense64:.1e} logits fp64 {d_logit64:.1e}, fp32 "
          f"{d_dense32:.1e} (loop fp32 {d_loop32:.1e}); loss fp32-fp64 {d_loss:.1e}; grads fp32 vs fp64 "
          f"rel {g_err:.1e}; finite diff rel {fd_worst:.1e}; max|corrected-base| {markov_move:.4f}; "
          f"truncated blocks {int(((valid == 1) & ~eval_mask.all(-1)).sum())}; "
          f"chain top-2 margin {r['chain_margin']:.2e}; chain != argmax(base) at {chain_vs_base}, "
          f"!= teacher-forced argmax at {chain_vs_tf} slots")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "dspark"))
    ap.add_argument("--target", default=os.path.join(here, "..", "tests", "fixtures", "models", "llama3"))
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    check_rope()

    r = build(args.target)
    run_checks(r)
    tensors = fixture_tensors(r)
    again = fixture_tensors(build(args.target))
    assert sorted(again) == sorted(tensors) and all(same_bits(again[k], tensors[k]) for k in tensors), \
        "fixture not deterministic"

    dflash = os.path.join(here, "..", "tests", "fixtures", "dflash", "reference.safetensors")
    if os.path.exists(dflash):
        ref, _ = read_safetensors(dflash)
        same = all(torch.equal(ref[k], tensors[k]) for k in
                   ("input_ids", "position_ids", "document_ids", "loss_mask", "padding_mask", "context_features"))
        print(f"batch and context_features identical to the DFlash fixture's: {same}")

    m = r["m"]
    print(f"loss {m['loss_ce'].item() * CE_ALPHA + m['loss_l1'].item() * L1_ALPHA + m['loss_conf'].item():.6f} "
          f"= {CE_ALPHA} * ce {m['loss_ce'].item():.6f} + {L1_ALPHA} * l1 {m['loss_l1'].item():.6f} "
          f"+ {CONF_ALPHA} * conf {m['loss_conf'].item():.6f}  (stored loss {r['loss'].item():.6f})")
    print(f"acc {m['acc'].item():.4f} count {m['count'].item()} weight_sum {m['weight_sum'].item():.6f} "
          f"per-k count {m['count_per_k'].tolist()} acc {[round(x, 3) for x in m['acc_per_k'].tolist()]}")
    print(f"eval_mask per block: {r['fixed']['eval_mask'].to(torch.int64).tolist()}")
    print(f"greedy_chain {r['chain'].tolist()}")

    metadata = {
        "generator": GENERATOR,
        "seed": f"batch {BATCH_SEED} (as tools/make_dflash_fixtures.py), draft {DRAFT_SEED}",
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "target": "tests/fixtures/models/llama3 (fp32, eager); embed model.embed_tokens.weight, "
                  "lm_head lm_head.weight, target logits lm_head(model.norm(last layer output))",
        "target_layer_ids": str(TARGET_LAYER_IDS),
        "mask_token_id": str(MASK_TOKEN_ID),
        "block_size": str(BS),
        "gamma": str(GAMMA),
        "markov_rank": str(RANK),
        "markov_head_type": "vanilla",
        "loss_alphas": f"ce {CE_ALPHA}, l1 {L1_ALPHA}, confidence {CONF_ALPHA}; denominators sum(w) + {DEN_EPS}",
        "draft_config": f"num_hidden_layers {N_LAYERS}, hidden 64, num_attention_heads {N_HEADS}, "
                        f"num_key_value_heads {N_KV}, head_dim {HEAD_DIM}, intermediate {INTER}, "
                        f"rms_norm_eps {EPS}, rope default theta {ROPE_THETA}, silu, no bias; "
                        f"confidence_head_with_markov true",
        "draft_weights": f"seeded 1+0.1*randn (norms) / 0.05*randn (matrices) / {MARKOV_STD[0]}*randn "
                         f"(markov_w1), {MARKOV_STD[1]}*randn (markov_w2) / confidence bias 0.1, then "
                         f"{WARMUP_STEPS} Adam steps (lr {WARMUP_LR}) on this batch's loss; stored weights "
                         "are final",
        "notes": "slot k of anchor a predicts input_ids[a+k+1] (all slots); eval_mask = cumprod of label "
                 "validity (in row, same doc, real, loss-masked); prev[0] = anchor token, prev[k] = labels[k-1]; "
                 "corrected = lm_head(h) + markov_w2(markov_w1[prev]); "
                 "confidence = proj(cat(h, markov_w1[prev])); "
                 "c* = clamp(1 - 0.5*|softmax(corrected) - softmax(target)|_1, 0, 1) detached; "
                 "w = eval_mask*exp(-k/gamma); each term sum(w*x)/(sum(w)+1e-6).",
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "reference.safetensors")
    write_safetensors(path, tensors, metadata)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} B")


if __name__ == "__main__":
    sys.exit(main())
