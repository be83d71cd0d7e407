#!/usr/bin/env python3
"""Check a tandem DSpark draft export (speculators format) with speculators 0.9.0's own classes.

    tools/check_dspark_export.sh --speculators DIR --target TARGET_DIR [--seq-len S] [--tol T]
    (or PYTHONPATH=<speculators install> .venv-tools/bin/python tools/check_dspark_export.py ...)

1. config: DIR/config.json parsed by speculators' SpeculatorModelConfig must give a
   DSparkSpeculatorConfig with tandem's DSpark semantics: sample_from_anchor (slot k predicts
   anchor+k+1), a vanilla Markov head of rank r = markov_w1's width, the confidence head on
   cat(h, markov_w1[prev]), full vocabulary (no d2t/t2d), greedy proposal of block_size tokens,
   mask_token_id inside the target vocabulary (the embedding is the target's, rebuilt on load),
   aux_hidden_state_layer_ids strictly increasing inside 1..N-1 (vLLM numbering: id j = input of
   target layer j = output of layer j-1 = transformers hidden_states[j]; tandem's / DFlash's
   target_layer_ids + 1), verifier.architectures == the target's.
2. weights: DIR/model.safetensors (or an index) holds exactly the state dict of speculators'
   DSparkDraftModel built from that config, minus the keys speculators itself never saves
   (its per-instance _keys_to_ignore_on_save: embed_tokens, lm_head for a full-vocab draft,
   verifier_lm_head, verifier_norm -- all rebuilt from the verifier), with the same shapes; then
   speculators' from_pretrained loads it and every file tensor is found unchanged in the model.
3. logits: on random tokens with a few anchors, speculators' own DSparkDraftModel.forward (eager
   attention, CPU, fp32) is run on target hidden states from the HF target; its block hidden
   states, base logits, Markov correction, corrected logits and confidence logits (captured on
   their way into its loss) must equal an independent per-block forward written here from the
   raw file weights within --tol (1e-4).
Exit status 0 when all holds, 1 with one line per failure (naming the file and field), 2 when
the checker cannot run (speculators not importable, unreadable files).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a hub id in verifier.name_or_path must not be fetched
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

torch.set_num_threads(min(8, os.cpu_count() or 1))

# Weights speculators rebuilds from the verifier on every load and never writes (DFlashDraftModel
# __init__'s per-instance _keys_to_ignore_on_save for a full-vocabulary draft); the check reads
# the list from the model itself and only compares it with this one to notice a new version.
NEVER_SAVED = {"embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight"}


class Failures:
    def __init__(self):
        self.lines = []

    def __call__(self, where, msg):
        self.lines.append(f"{where}: {msg}")


def read_header(d, fail):
    """name -> (shape, dtype string, file) from model.safetensors or a sharded index."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        path = os.path.join(d, name)
        with safe_open(path, framework="pt") as f:
            if (f.metadata() or {}).get("format") != "pt":
                fail(path, "safetensors metadata lacks format=pt (transformers' loader wants it)")
            for key in f.keys():
                sl = f.get_slice(key)
                out[key] = (tuple(sl.get_shape()), sl.get_dtype(), path)
    return out


def read_tensor(entry, key):
    with safe_open(entry[2], framework="pt") as f:
        return f.get_tensor(key)


# --------------------------------------------------------------------------------------- config

