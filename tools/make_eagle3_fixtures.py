#!/usr/bin/env python3
"""Independent PyTorch reference for EAGLE-3 draft training (SPEC section 6), written from the
spec with transformers' Llama building blocks (RMSNorm, MLP, rotary embedding); the TTT
attention is built densely (all steps' keys concatenated, explicit boolean mask) and
cross-checked against a per-position loop.

Target: tests/fixtures/models/llama3 (fp32). Batch B=2 x T=24, packed: row 0 = documents of
11 and 13 tokens, row 1 = one document of 19 tokens + 5 padding tokens (id 0).

Writes tests/fixtures/eagle3/reference.safetensors:
  input_ids, position_ids, document_ids  I64 [2, 24]
  loss_mask, padding_mask                U8  [2, 24]
  aux_hidden      F32 [2, 24, 192]  cat(raw outputs of target decoder layers 0, 1, 2), per document
  last_hidden     F32 [2, 24, 64]   raw output of the last target decoder layer (before final norm)
  target_logits   F32 [2, 24, 512]  lm_head(norm(last_hidden)); zeros on padding
  d2t             I64 [96]          used[i] - i
  t2d             BOOL [512]
  draft.{name}    F32               every draft weight (names below)
  logits.{i}      F32 [2, 24, 96]   draft logits of TTT step i, i = 0..3
  valid.{i}       U8  [2, 24]       position t has a target at t+2+i (same doc, real, loss-masked)
  loss_mask.{i}   U8  [2, 24]       valid.{i} & target argmax in the draft vocab
  loss.{i}, acc.{i}  F32 []   count.{i}  I64 []   loss_total  F32 []
  grad.{name}     F32               d loss_total / d draft.{name}
  l7.loss.{i} (i = 0..6), l7.acc.{i}, l7.count.{i}, l7.loss_total, l7.grad.{name} for
                  name in L7_GRADS: the same batch and weights with a TTT unroll of 7
Draft weight names: fc.weight [64,192], midlayer.self_attn.{q_proj [64,128], k_proj [32,128],
  v_proj [32,128], o_proj [64,64]}.weight, midlayer.mlp.{gate_proj [96,64], up_proj [96,64],
  down_proj [64,96]}.weight, midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight
  [64], norm.weight [64], lm_head.weight [96,64].

Also writes tests/fixtures/eagle3/reference_3_1.safetensors: EAGLE-3.1 (fc_norm.{0,1,2}: an
RMSNorm per captured hidden state before fc; norm_output: the normed layer output feeds both
lm_head and the next TTT step) on the same batch, features and vocab map (write_eagle31).

Deterministic: fixed seeds, CPU, single thread; running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_eagle3_fixtures.py [--out tests/fixtures/eagle3]
"""

import argparse
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
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402
from fixture_safetensors import write_safetensors  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv)

GENERATOR = "tools/make_eagle3_fixtures.py"
SEED = 3003
B, T = 2, 24
DOCS = [[11, 13], [19]]          # document lengths per row; the rest of a row is padding
AUX_LAYERS = [0, 1, 2]
DRAFT_VOCAB, DRAFT_INTER = 96, 96
TTT, TTT_LONG, DECAY = 4, 7, 0.8
WARMUP_STEPS, WARMUP_LR = 15, 3e-3   # Adam steps on the batch: acc_i neither 0 nor the in-vocab share
L7_GRADS = ["fc.weight", "midlayer.self_attn.q_proj.weight", "midlayer.self_attn.k_proj.weight",
            "midlayer.hidden_norm.weight", "norm.weight", "lm_head.weight"]


