#!/usr/bin/env python3
"""Check tandem's two EAGLE-3 draft exports against what the serving engines read.

    tools/check_eagle3_export.sh --sglang RUN/export/sglang --speculators RUN/export/speculators
    .venv-tools/bin/python tools/check_eagle3_export.py --sglang DIR [--speculators DIR]
        [--target TARGET_DIR] [--no-speculators-lib] [--no-cross-compare]

SGLang / HF format (architectures LlamaForCausalLMEagle3; also what vLLM loads through its
`midlayer.` -> `layers.0.` mapping):
  * config fields SGLang's LlamaForCausalLMEagle3 and its model runner read: num_hidden_layers 1,
    draft_vocab_size (a missing one makes SGLang take the target's lm_head), tie_word_embeddings
    false (true makes lm_head the full-vocab embedding), target_hidden_size (fc input), attention
    without bias (SGLang hard-codes it), eagle_config.eagle_aux_hidden_state_layer_ids (SGLang:
    output of layer i) == top-level eagle_aux_hidden_state_layer_ids (vLLM: input of layer k) - 1,
    norm_before_residual false, num_aux_hidden_states == number of aux layers.
  * weights exactly {fc, midlayer.*, norm, lm_head, d2t, t2d} (+ embed_tokens, optional, and
    required when the draft is narrower than the target): SGLang silently skips a name it does
    not know, so a misspelt key would serve a random layer.
speculators format (vLLM's SpeculatorsConfig path, speculators_model_type eagle3):
  * the fields vLLM's converter reads (speculators_config.proposal_methods[0].speculative_tokens,
    verifier.name_or_path, transformer_layer_config as a dict, draft_vocab_size,
    target_hidden_size, norm_before_residual -- vLLM defaults it to TRUE when absent --,
    eagle_aux_hidden_state_layer_ids), transformer_layer_config with model_type llama and an
    explicit num_hidden_layers 1 (LlamaConfig's default is 32) and vocab_size = target vocab;
  * with the speculators package importable: SpeculatorModelConfig.from_pretrained(DIR) resolves to
    Eagle3SpeculatorConfig, every field written round-trips through to_dict(), and the weights
    match the state dict of speculators' own Eagle3DraftModel built from that config (on the meta
    device), minus the keys it may miss (embed_tokens, d2t, t2d, ...);
  * weights exactly {fc, layers.0.*, norm, lm_head, d2t, t2d} (+ optional embed_tokens).
EAGLE-3.1 (fc_norm and/or norm_output true, in both configs alike): fc_norm.{j}.weight
[target_hidden] for each aux layer j in both exports, and norm_before_fc false in the speculators
config (speculators refuses it together with fc_norm).
Both: d2t int64 [draft_vocab] offsets, t2d bool [vocab], t2d.sum() == draft_vocab,
d2t[i] + i strictly increasing inside the vocab and marked in t2d; with both dirs, identical
tensors and consistent configs. Exit status 1 and one line per problem on failure.
"""
import argparse
import json
import math
import os
import sys

import torch
from safetensors import safe_open

torch.set_num_threads(1)

ARCH_SGLANG = "LlamaForCausalLMEagle3"
SPECULATORS_ARCHS = ("Eagle3DraftModel", "Eagle3Speculator")


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []
        self.notes = []

    def err(self, where, msg):
        self.errors.append(f"[{where}] {msg}")

    def warn(self, where, msg):
        self.warnings.append(f"[{where}] {msg}")

    def note(self, where, msg):
        self.notes.append(f"[{where}] {msg}")


# ---------------------------------------------------------------------------------------------
# reading


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def weight_files(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        wm = load_json(index).get("weight_map")
        if not isinstance(wm, dict) or not wm:
            raise ValueError(f"{index}: no weight_map")
        files = sorted(set(wm.values()))
        return [os.path.join(d, f) for f in files], wm
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        return [single], None
    raise FileNotFoundError(f"{d}: neither model.safetensors nor model.safetensors.index.json")


class Weights:
    """Names, shapes, dtypes (and lazily the values) of a checkpoint's tensors."""

    def __init__(self, d, rep, where):
        self.dir = d
        self.info = {}  # name -> (shape tuple, torch dtype)
        self.file_of = {}
        self.metadata = {}
        files, wm = weight_files(d)
        for path in files:
            with safe_open(path, framework="pt") as f:
                self.metadata[os.path.basename(path)] = f.metadata() or {}
                for name in f.keys():
                    if name in self.info:
                        rep.err(where, f"tensor {name} appears in two shards")
                    sl = f.get_slice(name)
                    self.info[name] = (tuple(sl.get_shape()), _dtype(sl.get_dtype()))
                    self.file_of[name] = path
        if wm is not None:
            for name, fname in wm.items():
                if self.file_of.get(name) != os.path.join(d, fname):
                    rep.err(where, f"index maps {name} to {fname}, which does not hold it")
            for name in self.info:
                if name not in wm:
                    rep.err(where, f"{name} is in a shard but not in the index weight_map")
        for fname, md in self.metadata.items():
            if md.get("format") != "pt":
                rep.warn(where, f"{fname}: safetensors metadata has no format=pt "
                                "(transformers < 5 refuses metadata without it)")

    def get(self, name):
        with safe_open(self.file_of[name], framework="pt") as f:
            return f.get_tensor(name)


_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
           "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
           "F32": torch.float32, "F64": torch.float64}