def check_config(d, raw, cfg, target_raw, fail):
    from speculators.models.dspark import DSparkSpeculatorConfig

    where = os.path.join(d, "config.json")
    if type(cfg) is not DSparkSpeculatorConfig:
        fail(where, f"speculators parses it as {type(cfg).__name__}, not DSparkSpeculatorConfig")
        return
    if raw.get("speculators_model_type") != "dspark":
        fail(where, f"speculators_model_type {raw.get('speculators_model_type')!r} != 'dspark'")
    # speculators resolves the class from speculators_model_type; save_pretrained writes the class name
    if raw.get("architectures") not in (["DSparkDraftModel"], ["DSparkSpeculator"]):
        fail(where, f"architectures {raw.get('architectures')!r}: speculators writes ['DSparkDraftModel']")
    tl = cfg.transformer_layer_config
    V, H, n_target = target_raw["vocab_size"], target_raw["hidden_size"], target_raw["num_hidden_layers"]
    if "model_type" not in raw.get("transformer_layer_config", {}):
        fail(where, "transformer_layer_config.model_type missing (write 'qwen3', the draft layers' type)")
    if tl.model_type != "qwen3":
        fail(where, f"transformer_layer_config.model_type {tl.model_type!r}; DSpark layers are qwen3")
    # transformers' Qwen3Config silently defaults what is missing (32 layers, vocab 151936, ...)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps"):
        if key not in raw.get("transformer_layer_config", {}):
            fail(where, f"transformer_layer_config.{key} missing (transformers would default it)")
    if tl.vocab_size != V:
        fail(where, f"transformer_layer_config.vocab_size {tl.vocab_size} != target vocab_size {V}")
    if cfg.draft_vocab_size != tl.vocab_size:
        fail(where, f"draft_vocab_size {cfg.draft_vocab_size} != vocab_size {tl.vocab_size}: a pruned "
                    "vocabulary needs d2t/t2d, which tandem's DSpark never trains")
    if tl.hidden_size != H:
        fail(where, f"transformer_layer_config.hidden_size {tl.hidden_size} != target hidden_size {H} "
                    "(speculators sizes fc from the draft hidden size and shares the target embedding)")
    if cfg.target_hidden_size not in (None, H):
        fail(where, f"target_hidden_size {cfg.target_hidden_size} != target hidden_size {H}")
    if getattr(tl, "hidden_act", "silu") != "silu" or getattr(tl, "attention_bias", False):
        fail(where, "transformer_layer_config: hidden_act must be silu and attention_bias false")
    if any(t != "full_attention" for t in (getattr(tl, "layer_types", None) or [])):
        fail(where, f"transformer_layer_config.layer_types {tl.layer_types}: tandem drafts attend fully")
    bs = cfg.block_size
    if not isinstance(bs, int) or bs < 2:
        fail(where, f"block_size {bs!r} must be an int >= 2")
    if cfg.sample_from_anchor is not True:
        fail(where, "sample_from_anchor must be true (tandem's slot k predicts anchor+k+1)")
    m = cfg.mask_token_id
    if not isinstance(m, int) or not 0 <= m < V:
        fail(where, f"mask_token_id {m!r} outside 0..{V - 1}: speculators embeds it with the "
                    "target's embedding (a grown mask row cannot be carried)")
    ids = cfg.aux_hidden_state_layer_ids
    if not ids or any(not isinstance(i, int) for i in ids):
        fail(where, f"aux_hidden_state_layer_ids {ids!r} must be a non-empty int list")
    else:
        if any(not 1 <= i <= n_target - 1 for i in ids):
            fail(where, f"aux_hidden_state_layer_ids {ids} outside 1..{n_target - 1} (vLLM numbering = "
                        f"tandem target_layer_ids + 1 for a {n_target}-layer target)")
        if ids != sorted(set(ids)):
            fail(where, f"aux_hidden_state_layer_ids {ids} must be strictly increasing (vLLM captures "
                        "them in layer order)")
    if cfg.markov_rank <= 0 or cfg.markov_head_type != "vanilla":
        fail(where, f"markov_rank {cfg.markov_rank} / markov_head_type {cfg.markov_head_type!r}: "
                    "tandem trains a vanilla Markov head of rank > 0")
    if not (cfg.enable_confidence_head and cfg.confidence_head_with_markov):
        fail(where, "enable_confidence_head and confidence_head_with_markov must both be true")
    sc = cfg.speculators_config
    if sc is None:
        fail(where, "speculators_config missing")
        return
    if sc.algorithm != "dspark":
        fail(where, f"speculators_config.algorithm {sc.algorithm!r} != 'dspark'")
    pm = sc.proposal_methods[0] if sc.proposal_methods else None
    want_tokens = bs if cfg.sample_from_anchor else bs - 1
    if pm is None or pm.proposal_type != "greedy" or pm.speculative_tokens != want_tokens:
        fail(where, f"speculators_config.proposal_methods[0] must be greedy with speculative_tokens "
                    f"{want_tokens} (= block_size with sample_from_anchor)")
    if sc.verifier.architectures != target_raw.get("architectures"):
        fail(where, f"speculators_config.verifier.architectures {sc.verifier.architectures} != the "
                    f"target config.json's {target_raw.get('architectures')}")
    if not sc.verifier.name_or_path:
        fail(where, "speculators_config.verifier.name_or_path missing")
    # a field speculators does not know would be kept (extra=allow) but never read: flag typos
    known = set(type(cfg).model_fields) | {"architectures", "torch_dtype", "dtype", "tie_word_embeddings",
                                           "transformers_version", "auto_map"}
    for key in raw:
        if key not in known:
            fail(where, f"field {key!r} is not a DSparkSpeculatorConfig field (typo?)")