def make_batch(gen, vocab):
    ids = torch.randint(3, vocab, (B, T), generator=gen, dtype=torch.int64)
    pos = torch.zeros(B, T, dtype=torch.int64)
    doc = torch.zeros(B, T, dtype=torch.int64)
    lmask = torch.zeros(B, T, dtype=torch.uint8)
    pad = torch.zeros(B, T, dtype=torch.uint8)
    for b, lens in enumerate(DOCS):
        t = 0
        for d, n in enumerate(lens):
            pos[b, t:t + n] = torch.arange(n)
            doc[b, t:t + n] = d
            pad[b, t:t + n] = 1
            lmask[b, t + 3:t + n] = 1               # first 3 tokens of each document unmasked
            t += n
        ids[b, t:] = 0                              # padding: id 0, positions keep counting,
        pos[b, t:] = pos[b, t - 1] + 1 + torch.arange(T - t)   # document clamped onto the last
        doc[b, t:] = len(lens) - 1
    lmask[0, 16] = 0                                # a hole inside a document
    lmask[1, 10] = 0
    return dict(input_ids=ids, position_ids=pos, document_ids=doc, loss_mask=lmask, padding_mask=pad)


@torch.no_grad()
def target_features(model, batch):
    """Run the target on each document alone (positions 0..n-1); lay the results back packed."""
    H, V = model.config.hidden_size, model.config.vocab_size
    aux, last, logits = torch.zeros(B, T, 3 * H), torch.zeros(B, T, H), torch.zeros(B, T, V)
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
            hs = out.hidden_states
            # convention check: hidden_states[i+1] is layer i's raw output, except the last entry,
            # which transformers returns after the final norm (so the hook is the source of truth)
            for i in range(len(layers) - 1):
                assert torch.equal(hs[i + 1], captured[i])
            assert torch.allclose(hs[-1], model.model.norm(captured[len(layers) - 1]), atol=1e-6)
            raw_last = captured[len(layers) - 1][0]
            aux[b, t:t + n] = torch.cat([captured[i][0] for i in AUX_LAYERS], dim=-1)
            last[b, t:t + n] = raw_last
            logits[b, t:t + n] = model.lm_head(model.model.norm(raw_last))
            assert torch.allclose(logits[b, t:t + n], out.logits[0], atol=1e-5)
            t += n
    return aux, last, logits


def valid_mask(batch, i):
    """valid[b,t]: u = t+2+i < T, same document as t, u real and loss-masked."""
    u = torch.arange(T) + 2 + i
    uc = u.clamp(max=T - 1)
    doc, pad, lm = batch["document_ids"], batch["padding_mask"], batch["loss_mask"]
    return (u < T)[None] & (doc[:, uc] == doc) & (pad[:, uc] == 1) & (lm[:, uc] == 1)