def _dtype(s):
    return _DTYPES.get(s, s)


# ---------------------------------------------------------------------------------------------
# config helpers


def need(cfg, key, where, rep, types=int, positive=True):
    v = cfg.get(key)
    if v is None:
        rep.err(where, f"config field '{key}' is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, types):
        rep.err(where, f"config field '{key}' = {v!r} has the wrong type")
        return None
    if positive and types is int and v <= 0:
        rep.err(where, f"config field '{key}' = {v} must be > 0")
        return None
    return v


def int_list(v):
    return isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                             for x in v)


class Dims:
    """The numbers the weight shapes follow from."""

    def __init__(self, H, Ht, n_aux, heads, kv_heads, head_dim, inter, V, Dv, fc_norm=False):
        self.H, self.Ht, self.n_aux, self.fc_norm = H, Ht, n_aux, fc_norm
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.inter, self.V, self.Dv = inter, V, Dv


def layer_dims(cfg, where, rep):
    """Draft layer dims from a Llama-style config dict (SGLang top level or speculators'
    transformer_layer_config)."""
    H = need(cfg, "hidden_size", where, rep)
    inter = need(cfg, "intermediate_size", where, rep)
    heads = need(cfg, "num_attention_heads", where, rep)
    kv = cfg.get("num_key_value_heads", heads)
    V = need(cfg, "vocab_size", where, rep)
    need(cfg, "rms_norm_eps", where, rep, types=(int, float))
    need(cfg, "max_position_embeddings", where, rep)
    layers = cfg.get("num_hidden_layers")
    if layers != 1:
        rep.err(where, f"num_hidden_layers must be written as 1 (got {layers!r}; LlamaConfig's "
                       "default is 32, and engines build that many draft layers)")
    if "num_key_value_heads" not in cfg:
        rep.warn(where, "num_key_value_heads absent: engines assume num_attention_heads")
    if None in (H, heads):
        return None
    head_dim = cfg.get("head_dim")
    if head_dim is None:
        if H % heads:
            rep.err(where, "hidden_size not divisible by num_attention_heads and no head_dim")
            return None
        head_dim = H // heads
    if not isinstance(kv, int) or kv <= 0 or heads % kv:
        rep.err(where, f"num_key_value_heads = {kv!r} does not divide num_attention_heads")
        return None
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        rep.err(where, f"hidden_act = {act!r}; tandem's draft MLP is SiLU-gated")
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key, False):
            rep.err(where, f"{key} is true; the draft has no biases (and SGLang's draft qkv has "
                           "none either)")
    if cfg.get("tie_word_embeddings", False):
        rep.err(where, "tie_word_embeddings is true: SGLang then uses the full-vocab embedding as "
                       "lm_head instead of the draft-vocab lm_head.weight")
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" not in cfg and "rope_theta" not in rope:
        rep.warn(where, "no rope_theta (nor rope_parameters.rope_theta): engines fall back to "
                        "10000, which must match the target's")
    return H, inter, heads, kv, head_dim, V


def expected_weights(d, prefix, embed):
    """name -> (shape, dtype or None) the engines load for one draft layer under `prefix`.
    embed: 'required' | 'optional'."""
    H, hd = d.H, d.head_dim
    q, kv = d.heads * hd, d.kv_heads * hd
    w = {
        "fc.weight": (d.H, d.n_aux * d.Ht),
        f"{prefix}self_attn.q_proj.weight": (q, 2 * H),
        f"{prefix}self_attn.k_proj.weight": (kv, 2 * H),
        f"{prefix}self_attn.v_proj.weight": (kv, 2 * H),
        f"{prefix}self_attn.o_proj.weight": (H, q),
        f"{prefix}mlp.gate_proj.weight": (d.inter, H),
        f"{prefix}mlp.up_proj.weight": (d.inter, H),
        f"{prefix}mlp.down_proj.weight": (H, d.inter),
        f"{prefix}input_layernorm.weight": (H,),
        f"{prefix}hidden_norm.weight": (H,),
        f"{prefix}post_attention_layernorm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (d.Dv, H),
    }
    if d.fc_norm:   # EAGLE-3.1: one norm per captured hidden state
        w.update({f"fc_norm.{j}.weight": (d.Ht,) for j in range(d.n_aux)})
    required = {k: (s, None) for k, s in w.items()}
    optional = {"embed_tokens.weight": ((d.V, H), None)}
    vocab = {"d2t": ((d.Dv,), torch.int64), "t2d": ((d.V,), torch.bool)}
    if d.Dv != d.V:
        required.update(vocab)
    else:
        optional.update(vocab)
    if embed == "required":
        required.update({k: optional.pop(k) for k in ["embed_tokens.weight"]})
    return required, optional


