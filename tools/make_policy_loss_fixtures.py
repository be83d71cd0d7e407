#!/usr/bin/env python3
"""Independent PyTorch references for the issue-8 losses (SPEC sections 3, 5, 6: Distillation,
DPO, GRPO / GSPO, fp32 LM head), written from the spec; TRL was consulted for facts only.

Every case starts from hidden states and LM-head weights, so the C++ fused/chunked path can be fed
the same inputs. Conventions shared by every case:

  * logits = hidden @ lm_head^T  (lm_head is (V, H); no bias, no final norm: `hidden` is what the
    LM head sees). log_softmax over the vocabulary (last dim).
  * Targets are ALREADY ALIGNED: position t is scored at labels[t] (no shift inside any loss;
    `logp[t] = log_softmax(logits[t])[labels[t]]`). A mask (loss_mask / completion_mask) says which
    positions count; labels at mask-0 positions are arbitrary valid ids and must not matter.
  * Masks are U8 (1 counts, 0 does not). Counts ("num_tokens", "num_documents", "num_pairs") are
    I64 scalars. The fixture is ONE STEP: every normaliser below is this step's total (with
    accumulation the C++ side divides each micro-batch's sum by the step's global total instead).
  * Stored losses/metrics/gradients are computed in float64 from the stored (fp32/bf16) inputs and
    rounded to fp32 once; the script asserts the same computation in fp32 agrees, checks every
    float64 gradient against central finite differences, and checks each loss against a second,
    loop-based formulation. Gradients are d(stored loss)/d(input), same shape as the input.
  * Inputs are chosen so that no element sits within 1e-3 of a kink (hinge at beta*delta = 1,
    the clip bounds, the min), so gradients are unambiguous.

----------------------------------------------------------------------------------------------
distill.safetensors  (N=24 tokens, H=16 student width, Ht=12 teacher width, V=64, T=2, alpha=0.3)
  student_hidden   F32 [24,16]    student_lm_head  F32 [64,16]
  teacher_hidden   F32 [24,12]    teacher_lm_head  F32 [64,12]
  labels           I64 [24]       loss_mask        U8  [24]     num_tokens  I64 []  (= sum mask)
  student_logits   F32 [24,64]    teacher_logits   F32 [24,64]  (raw, BEFORE the temperature)
  For D in {fkl, rkl, jsd_b0, jsd_b0.25, jsd_b0.5, jsd_b1}:
    D.token        F32 [24]       per-position divergence, computed at EVERY position (mask ignored)
    D.loss         F32 []         sum_{t: mask} D.token[t] / num_tokens
    D.grad.student_hidden F32 [24,16], D.grad.student_lm_head F32 [64,16]   of D.loss
    D.mix.loss     F32 []         (1-alpha) * D.loss + alpha * ce.loss
    D.mix.grad.student_hidden, D.mix.grad.student_lm_head                   of D.mix.loss
  ce.token F32 [24], ce.loss F32 [], ce.grad.student_hidden, ce.grad.student_lm_head
  Conventions:
    p_s = softmax(student_logits)              (student NOT divided by T)
    p_t = softmax(teacher_logits / T), T = 2   (temperature on the teacher only, SPEC section 6)
    fkl (forward) = KL(p_t || p_s) = sum_v p_t (log p_t - log p_s)   (= CE(p_t, p_s) - H(p_t))
    rkl (reverse) = KL(p_s || p_t) = sum_v p_s (log p_s - log p_t)
    jsd_b (GKD paper eq. 1, TRL GKDTrainer.generalized_jsd_loss convention):
        m = beta * p_t + (1 - beta) * p_s
        JSD_beta = beta * KL(p_t || m) + (1 - beta) * KL(p_s || m)
      with the endpoints defined EXACTLY (as TRL special-cases them, and as SPEC says
      "beta=0 forward, beta=1 reverse"):  JSD_0 := fkl,  JSD_1 := rkl.  (The bare formula would
      give 0 at both endpoints; JSD_beta ~ beta*fkl for beta -> 0 and ~ (1-beta)*rkl for beta -> 1,
      which the script checks.) jsd_b0 / jsd_b1 therefore equal fkl / rkl bit for bit.
      jsd_b0.25 is included because beta = 0.5 is symmetric in (p_t, p_s) and would not catch a
      swap of beta and 1-beta.
    No T^2 factor anywhere (TRL's GKD has none either).
    ce.token[t] = -log_softmax(student_logits[t])[labels[t]]  (hard labels, student at T=1).
    Mix: loss = (1 - alpha) * distill + alpha * CE, alpha = 0.3 (alpha=0: pure distillation).
    The teacher side gets no gradient (frozen); none is stored.

----------------------------------------------------------------------------------------------
dpo.safetensors  (one packed row of N=48 tokens, H=16, V=64, 3 pairs, beta=0.1)
  policy_hidden    F32 [48,16]    policy_lm_head   F32 [64,16]    labels  I64 [48]
  completion_mask  U8  [48]       segment_ids      I64 [48]
  ref_logps        F32 [48]       precomputed reference log-prob at labels[t] where
                                  completion_mask=1, 0.0 elsewhere (what the cache file holds)
  ref_hidden       F32 [48,16]    ref_lm_head      F32 [64,16]    the "live" reference they came
                                  from: ref_logps = log_softmax(ref_hidden @ ref_lm_head^T)[labels]
  policy_logps     F32 [48]       policy log-prob at labels[t], at EVERY position
  num_pairs        I64 []  (= 3)
  pair.chosen_len, pair.rejected_len            I64 [3]   completion tokens per sequence
  pair.policy_chosen_logps, pair.policy_rejected_logps, pair.ref_chosen_logps,
  pair.ref_rejected_logps                       F32 [3]   SUMMED over completion_mask=1 tokens
  pair.delta       F32 [3]   Delta_i = (sum logpi - sum logpi_ref)(chosen_i)
                                       - (sum logpi - sum logpi_ref)(rejected_i)
  pair.delta_ipo   F32 [3]   (sum logpi - sum logpi_ref)(chosen_i) / chosen_len_i
                             - (sum logpi - sum logpi_ref)(rejected_i) / rejected_len_i
  pair.rewards_chosen  = beta * (sum logpi - sum logpi_ref)(chosen)    F32 [3]
  pair.rewards_rejected = beta * (same)(rejected)                      F32 [3]
  pair.margins = rewards_chosen - rewards_rejected (= beta * Delta)    F32 [3]
  metrics.rewards_chosen, metrics.rewards_rejected, metrics.margin  F32 []  means over pairs
  metrics.accuracy F32 []  fraction of pairs with margin > 0 (strict)
  For L in {sigmoid, hinge, ipo}:  L.losses F32 [3] (per pair), L.loss F32 [] (mean over pairs),
    L.grad.policy_hidden F32 [48,16], L.grad.policy_lm_head F32 [64,16]    of L.loss
  Conventions:
    Sequence j = segment_ids == j; pair i = chosen sequence 2i, rejected sequence 2i+1. Segments
    are contiguous, in order 0..5, then 5 padding tokens whose segment id is CLAMPED onto the last
    segment (5) and whose completion_mask is 0. A segment of prompt P and completion C tokens has
    completion_mask = 1 on its positions P-1 .. P+C-2 (the positions that predict the completion
    tokens); (P, C_chosen, C_rejected) = (3,5,3), (4,4,6), (2,3,4).
    sigmoid: -log sigmoid(beta * Delta);  hinge: relu(1 - beta * Delta);
    ipo: (delta_ipo - 1/(2 beta))^2 -- TRL divides EACH sequence's summed log-probs (policy and
      reference alike, both come out of the same concatenated forward) by that sequence's own
      number of completion tokens before forming the difference ("if loss_type == 'ipo':
      all_logps = all_logps / loss_mask.sum(-1)"); SPEC's "Delta/len" means exactly this.
    One sigmoid per PAIR; loss = mean over the step's pairs. The reference gets no gradient.
    Metrics always use the SUMMED log-ratios (also for ipo; TRL would report averaged ones there).

----------------------------------------------------------------------------------------------
policy.safetensors  (packed B=2 rows x T=16, H=16, V=64, eps_low=0.2, eps_high=0.28)
  hidden           F32 [2,16,16]  lm_head  F32 [64,16]  labels  I64 [2,16]
  loss_mask        U8  [2,16]     completion tokens only; 0 on prompts, on each document's last
                                  position, on one hole (row 1, t=5) and on padding
  padding_mask     U8  [2,16]     1 real, 0 padding
  document_ids     I64 [2,16]     index WITHIN the row (PackedBatch convention); padding clamped
                                  onto the row's last real document
  global_document_ids I64 [2,16]  row offsets added: 0,1 in row 0; 2 in row 1 (padding -> 2)
  num_documents    I64 [2]  (2, 1);   num_documents_total I64 [] (= 3, padding never counts)
  num_tokens       I64 []  labelled tokens (= sum loss_mask)
  advantages_doc   F32 [3]        advantage per document, global document order
  advantages       F32 [2,16]     advantages_doc[global_document_ids] (broadcast, padding included)
  logps            F32 [2,16]     current log-prob at labels, every position
  entropy_token    F32 [2,16]     -sum_v p log p of the current policy (T=1), every position
  old_logps        F32 [2,16]     rollout log-probs at loss_mask=1 positions, 0.0 elsewhere
  old_logps_onpolicy F32 [2,16]   = logps at loss_mask=1 positions, 0.0 elsewhere (ratio 1 case)
  Layout: row 0 = doc 0 (7 tokens, mask on t=2..5) + doc 1 (9 tokens, mask on t=8..14);
          row 1 = doc 2 (11 tokens, mask on t=2..9 except t=5) + 5 padding tokens.
  For V in {grpo, gspo, grpo_onpolicy, gspo_onpolicy} (the *_onpolicy ones use old_logps_onpolicy):
    V.loss F32 [], V.grad.hidden F32 [2,16,16], V.grad.lm_head F32 [64,16]
    V.ratio  F32 [2,16] (grpo: r_t, 0 on mask-0 positions)  /  F32 [3] (gspo: R_s per document)
    V.metrics.ratio_mean, V.metrics.clipped_fraction, V.metrics.kl_new_old, V.metrics.entropy  F32 []
  Conventions:
    r_t = exp(logp_t - old_t).  clip(x) = clamp(x, 1 - eps_low, 1 + eps_high).
    GRPO: loss = sum_{t: mask} -min(r_t A_t, clip(r_t) A_t) / num_tokens   (the step's labelled
      tokens, DAPO-style; not TRL's default per-sequence mean).
    GSPO: R_s = exp( sum_{t in s, mask} (logp_t - old_t) / |{t in s: mask}| ) (TRL
      importance_sampling_level="sequence"); loss = sum_s -min(R_s A_s, clip(R_s) A_s)
      / num_documents_total. Gradient flows through R_s (no stop-gradient). Every document has
      at least one labelled token.
    ratio_mean: grpo mean of r_t over labelled tokens; gspo mean of R_s over documents.
    clipped_fraction: share of labelled tokens (grpo) / documents (gspo) where the clipped branch
      is the one the min takes and it is flat: (r > 1+eps_high and A > 0) or (r < 1-eps_low and
      A < 0) (TRL's is_high_clipped | is_low_clipped). These get zero gradient.
    kl_new_old: k3 estimator, mean over labelled tokens of exp(old - new) - (old - new) - 1
      (the form TRL uses for KL(pi_theta || pi_ref)); identical for grpo and gspo, 0 on-policy.
    entropy: mean of entropy_token over labelled tokens.

----------------------------------------------------------------------------------------------
fp32_head.safetensors  (N=48, H=32, V=64)
  hidden  BF16 [48,32]   lm_head  BF16 [64,32]   labels  I64 [48]
  logits_fp32  F32 [48,64]   hidden.float() @ lm_head.float()^T, fp32 matmul (both upcast)
  logps_fp32   F32 [48]      log_softmax(logits_fp32)[labels]          -- "fp32 head on"
  logps_bf16_logits F32 [48] log_softmax((hidden @ lm_head^T in bf16, result rounded to bf16)
                             .float())[labels]  -- "fp32 head off"; differs from logps_fp32 by
                             far more than fp32 rounding (the script asserts max diff > 1e-3)
  sum_logps    F32 []        sum over ALL 48 positions of logps_fp32 (no mask)
  grad_hidden_fp32  F32 [48,32], grad_lm_head_fp32 F32 [64,32]  d sum_logps / d input, fp32
  grad_hidden BF16 [48,32], grad_lm_head BF16 [64,32]  the fp32 gradients cast to bf16 ONCE
                             (round to nearest even): what the bf16 weight's .grad must hold
  Sign: these are gradients of +sum log-probs (= -(sum CE)).
  Unlike the other files, these are fp32 computations (as an fp32 head would do them); the script
  checks them against float64 to ~1e-5.

Deterministic: fixed seeds, CPU, single thread; running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_policy_loss_fixtures.py [--out tests/fixtures/losses]
"""