def choose_draft_vocab(gen, batch, target_logits, vocab):
    """Seeded: about half of the distinct target argmax ids over valid step-0 positions are put
    in the draft vocab, the other half kept out; the rest is a random fill. Sorted ascending."""
    valid = valid_mask(batch, 0)
    am = target_logits[:, 1:].argmax(-1)           # teacher position t+1 for step-0 position t
    cand = am[valid[:, :T - 1]].unique()           # sorted distinct ids
    cand = cand[torch.randperm(len(cand), generator=gen)]
    keep, drop = cand[: len(cand) // 2], cand[len(cand) // 2:]
    rest = torch.tensor([v for v in range(vocab) if v not in set(cand.tolist())])
    fill = rest[torch.randperm(len(rest), generator=gen)[: DRAFT_VOCAB - len(keep)]]
    used = torch.cat([keep, fill]).sort().values
    assert len(used.unique()) == DRAFT_VOCAB and not torch.isin(drop, used).any()
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[used] = True
    return used, used - torch.arange(DRAFT_VOCAB), t2d


class DraftAttention(nn.Module):
    def __init__(self, H, nh, nkv, hd):
        super().__init__()
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.q_proj = nn.Linear(2 * H, nh * hd, bias=False)
        self.k_proj = nn.Linear(2 * H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)


class DraftLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden_size
        self.self_attn = DraftAttention(H, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(H, cfg.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(H, cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(H, cfg.rms_norm_eps)


class Draft(nn.Module):
    def __init__(self, cfg, target_hidden, eagle31=False):
        super().__init__()
        self.eagle31 = eagle31
        if eagle31:   # EAGLE-3.1: one RMSNorm per captured hidden state, before the concat and fc
            self.fc_norm = nn.ModuleList([LlamaRMSNorm(target_hidden, cfg.rms_norm_eps) for _ in AUX_LAYERS])
        self.fc = nn.Linear(3 * target_hidden, cfg.hidden_size, bias=False)
        self.midlayer = DraftLayer(cfg)
        self.norm = LlamaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, DRAFT_VOCAB, bias=False)
        self.rotary = LlamaRotaryEmbedding(cfg)    # no parameters, only the inv_freq buffer

    def init_(self, gen):
        with torch.no_grad():
            for name, p in self.named_parameters():
                r = torch.randn(p.shape, generator=gen)
                is_norm = name.endswith("norm.weight") or name.startswith("fc_norm.")
                p.copy_(1.0 + 0.1 * r if is_norm else 0.05 * r)


def dense_attention(q, keys, vals, doc):
    """q [B,nh,T,hd]; keys/vals: one [B,nkv,T,hd] per step 0..i. One softmax over step-0 keys
    (causal, same document) and the keys of steps 1..i at the query's own position."""
    nsteps, nh, hd = len(keys), q.shape[1], q.shape[3]
    rep = nh // keys[0].shape[1]
    K = repeat_kv(torch.cat(keys, dim=2), rep)      # [B,nh,nsteps*T,hd]
    Vv = repeat_kv(torch.cat(vals, dim=2), rep)
    t = torch.arange(T)
    causal = (t[None, :] <= t[:, None])[None] & (doc[:, None, :] == doc[:, :, None])   # [B,T,T]
    eye = torch.eye(T, dtype=torch.bool)[None].expand(B, T, T)
    mask = torch.cat([causal] + [eye] * (nsteps - 1), dim=2)                       # [B,T,nsteps*T]
    scores = (q @ K.transpose(2, 3)) / math.sqrt(hd)
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ Vv       # [B,nh,T,hd]


@torch.no_grad()
def loop_attention(q, keys, vals, doc):
    """Same as dense_attention, one query at a time with the visible keys gathered explicitly,
    in float64."""
    q, keys, vals = q.double(), [k.double() for k in keys], [v.double() for v in vals]
    nh, hd, nkv = q.shape[1], q.shape[3], keys[0].shape[1]
    out = torch.zeros_like(q)
    for b in range(B):
        for h in range(nh):
            g = h // (nh // nkv)
            for t in range(T):
                ks = [keys[0][b, g, s] for s in range(t + 1) if doc[b, s] == doc[b, t]]
                vs = [vals[0][b, g, s] for s in range(t + 1) if doc[b, s] == doc[b, t]]
                ks += [k[b, g, t] for k in keys[1:]]
                vs += [v[b, g, t] for v in vals[1:]]
                p = torch.softmax(torch.stack(ks) @ q[b, h, t] / math.sqrt(hd), dim=0)
                out[b, h, t] = p @ torch.stack(vs)
    return out


def ttt_forward(draft, embed, batch, aux, nsteps, check=False):
    """Returns the draft logits [B,T,Vd] of every TTT step."""
    ids, pos, doc = batch["input_ids"], batch["position_ids"], batch["document_ids"]
    layer, att = draft.midlayer, draft.midlayer.self_attn
    if draft.eagle31:
        parts = aux.chunk(len(AUX_LAYERS), dim=-1)
        h = draft.fc(torch.cat([norm(x) for norm, x in zip(draft.fc_norm, parts)], dim=-1))
    else:
        h = draft.fc(aux)
    keys, vals, logits = [], [], []
    for i in range(nsteps):
        src = torch.arange(T) + 1 + i
        ids_i = torch.where(src < T, ids[:, src.clamp(max=T - 1)], torch.zeros_like(ids))
        with torch.no_grad():
            e = embed(ids_i)
        x = torch.cat([layer.input_layernorm(e), layer.hidden_norm(h)], dim=-1)
        q = att.q_proj(x).view(B, T, att.nh, att.hd).transpose(1, 2)
        k = att.k_proj(x).view(B, T, att.nkv, att.hd).transpose(1, 2)
        v = att.v_proj(x).view(B, T, att.nkv, att.hd).transpose(1, 2)
        cos, sin = draft.rotary(x, pos + i)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys.append(k)
        vals.append(v)
        a = dense_attention(q, keys, vals, doc)
        if check:   # float64 loop vs the dense path (in float64: exact mask check; in fp32: rounding)
            ref = loop_attention(q, keys, vals, doc)
            d64 = (dense_attention(q.double(), [k.double() for k in keys], [v.double() for v in vals], doc)
                   - ref).abs().max().item()
            d32 = (a.double() - ref).abs().max().item()
            assert d64 <= 1e-6 and d32 <= 1e-5 * max(1.0, ref.abs().max().item()), (i, d64, d32)
        r = h + att.o_proj(a.transpose(1, 2).reshape(B, T, att.nh * att.hd))
        h = r + layer.mlp(layer.post_attention_layernorm(r))
        if draft.eagle31:   # norm_output: the normed state goes to lm_head AND into the next step
            h = draft.norm(h)
            logits.append(draft.lm_head(h))
        else:               # EAGLE-3: lm_head reads norm(h); the next step reads h itself
            logits.append(draft.lm_head(draft.norm(h)))
    return logits


def ttt_loss(logits, batch, target_logits, used, t2d):
    """Per step: loss_i, acc_i, count_i, valid_i, loss_mask_i; total = sum 0.8^i loss_i."""
    steps, total = [], 0.0
    for i, dl in enumerate(logits):
        p = (torch.arange(T) + 1 + i).clamp(max=T - 1)     # teacher position (clamped; invalid there)
        tl = target_logits[:, p]
        targ = tl.argmax(-1)
        valid = valid_mask(batch, i)
        lmask = valid & t2d[targ]
        count = valid.sum()
        teacher = torch.softmax(tl[..., used], dim=-1)
        ce = -(teacher * torch.log_softmax(dl, dim=-1)).sum(-1)
        loss = torch.where(lmask, ce, torch.zeros_like(ce)).sum() / count.clamp(min=1)
        hit = valid & (used[dl.argmax(-1)] == targ)
        acc = hit.sum().float() / count.clamp(min=1)
        total = total + DECAY ** i * loss
        steps.append(dict(loss=loss, acc=acc, count=count, valid=valid, lmask=lmask, dl=dl, tl=tl))
    return total, steps


def warm_up(draft, embed, batch, aux, target_logits, used, t2d):
    """A few deterministic Adam steps on this batch, so that the stored draft predicts the
    target's argmax at some positions (random weights give acc_i == 0 everywhere)."""
    opt = torch.optim.Adam(draft.parameters(), lr=WARMUP_LR)
    for _ in range(WARMUP_STEPS):
        opt.zero_grad()
        ttt_loss(ttt_forward(draft, embed, batch, aux, TTT), batch, target_logits, used, t2d)[0].backward()
        opt.step()


def top2_gap(x, mask):
    v = x.topk(2, dim=-1).values
    return (v[..., 0] - v[..., 1])[mask].min().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "eagle3"))
    ap.add_argument("--target", default=os.path.join(here, "..", "tests", "fixtures", "models", "llama3"))
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tcfg = model.config
    for p in model.parameters():
        p.requires_grad_(False)
    batch = make_batch(gen, tcfg.vocab_size)
    aux, last, target_logits = target_features(model, batch)
    used, d2t, t2d = choose_draft_vocab(gen, batch, target_logits, tcfg.vocab_size)

    dcfg = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       intermediate_size=DRAFT_INTER, hidden_act="silu", mlp_bias=False, rms_norm_eps=1e-6,
                       max_position_embeddings=tcfg.max_position_embeddings,
                       rope_parameters=dict(tcfg.rope_parameters), vocab_size=tcfg.vocab_size)
    draft = Draft(dcfg, tcfg.hidden_size)
    draft.init_(gen)
    embed = model.model.embed_tokens

    warm_up(draft, embed, batch, aux, target_logits, used, t2d)
    names = [n for n, _ in draft.named_parameters()]

    tensors = dict(batch)
    tensors.update(aux_hidden=aux, last_hidden=last, target_logits=target_logits, d2t=d2t, t2d=t2d)
    tensors.update({f"draft.{n}": p.detach().clone() for n, p in draft.named_parameters()})

    draft.zero_grad()
    total, steps = ttt_loss(ttt_forward(draft, embed, batch, aux, TTT, check=True),
                            batch, target_logits, used, t2d)
    total.backward()
    tensors["loss_total"] = total.detach()
    tensors.update({f"grad.{n}": p.grad.clone() for n, p in draft.named_parameters()})
    for i, s in enumerate(steps):
        lm = s["lmask"]
        assert lm.any() and (s["valid"] & ~lm).any(), f"step {i}: need in- and out-of-vocab positions"
        hits = round(s["acc"].item() * s["count"].item())
        assert 0 < hits < lm.sum().item(), f"step {i}: want some in-vocab hits and misses"
        assert min(top2_gap(s["dl"], s["valid"]), top2_gap(s["tl"], s["valid"])) > 1e-3, "argmax near-tie"
        print(f"step {i}: loss {s['loss'].item():.6f}  acc {s['acc'].item():.6f}  count {s['count'].item()}  "
              f"in-vocab {lm.sum().item()}  min top-2 gap draft {top2_gap(s['dl'], s['valid']):.2e} "
              f"target {top2_gap(s['tl'], s['valid']):.2e}")
        tensors.update({f"logits.{i}": s["dl"].detach(), f"valid.{i}": s["valid"].to(torch.uint8),
                        f"loss_mask.{i}": lm.to(torch.uint8), f"loss.{i}": s["loss"].detach(),
                        f"acc.{i}": s["acc"], f"count.{i}": s["count"]})
    print(f"loss_total {total.item():.6f}")

    draft.zero_grad()
    total7, steps7 = ttt_loss(ttt_forward(draft, embed, batch, aux, TTT_LONG, check=True),
                              batch, target_logits, used, t2d)
    total7.backward()
    for i, s in enumerate(steps7):
        if i < TTT:   # a step never depends on later steps
            assert torch.equal(s["dl"], steps[i]["dl"]) and torch.equal(s["loss"], steps[i]["loss"])
        print(f"l7 step {i}: loss {s['loss'].item():.6f}  acc {s['acc'].item():.6f}  count {s['count'].item()}")
        tensors.update({f"l7.loss.{i}": s["loss"].detach(), f"l7.acc.{i}": s["acc"], f"l7.count.{i}": s["count"]})
    print(f"l7 loss_total {total7.item():.6f}")
    tensors["l7.loss_total"] = total7.detach()
    tensors.update({f"l7.grad.{n}": dict(draft.named_parameters())[n].grad.clone() for n in L7_GRADS})
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())

    metadata = {
        "generator": GENERATOR,
        "seed": str(SEED),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "target": "tests/fixtures/models/llama3 (fp32, eager)",
        "aux_layer_ids": str(AUX_LAYERS),
        "ttt_length": str(TTT),
        "l7_ttt_length": str(TTT_LONG),
        "l7_grads": ",".join(L7_GRADS),
        "decay": str(DECAY),
        "draft_intermediate": str(DRAFT_INTER),
        "draft_vocab_size": str(DRAFT_VOCAB),
        "draft_weights": f"seeded 1+0.1*randn (norms) / 0.05*randn (matrices), then {WARMUP_STEPS} Adam "
                         f"steps (lr {WARMUP_LR}) on this batch's TTT-{TTT} loss; stored weights are final",
        "notes": "target run per document (positions 0..n-1), aux/last/logits packed back, zeros on padding; "
                 "aux = raw outputs of decoder layers [0,1,2] (hidden_states[i+1]); last_hidden before final "
                 "norm. Step i: ids x[t+1+i] (0 past T), hidden fc(aux) then previous step's midlayer "
                 "output; RoPE positions position_ids+i; query sees step-0 keys t'<=t same document plus "
                 "keys of steps 1..i at t; valid: u=t+2+i<T, same doc, real, loss-masked; teacher "
                 "softmax(target_logits[t+1+i][used]); loss sums CE over valid&in_vocab / max(count,1); "
                 "acc over valid / max(count,1); total = sum 0.8^i loss_i.",
    }
    path = os.path.join(args.out, "reference.safetensors")
    write_safetensors(path, {k: v.contiguous() for k, v in tensors.items()}, metadata)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} B")
    write_eagle31(args.out, dcfg, tcfg, embed, batch, aux, target_logits, used, t2d)