def check_weight_set(weights, required, optional, where, rep):
    float_dtypes = {torch.float32, torch.float16, torch.bfloat16}
    have = weights.info
    for name, (shape, dtype) in required.items():
        if name not in have:
            rep.err(where, f"missing weight {name} {list(shape)}")
    for name, (shape, dtype) in {**required, **optional}.items():
        if name not in have:
            continue
        got_shape, got_dtype = have[name]
        if got_shape != tuple(shape):
            rep.err(where, f"{name} has shape {list(got_shape)}, engines expect {list(shape)}")
        if dtype is not None and got_dtype != dtype:
            rep.err(where, f"{name} has dtype {got_dtype}, expected {dtype}")
        if dtype is None and got_dtype not in float_dtypes:
            rep.err(where, f"{name} has dtype {got_dtype}, expected a float type")
    for name in sorted(set(have) - set(required) - set(optional)):
        rep.err(where, f"unexpected weight {name} {list(have[name][0])} (vLLM's loader rejects "
                       "unknown names; SGLang silently skips them)")
    floats = {have[n][1] for n in have if have[n][1] in float_dtypes}
    if len(floats) > 1:
        rep.warn(where, f"mixed float dtypes in the weights: {sorted(map(str, floats))}")


def check_vocab_map(weights, Dv, V, where, rep):
    """d2t int64 offsets and t2d bool mask, consistent with each other."""
    if "d2t" not in weights.info or "t2d" not in weights.info:
        return None
    d2t, t2d = weights.get("d2t"), weights.get("t2d")
    if d2t.dtype != torch.int64:
        rep.err(where, f"d2t dtype {d2t.dtype}, expected int64")
    if t2d.dtype != torch.bool:
        rep.err(where, f"t2d dtype {t2d.dtype}, expected bool")
    if d2t.dim() != 1 or t2d.dim() != 1:
        rep.err(where, "d2t and t2d must be 1-D")
        return None
    if d2t.numel() != Dv:
        rep.err(where, f"d2t has {d2t.numel()} entries, draft_vocab_size is {Dv}")
    if t2d.numel() != V:
        rep.err(where, f"t2d has {t2d.numel()} entries, vocab_size is {V}")
    mask = t2d.to(torch.bool)
    n = int(mask.sum().item())
    if n != Dv:
        rep.err(where, f"t2d marks {n} tokens, draft_vocab_size is {Dv}")
    used = d2t.to(torch.int64) + torch.arange(d2t.numel(), dtype=torch.int64)
    if used.numel():
        if int(used.min()) < 0 or int(used.max()) >= t2d.numel():
            rep.err(where, f"d2t[i] + i leaves the target vocab [0, {t2d.numel()}): "
                           f"range [{int(used.min())}, {int(used.max())}]")
            return None
        if used.numel() > 1 and not bool((used[1:] > used[:-1]).all()):
            bad = int((used[1:] <= used[:-1]).nonzero()[0].item())
            rep.err(where, f"d2t[i] + i is not strictly increasing (at i={bad + 1}: "
                           f"{int(used[bad])} then {int(used[bad + 1])})")
        if not bool(mask[used].all()):
            k = int((~mask[used]).nonzero()[0].item())
            rep.err(where, f"draft id {k} maps to target id {int(used[k])}, which t2d does not "
                           "mark")
    return d2t, t2d


def aux_ids_ok(ids, where, what, lo, rep, n_target=None):
    if not int_list(ids):
        rep.err(where, f"{what} = {ids!r} must be a non-empty list of ints")
        return False
    ok = True
    if len(set(ids)) != len(ids):
        rep.err(where, f"{what} = {ids} has duplicates")
        ok = False
    if min(ids) < lo:
        rep.err(where, f"{what} = {ids}: ids below {lo} are impossible in this numbering")
        ok = False
    if ids != sorted(ids):
        rep.warn(where, f"{what} = {ids} is not ascending (engines concatenate in layer order)")
    if n_target is not None:
        hi = n_target - 1 if lo == 1 else n_target - 2
        if max(ids) > hi:
            rep.err(where, f"{what} = {ids}: max id {max(ids)} > {hi} for a {n_target}-layer "
                           "target")
            ok = False
    return ok