import argparse
import math
import os
import sys

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import safetensors  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fixture_safetensors import write_safetensors  # noqa: E402

GENERATOR = "tools/make_policy_loss_fixtures.py"
V = 64
# distillation
D_SEED, D_N, D_H, D_HT, TEMP, ALPHA = 8001, 24, 16, 12, 2.0, 0.3
JSD_BETAS = [0.0, 0.25, 0.5, 1.0]
# DPO
P_SEED, P_H, DPO_BETA = 8002, 16, 0.1
PAIRS = [(3, 5, 3), (4, 4, 6), (2, 3, 4)]     # (prompt, chosen completion, rejected completion)
P_N = 48
# GRPO / GSPO
G_SEED, G_B, G_T, G_H = 8003, 2, 16, 16
EPS_LOW, EPS_HIGH = 0.2, 0.28
DOCS = [[(3, 4), (2, 7)], [(3, 8)]]           # per row: (prompt, completion) per document
HOLES = [(1, 5)]                              # (row, t) labelled positions forced to 0
ADV = [1.0, -0.7, 0.4]                        # per document (global order)
LOGR_MEAN = [0.35, 0.10, -0.30]               # per-document mean of log r used to build old_logps
LOGR_STD = 0.35
# fp32 head
F_SEED, F_N, F_H = 8004, 48, 32