# ------------------------------------------------------------------------------------- weights

def check_weights(d, cfg, header, fail):
    from speculators.models.dspark import DSparkDraftModel

    with torch.device("meta"):
        meta = DSparkDraftModel(cfg)
    never = set(meta._keys_to_ignore_on_save) & set(meta.state_dict())
    if never != NEVER_SAVED:
        fail("speculators", f"keys it never saves are {sorted(never)}, expected {sorted(NEVER_SAVED)}")
    expected = {k: tuple(v.shape) for k, v in meta.state_dict().items() if k not in never}
    where = os.path.join(d, "model.safetensors")
    for key in sorted(set(expected) - set(header)):
        fail(where, f"missing tensor {key} {list(expected[key])}")
    for key in sorted(set(header) - set(expected)):
        why = " (speculators never saves it: rebuilt from the verifier)" if key in never else ""
        fail(where, f"unexpected tensor {key}{why}")
    for key in sorted(set(expected) & set(header)):
        if header[key][0] != expected[key]:
            fail(where, f"{key} has shape {list(header[key][0])}, speculators expects {list(expected[key])}")
    w1 = header.get("markov_head.markov_w1.weight")
    if w1 is not None and len(w1[0]) == 2 and w1[0][1] != cfg.markov_rank:
        fail(os.path.join(d, "config.json"), f"markov_rank {cfg.markov_rank} but the file's "
                                             f"markov_w1 is {w1[0][1]} wide")
    dtypes = {v[1] for v in header.values()}
    if len(dtypes) > 1:
        fail(where, f"mixed tensor dtypes {sorted(dtypes)}")
    return sorted(never)


def load_with_speculators(d, cfg, header, fail):
    """speculators' own from_pretrained; then every file tensor must be in the model unchanged."""
    from speculators import SpeculatorModel

    model = SpeculatorModel.from_pretrained(d, config=cfg, dtype=torch.float32)
    model.eval()
    state = model.state_dict()
    for key, entry in header.items():
        if key in state and not torch.equal(state[key], read_tensor(entry, key).to(torch.float32)):
            fail(entry[2], f"{key} differs after speculators' from_pretrained")
    for key, t in state.items():
        if t.is_floating_point() and torch.isnan(t).any():
            fail("speculators", f"{key} is NaN after loading (never filled)")
    return model


# ------------------------------------------------------------------------------------- forward

