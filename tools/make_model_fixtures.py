#!/usr/bin/env python3
"""Generate tiny random Hugging Face checkpoints plus transformers reference outputs.

Writes, for each fixture NAME, tests/fixtures/models/NAME/:
  config.json, model*.safetensors (+ index for sharded), generation_config.json  -- save_pretrained
  reference.safetensors:
    input_ids          I64 [2, 16]
    logits             F32 [2, 16, V]   fp32 eager forward, no attention mask, positions 0..15
    hidden.{i}         F32 [2, 16, H]   raw output of decoder layer i (forward hook, no final norm)
    logits_bf16        F32 [2, 16, V]   same forward in bf16 (from_pretrained dtype=bfloat16), upcast
    hidden_bf16.{i}    F32 [2, 16, H]
    __metadata__       generator, versions, seed, fixture, notes

Deterministic: fixed seeds, CPU, single thread; running it twice gives byte-identical files.
Run (from the repository root):
    <venv-tools>/bin/python tools/make_model_fixtures.py [--out tests/fixtures/models] [--only NAME ...]
"""

import argparse
import math
import os
import shutil
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import safetensors  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from fixture_safetensors import write_safetensors  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

GENERATOR = "tools/make_model_fixtures.py"
BATCH, SEQ = 2, 16
VOCAB, HIDDEN, LAYERS, INTER = 512, 64, 4, 128

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    intermediate_size=INTER,
    hidden_act="silu",
    attention_dropout=0.0,
    rms_norm_eps=1e-6,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
)


def fixture_specs():
    """name -> dict(seed, config factory, model class, save dtype, shards, embed_std)."""
    return {
        "llama3": dict(
            seed=1001,
            make_config=lambda: LlamaConfig(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                attention_bias=False,
                mlp_bias=False,
                rope_parameters=dict(
                    rope_type="llama3",
                    rope_theta=500000.0,
                    factor=8.0,
                    low_freq_factor=1.0,
                    high_freq_factor=4.0,
                    original_max_position_embeddings=64,
                ),
            ),
            cls=LlamaForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
        ),
        "mistral": dict(
            seed=1002,
            make_config=lambda: MistralConfig(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=1,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                sliding_window=6,
                rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            ),
            cls=MistralForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
        ),
        "qwen2": dict(
            seed=1003,
            make_config=lambda: Qwen2Config(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=512,
                tie_word_embeddings=False,
                use_sliding_window=False,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            ),
            cls=Qwen2ForCausalLM,
            save_dtype=torch.bfloat16,
            # bf16 weights total ~428 KB; 300 KB per shard -> exactly two shards (asserted below).
            max_shard_size="300KB",
        ),
        "qwen3": dict(
            seed=1004,
            make_config=lambda: Qwen3Config(
                **COMMON,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=32,
                max_position_embeddings=512,
                tie_word_embeddings=True,
                attention_bias=False,
                use_sliding_window=False,
                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            ),
            cls=Qwen3ForCausalLM,
            save_dtype=torch.float32,
            max_shard_size=None,
            # tied: logits = norm(h) @ E^T, so the embedding scale sets the logit scale
            embed_std=0.4,
        ),
    }


def reinit_(model, gen, embed_std=1.0, linear_gain=1.0, lm_head_gain=2.0, bias_std=0.5):
    """Overwrite every parameter deterministically with a healthy spread.

    norms (input/post_attention/final/q_norm/k_norm): 1 + 0.1*randn
    embed_tokens: embed_std * randn
    Linear weights [out, in]: gain * randn / sqrt(in)   (lm_head: lm_head_gain)
    biases: bias_std * randn
    """
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied params appear once
            shape = tuple(p.shape)
            r = torch.randn(shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                v = 1.0 + 0.1 * r
            elif "embed_tokens" in name:
                v = embed_std * r
            elif name.endswith(".bias"):
                v = bias_std * r
            elif name == "lm_head.weight":
                v = lm_head_gain * r / math.sqrt(shape[1])
            elif p.dim() == 2:
                v = linear_gain * r / math.sqrt(shape[1])
            else:
                raise RuntimeError(f"unexpected parameter {name} {shape}")
            p.copy_(v.to(p.dtype))


def make_input_ids(seed, vocab):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(vocab, generator=g)[: BATCH * SEQ].view(BATCH, SEQ).clone()
    # make sure the extremes of the vocab are exercised
    ids[0, 7] = vocab - 1
    ids[1, 3] = 0
    ids[1, 12] = ids[1, 5]  # one repeated token within a row
    return ids.to(torch.int64)


@torch.no_grad()
def run_forward(model, input_ids):
    """Returns (logits F32, [hidden F32 per layer]) with hooks on model.model.layers[i]."""
    captured = {}
    handles = []
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
    n = len(model.model.layers)
    assert sorted(captured) == list(range(n)), captured.keys()
    return out.logits.detach().to(torch.float32).clone(), [captured[i] for i in range(n)]


def load_model(path, dtype=torch.float32):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    model.eval()
    assert model.config._attn_implementation == "eager"
    return model


def dir_size(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path)))