KINK = 1e-3


# ------------------------------------------------------------------------------------------------
# I/O

def base_metadata(seed, notes):
    return {"generator": GENERATOR, "seed": str(seed), "torch_version": torch.__version__,
            "safetensors_version": safetensors.__version__, "vocab_size": str(V),
            "notes": notes + " Full conventions: the docstring of " + GENERATOR + "."}


# ------------------------------------------------------------------------------------------------
# Checking machinery

def grads64(fn, inputs):
    """fn(**float64 leaf tensors) -> scalar. Returns (value, {name: grad}) in float64."""
    leaves = {k: v.detach().double().requires_grad_(True) for k, v in inputs.items()}
    out = fn(**leaves)
    gs = torch.autograd.grad(out, list(leaves.values()))
    return out.detach(), dict(zip(leaves, gs))


def fd_check(fn, inputs, grads, gen, what, coords=10, eps=1e-6, tol=2e-7):
    """Central finite differences in float64 on `coords` random coordinates of each input plus
    one random direction over all inputs at once."""
    base = {k: v.detach().double() for k, v in inputs.items()}

    def f(d):
        with torch.no_grad():
            return fn(**d).item()

    worst = 0.0
    for name, x in base.items():
        flat = torch.randperm(x.numel(), generator=gen)[:coords]
        for i in flat.tolist():
            xp, xm = x.clone(), x.clone()
            xp.view(-1)[i] += eps
            xm.view(-1)[i] -= eps
            fd = (f({**base, name: xp}) - f({**base, name: xm})) / (2 * eps)
            an = grads[name].view(-1)[i].item()
            err = abs(fd - an) / max(1.0, abs(an))
            worst = max(worst, err)
            assert err < tol, (what, name, i, fd, an)
    dirs = {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in base.items()}
    fd = (f({k: v + eps * dirs[k] for k, v in base.items()})
          - f({k: v - eps * dirs[k] for k, v in base.items()})) / (2 * eps)
    an = sum((grads[k] * dirs[k]).sum().item() for k in base)
    err = abs(fd - an) / max(1.0, abs(an))
    assert err < tol, (what, "direction", fd, an)
    return max(worst, err)


def check_fp32(fn, inputs, value64, grads64_, what, rtol=2e-5):
    """The same function evaluated in fp32 agrees with the float64 reference."""
    leaves = {k: v.detach().float().requires_grad_(True) for k, v in inputs.items()}
    out = fn(**leaves)
    gs = torch.autograd.grad(out, list(leaves.values()))
    scale = max(1.0, abs(value64.item()))
    assert abs(out.item() - value64.item()) <= rtol * scale, (what, out.item(), value64.item())
    for (k, g32) in zip(leaves, gs):
        g = grads64_[k]
        s = max(1e-3, g.abs().max().item())
        d = (g32.double() - g).abs().max().item()
        assert d <= rtol * 10 * s, (what, k, d, s)


def evaluate(fn, inputs, gen, what, fp32=True):
    """float64 value and grads, fd-checked (and fp32-checked); returned as fp32 tensors."""
    value, gs = grads64(fn, inputs)
    err = fd_check(fn, inputs, gs, gen, what)
    if fp32:
        check_fp32(fn, inputs, value, gs, what)
    return value.float(), {k: g.float() for k, g in gs.items()}, err