# ---------------------------------------------------------------------------------------------
# SGLang / HF format


def check_sglang(d, rep, target):
    W = "sglang"
    cfg = load_json(os.path.join(d, "config.json"))
    if cfg.get("architectures") != [ARCH_SGLANG]:
        rep.err(W, f"architectures = {cfg.get('architectures')!r}, SGLang needs [{ARCH_SGLANG!r}]")
    if cfg.get("model_type") != "llama":
        rep.err(W, f"model_type = {cfg.get('model_type')!r}, expected 'llama' (AutoConfig -> "
                   "LlamaConfig)")
    ld = layer_dims(cfg, W, rep)
    Dv = need(cfg, "draft_vocab_size", W, rep)
    if "draft_vocab_size" not in cfg:
        rep.err(W, "without draft_vocab_size SGLang loads the target's full lm_head instead")
    Ht = need(cfg, "target_hidden_size", W, rep)
    if cfg.get("norm_before_residual", None) is not False:
        rep.err(W, f"norm_before_residual = {cfg.get('norm_before_residual')!r}; write false "
                   "explicitly (vLLM reads this dir too)")
    if "torch_dtype" not in cfg and "dtype" not in cfg:
        rep.warn(W, "no torch_dtype: engines use the serving dtype")
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    ec = cfg.get("eagle_config")
    sg = None
    if not isinstance(ec, dict):
        rep.err(W, "eagle_config (dict) is missing: SGLang then captures its default layers "
                   "[2, N//2, N-3] (+1 shifted) instead of the trained ones")
    else:
        sg = ec.get("eagle_aux_hidden_state_layer_ids")
        if ec.get("use_aux_hidden_state", True) is not True:
            rep.err(W, "eagle_config.use_aux_hidden_state is not true")
        elif "use_aux_hidden_state" not in ec:
            rep.warn(W, "eagle_config.use_aux_hidden_state absent (engines default it to true; "
                        "some SGLang helpers read it with default false)")
    nt = target["num_hidden_layers"] if target else None
    ok_sg = sg is not None and aux_ids_ok(sg, W, "eagle_config.eagle_aux_hidden_state_layer_ids",
                                          0, rep, nt)
    ok_top = top is not None and aux_ids_ok(top, W, "eagle_aux_hidden_state_layer_ids", 1, rep, nt)
    if top is None:
        rep.err(W, "top-level eagle_aux_hidden_state_layer_ids (vLLM numbering) is missing")
    if sg is None and isinstance(ec, dict):
        rep.err(W, "eagle_config.eagle_aux_hidden_state_layer_ids (SGLang numbering) is missing")
    if ok_sg and ok_top and [x + 1 for x in sg] != top:
        rep.err(W, f"aux layer numbering: SGLang ids {sg} must equal vLLM ids {top} minus 1 "
                   "(SGLang captures the input of layer id+1; vLLM the input of layer id)")
    ids = top if ok_top else (sg if ok_sg else None)
    n_aux = cfg.get("num_aux_hidden_states")
    if n_aux is None:
        rep.err(W, "num_aux_hidden_states is missing")
        n_aux = len(ids) if ids else 3
    elif ids and n_aux != len(ids):
        rep.err(W, f"num_aux_hidden_states = {n_aux} but {len(ids)} aux layer ids")
    if n_aux != 3:
        rep.warn(W, f"{n_aux} aux layers: SGLang's llama_eagle3.py (and vLLM before "
                    "num_aux_hidden_states support) hard-code fc input = 3 * target_hidden_size")
    dims = None
    if ld and Dv and Ht:
        H, inter, heads, kv, hd, V = ld
        if Dv > V:
            rep.err(W, f"draft_vocab_size {Dv} > vocab_size {V}")
        dims = Dims(H, Ht, n_aux, heads, kv, hd, inter, V, Dv, cfg.get("fc_norm") is True)
    return cfg, dims, ids