def write_eagle31(out, dcfg, tcfg, embed, batch, aux, target_logits, used, t2d):
    """EAGLE-3.1 (fc_norm + norm_output) on the same batch, target features and vocab map, with
    its own seeded draft: reference_3_1.safetensors holds draft.{name} (the EAGLE-3 names plus
    fc_norm.{0,1,2}.weight [64]), logits.{i}, loss.{i}, acc.{i}, count.{i}, loss_total and
    grad.{name} for TTT 4."""
    gen = torch.Generator().manual_seed(SEED + 31)
    draft = Draft(dcfg, tcfg.hidden_size, eagle31=True)
    draft.init_(gen)
    warm_up(draft, embed, batch, aux, target_logits, used, t2d)
    tensors = {f"draft.{n}": p.detach().clone() for n, p in draft.named_parameters()}
    draft.zero_grad()
    total, steps = ttt_loss(ttt_forward(draft, embed, batch, aux, TTT), batch, target_logits, used, t2d)
    total.backward()
    tensors["loss_total"] = total.detach()
    tensors.update({f"grad.{n}": p.grad.clone() for n, p in draft.named_parameters()})
    for i, s in enumerate(steps):
        lm = s["lmask"]
        hits = round(s["acc"].item() * s["count"].item())
        assert 0 < hits < lm.sum().item(), f"3.1 step {i}: want some in-vocab hits and misses"
        assert top2_gap(s["dl"], s["valid"]) > 1e-3, "argmax near-tie"
        print(f"3.1 step {i}: loss {s['loss'].item():.6f}  acc {s['acc'].item():.6f}  count {s['count'].item()}")
        tensors.update({f"logits.{i}": s["dl"].detach(), f"loss.{i}": s["loss"].detach(),
                        f"acc.{i}": s["acc"], f"count.{i}": s["count"]})
    print(f"3.1 loss_total {total.item():.6f}")
    # The two norms must matter on this batch: the same weights read as an EAGLE-3 draft (no
    # fc_norm, the un-normed state carried) give other logits at every step.
    with torch.no_grad():
        plain = Draft(dcfg, tcfg.hidden_size)
        plain.load_state_dict({k: v for k, v in draft.state_dict().items() if not k.startswith("fc_norm.")})
        for i, (a, b) in enumerate(zip(ttt_forward(plain, embed, batch, aux, TTT), [s["dl"] for s in steps])):
            gap = (a - b).abs().max().item()
            assert gap > 1e-2, f"3.1 step {i}: EAGLE-3 and EAGLE-3.1 logits differ by only {gap}"
            print(f"3.1 step {i}: |EAGLE-3.1 - EAGLE-3 logits| max {gap:.3f}")
    assert all(torch.isfinite(t.float()).all() for t in tensors.values())
    metadata = {
        "generator": GENERATOR, "seed": str(SEED + 31), "torch_version": torch.__version__,
        "transformers_version": transformers.__version__, "ttt_length": str(TTT),
        "notes": "EAGLE-3.1 on reference.safetensors' batch, features and vocab map: fc_norm.j = "
                 "RMSNorm(target hidden, draft eps) on aux layer j's slice before fc; after each step "
                 "h = norm(layer output), logits = lm_head(h) and h is the next step's hidden input. "
                 "Weights seeded, then the same warm-up as reference.safetensors.",
    }
    path = os.path.join(out, "reference_3_1.safetensors")
    write_safetensors(path, {k: v.contiguous() for k, v in tensors.items()}, metadata)
    print(f"wrote {path}: {len(tensors)} tensors, {os.path.getsize(path)} B")


if __name__ == "__main__":
    sys.exit(main())
