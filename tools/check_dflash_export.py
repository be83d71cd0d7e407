#!/usr/bin/env python3
"""Check a tandem DFlash draft export against what the serving engines read (stdlib only).

    python3 tools/check_dflash_export.py EXPORT_DIR [--target TARGET_DIR]

Pure JSON / safetensors-header checks of the fields and tensors that SGLang
(python/sglang/srt/models/dflash.py, speculative/dflash_utils.py parse_dflash_draft_config) and
vLLM (vllm/model_executor/models/qwen3_dflash.py) read; it imports neither engine:
  * architectures ["DFlashDraftModel"], model_type qwen3, hidden_act silu (SGLang's DFlashMLP
    refuses others), attention_bias false, tie_word_embeddings false;
  * block_size (top level or dflash_config) >= 2; dflash_config.mask_token_id < vocab_size
    (SGLang rejects others) unless a mask_embedding.pt ships beside it (vLLM's loader reads that
    file name to replace embed[mask_token_id]);
  * num_target_layers present (without it SGLang checks target_layer_ids against the DRAFT's
    num_hidden_layers) and every target_layer_ids entry inside it; no layer_types / is_causal /
    dflash_config.causal / use_swa (they switch the engines to causal or sliding attention);
  * weights exactly fc, hidden_norm, norm and layers.{i}.* of num_hidden_layers Qwen3 layers, no
    embed_tokens / lm_head / model. prefix, with the shapes the config implies (fc input =
    len(target_layer_ids) * target_hidden_size, what vLLM sizes fc from);
  * with --target: vocab_size, hidden_size and num_target_layers equal the target's.
Exit status 0 when everything holds; otherwise every failed check is printed and the status is 1.
"""
import argparse
import json
import os
import struct
import sys


def safetensors_shapes(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return {name: list(entry["shape"]) for name, entry in header.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dir")
    parser.add_argument("--target")
    args = parser.parse_args()
    problems = []

    def expect(condition, message):
        if not condition:
            problems.append(message)

    with open(os.path.join(args.export_dir, "config.json")) as f:
        config = json.load(f)
    dflash = config.get("dflash_config") or {}
    expect(config.get("architectures") == ["DFlashDraftModel"], "architectures must be [\"DFlashDraftModel\"]")
    expect(config.get("model_type") == "qwen3", "model_type must be qwen3")
    expect(config.get("hidden_act", "silu") == "silu", "hidden_act must be silu (SGLang)")
    expect(config.get("attention_bias", False) is False, "attention_bias must be false")
    expect(config.get("tie_word_embeddings") is False, "tie_word_embeddings must be false")
    for key in ("layer_types", "is_causal"):
        expect(key not in config, f"{key} changes the engines' attention; tandem drafts are non-causal")
    for key in ("causal", "use_swa"):
        expect(key not in dflash, f"dflash_config.{key} changes the engines' attention")
    block_size = dflash.get("block_size", config.get("block_size"))
    expect(isinstance(block_size, int) and block_size >= 2, f"block_size {block_size!r} must be an int >= 2")
    vocab = config.get("vocab_size")
    mask = dflash.get("mask_token_id")
    has_pt = os.path.exists(os.path.join(args.export_dir, "mask_embedding.pt"))
    expect(isinstance(mask, int) and mask >= 0, "dflash_config.mask_token_id must be a non-negative int")
    if isinstance(mask, int) and isinstance(vocab, int) and mask >= vocab:
        expect(has_pt, f"mask_token_id {mask} >= vocab_size {vocab} needs mask_embedding.pt (vLLM); SGLang cannot serve it")
    layer_ids = dflash.get("target_layer_ids")
    num_target = dflash.get("num_target_layers", config.get("num_target_layers"))
    expect(isinstance(layer_ids, list) and layer_ids and all(isinstance(i, int) for i in layer_ids),
           "dflash_config.target_layer_ids must be a non-empty int list")
    expect(isinstance(num_target, int) and num_target > 0,
           "num_target_layers missing: SGLang would check target_layer_ids against the draft's layer count")
    if isinstance(layer_ids, list) and isinstance(num_target, int):
        expect(all(0 <= i < num_target for i in layer_ids), f"target_layer_ids {layer_ids} outside 0..{num_target - 1}")

    hidden = config["hidden_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim", hidden // heads)
    inter = config["intermediate_size"]
    target_hidden = config.get("target_hidden_size", hidden)
    expected = {
        "fc.weight": [hidden, len(layer_ids or []) * target_hidden],
        "hidden_norm.weight": [hidden],
        "norm.weight": [hidden],
    }
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        expected.update({
            p + "self_attn.q_proj.weight": [heads * head_dim, hidden],
            p + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
            p + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
            p + "self_attn.o_proj.weight": [hidden, heads * head_dim],
            p + "self_attn.q_norm.weight": [head_dim],
            p + "self_attn.k_norm.weight": [head_dim],
            p + "mlp.gate_proj.weight": [inter, hidden],
            p + "mlp.up_proj.weight": [inter, hidden],
            p + "mlp.down_proj.weight": [hidden, inter],
            p + "input_layernorm.weight": [hidden],
            p + "post_attention_layernorm.weight": [hidden],
        })
    found = safetensors_shapes(os.path.join(args.export_dir, "model.safetensors"))
    for name in sorted(set(expected) - set(found)):
        problems.append(f"missing tensor {name}")
    for name in sorted(set(found) - set(expected)):
        problems.append(f"unexpected tensor {name} (engines skip or misload it)")
    for name in sorted(set(found) & set(expected)):
        expect(found[name] == expected[name], f"{name} has shape {found[name]}, the config implies {expected[name]}")

    if args.target:
        with open(os.path.join(args.target, "config.json")) as f:
            target = json.load(f)
        target = target.get("text_config", target)
        expect(vocab == target["vocab_size"], f"vocab_size {vocab} != target's {target['vocab_size']}")
        expect(target_hidden == target["hidden_size"], f"target_hidden_size {target_hidden} != target's {target['hidden_size']}")
        expect(hidden == target["hidden_size"], f"hidden_size {hidden} != target's {target['hidden_size']} (SGLang sizes fc from the draft)")
        expect(num_target == target["num_hidden_layers"], f"num_target_layers {num_target} != target's {target['num_hidden_layers']}")

    for problem in problems:
        print(f"[check_dflash_export] {args.export_dir}: {problem}")
    if not problems:
        print(f"[check_dflash_export] {args.export_dir}: ok ({len(found)} tensors)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