def logprobs(hidden, lm_head):
    return torch.log_softmax(hidden @ lm_head.T, dim=-1)


def gather(logp, labels):
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


# ------------------------------------------------------------------------------------------------
# 1. Distillation

def divergence_tokens(ls, lt, kind, beta=None):
    """Per-position divergence from student log-probs ls and (tempered) teacher log-probs lt."""
    ps, pt = ls.exp(), lt.exp()
    if kind == "fkl" or (kind == "jsd" and beta == 0.0):
        return (pt * (lt - ls)).sum(-1)
    if kind == "rkl" or (kind == "jsd" and beta == 1.0):
        return (ps * (ls - lt)).sum(-1)
    assert kind == "jsd"
    return jsd_formula(ls, lt, beta)


def jsd_formula(ls, lt, beta):
    lm = torch.logsumexp(torch.stack([lt + math.log(beta), ls + math.log1p(-beta)]), dim=0)
    return beta * (lt.exp() * (lt - lm)).sum(-1) + (1 - beta) * (ls.exp() * (ls - lm)).sum(-1)


def distill_case(out_dir):
    gen = torch.Generator().manual_seed(D_SEED)
    sh = torch.randn(D_N, D_H, generator=gen)
    sw = 0.5 * torch.randn(V, D_H, generator=gen)
    th = torch.randn(D_N, D_HT, generator=gen)
    tw = 0.8 * torch.randn(V, D_HT, generator=gen)
    labels = torch.randint(0, V, (D_N,), generator=gen)
    mask = torch.ones(D_N, dtype=torch.uint8)
    mask[[0, 1, 2, 9, 16, 17, 23]] = 0
    n = int(mask.sum())
    m64 = mask.double()
    lt64 = torch.log_softmax((th.double() @ tw.double().T) / TEMP, dim=-1)

    def make(kind, beta=None, alpha=0.0):
        def fn(student_hidden, student_lm_head):
            ls = logprobs(student_hidden, student_lm_head)
            lt = lt64.to(ls.dtype)
            total = 0.0
            if alpha < 1.0:
                d = (divergence_tokens(ls, lt, kind, beta) * m64.to(ls.dtype)).sum() / n
                total = (1 - alpha) * d
            if alpha > 0.0:
                ce = (-gather(ls, labels) * m64.to(ls.dtype)).sum() / n
                total = total + alpha * ce
            return total
        return fn

    inputs = dict(student_hidden=sh, student_lm_head=sw)
    tensors = dict(student_hidden=sh, student_lm_head=sw, teacher_hidden=th, teacher_lm_head=tw,
                   labels=labels, loss_mask=mask, num_tokens=torch.tensor(n),
                   student_logits=sh @ sw.T, teacher_logits=th @ tw.T)

    # independent cross-checks of the per-token quantities, float64
    ls64 = logprobs(sh.double(), sw.double())
    fkl_tok = divergence_tokens(ls64, lt64, "fkl")
    rkl_tok = divergence_tokens(ls64, lt64, "rkl")
    ce_to_teacher = -(lt64.exp() * ls64).sum(-1)
    h_teacher = -(lt64.exp() * lt64).sum(-1)
    assert torch.allclose(fkl_tok, ce_to_teacher - h_teacher, atol=1e-12)          # SPEC's identity
    assert torch.allclose(fkl_tok, F.kl_div(ls64, lt64, reduction="none", log_target=True).sum(-1),
                          atol=1e-12)
    assert torch.allclose(rkl_tok, F.kl_div(lt64, ls64, reduction="none", log_target=True).sum(-1),
                          atol=1e-12)
    for t in range(D_N):   # loop form of the generic JSD with probabilities, beta = 0.25 and 0.5
        for b in (0.25, 0.5):
            ps, pt = ls64[t].exp(), lt64[t].exp()
            mix = b * pt + (1 - b) * ps
            ref = b * sum(pt[v] * math.log(pt[v] / mix[v]) for v in range(V)) \
                + (1 - b) * sum(ps[v] * math.log(ps[v] / mix[v]) for v in range(V))
            assert abs(jsd_formula(ls64[t:t + 1], lt64[t:t + 1], b).item() - float(ref)) < 1e-12
    # the endpoint limits that justify "beta=0 forward, beta=1 reverse"
    small = 1e-8
    assert torch.allclose(jsd_formula(ls64, lt64, small) / small, fkl_tok, rtol=1e-4)
    assert torch.allclose(jsd_formula(ls64, lt64, 1 - small) / small, rkl_tok, rtol=1e-4)
    assert fkl_tok.min() > 0.05 and rkl_tok.min() > 0.05, "teacher and student should differ"

    ce_tok = -gather(ls64, labels)
    tensors["ce.token"] = ce_tok.float()
    printed = []
    value, gs, err = evaluate(make("fkl", alpha=1.0), inputs, gen, "ce")
    assert abs(value.item() - (ce_tok * m64).sum().item() / n) < 1e-6
    tensors["ce.loss"] = value
    tensors.update({f"ce.grad.{k}": g for k, g in gs.items()})
    printed.append(f"  ce.loss            {value.item():.7f}")
    ce_value = value
    worst = err

    variants = [("fkl", "fkl", None), ("rkl", "rkl", None)] + \
               [(f"jsd_b{b:g}", "jsd", b) for b in JSD_BETAS]
    for name, kind, beta in variants:
        tok = divergence_tokens(ls64, lt64, kind, beta)
        tensors[f"{name}.token"] = tok.float()
        value, gs, err = evaluate(make(kind, beta), inputs, gen, name)
        worst = max(worst, err)
        assert abs(value.item() - (tok * m64).sum().item() / n) < 1e-6
        tensors[f"{name}.loss"] = value
        tensors.update({f"{name}.grad.{k}": g for k, g in gs.items()})
        mvalue, mgs, err = evaluate(make(kind, beta, ALPHA), inputs, gen, name + ".mix")
        worst = max(worst, err)
        assert abs(mvalue.item() - ((1 - ALPHA) * value.item() + ALPHA * ce_value.item())) < 1e-6
        tensors[f"{name}.mix.loss"] = mvalue
        tensors.update({f"{name}.mix.grad.{k}": g for k, g in mgs.items()})
        printed.append(f"  {name + '.loss':18s} {value.item():.7f}   mix (alpha={ALPHA}) {mvalue.item():.7f}")
    for a, b in (("jsd_b0", "fkl"), ("jsd_b1", "rkl")):
        for suffix in (".loss", ".grad.student_hidden", ".grad.student_lm_head", ".token"):
            assert torch.equal(tensors[a + suffix], tensors[b + suffix]), (a, suffix)

    meta = base_metadata(D_SEED, "Distillation: student logits = student_hidden @ student_lm_head^T "
                         "(T=1), teacher p = softmax(teacher_hidden @ teacher_lm_head^T / T); "
                         "fkl = KL(p_t||p_s), rkl = KL(p_s||p_t), jsd_b = b*KL(p_t||m)+(1-b)*KL(p_s||m), "
                         "m = b*p_t+(1-b)*p_s, jsd_b0 := fkl, jsd_b1 := rkl; loss = sum over loss_mask / "
                         "num_tokens; mix = (1-alpha)*distill + alpha*CE(labels).")
    meta.update(temperature=str(TEMP), alpha=str(ALPHA), jsd_betas=str(JSD_BETAS),
                temperature_applies_to="teacher only", t_squared_factor="none")
    path = os.path.join(out_dir, "distill.safetensors")
    write_safetensors(path, tensors, meta)
    print(f"distill (N={D_N}, masked tokens {n}, worst fd rel err {worst:.1e}):")
    print("\n".join(printed))
    return path