def check_sliding_window(model, input_ids, window):
    """Prove transformers applies Mistral's sliding window in eager mode.

    1) compare against the same weights with sliding_window=None: outputs must differ;
    2) perturb one token at position j and find which positions of layer 0's output change:
       must be exactly j <= i < j + window (token i sees keys i-window+1 .. i).
    """
    import copy

    full = copy.deepcopy(model)
    full.config.sliding_window = None
    full.model.config.sliding_window = None
    for layer in full.model.layers:
        layer.self_attn.config.sliding_window = None
    lw, _ = run_forward(model, input_ids)
    lf, hf = run_forward(full, input_ids)
    diff_full = (lw - lf).abs().max().item()
    # causal positions < window must agree exactly-ish, later ones must differ
    early = (lw[:, :window] - lf[:, :window]).abs().max().item()
    assert diff_full > 1e-3, f"sliding_window has no effect (max diff {diff_full})"
    assert early < 1e-4, f"positions < window differ ({early})"

    j = 3
    ids2 = input_ids.clone()
    ids2[:, j] = (ids2[:, j] + 1) % model.config.vocab_size
    _, h_a = run_forward(model, input_ids)
    _, h_b = run_forward(model, ids2)
    changed = ((h_a[0] - h_b[0]).abs().amax(dim=(0, 2)) > 0).nonzero().flatten().tolist()
    expect = list(range(j, min(j + window, SEQ)))
    assert changed == expect, f"layer-0 receptive field {changed} != {expect}"
    return diff_full, early, changed


def build_fixture(name, spec, out_root):
    seed = spec["seed"]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = spec["make_config"]()
    config._attn_implementation = "eager"
    model = spec["cls"](config).to(torch.float32)
    reinit_(model, gen, embed_std=spec.get("embed_std", 1.0))
    model.eval()

    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    to_save = model.to(spec["save_dtype"])
    to_save.config.dtype = spec["save_dtype"]
    kwargs = {}
    if spec["max_shard_size"] is not None:
        kwargs["max_shard_size"] = spec["max_shard_size"]
    to_save.save_pretrained(out_dir, **kwargs)
    del to_save, model

    files = sorted(os.listdir(out_dir))
    if spec["max_shard_size"] is not None:
        want = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                "model.safetensors.index.json"}
        assert want <= set(files) and "model.safetensors" not in files, files
    else:
        assert "model.safetensors" in files and not any(f.endswith(".index.json") for f in files), files

    # References always come from the checkpoint as stored on disk, loaded in fp32.
    model = load_model(out_dir, torch.float32)
    input_ids = make_input_ids(seed + 7, config.vocab_size)
    logits, hidden = run_forward(model, input_ids)
    assert torch.isfinite(logits).all()

    extra = {}
    if name == "mistral":
        extra["sliding_window_check"] = check_sliding_window(model, input_ids, config.sliding_window)

    # bf16 reference = what transformers computes for this checkpoint loaded in bf16
    # (from_pretrained(dtype=bfloat16)): every weight rounded to bf16, RoPE inv_freq kept fp32.
    model_bf16 = load_model(out_dir, torch.bfloat16)
    assert model_bf16.model.rotary_emb.inv_freq.dtype == torch.float32
    logits_bf16, hidden_bf16 = run_forward(model_bf16, input_ids)
    assert torch.isfinite(logits_bf16).all()
    del model_bf16
    # Cross-check: identical to the fp32 model after model.to(torch.bfloat16) with inv_freq
    # restored to fp32.  A plain model.to(torch.bfloat16) also rounds the non-persistent
    # inv_freq buffer to bf16 (RoPE angles off by up to ~pos * 2^-9 rad); that variant is only
    # measured, not stored.
    inv_freq = model.model.rotary_emb.inv_freq.clone()
    model = model.to(torch.bfloat16)
    lit_logits, _ = run_forward(model, input_ids)
    model.model.rotary_emb.inv_freq = inv_freq
    cast_logits, cast_hidden = run_forward(model, input_ids)
    assert torch.equal(cast_logits, logits_bf16) and all(
        torch.equal(a, b) for a, b in zip(cast_hidden, hidden_bf16)), "bf16 load != fp32 model cast to bf16"
    extra["literal_to_bf16_vs_stored_max_abs"] = (lit_logits - logits_bf16).abs().max().item()

    tensors = {"input_ids": input_ids.contiguous(), "logits": logits.contiguous(),
               "logits_bf16": logits_bf16.contiguous()}
    for i, h in enumerate(hidden):
        tensors[f"hidden.{i}"] = h.contiguous()
    for i, h in enumerate(hidden_bf16):
        tensors[f"hidden_bf16.{i}"] = h.contiguous()
    metadata = {
        "generator": GENERATOR,
        "fixture": name,
        "seed": str(seed),
        "input_ids_seed": str(seed + 7),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "architecture": type(model).__name__,
        "checkpoint_dtype": str(spec["save_dtype"]).replace("torch.", ""),
        "reference": "eager attention, eval, no attention mask (causal), position_ids 0..15, use_cache=False; "
                     "logits/hidden: model loaded from this dir with dtype=float32; "
                     "*_bf16: this dir loaded with dtype=bfloat16 (== fp32 model .to(bfloat16) with RoPE "
                     "inv_freq kept float32), outputs upcast to float32; "
                     "hidden.{i}: raw output of model.model.layers[i] (forward hook, before final norm)",
        "num_layers": str(len(hidden)),
    }
    write_safetensors(os.path.join(out_dir, "reference.safetensors"), tensors, metadata)

    stats = dict(
        logits_std=logits.std().item(),
        logits_max_abs=logits.abs().max().item(),
        bf16_vs_fp32_max_abs=(logits_bf16 - logits).abs().max().item(),
        bytes=dir_size(out_dir),
        files={f: os.path.getsize(os.path.join(out_dir, f)) for f in sorted(os.listdir(out_dir))},
        **extra,
    )
    return stats