def check_sglang_weights(d, dims, rep):
    W = "sglang"
    weights = Weights(d, rep, W)
    if dims is None:
        rep.err(W, "config incomplete; weight shapes not checked")
        return weights
    req, opt = expected_weights(dims, "midlayer.", "required" if dims.Ht != dims.H else "optional")
    if dims.Ht != dims.H:
        rep.note(W, "draft hidden != target hidden: engines keep the draft's own embed_tokens")
    layers0 = [n for n in weights.info if n.startswith("layers.0.")]
    if layers0:
        rep.err(W, f"{len(layers0)} weights named layers.0.*: SGLang's draft module is "
                   "`midlayer`, it would skip them silently")
    check_weight_set(weights, req, opt, W, rep)
    check_vocab_map(weights, dims.Dv, dims.V, W, rep)
    return weights


# ---------------------------------------------------------------------------------------------
# speculators format


def check_speculators(d, rep, target):
    W = "speculators"
    cfg = load_json(os.path.join(d, "config.json"))
    arch = cfg.get("architectures")
    if arch != ["Eagle3DraftModel"]:
        if isinstance(arch, list) and arch and arch[0] in SPECULATORS_ARCHS:
            rep.warn(W, f"architectures = {arch} (SPEC: ['Eagle3DraftModel']; vLLM ignores it)")
        else:
            rep.err(W, f"architectures = {arch!r}, expected ['Eagle3DraftModel']")
    if "model_type" in cfg:
        rep.err(W, f"top-level model_type = {cfg['model_type']!r}: speculators configs have none "
                   "(transformers would treat the dir as a plain model)")
    if cfg.get("speculators_model_type") != "eagle3":
        rep.err(W, f"speculators_model_type = {cfg.get('speculators_model_type')!r}, vLLM needs "
                   "'eagle3'")
    if not isinstance(cfg.get("speculators_version"), str):
        rep.warn(W, "speculators_version missing or not a string")
    sc = cfg.get("speculators_config")
    if not isinstance(sc, dict):
        rep.err(W, "speculators_config (dict) is missing")
        sc = {}
    if sc.get("algorithm") != "eagle3":
        rep.err(W, f"speculators_config.algorithm = {sc.get('algorithm')!r}, expected 'eagle3'")
    pm = sc.get("proposal_methods")
    if not isinstance(pm, list) or not pm or not isinstance(pm[0], dict):
        rep.err(W, "speculators_config.proposal_methods must be a non-empty list of dicts")
    else:
        p0 = pm[0]
        if p0.get("proposal_type") != "greedy":
            rep.err(W, f"proposal_methods[0].proposal_type = {p0.get('proposal_type')!r}, "
                       "expected 'greedy'")
        st = p0.get("speculative_tokens")
        if not isinstance(st, int) or isinstance(st, bool) or st < 1:
            rep.err(W, f"proposal_methods[0].speculative_tokens = {st!r} (vLLM's "
                       "num_speculative_tokens) must be an int >= 1")
    if sc.get("default_proposal_method") != "greedy":
        rep.err(W, f"speculators_config.default_proposal_method = "
                   f"{sc.get('default_proposal_method')!r}; speculators requires it (no default) "
                   "and it must name a proposal_type")
    ver = sc.get("verifier")
    if isinstance(ver, dict) and target and target.get("architectures") is not None and \
            ver.get("architectures") != target["architectures"]:
        rep.err(W, f"speculators_config.verifier.architectures = {ver.get('architectures')!r}, the "
                   f"target's config.json says {target['architectures']!r} (vLLM loads the "
                   "verifier with it)")
    if isinstance(ver, dict) and isinstance(ver.get("name_or_path"), str) and \
            os.path.isabs(ver["name_or_path"]):
        rep.warn(W, f"verifier.name_or_path {ver['name_or_path']!r} is a local absolute path: "
                    "an engine on another machine will not find it (set target.name)")
    if not isinstance(ver, dict) or "name_or_path" not in ver:
        rep.err(W, "speculators_config.verifier.name_or_path is missing (vLLM reads it)")
    elif not isinstance(ver.get("architectures"), list):
        rep.err(W, "speculators_config.verifier.architectures (list) is missing; speculators' "
                   "VerifierConfig requires it")
    tl = cfg.get("transformer_layer_config")
    if not isinstance(tl, dict):
        rep.err(W, "transformer_layer_config must be a dict (vLLM: TypeError otherwise)")
        tl = {}
    if tl.get("model_type") != "llama":
        rep.err(W, f"transformer_layer_config.model_type = {tl.get('model_type')!r}, expected "
                   "'llama' (speculators defaults to Qwen3Config without it)")
    ld = layer_dims(tl, W + ".transformer_layer_config", rep)
    Dv = need(cfg, "draft_vocab_size", W, rep)
    Ht = cfg.get("target_hidden_size")
    if Ht is None:
        rep.warn(W, "target_hidden_size absent: engines assume the draft hidden size")
    if "norm_before_residual" not in cfg:
        rep.err(W, "norm_before_residual absent: vLLM's speculators converter defaults it to "
                   "TRUE (a different draft); write false")
    elif cfg["norm_before_residual"] is not False:
        rep.err(W, f"norm_before_residual = {cfg['norm_before_residual']!r}; tandem's residual is "
                   "the raw hidden state (false)")
    if cfg.get("norm_before_fc", False):
        rep.err(W, "norm_before_fc is true; tandem's draft has no norm over the concatenated "
                   "aux states (EAGLE-3.1's fc_norm is one norm per state)")
    eagle31 = [k for k in ("fc_norm", "norm_output") if k in cfg]
    for key in eagle31:
        if not isinstance(cfg[key], bool):
            rep.err(W, f"{key} = {cfg[key]!r}, expected a bool")
    if eagle31 and cfg.get("norm_before_fc", None) is not False:
        rep.err(W, "an EAGLE-3.1 config must write norm_before_fc false (the speculators "
                   "training CLI defaults it to true, which speculators refuses beside fc_norm)")
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    nt = target["num_hidden_layers"] if target else None
    if ids is None:
        rep.err(W, "eagle_aux_hidden_state_layer_ids is missing (vLLM would capture its "
                   "defaults)")
    elif not aux_ids_ok(ids, W, "eagle_aux_hidden_state_layer_ids", 1, rep, nt):
        ids = None
    dims = None
    if ld and Dv:
        H, inter, heads, kv, hd, V = ld
        if Dv > V:
            rep.err(W, f"draft_vocab_size {Dv} > transformer_layer_config.vocab_size {V}")
        n_aux = len(ids) if ids else 3
        dims = Dims(H, Ht or H, n_aux, heads, kv, hd, inter, V, Dv, cfg.get("fc_norm") is True)
    return cfg, dims, ids