# ------------------------------------------------------------------------------------------------
# 2. DPO

def dpo_layout():
    seg = torch.zeros(P_N, dtype=torch.int64)
    cmask = torch.zeros(P_N, dtype=torch.uint8)
    t = 0
    for i, (p, cc, cr) in enumerate(PAIRS):
        for j, c in ((2 * i, cc), (2 * i + 1, cr)):
            seg[t:t + p + c] = j
            cmask[t + p - 1:t + p + c - 1] = 1
            t += p + c
    seg[t:] = 2 * len(PAIRS) - 1           # padding clamped onto the last segment
    return seg, cmask, t


def dpo_sums(tok, seg, cmask):
    """Per-sequence sums over completion tokens, then (chosen, rejected) per pair."""
    s = torch.zeros(2 * len(PAIRS), dtype=tok.dtype).index_add(0, seg, tok * cmask.to(tok.dtype))
    return s[0::2], s[1::2]


def dpo_case(out_dir):
    seg, cmask, real = dpo_layout()
    lens = torch.zeros(2 * len(PAIRS), dtype=torch.int64).index_add(0, seg, cmask.long())
    clen, rlen = lens[0::2], lens[1::2]
    assert clen.tolist() == [c for _, c, _ in PAIRS] and rlen.tolist() == [r for _, _, r in PAIRS]
    for attempt in range(1000):
        seed = P_SEED * 1000 + attempt
        gen = torch.Generator().manual_seed(seed)
        h = torch.randn(P_N, P_H, generator=gen)
        w = 0.6 * torch.randn(V, P_H, generator=gen)
        rh = torch.randn(P_N, P_H, generator=gen)
        rw = 0.6 * torch.randn(V, P_H, generator=gen)
        labels = torch.randint(0, V, (P_N,), generator=gen)
        ref_tok = gather(logprobs(rh.double(), rw.double()), labels)
        ref_logps = torch.where(cmask.bool(), ref_tok, torch.zeros_like(ref_tok)).float()
        pol = gather(logprobs(h.double(), w.double()), labels)
        pc, pr = dpo_sums(pol, seg, cmask)
        rc, rr = dpo_sums(ref_logps.double(), seg, cmask)
        bd = DPO_BETA * ((pc - rc) - (pr - rr))
        ok = (bd > 1 + 0.1).any() and ((bd > 0.1) & (bd < 0.9)).any() and (bd < -0.1).any()
        if ok:
            break
    else:
        raise RuntimeError("no DPO seed found")

    def make(kind):
        def fn(policy_hidden, policy_lm_head):
            tok = gather(logprobs(policy_hidden, policy_lm_head), labels)
            c, r = dpo_sums(tok, seg, cmask)
            ref_c, ref_r = dpo_sums(ref_logps.to(tok.dtype), seg, cmask)
            if kind == "ipo":
                d = (c - ref_c) / clen.to(tok.dtype) - (r - ref_r) / rlen.to(tok.dtype)
                losses = (d - 1 / (2 * DPO_BETA)) ** 2
            else:
                d = (c - ref_c) - (r - ref_r)
                losses = -F.logsigmoid(DPO_BETA * d) if kind == "sigmoid" else torch.relu(1 - DPO_BETA * d)
            return losses.mean()
        return fn

    inputs = dict(policy_hidden=h, policy_lm_head=w)
    tensors = dict(policy_hidden=h, policy_lm_head=w, labels=labels, completion_mask=cmask,
                   segment_ids=seg, ref_logps=ref_logps, ref_hidden=rh, ref_lm_head=rw,
                   policy_logps=pol.float(), num_pairs=torch.tensor(len(PAIRS)))
    # loop-based recomputation of the per-pair quantities, float64
    loop = {k: [] for k in ("pc", "pr", "rc", "rr")}
    for i in range(len(PAIRS)):
        for j, (kp, kr) in ((2 * i, ("pc", "rc")), (2 * i + 1, ("pr", "rr"))):
            loop[kp].append(sum(pol[t].item() for t in range(P_N) if seg[t] == j and cmask[t]))
            loop[kr].append(sum(ref_logps[t].item() for t in range(P_N) if seg[t] == j and cmask[t]))
    for k, v in (("pc", pc), ("pr", pr), ("rc", rc), ("rr", rr)):
        assert torch.allclose(torch.tensor(loop[k], dtype=torch.float64), v, atol=1e-12), k
    delta = (pc - rc) - (pr - rr)
    delta_ipo = (pc - rc) / clen - (pr - rr) / rlen
    rew_c, rew_r = DPO_BETA * (pc - rc), DPO_BETA * (pr - rr)
    margins = rew_c - rew_r
    assert ((margins.abs() > KINK) & ((DPO_BETA * delta - 1).abs() > KINK)).all()
    tensors.update({"pair.chosen_len": clen, "pair.rejected_len": rlen,
                    "pair.policy_chosen_logps": pc.float(), "pair.policy_rejected_logps": pr.float(),
                    "pair.ref_chosen_logps": rc.float(), "pair.ref_rejected_logps": rr.float(),
                    "pair.delta": delta.float(), "pair.delta_ipo": delta_ipo.float(),
                    "pair.rewards_chosen": rew_c.float(), "pair.rewards_rejected": rew_r.float(),
                    "pair.margins": margins.float(),
                    "metrics.rewards_chosen": rew_c.mean().float(),
                    "metrics.rewards_rejected": rew_r.mean().float(),
                    "metrics.margin": margins.mean().float(),
                    "metrics.accuracy": (margins > 0).double().mean().float()})
    x = DPO_BETA * delta
    per_pair = {"sigmoid": torch.log1p(torch.exp(-x)),           # second formulation of -log sigmoid
                "hinge": torch.clamp(1 - x, min=0),
                "ipo": (delta_ipo - 5.0) ** 2}                  # 1/(2*0.1) = 5
    gen = torch.Generator().manual_seed(P_SEED)
    printed, worst = [], 0.0
    for kind in ("sigmoid", "hinge", "ipo"):
        value, gs, err = evaluate(make(kind), inputs, gen, "dpo." + kind)
        worst = max(worst, err)
        assert abs(value.item() - per_pair[kind].mean().item()) < 1e-6, kind
        tensors[f"{kind}.losses"] = per_pair[kind].float()
        tensors[f"{kind}.loss"] = value
        tensors.update({f"{kind}.grad.{k}": g for k, g in gs.items()})
        printed.append(f"  {kind + '.loss':13s} {value.item():.7f}   per pair "
                       + " ".join(f"{v:.7f}" for v in per_pair[kind].tolist()))
    meta = base_metadata(seed, "DPO: policy logp[t] = log_softmax(policy_hidden @ policy_lm_head^T)"
                         "[labels[t]]; sequence j = segment_ids==j, pair i = (2i chosen, 2i+1 "
                         "rejected); sums over completion_mask; Delta = (sum pi - sum ref)(c) - "
                         "(same)(r); ipo divides each side by its own completion length; loss = "
                         "mean over pairs; metrics from summed log-ratios.")
    meta.update(beta=str(DPO_BETA), pairs_prompt_chosen_rejected=str(PAIRS),
                seed_note=f"first seed P_SEED*1000+k (k={attempt}) whose margins cover beta*Delta "
                          "> 1.1, in (0.1, 0.9) and < -0.1")
    path = os.path.join(out_dir, "dpo.safetensors")
    write_safetensors(path, tensors, meta)
    print(f"dpo (N={P_N}, {real} real tokens, seed {seed}, worst fd rel err {worst:.1e}):")
    print("  beta*Delta per pair " + " ".join(f"{v:.6f}" for v in x.tolist())
          + f"   delta_ipo " + " ".join(f"{v:.6f}" for v in delta_ipo.tolist()))
    print("\n".join(printed))
    print(f"  metrics: rewards_chosen {rew_c.mean().item():.7f}  rewards_rejected "
          f"{rew_r.mean().item():.7f}  margin {margins.mean().item():.7f}  accuracy "
          f"{(margins > 0).double().mean().item():.7f}")
    return path