def self_check(name, out_root):
    """Reload the checkpoint from disk and reproduce the stored fp32 logits/hidden exactly."""
    out_dir = os.path.join(out_root, name)
    with safe_open(os.path.join(out_dir, "reference.safetensors"), "pt") as f:
        ref = {k: f.get_tensor(k) for k in f.keys()}
    model = load_model(out_dir)
    logits, hidden = run_forward(model, ref["input_ids"])
    d = (logits - ref["logits"]).abs().max().item()
    dh = max((h - ref[f"hidden.{i}"]).abs().max().item() for i, h in enumerate(hidden))
    assert d == 0.0 and dh == 0.0, f"{name}: reload mismatch logits {d} hidden {dh}"
    model = load_model(out_dir, torch.bfloat16)
    logits, hidden = run_forward(model, ref["input_ids"])
    db = (logits - ref["logits_bf16"]).abs().max().item()
    dbh = max((h - ref[f"hidden_bf16.{i}"]).abs().max().item() for i, h in enumerate(hidden))
    assert db == 0.0 and dbh == 0.0, f"{name}: bf16 reload mismatch logits {db} hidden {dbh}"
    return d, db


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "models"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    out_root = os.path.normpath(args.out)
    os.makedirs(out_root, exist_ok=True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    specs = fixture_specs()
    names = args.only or list(specs)
    total = 0
    for name in names:
        st = build_fixture(name, specs[name], out_root)
        total += st["bytes"]
        assert 0.5 <= st["logits_std"] <= 5.0, f"{name}: logits std {st['logits_std']} out of range"
        print(f"{name}: logits std {st['logits_std']:.4f}  max|logit| {st['logits_max_abs']:.4f}  "
              f"bf16-vs-fp32 max|diff| {st['bf16_vs_fp32_max_abs']:.4f}  size {st['bytes']} B")
        for f, s in st["files"].items():
            print(f"    {f}: {s} B")
        print(f"    plain model.to(bf16) (inv_freq rounded to bf16) vs stored logits_bf16: "
              f"max|diff| {st['literal_to_bf16_vs_stored_max_abs']:.4f}")
        if "sliding_window_check" in st:
            dfull, early, changed = st["sliding_window_check"]
            print(f"    sliding_window check: vs sliding_window=None max|dlogit| {dfull:.4f} "
                  f"(positions < window: {early:.2e}); layer-0 positions affected by token 3: {changed}")
    for name in names:
        d, db = self_check(name, out_root)
        print(f"self-check {name}: reload from disk reproduces logits/hidden (fp32 max abs diff {d}, "
              f"bf16 max abs diff {db})")
    print(f"total size {total} B ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    sys.exit(main())
