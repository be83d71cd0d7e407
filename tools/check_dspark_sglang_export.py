#!/usr/bin/env python3
"""Check a tandem DSpark draft's SGLang export (RUN/export/sglang) with SGLang 0.5.16's own code.

    tools/check_dspark_sglang_export.sh --sglang DIR --target TARGET_DIR
    (or PYTHONPATH=<sglang 0.5.16 install> .venv-tools/bin/python tools/check_dspark_sglang_export.py ...)

SGLang's server cannot start on a machine without a GPU, so its DSpark code is run piece by piece:
the modules that parse a DSpark draft's config (speculative/dflash_utils.py,
speculative/dspark_components/dspark_config.py) and build its heads (models/dspark.py) are loaded
from the installed wheel, with the GPU-only modules they import at the top replaced by empty
stand-ins (none of them is used by the functions called here).

1. config: transformers reads DIR/config.json (model_type qwen3, as SGLang's get_config does);
   its architecture is one of models/dspark.py's EntryClass; SGLang's parse_dspark_draft_config
   and resolve_runtime_config accept it and give gamma = block_size, a verify window of
   block_size + 1, the mask token inside the target's vocabulary, a vanilla Markov head of the
   export's rank, target_layer_ids inside 0..N-2 of the target's N layers (SGLang captures the
   output of layer i before layer i + 1) and the draft's layer count.
2. heads: SGLang's build_markov_head and build_confidence_head build the heads from that config
   (the confidence head as SGLANG_RAGGED_VERIFY_MODE=compact or cap-accept builds it; the default
   "static" mode builds none and skips its weights); the export's markov_head.* and
   confidence_head.* tensors load into them with strict names and equal shapes.
3. backbone: the other tensors are exactly the Qwen3 DFlash backbone SGLang's DFlash loader
   reads (fc [H, n*H], hidden_norm, norm, layers.i.{self_attn.{q,k,v,o}_proj, q_norm, k_norm,
   mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm}) with the config's shapes;
   no embed_tokens or lm_head (SGLang skips them and shares the target's).
4. with --speculators DIR2 (the same run's speculators export): block_size, mask_token_id,
   markov_rank and the target layers (aux_hidden_state_layer_ids - 1) agree, and every tensor
   equals the speculators export's tensor of that name.
Exit status 0 when all holds, 1 with one line per failure, 2 when the checker cannot run.
"""
import argparse
import glob
import importlib.util
import json
import os
import sys
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoConfig  # noqa: E402


def sglang_source(relative):
    for base in sys.path:
        path = os.path.join(base, "sglang", "srt", relative)
        if os.path.exists(path):
            return path
    print(f"check_dspark_sglang_export: sglang/srt/{relative} is not on the path "
          "(tools/check_dspark_sglang_export.sh installs SGLang 0.5.16)", file=sys.stderr)
    sys.exit(2)


def stub(name, **attributes):
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so that submodules can be stubbed under it
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def load(name, relative):
    spec = importlib.util.spec_from_file_location(name, sglang_source(relative))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_sglang_dspark():
    """SGLang's DSpark config parser and head builders, GPU-only imports stubbed."""
    for package in ["sglang", "sglang.srt", "sglang.srt.speculative",
                    "sglang.srt.speculative.dspark_components", "sglang.srt.layers",
                    "sglang.srt.layers.quantization", "sglang.srt.managers",
                    "sglang.srt.distributed", "sglang.srt.model_loader", "sglang.srt.models"]:
        stub(package)
    stub("sglang.srt.layers.quantization.unquant", UnquantizedLinearMethod=type("Unquantized", (), {}))
    stub("sglang.srt.layers.sampler", apply_custom_logit_processor=None)
    stub("sglang.srt.managers.schedule_batch", Req=object)
    stub("sglang.srt.utils", is_cuda=lambda: False, is_musa=lambda: False)
    stub("sglang.srt.distributed.communication_op", tensor_model_parallel_all_gather=None)
    stub("sglang.srt.model_loader.weight_utils", default_weight_loader=None)
    stub("sglang.srt.models.dflash", DFlashDraftModel=type("DFlashDraftModel", (), {}))
    # SGLANG_RAGGED_VERIFY_MODE: "static" (SGLang's default) builds no confidence head and skips
    # its weights; "cap-accept" and "compact" build it. The check builds it.
    mode = type("EnvStr", (), {"get": staticmethod(lambda: "compact")})()
    stub("sglang.srt.environ", envs=type("Envs", (), {"SGLANG_RAGGED_VERIFY_MODE": mode})())
    load("sglang.srt.speculative.ragged_verify", "speculative/ragged_verify.py")
    load("sglang.srt.speculative.dflash_utils", "speculative/dflash_utils.py")
    config = load("sglang.srt.speculative.dspark_components.dspark_config",
                  "speculative/dspark_components/dspark_config.py")
    models = load("sglang.srt.models.dspark", "models/dspark.py")
    return config, models