# ------------------------------------------------------------------------------------------------
# 3. GRPO / GSPO

def policy_layout():
    doc = torch.zeros(G_B, G_T, dtype=torch.int64)
    gdoc = torch.zeros(G_B, G_T, dtype=torch.int64)
    mask = torch.zeros(G_B, G_T, dtype=torch.uint8)
    pad = torch.zeros(G_B, G_T, dtype=torch.uint8)
    g = 0
    for b, docs in enumerate(DOCS):
        t = 0
        for d, (p, c) in enumerate(docs):
            doc[b, t:t + p + c] = d
            gdoc[b, t:t + p + c] = g
            pad[b, t:t + p + c] = 1
            mask[b, t + p - 1:t + p + c - 1] = 1
            t += p + c
            g += 1
        doc[b, t:] = len(docs) - 1
        gdoc[b, t:] = g - 1
    for b, t in HOLES:
        mask[b, t] = 0
    return doc, gdoc, mask, pad, g


def clip(x):
    return torch.clamp(x, 1 - EPS_LOW, 1 + EPS_HIGH)


def grpo_loss(logp, old, adv, mask, ntok):
    r = torch.exp(logp - old)
    per = -torch.minimum(r * adv, clip(r) * adv)
    return (per * mask).sum() / ntok


def gspo_ratios(logp, old, gdoc, mask, ndocs):
    m = mask.to(logp.dtype)
    s = torch.zeros(ndocs, dtype=logp.dtype).index_add(0, gdoc.reshape(-1), ((logp - old) * m).reshape(-1))
    cnt = torch.zeros(ndocs, dtype=logp.dtype).index_add(0, gdoc.reshape(-1), m.reshape(-1))
    return torch.exp(s / cnt)


def gspo_loss(logp, old, adv_doc, gdoc, mask, ndocs):
    R = gspo_ratios(logp, old, gdoc, mask, ndocs)
    return (-torch.minimum(R * adv_doc, clip(R) * adv_doc)).sum() / ndocs


