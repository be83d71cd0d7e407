#!/usr/bin/env python3
"""Record what transformers 5.23 computes for YaRN RoPE scaling (rope_type "yarn").

Writes tests/fixtures/rope/:

  yarn.safetensors   for each case C of CASES (qwen3, deepseek_v3, kimi_like, gpt_oss, explicit_factor):
      C.inv_freq   F32 [d/2]     ROPE_INIT_FUNCTIONS["yarn"](config) (= _compute_yarn_parameters) on a real
                                 config object (Qwen3Config / DeepseekV3Config / GptOssConfig) built with
                                 the case's rope parameters; d = the rotated dims
      C.cos, C.sin F32 [6, W]    the model's own RotaryEmbedding class (Qwen3RotaryEmbedding,
                                 DeepseekV3RotaryEmbedding, GptOssRotaryEmbedding) called in fp32 with
                                 position_ids [[0, 1, 7, 4095, 4096, 100000]] (batch dim dropped).
                                 W = d for Qwen3 / DeepSeek-V3 (cos = cos(cat(freqs, freqs)) * a), but
                                 W = d/2 for gpt-oss: GptOssRotaryEmbedding returns cos(freqs) * a without
                                 the cat, and its _apply_rotary_emb rotates the halves x[:d/2], x[d/2:]
                                 (the same rotation as rotate_half with the catted form)
      __metadata__ "C" (JSON): config class, the rope dict given and the config's rope_parameters after
                   transformers' standardization (the exact dict _compute_yarn_parameters reads), head
                   dim, rotated dims, max_position_embeddings, attention_factor (the float transformers
                   returns; it multiplies cos and sin), the correction range, which pair indices are
                   extrapolated / interpolated / blended, cos/sin layout; for the DeepSeek cases also
                   DeepseekV3Attention's softmax scale.  "cases", "position_ids", "formulas", and
                   "attention_factor_table" (attention factor and factor / original length actually used,
                   for more combinations of factor / mscale / mscale_all_dim / attention_factor, each
                   obtained the same way from a Qwen3Config).

  qwen3_yarn_reference.safetensors   the committed tiny fp32 checkpoint tests/fixtures/models/qwen3 (4 layers,
      H 64, head_dim 32, rope_theta 1e6, vocab 512) with config.json's rope_parameters replaced by
      {"factor": 4.0, "original_max_position_embeddings": 8, "rope_theta": 1000000.0, "rope_type": "yarn"}
      (max_position_embeddings kept at 512; every other key unchanged; written with indent 2, sorted keys):
      input_ids  I64 [2, 24]      positions 0..23, i.e. past original_max_position_embeddings 8
      logits     F32 [2, 24, 512] eager fp32 forward of Qwen3ForCausalLM from that dir, no attention mask
                                  (causal), use_cache=False
      hidden.{i} F32 [2, 24, 64]  raw output of model.model.layers[i] (forward hook, before the final norm)
      inv_freq   F32 [16]         the loaded model's model.rotary_emb.inv_freq
      __metadata__ config_json = the exact config.json text (write it next to the fixture's model.safetensors
                   to load the same model), attention_factor, yarn-vs-default logit differences.

YaRN as transformers 5.23 implements it (modeling_rope_utils._compute_yarn_parameters; checked here by an
independent re-implementation, own_yarn below, that must match transformers bit for bit):
  Inputs from config.rope_parameters (after standardize_rope_params): base = rope_theta; dim =
  int(head_dim * partial_rotary_factor) with head_dim = config.head_dim (DeepseekV3Config sets head_dim =
  qk_rope_head_dim = 64, so DeepSeek's rotated dims are qk_rope_head_dim); factor = rope_parameters["factor"]
  (key required; only if its value is None is it recomputed as max_position_embeddings /
  original_max_position_embeddings, otherwise never: a mismatch with that ratio only logs a warning);
  original_max_position_embeddings = rope_parameters["original_max_position_embeddings"], except that
  standardize_rope_params (re-run by the init function) overwrites it with config.original_max_position_embeddings
  when the config has that attribute (a top-level config.json key), and fills in config.max_position_embeddings
  when it is absent from both; beta_fast = rope_parameters.get("beta_fast") or 32, beta_slow =
  .get("beta_slow") or 1 (0 counts as absent); truncate = config.rope_parameters.get("truncate", True).
  Attention factor a (get_mscale(s, m) = 1.0 if s <= 1 else 0.1 * m * ln(s) + 1.0, in double):
    attention_factor given (not None): a = it, as is;
    else if mscale and mscale_all_dim (both present and non-zero): a = get_mscale(factor, mscale) /
      get_mscale(factor, mscale_all_dim);
    else: a = get_mscale(factor) = 0.1 * ln(factor) + 1 (a lone mscale or a lone mscale_all_dim is ignored).
  Correction range (find_correction_dim / find_correction_range, double): for r rotations,
    c(r) = dim * ln(orig / (2 * pi * r)) / (2 * ln(base));  low = c(beta_fast), high = c(beta_slow);
    if truncate: low = floor(low), high = ceil(high);  low = max(low, 0), high = min(high, dim - 1)
    (clamped to dim - 1, not dim/2 - 1, although the ramp runs over dim/2 pair indices).
  Ramp (linear_ramp_factor(low, high, dim // 2)), float32: if low == high, high += 0.001;
    ramp[i] = clamp((float(i) - low) / (high - low), 0, 1) for i = 0 .. dim/2 - 1.
  Frequencies, float32: pos_freqs[i] = base ** (float(2i) / dim) (torch's float32 pow, arange(0, dim, 2)
    cast to float32 and divided by dim in float32); extrapolation[i] = 1 / pos_freqs[i] (the unscaled RoPE
    frequency); interpolation[i] = 1 / (factor * pos_freqs[i]);  e[i] = 1 - ramp[i] ("extrapolation factor");
    inv_freq[i] = interpolation[i] * (1 - e[i]) + extrapolation[i] * e[i].
    So pair i <= low (ramp 0, high frequencies, many rotations over orig) keeps the original frequency
    ("extrapolated"), pair i >= high (ramp 1, low frequencies) is divided by factor ("interpolated"), pairs in
    between are blended linearly.
  The RotaryEmbedding (forward, fp32): freqs = float(position) * inv_freq; emb = cat(freqs, freqs) (gpt-oss:
  emb = freqs); cos = cos(emb) * a, sin = sin(emb) * a (a as a float32 scalar); then cast to the activation
  dtype. Both q and k get the factor, so attention logits scale by a^2.  DeepseekV3Attention additionally
  multiplies its softmax scale qk_head_dim ** -0.5 by get_mscale(factor, mscale_all_dim) ** 2 when
  mscale_all_dim is non-zero (yarn_apply_mscale).

Deterministic: CPU, single thread, fixed input ids seed, sorted names and metadata (tools/fixture_safetensors.py);
running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_rope_fixtures.py [--out tests/fixtures/rope]
                                                       [--base tests/fixtures/models/qwen3]
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import DeepseekV3Config, GptOssConfig, Qwen3Config  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3  # noqa: E402
from transformers.models.gpt_oss import modeling_gpt_oss  # noqa: E402
from transformers.models.qwen3 import modeling_qwen3  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_safetensors import file_sha256, same_bits, write_safetensors  # noqa: E402

torch.set_num_threads(1)

POSITIONS = [0, 1, 7, 4095, 4096, 100000]

QWEN3 = dict(config=Qwen3Config, rotary=modeling_qwen3.Qwen3RotaryEmbedding,
             kwargs=dict(head_dim=128, max_position_embeddings=131072))
DEEPSEEK = dict(config=DeepseekV3Config, rotary=modeling_deepseek_v3.DeepseekV3RotaryEmbedding,
                # DeepSeek-V3's published config.json: rope_theta at the top level, the yarn dict under
                # rope_scaling with the legacy "type" key; the other dims are DeepseekV3Config's defaults,
                # which are the published ones (qk_rope_head_dim 64, qk_nope_head_dim 128)
                kwargs=dict(max_position_embeddings=163840, rope_theta=10000.0), legacy_key="rope_scaling")
GPT_OSS = dict(config=GptOssConfig, rotary=modeling_gpt_oss.GptOssRotaryEmbedding,
               kwargs=dict(head_dim=64, max_position_embeddings=131072))

CASES = {
    "qwen3": dict(QWEN3, rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                               "rope_theta": 1000000.0}),
    "deepseek_v3": dict(DEEPSEEK, rope={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    "kimi_like": dict(DEEPSEEK, rope={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                      "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 1.0}),
    "gpt_oss": dict(GPT_OSS, rope={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                   "truncate": False, "original_max_position_embeddings": 4096,
                                   "rope_theta": 150000.0}),
    "explicit_factor": dict(QWEN3, rope={"rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 32768, "rope_theta": 1000000.0,
                                         "attention_factor": 0.9}),
}

# more combinations, attention factor only (Qwen3Config head_dim 128, rope_theta 1e6, max_position_embeddings
# 131072); original_max_position_embeddings 32768 unless the entry leaves it out
TABLE_BASE = {"rope_type": "yarn", "rope_theta": 1000000.0, "original_max_position_embeddings": 32768}
ATTENTION_FACTOR_TABLE = [
    {"factor": 4.0},
    {"factor": 4.0, "mscale": 0.707},
    {"factor": 4.0, "mscale_all_dim": 1.0},
    {"factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    {"factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.0},
    {"factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.707},
    {"factor": 4.0, "mscale": 0.0, "mscale_all_dim": 1.0},
    {"factor": 4.0, "mscale": 0.707, "mscale_all_dim": 1.0, "attention_factor": 0.9},
    {"factor": 4.0, "attention_factor": 1.0},
    {"factor": 1.0},
    {"factor": 40.0},
    {"factor": None},
    {"factor": 4.0, "original_max_position_embeddings": None},
    # a top-level original_max_position_embeddings (config.json key outside rope_parameters) replaces the one
    # inside rope_parameters when the rope init function re-runs standardize_rope_params
    {"factor": 4.0, "_config_kwargs": {"original_max_position_embeddings": 8192}},
]

REF_SEQ = 24
REF_IDS_SEED = 2401
REF_ROPE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}  # + the base's rope_theta


# ------------------------------------------------------------------------------------------
# independent re-implementation (must agree with transformers bit for bit)
# ------------------------------------------------------------------------------------------
def get_mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def own_yarn(dim, rope, max_position_embeddings):
    """(inv_freq F32 [dim/2], attention_factor, info) from a standardized rope_parameters dict."""
    base = float(rope["rope_theta"])
    orig = rope["original_max_position_embeddings"]
    factor = rope["factor"]
    if factor is None:
        factor = max_position_embeddings / orig
    af = rope.get("attention_factor")
    m, m_all = rope.get("mscale"), rope.get("mscale_all_dim")
    if af is None:
        af = get_mscale(factor, m) / get_mscale(factor, m_all) if (m and m_all) else get_mscale(factor)
    beta_fast = rope.get("beta_fast") or 32
    beta_slow = rope.get("beta_slow") or 1
    truncate = rope.get("truncate", True)

    def corr(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low_raw, high_raw = corr(beta_fast), corr(beta_slow)
    low, high = (math.floor(low_raw), math.ceil(high_raw)) if truncate else (low_raw, high_raw)
    low, high = max(low, 0), min(high, dim - 1)
    ramp_high = high + 0.001 if low == high else high
    f32 = torch.float32
    ramp = ((torch.arange(dim // 2, dtype=f32) - low) / (ramp_high - low)).clamp(0, 1)
    pos = base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(f32) / dim)
    extra = 1.0 / pos
    inter = 1.0 / (factor * pos)
    e = 1 - ramp
    inv_freq = inter * (1 - e) + extra * e
    info = {"factor_used": factor, "beta_fast_used": beta_fast, "beta_slow_used": beta_slow,
            "truncate": truncate, "correction_range_raw": [low_raw, high_raw], "correction_range": [low, high],
            "extrapolated_pairs (ramp 0: original frequency)": [i for i, r in enumerate(ramp.tolist()) if r == 0],
            "interpolated_pairs (ramp 1: frequency / factor)": [i for i, r in enumerate(ramp.tolist()) if r == 1],
            "blended_pairs (0 < ramp < 1)": [i for i, r in enumerate(ramp.tolist()) if 0 < r < 1]}
    return inv_freq, af, info


def make_config(spec, rope):
    rope = json.loads(json.dumps(rope))  # transformers edits the dict in place
    kwargs = dict(spec["kwargs"])
    kwargs[spec.get("legacy_key", "rope_parameters")] = rope
    return spec["config"](**kwargs)


# ------------------------------------------------------------------------------------------
# yarn.safetensors
# ------------------------------------------------------------------------------------------
@torch.no_grad()
def make_yarn(out_dir):
    tensors, metadata = {}, {}
    for name, spec in CASES.items():
        config = make_config(spec, spec["rope"])
        inv_freq, af = ROPE_INIT_FUNCTIONS["yarn"](config)
        rope = config.rope_parameters
        assert rope["rope_type"] == "yarn" and inv_freq.dtype == torch.float32
        dim = int(config.head_dim * rope.get("partial_rotary_factor", 1.0))
        assert inv_freq.shape == (dim // 2,)
        own, own_af, info = own_yarn(dim, rope, config.max_position_embeddings)
        assert same_bits(own, inv_freq), (name, (own - inv_freq).abs().max())
        assert own_af == af, (name, own_af, af)

        rot = spec["rotary"](config)
        assert same_bits(rot.inv_freq, inv_freq) and rot.attention_scaling == af
        x = torch.zeros(1, 1, dtype=torch.float32)
        cos, sin = rot(x, torch.tensor([POSITIONS], dtype=torch.int64))
        cos, sin = cos[0].contiguous(), sin[0].contiguous()
        half = spec["config"] is GptOssConfig
        assert cos.dtype == torch.float32 and cos.shape == (len(POSITIONS), dim // 2 if half else dim)
        freqs = torch.tensor(POSITIONS, dtype=torch.int64).float()[:, None] * inv_freq
        emb = freqs if half else torch.cat((freqs, freqs), dim=-1)
        assert same_bits(emb.cos() * af, cos) and same_bits(emb.sin() * af, sin), name
        tensors[f"{name}.inv_freq"] = inv_freq.contiguous()
        tensors[f"{name}.cos"], tensors[f"{name}.sin"] = cos, sin

        entry = {
            "config_class": spec["config"].__name__,
            "rotary_class": spec["rotary"].__name__,
            "rope_dict_given": spec["rope"],
            "rope_dict_given_as": spec.get("legacy_key", "rope_parameters"),
            "config_kwargs": spec["kwargs"],
            "rope_parameters": rope,
            "head_dim": config.head_dim,
            "rotated_dims": dim,
            "max_position_embeddings": config.max_position_embeddings,
            "attention_factor": af,
            "cos_sin_width": int(cos.shape[1]),
            "cos_sin_layout": ("cos(freqs) * attention_factor, no cat: [positions, rotated_dims / 2]" if half else
                               "cos(cat(freqs, freqs)) * attention_factor: [positions, rotated_dims]"),
        }
        entry.update(info)
        if spec["config"] is DeepseekV3Config:
            entry["qk_rope_head_dim"] = config.qk_rope_head_dim
            entry["qk_head_dim"] = config.qk_head_dim
            scale = modeling_deepseek_v3.yarn_apply_mscale(rope, config.qk_head_dim ** (-0.5))
            own_scale = config.qk_head_dim ** (-0.5)
            if rope.get("mscale_all_dim", 0):
                own_scale = own_scale * get_mscale(rope["factor"], rope["mscale_all_dim"]) ** 2
            assert scale == own_scale
            entry["softmax_scale"] = scale
            entry["softmax_scale_formula"] = ("DeepseekV3Attention.scaling = yarn_apply_mscale(rope_parameters, "
                                              "qk_head_dim ** -0.5) = qk_head_dim ** -0.5 * "
                                              "(0.1 * mscale_all_dim * ln(factor) + 1) ** 2")
        metadata[name] = json.dumps(entry, sort_keys=True)
        print(f"{name}: dim {dim}, attention_factor {af!r}, range {info['correction_range']}")

    table = []
    for extra in ATTENTION_FACTOR_TABLE:
        extra = dict(extra)
        config_kwargs = extra.pop("_config_kwargs", {})
        rope = dict(TABLE_BASE, **extra)
        if rope["original_max_position_embeddings"] is None:
            del rope["original_max_position_embeddings"]
        config = make_config(dict(QWEN3, kwargs=dict(QWEN3["kwargs"], **config_kwargs)), rope)
        inv_freq, af = ROPE_INIT_FUNCTIONS["yarn"](config)
        own, own_af, info = own_yarn(128, config.rope_parameters, config.max_position_embeddings)
        assert same_bits(own, inv_freq) and own_af == af, extra
        table.append({"rope_dict_given": rope, "config_kwargs": dict(QWEN3["kwargs"], **config_kwargs),
                      "max_position_embeddings": config.max_position_embeddings,
                      "original_max_position_embeddings_used":
                          config.rope_parameters["original_max_position_embeddings"],
                      "factor_used": info["factor_used"], "attention_factor": af,
                      "inv_freq_equals_qwen3_case": same_bits(inv_freq, tensors["qwen3.inv_freq"])})
    metadata["attention_factor_table"] = json.dumps(table, sort_keys=True)
    metadata["cases"] = json.dumps(list(CASES))
    metadata["position_ids"] = json.dumps(POSITIONS)
    metadata["formulas"] = FORMULAS
    metadata["generator"] = "tools/make_rope_fixtures.py"
    metadata["transformers_version"] = transformers.__version__
    metadata["torch_version"] = torch.__version__
    path = os.path.join(out_dir, "yarn.safetensors")
    write_safetensors(path, tensors, metadata)
    return path, table


FORMULAS = (
    "transformers 5.23 _compute_yarn_parameters: factor = rope_parameters['factor'] (if None: "
    "max_position_embeddings / original_max_position_embeddings); attention_factor = given, else "
    "get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) if mscale and mscale_all_dim are both "
    "non-zero, else get_mscale(factor); get_mscale(s, m=1) = 1 if s <= 1 else 0.1 * m * ln(s) + 1. "
    "c(r) = dim * ln(orig / (2 pi r)) / (2 ln(base)); low = c(beta_fast or 32), high = c(beta_slow or 1); "
    "truncate (default True): low = floor(low), high = ceil(high); low = max(low, 0), high = min(high, dim - 1); "
    "if low == high: high += 0.001. float32: ramp[i] = clamp((i - low) / (high - low), 0, 1), i < dim/2; "
    "pos[i] = base ** (2i / dim); e = 1 - ramp; inv_freq = (1 / (factor * pos)) * (1 - e) + (1 / pos) * e. "
    "RotaryEmbedding: cos = cos(position * inv_freq (cat'ed twice; gpt-oss: once)) * attention_factor, "
    "sin likewise.")


# ------------------------------------------------------------------------------------------
# qwen3_yarn_reference.safetensors
# ------------------------------------------------------------------------------------------
@torch.no_grad()
def run_forward(model, input_ids):
    captured, handles = {}, []
    for i, layer in enumerate(model.model.layers):
        def hook(_mod, _inp, out, i=i):
            t = out[0] if isinstance(out, (tuple, list)) else out
            captured[i] = t.detach().to(torch.float32).clone()
        handles.append(layer.register_forward_hook(hook))
    try:
        out = model(input_ids=input_ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    assert sorted(captured) == list(range(len(model.model.layers)))
    return out.logits.detach().to(torch.float32).clone(), [captured[i] for i in range(len(captured))]


def load(path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


@torch.no_grad()
def make_reference(out_dir, base):
    with open(os.path.join(base, "config.json")) as f:
        base_text = f.read()
    cfg = json.loads(base_text)
    assert base_text == json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["dtype"] == "float32"
    assert cfg["rope_parameters"]["rope_type"] == "default"
    theta = cfg["rope_parameters"]["rope_theta"]
    cfg["rope_parameters"] = dict(REF_ROPE, rope_theta=theta)
    config_json = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    vocab, n_layers = cfg["vocab_size"], cfg["num_hidden_layers"]

    g = torch.Generator().manual_seed(REF_IDS_SEED)
    input_ids = torch.randint(0, vocab, (2, REF_SEQ), generator=g, dtype=torch.int64)
    input_ids[0, 20] = vocab - 1
    input_ids[1, 2] = 0

    tmp = tempfile.mkdtemp(prefix="rope_yarn_")
    try:
        for fn in ("model.safetensors", "generation_config.json"):
            shutil.copy(os.path.join(base, fn), os.path.join(tmp, fn))
        with open(os.path.join(tmp, "config.json"), "w") as f:
            f.write(config_json)
        model = load(tmp)
    finally:
        shutil.rmtree(tmp)
    rope = model.config.rope_parameters
    assert rope["rope_type"] == "yarn" and model.config.max_position_embeddings == cfg["max_position_embeddings"]
    rot = model.model.rotary_emb
    own, own_af, info = own_yarn(cfg["head_dim"], rope, model.config.max_position_embeddings)
    assert same_bits(rot.inv_freq, own) and rot.attention_scaling == own_af
    logits, hidden = run_forward(model, input_ids)

    # the default-rope base model: it reproduces its committed reference, differs from yarn, and gives the
    # yarn logits bit for bit once its rotary embedding carries yarn's inv_freq and attention factor
    default = load(base)
    with open(os.path.join(base, "reference.safetensors"), "rb") as f:
        from safetensors.torch import load as st_load
        base_ref = st_load(f.read())
    l0, _ = run_forward(default, base_ref["input_ids"])
    base_ref_diff = float((l0 - base_ref["logits"]).abs().max())
    assert base_ref_diff < 1e-5, base_ref_diff
    ld, _ = run_forward(default, input_ids)
    diff = (logits - ld).abs()
    per_pos = diff.amax(dim=(0, 2))
    assert float(per_pos[0]) == 0.0, "position 0 attends only to itself: RoPE cannot matter there"
    assert float(diff.max()) > 0.1, float(diff.max())
    default.model.rotary_emb.inv_freq.copy_(own)
    default.model.rotary_emb.attention_scaling = own_af
    lp, hp = run_forward(default, input_ids)
    assert same_bits(lp, logits) and all(same_bits(a, b) for a, b in zip(hp, hidden))

    tensors = {"input_ids": input_ids, "logits": logits, "inv_freq": rot.inv_freq.detach().clone()}
    for i, h in enumerate(hidden):
        assert h.shape == (2, REF_SEQ, cfg["hidden_size"])
        tensors[f"hidden.{i}"] = h
    assert len(hidden) == n_layers
    metadata = {
        "generator": "tools/make_rope_fixtures.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "base_fixture": "tests/fixtures/models/qwen3",
        "config_json": config_json,
        "rope_parameters": json.dumps(rope, sort_keys=True),
        "attention_factor": repr(own_af),
        "yarn": json.dumps(info, sort_keys=True),
        "input_ids_seed": str(REF_IDS_SEED),
        "reference": ("Qwen3ForCausalLM.from_pretrained(dir with config_json + the base's model.safetensors and "
                      "generation_config.json, dtype=float32, attn_implementation='eager'), eval, no attention "
                      "mask (causal), position_ids 0..23, use_cache=False; hidden.{i}: raw output of "
                      "model.model.layers[i] (forward hook, before the final norm); inv_freq: "
                      "model.model.rotary_emb.inv_freq"),
        "notes": ("max_position_embeddings kept at 512: max_position_embeddings / original_max_position_embeddings "
                  "= 64 != factor 4, for which transformers only logs a warning and uses factor 4. The same "
                  "forward of the default-rope base model with rotary_emb.inv_freq / attention_scaling replaced "
                  "by these gives these logits and hidden states bit for bit; the base model reproduces its own "
                  f"committed reference.safetensors logits (max abs diff {base_ref_diff:.3g})."),
        "yarn_vs_default_max_abs_logit_diff": f"{float(diff.max()):.6g}",
        "yarn_vs_default_max_abs_logit_diff_per_position": json.dumps([float(f"{v:.6g}") for v in per_pos.tolist()]),
        "default_logits_max_abs": f"{float(ld.abs().max()):.6g}",
    }
    path = os.path.join(out_dir, "qwen3_yarn_reference.safetensors")
    write_safetensors(path, tensors, metadata)
    return path, float(diff.max()), per_pos.tolist(), own_af, base_ref_diff


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.relpath(os.path.join(here, ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "rope"),
                    help="output directory (default: %(default)s)")
    ap.add_argument("--base", default=os.path.join(root, "tests", "fixtures", "models", "qwen3"),
                    help="the tiny fp32 Qwen3 fixture (default: %(default)s)")
    args = ap.parse_args()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.makedirs(args.out, exist_ok=True)

    yarn_path, table = make_yarn(args.out)
    for t in table:
        print(f"  table: {json.dumps(t['rope_dict_given'], sort_keys=True)} {json.dumps(t['config_kwargs'])} -> "
              f"attention_factor {t['attention_factor']!r} (factor used {t['factor_used']!r}, original "
              f"{t['original_max_position_embeddings_used']}, inv_freq == qwen3's: {t['inv_freq_equals_qwen3_case']})")
    ref_path, max_diff, per_pos, af, base_diff = make_reference(args.out, os.path.normpath(args.base))
    print(f"qwen3 tiny yarn: attention_factor {af!r}, yarn vs default max |logit diff| {max_diff:.6g}; "
          f"per position {[round(v, 4) for v in per_pos]}; base reference reproduced to {base_diff:.3g}")
    for p in (yarn_path, ref_path):
        print(f"{p}: {os.path.getsize(p)} bytes, sha256 {file_sha256(p)}")


if __name__ == "__main__":
    main()