def read_tensors(directory):
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    tensors = {}
    for path in files:
        tensors.update(load_file(path))
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang", required=True, help="the DSpark export's sglang/ directory")
    ap.add_argument("--target", required=True, help="the target's HF checkpoint directory")
    ap.add_argument("--speculators", help="the same run's speculators/ export, to compare tensors")
    args = ap.parse_args()
    failures = []
    fail = failures.append
    where = os.path.join(args.sglang, "config.json")
    try:
        raw = json.load(open(where))
        config = AutoConfig.from_pretrained(args.sglang)
        target = AutoConfig.from_pretrained(args.target)
        tensors = read_tensors(args.sglang)
    except Exception as e:  # noqa: BLE001
        print(f"check_dspark_sglang_export: cannot read the export or the target: {e}", file=sys.stderr)
        return 2
    target = getattr(target, "text_config", None) or target
    dspark_config, dspark_models = load_sglang_dspark()

    # 1. config, through SGLang's own parser
    entry = [c.__name__ for c in dspark_models.EntryClass]
    if raw.get("architectures") != ["Qwen3DSparkModel"] or "Qwen3DSparkModel" not in entry:
        fail(f"{where}: architectures {raw.get('architectures')} (SGLang's DSpark classes: {entry})")
    if config.model_type != "qwen3":
        fail(f"{where}: model_type {config.model_type!r}, the DSpark draft is a Qwen3 stack")
    try:
        parsed = dspark_config.parse_dspark_draft_config(draft_hf_config=config)
        runtime = dspark_config.resolve_runtime_config(
            draft_hf_config=config, speculative_num_draft_tokens=None,
            target_vocab_size=target.vocab_size)
    except Exception as e:  # noqa: BLE001
        fail(f"{where}: SGLang refuses the config: {e}")
        parsed = runtime = None
    block = raw.get("block_size")
    if parsed is not None:
        n = target.num_hidden_layers
        checks = [
            ("gamma", parsed.gamma, block),
            ("verify window", runtime.verify_num_draft_tokens, block + 1),
            ("mask_token_id", runtime.mask_token_id, raw.get("mask_token_id")),
            ("markov_rank", parsed.markov_rank, tensors["markov_head.markov_w1.weight"].shape[1]),
            ("markov_head_type", parsed.markov_head_type, "vanilla"),
            ("num_hidden_layers", parsed.num_hidden_layers, raw.get("num_hidden_layers")),
            ("num_target_layers", parsed.num_target_layers, n),
        ]
        for name, got, want in checks:
            if got != want:
                fail(f"{where}: SGLang reads {name} = {got}, the export means {want}")
        ids = parsed.target_layer_ids or []
        if not ids or ids != sorted(set(ids)) or ids[0] < 0 or ids[-1] > n - 2:
            fail(f"{where}: target_layer_ids {ids} must be increasing inside 0..{n - 2} "
                 f"(SGLang captures the output of layer i before layer i + 1 of the {n})")
        if ids and fc_width(tensors) != len(ids) * target.hidden_size:
            fail(f"{where}: fc reads {fc_width(tensors)} features, {len(ids)} target layers of "
                 f"{target.hidden_size} give {len(ids) * target.hidden_size}")

    # 2. the heads, built by SGLang
    for prefix, build in (("markov_head.", dspark_models.build_markov_head),
                          ("confidence_head.", dspark_models.build_confidence_head)):
        try:
            head = build(config)
        except Exception as e:  # noqa: BLE001
            fail(f"{where}: SGLang cannot build {prefix[:-1]}: {e}")
            continue
        if head is None:
            fail(f"{where}: SGLang builds no {prefix[:-1]} from this config")
            continue
        part = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        expected = head.state_dict()
        for name in sorted(set(part) | set(expected)):
            if name not in expected:
                fail(f"{args.sglang}: unexpected tensor {prefix}{name} for SGLang's {type(head).__name__}")
            elif name not in part:
                fail(f"{args.sglang}: missing {prefix}{name} of SGLang's {type(head).__name__}")
            elif tuple(part[name].shape) != tuple(expected[name].shape):
                fail(f"{args.sglang}: {prefix}{name} has shape {tuple(part[name].shape)}, "
                     f"SGLang's {type(head).__name__} has {tuple(expected[name].shape)}")
        if not failures:
            head.load_state_dict({k: v.float() for k, v in part.items()}, strict=True)

    # 3. the backbone
    h, heads, kv = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    d, inter = config.head_dim, config.intermediate_size
    backbone = {"fc.weight": (h, fc_width(tensors)), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(config.num_hidden_layers):
        p = f"layers.{i}."
        backbone.update({
            p + "self_attn.q_proj.weight": (heads * d, h), p + "self_attn.k_proj.weight": (kv * d, h),
            p + "self_attn.v_proj.weight": (kv * d, h), p + "self_attn.o_proj.weight": (h, heads * d),
            p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,)})
    rest = {k: v for k, v in tensors.items() if not k.startswith(("markov_head.", "confidence_head."))}
    for name in sorted(set(rest) | set(backbone)):
        if name not in backbone:
            fail(f"{args.sglang}: unexpected tensor {name} (not a DSpark draft weight SGLang loads)")
        elif name not in rest:
            fail(f"{args.sglang}: missing {name}")
        elif tuple(rest[name].shape) != backbone[name]:
            fail(f"{args.sglang}: {name} has shape {tuple(rest[name].shape)}, the config implies {backbone[name]}")

    # 4. the same draft as the speculators export (which speculators' own classes check)
    if args.speculators:
        spec = json.load(open(os.path.join(args.speculators, "config.json")))
        same = [("block_size", raw.get("block_size"), spec.get("block_size")),
                ("mask_token_id", raw.get("mask_token_id"), spec.get("mask_token_id")),
                ("markov_rank", raw.get("markov_rank"), spec.get("markov_rank")),
                ("target_layer_ids", raw.get("target_layer_ids"),
                 [i - 1 for i in spec.get("aux_hidden_state_layer_ids", [])])]
        for name, got, want in same:
            if got != want:
                fail(f"{where}: {name} {got}, the speculators export says {want}")
        other = read_tensors(args.speculators)
        if set(other) != set(tensors):
            fail(f"{args.sglang}: tensor names differ from {args.speculators}'s: "
                 f"{sorted(set(other) ^ set(tensors))[:5]}")
        for name in sorted(set(other) & set(tensors)):
            if not torch.equal(other[name], tensors[name]):
                fail(f"{args.sglang}: {name} differs from {args.speculators}'s")

    for line in failures:
        print(line)
    if failures:
        return 1
    print(f"[check_dspark_sglang_export] {args.sglang}: SGLang 0.5.16's DSpark config parser, "
          f"runtime config and head builders accept it (gamma {parsed.gamma}, verify window "
          f"{runtime.verify_num_draft_tokens}, mask {runtime.mask_token_id}, target layers "
          f"{parsed.target_layer_ids}, Markov rank {parsed.markov_rank}); {len(tensors)} tensors "
          "with SGLang's names and shapes" + (", equal to the speculators export's" if args.speculators else ""))
    return 0


def fc_width(tensors):
    return tensors["fc.weight"].shape[1] if "fc.weight" in tensors else -1


if __name__ == "__main__":
    sys.exit(main())