def clipped(r, a):
    return ((r > 1 + EPS_HIGH) & (a > 0)) | ((r < 1 - EPS_LOW) & (a < 0))


def policy_case(out_dir):
    doc, gdoc, mask, pad, ndocs = policy_layout()
    maskb, m64 = mask.bool(), mask.double()
    ntok = int(mask.sum())
    adv_doc = torch.tensor(ADV)
    adv = adv_doc[gdoc]
    for attempt in range(1000):
        seed = G_SEED * 1000 + attempt
        gen = torch.Generator().manual_seed(seed)
        h = torch.randn(G_B, G_T, G_H, generator=gen)
        w = 0.6 * torch.randn(V, G_H, generator=gen)
        labels = torch.randint(0, V, (G_B, G_T), generator=gen)
        logp64 = gather(logprobs(h.double(), w.double()), labels)
        logr = torch.tensor(LOGR_MEAN, dtype=torch.float64)[gdoc] \
            + LOGR_STD * torch.randn(G_B, G_T, generator=gen, dtype=torch.float64)
        old = torch.where(maskb, logp64 - logr, torch.zeros_like(logp64)).float()
        r = torch.exp(logp64 - old.double())
        R = gspo_ratios(logp64, old.double(), gdoc, mask, ndocs)
        ad = adv.double()
        hi, lo = (r > 1 + EPS_HIGH) & maskb, (r < 1 - EPS_LOW) & maskb
        inside = ~hi & ~lo & maskb
        want = [
            (hi & (ad > 0)).any(), (lo & (ad < 0)).any(),           # clipped both ways
            ((hi & (ad < 0)) | (lo & (ad > 0))).any(),              # outside but unclipped
            inside.any(),
            R[0] > 1 + EPS_HIGH, (1 - EPS_LOW < R[1]) & (R[1] < 1 + EPS_HIGH), R[2] < 1 - EPS_LOW,
            min((r[maskb] - (1 + EPS_HIGH)).abs().min(), (r[maskb] - (1 - EPS_LOW)).abs().min(),
                (R - (1 + EPS_HIGH)).abs().min(), (R - (1 - EPS_LOW)).abs().min()) > KINK,
            (old[maskb] < 0).all(),
        ]
        if all(bool(x) for x in want):
            break
    else:
        raise RuntimeError("no policy seed found")
    ent = -(logprobs(h.double(), w.double()).exp() * logprobs(h.double(), w.double())).sum(-1)
    old_on = torch.where(maskb, logp64, torch.zeros_like(logp64)).float()

    tensors = dict(hidden=h, lm_head=w, labels=labels, loss_mask=mask, padding_mask=pad,
                   document_ids=doc, global_document_ids=gdoc,
                   num_documents=torch.tensor([len(d) for d in DOCS]),
                   num_documents_total=torch.tensor(ndocs), num_tokens=torch.tensor(ntok),
                   advantages_doc=adv_doc, advantages=adv, logps=logp64.float(),
                   entropy_token=ent.float(), old_logps=old, old_logps_onpolicy=old_on)
    inputs = dict(hidden=h, lm_head=w)
    gen = torch.Generator().manual_seed(G_SEED)
    printed, worst = [], 0.0
    for name, oldv in (("grpo", old), ("gspo", old), ("grpo_onpolicy", old_on), ("gspo_onpolicy", old_on)):
        o64 = oldv.double()
        if name.startswith("grpo"):
            def fn(hidden, lm_head, o64=o64):
                lp = gather(logprobs(hidden, lm_head), labels)
                return grpo_loss(lp, o64.to(lp.dtype), adv.to(lp.dtype), mask.to(lp.dtype), ntok)
        else:
            def fn(hidden, lm_head, o64=o64):
                lp = gather(logprobs(hidden, lm_head), labels)
                return gspo_loss(lp, o64.to(lp.dtype), adv_doc.to(lp.dtype), gdoc, mask, ndocs)
        value, gs, err = evaluate(fn, inputs, gen, name)
        worst = max(worst, err)
        # loop-based second formulation, float64
        lp = logp64
        if name.startswith("grpo"):
            tot, rs = 0.0, torch.zeros(G_B, G_T, dtype=torch.float64)
            for b in range(G_B):
                for t in range(G_T):
                    if mask[b, t]:
                        rt = math.exp(lp[b, t].item() - o64[b, t].item())
                        a = ADV[gdoc[b, t].item()]
                        tot += -min(rt * a, min(max(rt, 1 - EPS_LOW), 1 + EPS_HIGH) * a)
                        rs[b, t] = rt
            ref = tot / ntok
            ratio, ratio_mean = rs, rs[maskb].mean()
            frac = clipped(rs, adv.double())[maskb].double().mean()
        else:
            Rs = []
            for s in range(ndocs):
                sel = [(b, t) for b in range(G_B) for t in range(G_T) if gdoc[b, t] == s and mask[b, t]]
                Rs.append(math.exp(sum(lp[b, t].item() - o64[b, t].item() for b, t in sel) / len(sel)))
            ref = sum(-min(R_ * a, min(max(R_, 1 - EPS_LOW), 1 + EPS_HIGH) * a) for R_, a in zip(Rs, ADV)) / ndocs
            ratio = torch.tensor(Rs, dtype=torch.float64)
            ratio_mean = ratio.mean()
            frac = clipped(ratio, adv_doc.double()).double().mean()
        assert abs(value.item() - ref) < 1e-6, (name, value.item(), ref)
        dlog = o64 - lp
        kl = ((torch.exp(dlog) - dlog - 1) * m64).sum() / ntok
        ent_mean = (ent * m64).sum() / ntok
        if name.endswith("onpolicy"):
            assert kl.abs() < 1e-6 and frac == 0 and abs(ratio_mean.item() - 1) < 1e-6
            # ratio 1: loss = -sum A / ntok (grpo) or -sum A_s / ndocs (gspo)
            expect = -(adv.double() * m64).sum().item() / ntok if name.startswith("grpo") \
                else -sum(ADV) / ndocs
            assert abs(value.item() - expect) < 1e-6
        tensors[f"{name}.loss"] = value
        tensors.update({f"{name}.grad.{k}": g for k, g in gs.items()})
        tensors[f"{name}.ratio"] = ratio.float()
        tensors[f"{name}.metrics.ratio_mean"] = ratio_mean.float()
        tensors[f"{name}.metrics.clipped_fraction"] = frac.float()
        tensors[f"{name}.metrics.kl_new_old"] = kl.float()
        tensors[f"{name}.metrics.entropy"] = ent_mean.float()
        printed.append(f"  {name + '.loss':20s} {value.item():+.7f}  ratio_mean {ratio_mean.item():.7f}  "
                       f"clipped_fraction {frac.item():.7f}  kl_new_old {kl.item():.7f}  "
                       f"entropy {ent_mean.item():.7f}")
    meta = base_metadata(seed, "GRPO/GSPO on a packed batch: logp = log_softmax(hidden @ lm_head^T)"
                         "[labels]; r = exp(logp - old); GRPO sum_{mask} -min(rA, clip(r)A) / "
                         "num_tokens; GSPO R_s = exp(masked mean of logp - old over document s), "
                         "sum_s -min(R_s A_s, clip(R_s) A_s) / num_documents_total; clip = "
                         "clamp(1-eps_low, 1+eps_high); kl_new_old = k3 mean of exp(old-new)-(old-new)-1 "
                         "over labelled tokens.")
    meta.update(eps_low=str(EPS_LOW), eps_high=str(EPS_HIGH),
                documents_prompt_completion=str(DOCS), holes=str(HOLES),
                seed_note=f"first seed G_SEED*1000+k (k={attempt}) whose ratios cover every "
                          "clip branch; old_logps = logp - (per-document mean + 0.35 randn)")
    path = os.path.join(out_dir, "policy.safetensors")
    write_safetensors(path, tensors, meta)
    print(f"policy (B={G_B} T={G_T}, labelled tokens {ntok}, documents {ndocs}, seed {seed}, "
          f"worst fd rel err {worst:.1e}):")
    print("  GSPO R_s " + " ".join(f"{v:.6f}" for v in tensors["gspo.ratio"].tolist())
          + "   advantages " + " ".join(f"{v:+.2f}" for v in ADV))
    print("\n".join(printed))
    return path