def target_features(target_dir, ids, layer_ids):
    """Target hidden states for speculators' layer ids (id j = transformers hidden_states[j] =
    output of decoder layer j-1, checked by hooks) and the last layer's output, embedding, lm_head."""
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32,
                                                  attn_implementation="eager")
    target.eval()
    layers = target.model.layers
    got = {}
    hooks = [layer.register_forward_hook(lambda _m, _i, out, i=i: got.__setitem__(
        i, out[0] if isinstance(out, tuple) else out)) for i, layer in enumerate(layers)]
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    for j in layer_ids:
        assert torch.equal(out.hidden_states[j], got[j - 1]), f"hidden_states[{j}] != layer {j - 1}'s output"
    feats = torch.cat([got[j - 1] for j in layer_ids], dim=-1)
    return (feats, got[len(layers) - 1], target.get_input_embeddings().weight.detach(),
            target.get_output_embeddings().weight.detach())


def run_speculators(model, feats, last, ids, anchors):
    """speculators' DSparkDraftModel.forward; anchors are forced by making them the only valid
    positions of loss_mask (select_anchors takes all of them when max_anchors == their count).
    Its outputs are loss and metrics only, so the tensors are captured on their way."""
    import speculators.models.dspark.core as dspark_core

    got = {}
    metrics = dspark_core.compute_metrics
    backbone = model._backbone_forward

    def metrics_spy(logits, targets, confidence_logits, *a, **k):
        got["corrected"], got["conf"] = logits.detach(), confidence_logits
        return metrics(logits, targets, confidence_logits, *a, **k)

    def backbone_spy(*a, **k):
        out = backbone(*a, **k)
        got["hidden"], got["base"], got["index"] = out[0].detach(), out[1].detach(), out[4]
        return out

    loss_mask = torch.zeros_like(ids)
    loss_mask[0, anchors] = 1
    # its trainer's own kwargs, with the eager losses: the default fused ones are Triton (GPU only)
    kwargs, _ = model.get_trainer_kwargs(loss_fn="kl_div", loss_implementation="eager")
    kwargs["max_anchors"] = len(anchors)
    dspark_core.compute_metrics, model._backbone_forward = metrics_spy, backbone_spy
    try:
        with torch.no_grad():
            model(hidden_states=feats, input_ids=ids, loss_mask=loss_mask,
                  verifier_last_hidden_states=last, document_ids=torch.zeros_like(ids), **kwargs)
    finally:
        dspark_core.compute_metrics = metrics
        del model._backbone_forward
    A, bs = len(anchors), model.block_size
    used = got["index"].view(A, bs)[:, 0].tolist()
    assert used == anchors, f"speculators chose anchors {used}, not {anchors}"
    shape = lambda t: t.reshape(A, bs, *t.shape[2:])  # noqa: E731
    conf = None if got["conf"] is None else got["conf"].detach().reshape(A, bs)
    return dict(hidden=shape(got["hidden"]), base=shape(got["base"]), corrected=shape(got["corrected"]),
                conf=conf)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(tl, pos):
    """cos, sin [n, head_dim] (rotate-half layout) at integer positions."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rp = dict(tl.rope_parameters or {})
    hd = tl.head_dim
    if rp.get("rope_type", "default") == "default":
        inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        scale = 1.0
    else:  # scaled variants: transformers' frequency tables (not speculators')
        inv, scale = ROPE_INIT_FUNCTIONS[rp["rope_type"]](tl, "cpu")
    ang = pos.to(torch.float64)[:, None] * inv.to(torch.float64)[None]
    ang = torch.cat([ang, ang], dim=-1)
    return (ang.cos() * scale).float(), (ang.sin() * scale).float()


def apply_rope(x, cos, sin):  # x [n, heads, hd]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rot * sin[:, None]


def independent_forward(W, cfg, feats, ids, anchors, embed, lm_head):
    """One anchor at a time, as at inference: context = the target features strictly before the
    anchor (hidden_norm(fc(.)), keys/values only, not input-normed), block [anchor, MASK...] at
    positions a..a+bs-1, no mask (the block sees its context and all of itself)."""
    tl = cfg.transformer_layer_config
    eps, hd = tl.rms_norm_eps, tl.head_dim
    nq, nkv, bs = tl.num_attention_heads, tl.num_key_value_heads, cfg.block_size
    w1, w2 = W["markov_head.markov_w1.weight"], W["markov_head.markov_w2.weight"]
    out = {k: [] for k in ("hidden", "base", "markov", "corrected", "conf")}
    for a in anchors:
        c = rms_norm(feats[0, :a] @ W["fc.weight"].T, W["hidden_norm.weight"], eps)
        block = torch.tensor([int(ids[0, a])] + [cfg.mask_token_id] * (bs - 1))
        x = embed[block]
        cos_c, sin_c = rope(tl, torch.arange(a))
        cos_b, sin_b = rope(tl, torch.arange(a, a + bs))
        for i in range(tl.num_hidden_layers):
            p = lambda n: W[f"layers.{i}.{n}.weight"]  # noqa: E731
            heads = lambda t, name, n: (t @ p(name).T).view(t.shape[0], n, hd)  # noqa: E731
            h = rms_norm(x, p("input_layernorm"), eps)
            q = rms_norm(heads(h, "self_attn.q_proj", nq), p("self_attn.q_norm"), eps)
            q = apply_rope(q, cos_b, sin_b)
            kc = rms_norm(heads(c, "self_attn.k_proj", nkv), p("self_attn.k_norm"), eps)
            kb = rms_norm(heads(h, "self_attn.k_proj", nkv), p("self_attn.k_norm"), eps)
            k = torch.cat([apply_rope(kc, cos_c, sin_c), apply_rope(kb, cos_b, sin_b)])
            v = torch.cat([heads(c, "self_attn.v_proj", nkv), heads(h, "self_attn.v_proj", nkv)])
            k, v = k.repeat_interleave(nq // nkv, dim=1), v.repeat_interleave(nq // nkv, dim=1)
            probs = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) * hd ** -0.5, dim=-1)
            x = x + torch.einsum("hqk,khd->qhd", probs, v).reshape(bs, nq * hd) @ p("self_attn.o_proj").T
            n = rms_norm(x, p("post_attention_layernorm"), eps)
            g, u = n @ p("mlp.gate_proj").T, n @ p("mlp.up_proj").T
            x = x + (torch.nn.functional.silu(g) * u) @ p("mlp.down_proj").T
        hk = rms_norm(x, W["norm.weight"], eps)
        prev = ids[0, a:a + bs]  # teacher forcing: prev_0 = anchor token, prev_k = token at a+k
        e = w1[prev]
        base, markov = hk @ lm_head.T, e @ w2.T
        out["hidden"].append(hk)
        out["base"].append(base)
        out["markov"].append(markov)
        out["corrected"].append(base + markov)
        proj_w, proj_b = W["confidence_head.proj.weight"][0], W["confidence_head.proj.bias"][0]
        out["conf"].append(torch.cat([hk, e], -1) @ proj_w + proj_b)
    return {k: torch.stack(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speculators", required=True, help="the DSpark speculators-format export dir")
    ap.add_argument("--target", required=True, help="the target's HF checkpoint dir")
    ap.add_argument("--seq-len", type=int, default=0, help="tokens in the test sequence (default 3*block+8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    try:
        import transformers
        from speculators import SpeculatorModelConfig
    except ImportError as e:
        sys.exit(f"check_dspark_export: cannot import speculators ({e}); run tools/check_dspark_export.sh")
    transformers.logging.set_verbosity_error()
    import logging
    logging.getLogger("speculators").setLevel(logging.ERROR)
    try:  # speculators' loading code logs every file it opens through loguru
        from loguru import logger
        logger.remove()
    except ImportError:
        pass

    d, fail = args.speculators, Failures()
    try:
        raw = json.load(open(os.path.join(d, "config.json")))
        target_raw = json.load(open(os.path.join(args.target, "config.json")))
        target_raw = target_raw.get("text_config", target_raw)
        header = read_header(d, fail)
    except (OSError, ValueError) as e:
        print(f"check_dspark_export: {e}", file=sys.stderr)
        return 2

    def done():
        for line in fail.lines:
            print(f"FAIL {line}")
        print(f"check_dspark_export: {d}: " + (f"{len(fail.lines)} failure(s)" if fail.lines else "OK"))
        return 1 if fail.lines else 0

    try:
        cfg = SpeculatorModelConfig.from_pretrained(d)
    except Exception as e:  # pydantic / transformers errors: report them as this file's
        fail(os.path.join(d, "config.json"), f"speculators cannot parse it: {type(e).__name__}: {e}")
        return done()
    check_config(d, raw, cfg, target_raw, fail)
    if fail.lines:
        return done()
    tl = cfg.transformer_layer_config
    bs, ids_cfg = cfg.block_size, cfg.aux_hidden_state_layer_ids
    print(f"config: {type(cfg).__name__}, block_size {bs}, mask_token_id {cfg.mask_token_id}, markov_rank "
          f"{cfg.markov_rank}, aux_hidden_state_layer_ids {ids_cfg} (tandem target_layer_ids "
          f"{[i - 1 for i in ids_cfg]}), {tl.num_hidden_layers} draft layers, H {tl.hidden_size}, "
          f"rope {dict(tl.rope_parameters or {})}")

    # Attention: eager (flex attention wants compilation); verifier: the local target, so that
    # from_pretrained rebuilds embed_tokens / lm_head / verifier_norm from it without a hub.
    tl._attn_implementation = "eager"
    cfg.speculators_config.verifier.name_or_path = os.path.abspath(args.target)
    never = check_weights(d, cfg, header, fail)
    if fail.lines:
        return done()
    print(f"weights: {len(header)} tensors ({sorted({v[1] for v in header.values()})}) = speculators' "
          f"DSparkDraftModel state dict minus the keys it never saves {never}")
    model = load_with_speculators(d, cfg, header, fail)
    if fail.lines:
        return done()

    S = args.seq_len or 3 * bs + 8
    if S < 2 * bs + 2:
        sys.exit(f"check_dspark_export: --seq-len {S} too short for block_size {bs}")
    gen = torch.Generator().manual_seed(args.seed)
    V = tl.vocab_size
    ids = torch.randint(0, V - 1, (1, S), generator=gen)
    ids[ids >= cfg.mask_token_id] += 1  # any token but the mask
    # first anchor without context, one at the last position speculators may pick (S-bs-1)
    anchors = sorted({0, S // 3, S // 2 + 1, S - bs - 1})
    feats, last, embed, lm_head = target_features(args.target, ids, ids_cfg)
    spec = run_speculators(model, feats, last, ids, anchors)
    W = {k: read_tensor(e, k).to(torch.float32) for k, e in header.items()}
    ref = independent_forward(W, cfg, feats, ids, anchors, embed, lm_head)
    spec["markov"] = spec["corrected"] - spec["base"]
    print(f"logits: {S} random tokens, anchors {anchors}, block {bs}; speculators forward vs independent "
          f"per-block forward (fp32, teacher-forced prev):")
    names = ["hidden", "base", "markov", "corrected"] + (["conf"] if spec["conf"] is not None else [])
    if spec["conf"] is None:
        fail("speculators", "the model computed no confidence logits")
    for name in names:
        diff = (spec[name] - ref[name]).abs().max().item()
        scale = ref[name].abs().max().item()
        print(f"  {name:9s} max|diff| {diff:.2e}  (max|value| {scale:.3g})")
        if not diff < args.tol:
            fail(os.path.join(d, "model.safetensors"),
                 f"speculators' {name} differs from the independent forward by {diff:.2e} >= {args.tol:g}")
    agree = (spec["corrected"].argmax(-1) == ref["corrected"].argmax(-1)).float().mean().item()
    print(f"  argmax(corrected) agreement {agree:.3f}; max|markov correction| "
          f"{ref['markov'].abs().max().item():.3g}")
    if ref["markov"].abs().max().item() == 0:
        fail(os.path.join(d, "model.safetensors"), "the Markov correction is identically 0 (zero weights?)")
    return done()


if __name__ == "__main__":
    sys.exit(main())
