"""speculators 0.9.0 EAGLE-3 checkpoint dir -> the SGLang LlamaForCausalLMEagle3 layout that
`tandem eval` loads (the same layout tandem exports under export/sglang).

Usage: convert_eagle3_to_sglang.py SPEC_CKPT_DIR OUT_DIR TARGET_DIR

Only drafts with tandem's architecture convert (trained with --no-norm-before-fc
--no-norm-before-residual --no-norm-output, one layer, a reduced vocabulary): anything else is
refused rather than converted into a different model. Weights: layers.0.* -> midlayer.*; fc,
norm, lm_head, d2t, t2d kept; embed_tokens (a frozen copy of the target's) dropped. Layer ids:
speculators' id k is the output of target decoder layer k - 1, tandem's eagle_config ids are the
layer indices. Float weights are written in float32."""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

src, dst, target = (Path(p) for p in sys.argv[1:4])
spec = json.loads((src / "config.json").read_text())
tcfg = json.loads((target / "config.json").read_text())
assert spec["speculators_model_type"] == "eagle3", f"{src}: not an EAGLE-3 checkpoint"
for flag in ("norm_before_fc", "norm_before_residual", "norm_output", "fc_norm"):
    assert not spec.get(flag), f"{src}: trained with {flag}, which tandem's draft does not have"
layer = spec["transformer_layer_config"]
assert layer["num_hidden_layers"] == 1, f"{src}: tandem's EAGLE-3 draft has one layer"
aux = [k - 1 for k in spec["eagle_aux_hidden_state_layer_ids"]]

w = load_file(str(src / "model.safetensors"))
out = {}
for name, tensor in w.items():
    if name.startswith("layers.0."):
        out["midlayer." + name[len("layers.0."):]] = tensor.float()
    elif name in ("fc.weight", "norm.weight", "lm_head.weight"):
        out[name] = tensor.float()
    elif name == "d2t":
        out[name] = tensor.to(torch.int64)
    elif name == "t2d":
        out[name] = tensor.to(torch.bool)
    elif name != "embed_tokens.weight":
        sys.exit(f"{src}: unexpected tensor {name} (not part of tandem's EAGLE-3 draft)")
for name in ("d2t", "t2d", "lm_head.weight", "fc.weight"):
    assert name in out, f"{src}: missing {name} (trained without a reduced draft vocabulary?)"
draft_vocab = out["lm_head.weight"].shape[0]
assert int(out["t2d"].sum()) == draft_vocab == out["d2t"].numel(), "d2t / t2d do not agree"
ids = torch.arange(draft_vocab) + out["d2t"]  # d2t holds offsets: target id = draft id + d2t
assert bool(out["t2d"][ids].all()), "d2t and t2d name different tokens"

config = {key: tcfg[key] for key in ("bos_token_id", "eos_token_id", "vocab_size",
                                     "max_position_embeddings") if key in tcfg}
for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
            "head_dim", "rms_norm_eps", "hidden_act", "mlp_bias", "max_position_embeddings",
            "vocab_size"):
    if key in layer:
        config[key] = layer[key]
rope = layer.get("rope_parameters") or {}
config.update({
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "num_hidden_layers": 1,
    "rope_theta": rope.get("rope_theta", layer.get("rope_theta", 10000.0)), "rope_scaling": None,
    "draft_vocab_size": draft_vocab, "target_hidden_size": tcfg["hidden_size"],
    "num_aux_hidden_states": len(aux), "eagle_aux_hidden_state_layer_ids": [k + 1 for k in aux],
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True,
                     "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True},
    "norm_before_residual": False, "attention_bias": False, "tie_word_embeddings": False,
    "torch_dtype": "float32"})
dst.mkdir(parents=True, exist_ok=True)
save_file({k: v.contiguous() for k, v in out.items()}, str(dst / "model.safetensors"),
          metadata={"format": "pt"})
(dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    if (target / f).exists():
        shutil.copy(target / f, dst / f)
print("wrote", dst, len(out), "tensors, aux layer ids (tandem numbering)", aux)