# ------------------------------------------------------------------------------------------------
# 4. fp32 LM head

def fp32_head_case(out_dir):
    gen = torch.Generator().manual_seed(F_SEED)
    h = torch.randn(F_N, F_H, generator=gen).to(torch.bfloat16)
    w = (0.5 * torch.randn(V, F_H, generator=gen)).to(torch.bfloat16)
    labels = torch.randint(0, V, (F_N,), generator=gen)

    h32 = h.float().requires_grad_(True)
    w32 = w.float().requires_grad_(True)
    logits = h32 @ w32.T
    logp = gather(torch.log_softmax(logits, dim=-1), labels)
    total = logp.sum()
    gh, gw = torch.autograd.grad(total, [h32, w32])
    # float64 check of the fp32 computation
    v64, g64 = grads64(lambda hidden, lm_head: gather(logprobs(hidden, lm_head), labels).sum(),
                       dict(hidden=h, lm_head=w))
    fd_check(lambda hidden, lm_head: gather(logprobs(hidden, lm_head), labels).sum(),
             dict(hidden=h, lm_head=w), g64, gen, "fp32_head")
    lp64 = gather(logprobs(h.double(), w.double()), labels)
    assert (logp.double() - lp64).abs().max() < 2e-5
    assert abs(total.item() - v64.item()) < 1e-3
    assert (gh.double() - g64["hidden"]).abs().max() < 2e-5
    assert (gw.double() - g64["lm_head"]).abs().max() < 2e-5
    # the fp32-head-off path for contrast: bf16 matmul, bf16 logits
    logits_bf = (h @ w.T).float()
    logp_bf = gather(torch.log_softmax(logits_bf, dim=-1), labels)
    diff = (logp_bf - logp).abs().max().item()
    assert diff > 1e-3, diff
    tensors = dict(hidden=h, lm_head=w, labels=labels, logits_fp32=logits.detach(),
                   logps_fp32=logp.detach(), logps_bf16_logits=logp_bf, sum_logps=total.detach(),
                   grad_hidden_fp32=gh, grad_lm_head_fp32=gw,
                   grad_hidden=gh.to(torch.bfloat16), grad_lm_head=gw.to(torch.bfloat16))
    gw_bf_err = (tensors["grad_lm_head"].float() - gw).abs().max().item()
    meta = base_metadata(F_SEED, "fp32 LM head: hidden, lm_head stored bf16; logits_fp32 = "
                         "hidden.float() @ lm_head.float()^T; logps_fp32 at labels; sum_logps over all "
                         "positions; grads of +sum_logps in fp32 and cast once to bf16 (RNE); "
                         "logps_bf16_logits = the bf16-matmul path for contrast.")
    path = os.path.join(out_dir, "fp32_head.safetensors")
    write_safetensors(path, tensors, meta)
    print(f"fp32_head (N={F_N} H={F_H}): sum_logps {total.item():.6f}  max |logps_bf16_logits - "
          f"logps_fp32| {diff:.3e}  max |bf16(grad_lm_head) - fp32| {gw_bf_err:.3e}")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "losses"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    paths = [distill_case(args.out), dpo_case(args.out), policy_case(args.out), fp32_head_case(args.out)]
    for p in paths:
        print(f"wrote {os.path.relpath(p)}: {os.path.getsize(p)} B")


if __name__ == "__main__":
    sys.exit(main())