def check_speculators_weights(d, dims, rep):
    W = "speculators"
    weights = Weights(d, rep, W)
    if dims is None:
        rep.err(W, "config incomplete; weight shapes not checked")
        return weights
    req, opt = expected_weights(dims, "layers.0.", "required" if dims.Ht != dims.H else "optional")
    mid = [n for n in weights.info if n.startswith("midlayer.")]
    if mid:
        rep.err(W, f"{len(mid)} weights named midlayer.*: speculators' Eagle3DraftModel names "
                   "the layer layers.0 (vLLM would remap, speculators would not load them)")
    check_weight_set(weights, req, opt, W, rep)
    check_vocab_map(weights, dims.Dv, dims.V, W, rep)
    return weights


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _kept(written, out):
    """Every value written comes back (dicts may gain defaulted keys)."""
    if isinstance(written, dict) and isinstance(out, dict):
        return all(k in out and _kept(v, out[k]) for k, v in written.items())
    if isinstance(written, list) and isinstance(out, list):
        return len(written) == len(out) and all(_kept(x, y) for x, y in zip(written, out))
    return _same(written, out)


def check_with_speculators_lib(d, cfg, weights, rep):
    """Parse with speculators' own classes, round-trip, and compare with its model's state dict."""
    W = "speculators-lib"
    try:
        import speculators
        from speculators import SpeculatorModelConfig
        from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    except Exception as e:  # noqa: BLE001
        rep.err(W, f"cannot import speculators ({type(e).__name__}: {e}); run through "
                   "tools/check_eagle3_export.sh or pass --no-speculators-lib")
        return
    version = getattr(speculators, "__version__", None)
    try:
        from importlib.metadata import version as _v
        version = _v("speculators")
    except Exception:  # noqa: BLE001
        pass
    rep.note(W, f"speculators {version}")
    try:
        parsed = SpeculatorModelConfig.from_pretrained(d)
    except Exception as e:  # noqa: BLE001
        rep.err(W, f"SpeculatorModelConfig.from_pretrained failed: {type(e).__name__}: {e}")
        return
    if not isinstance(parsed, Eagle3SpeculatorConfig):
        rep.err(W, f"config resolved to {type(parsed).__name__}, not Eagle3SpeculatorConfig")
        return
    try:
        direct = Eagle3SpeculatorConfig.model_validate(cfg)
    except Exception as e:  # noqa: BLE001
        rep.err(W, f"Eagle3SpeculatorConfig.model_validate failed: {type(e).__name__}: {e}")
        return
    out = parsed.to_dict()
    for key, val in cfg.items():
        if key in ("transformers_version", "transformer_layer_config"):
            continue
        if key not in out:
            rep.err(W, f"field {key} is dropped by speculators' to_dict()")
        elif not _kept(val, out[key]):
            rep.err(W, f"field {key} round-trips as {out[key]!r}, written {val!r}")
    tl_written = cfg.get("transformer_layer_config") or {}
    tl_parsed = parsed.transformer_layer_config
    tl_out = tl_parsed.to_dict()
    rope = tl_out.get("rope_parameters") or {}
    for key, val in tl_written.items():
        if key == "transformers_version":
            continue
        if key in ("rope_theta", "rope_scaling") and key not in tl_out:
            got = rope.get("rope_theta") if key == "rope_theta" else (
                {k: v for k, v in rope.items() if k != "rope_theta"} if val else None)
            if key == "rope_scaling" and val:
                ok = all(_same(v, rope.get(k)) for k, v in val.items() if k != "type")
            else:
                ok = _same(val, got) or (key == "rope_scaling" and val is None and
                                         rope.get("rope_type", "default") == "default")
            if not ok:
                rep.err(W, f"transformer_layer_config.{key} = {val!r} parses as rope_parameters "
                           f"{rope!r}")
            continue
        if key == "torch_dtype" and key not in tl_out:  # transformers 5 calls it dtype
            key = "dtype"
        if key not in tl_out:
            rep.err(W, f"transformer_layer_config.{key} is dropped by LlamaConfig")
        elif not _kept(val, tl_out[key]):
            rep.err(W, f"transformer_layer_config.{key} round-trips as {tl_out[key]!r}, "
                       f"written {val!r}")
    if type(tl_parsed).__name__ != "LlamaConfig":
        rep.err(W, f"transformer_layer_config parsed as {type(tl_parsed).__name__}")
    again = Eagle3SpeculatorConfig.model_validate(out).to_dict()
    for key in sorted(set(out) | set(again)):
        if key != "transformers_version" and not _same(out.get(key), again.get(key)):
            rep.err(W, f"to_dict() is not stable under a second parse at {key}")
    if direct.to_dict().keys() != out.keys():
        rep.err(W, "model_validate and from_pretrained disagree")
    if weights is None:
        return
    tl_h = tl_written.get("hidden_size")
    if cfg.get("target_hidden_size") not in (None, tl_h):
        rep.err(W, f"target_hidden_size {cfg.get('target_hidden_size')} != draft hidden_size "
                   f"{tl_h}: speculators' Eagle3DraftModel sizes fc from the draft hidden size "
                   "and cannot hold this draft (vLLM can)")
        return
    # The state dict of speculators' own model built from this config (meta device: no memory).
    try:
        with torch.device("meta"):
            model = Eagle3DraftModel(parsed)
    except Exception as e:  # noqa: BLE001
        rep.err(W, f"Eagle3DraftModel(config) failed: {type(e).__name__}: {e}")
        return
    sd = {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}
    ignore_save = set(getattr(model, "_keys_to_ignore_on_save", None) or [])
    may_miss = set(getattr(model, "_keys_to_ignore_on_load_missing", None) or [])
    expected = {k: v for k, v in sd.items() if k not in ignore_save}
    for name, (shape, dtype) in weights.info.items():
        if name not in expected:
            rep.err(W, f"{name} is not a key of speculators' Eagle3DraftModel")
            continue
        es, ed = expected[name]
        if shape != es:
            rep.err(W, f"{name} shape {list(shape)} != Eagle3DraftModel's {list(es)}")
        if name in ("d2t", "t2d") and dtype != ed:
            rep.err(W, f"{name} dtype {dtype} != Eagle3DraftModel buffer dtype {ed}")
    for name in sorted(set(expected) - set(weights.info) - may_miss):
        rep.err(W, f"Eagle3DraftModel key {name} {list(expected[name][0])} is not in the file")
    if not any(e.startswith(f"[{W}]") for e in rep.errors):
        rep.note(W, "config parses as Eagle3SpeculatorConfig, round-trips, and the weights "
                    "match Eagle3DraftModel's state dict")


# ---------------------------------------------------------------------------------------------
# both


def cross_check(sg, sp, rep, compare_values):
    W = "cross"
    (scfg, sdims, sids, sweights), (pcfg, pdims, pids, pweights) = sg, sp
    if sdims and pdims:
        for field in ("H", "Ht", "n_aux", "heads", "kv_heads", "head_dim", "inter", "V", "Dv",
                      "fc_norm"):
            a, b = getattr(sdims, field), getattr(pdims, field)
            if a != b:
                rep.err(W, f"{field}: sglang {a} vs speculators {b}")
    if sids is not None and pids is not None and sids != pids:
        rep.err(W, f"vLLM-numbered aux ids differ: sglang top-level {sids}, speculators {pids}")
    ec = scfg.get("eagle_config") or {}
    sgl = ec.get("eagle_aux_hidden_state_layer_ids")
    if int_list(sgl) and int_list(pids) and [x + 1 for x in sgl] != pids:
        rep.err(W, f"sglang eagle_config ids {sgl} + 1 != speculators ids {pids}")
    for key in ("fc_norm", "norm_output"):
        if scfg.get(key, False) != pcfg.get(key, False):
            rep.err(W, f"{key}: sglang {scfg.get(key)!r} vs speculators {pcfg.get(key)!r}")
    tl = pcfg.get("transformer_layer_config") or {}
    for key in ("rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings",
                "torch_dtype"):
        if key in scfg or key in tl:
            a, b = scfg.get(key), tl.get(key)
            if key == "rope_scaling" and isinstance(a, dict) and isinstance(b, dict):
                # transformers 5 copies rope_theta into the rope dict when it reads a config
                a = {k: v for k, v in a.items() if k != "rope_theta"}
                b = {k: v for k, v in b.items() if k != "rope_theta"}
            if not _same(a, b):
                rep.err(W, f"{key}: sglang {scfg.get(key)!r} vs speculators "
                           f"transformer_layer_config {tl.get(key)!r}")
    if sweights is None or pweights is None:
        return
    rename = {n: ("layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n)
              for n in sweights.info}
    if set(rename.values()) != set(pweights.info):
        rep.err(W, "the two exports hold different tensor sets (after midlayer. -> layers.0.): "
                   f"{sorted(set(rename.values()) ^ set(pweights.info))}")
        return
    for n, m in rename.items():
        if sweights.info[n] != pweights.info[m]:
            rep.err(W, f"{n} / {m}: {sweights.info[n]} vs {pweights.info[m]}")
        elif compare_values and not torch.equal(sweights.get(n), pweights.get(m)):
            rep.err(W, f"{n} and {m} differ in value")


def read_target(d, rep):
    top = load_json(os.path.join(d, "config.json"))
    cfg = top.get("text_config", top)
    out = {k: cfg.get(k) for k in ("num_hidden_layers", "hidden_size", "vocab_size")}
    if None in out.values():
        rep.err("target", f"target config lacks one of {list(out)}")
        return None
    out["architectures"] = top.get("architectures")
    return out


def target_check(dims, where, target, rep):
    if not dims or not target:
        return
    if dims.V != target["vocab_size"]:
        rep.err(where, f"vocab_size {dims.V} != target vocab_size {target['vocab_size']}")
    if dims.Ht != target["hidden_size"]:
        rep.err(where, f"target_hidden_size {dims.Ht} != target hidden_size "
                       f"{target['hidden_size']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang", help="SGLang/HF-format export dir (LlamaForCausalLMEagle3)")
    ap.add_argument("--speculators", help="speculators-format export dir (Eagle3DraftModel)")
    ap.add_argument("--target", help="optional: the target model dir, to check vocab, hidden "
                                     "size and aux layer range")
    ap.add_argument("--no-speculators-lib", action="store_true",
                    help="skip the checks that need the speculators package")
    ap.add_argument("--no-cross-compare", action="store_true",
                    help="do not compare tensor values between the two exports")
    args = ap.parse_args()
    if not args.sglang and not args.speculators:
        ap.error("give --sglang and/or --speculators")
    rep = Report()
    target = read_target(args.target, rep) if args.target else None
    sg = sp = None
    try:
        if args.sglang:
            scfg, sdims, sids = check_sglang(args.sglang, rep, target)
            sw = check_sglang_weights(args.sglang, sdims, rep)
            target_check(sdims, "sglang", target, rep)
            sg = (scfg, sdims, sids, sw)
        if args.speculators:
            pcfg, pdims, pids = check_speculators(args.speculators, rep, target)
            pw = check_speculators_weights(args.speculators, pdims, rep)
            target_check(pdims, "speculators", target, rep)
            if not args.no_speculators_lib:
                check_with_speculators_lib(args.speculators, pcfg, pw, rep)
            sp = (pcfg, pdims, pids, pw)
        if sg and sp:
            cross_check(sg, sp, rep, not args.no_cross_compare)
    except (OSError, ValueError, json.JSONDecodeError) as e:
        rep.err("io", f"{type(e).__name__}: {e}")
    for line in rep.notes:
        print("note:", line)
    for line in rep.warnings:
        print("warning:", line)
    for line in rep.errors:
        print("ERROR:", line)
    dirs = " + ".join(x for x in (args.sglang, args.speculators) if x)
    if rep.errors:
        print(f"FAIL: {len(rep.errors)} problem(s) in {dirs}")
        return 1
    print(f"OK: {dirs} ({len(rep.warnings)} warning(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
