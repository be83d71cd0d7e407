"""speculators 0.9.0 DFlash checkpoint dir -> z-lab DFlashDraftModel export (what tandem eval /
SGLang / vLLM read). Usage: convert_to_zlab.py SPEC_CKPT_DIR OUT_DIR TARGET_DIR [float32|bfloat16]"""
import json, shutil, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
src, dst, target = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[sys.argv[4] if len(sys.argv) > 4 else "float32"]
spec = json.loads((src / "config.json").read_text())
tcfg = json.loads((target / "config.json").read_text())
assert spec["speculators_model_type"] == "dflash" and not spec.get("sample_from_anchor")
tl = dict(spec["transformer_layer_config"])
if any(t != "full_attention" for t in tl.get("layer_types") or []):
    print("WARNING: draft trained with sliding_attention layers = causal in-block mask "
          "(speculators default); z-lab/tandem decode it bidirectionally")
for k in ("layer_types", "use_sliding_window", "sliding_window", "max_window_layers", "use_cache",
          "bos_token_id", "eos_token_id", "pad_token_id", "dtype", "torch_dtype"):
    tl.pop(k, None)
rope = tl.pop("rope_parameters", None) or {}
out = {**tl, "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
       "rope_theta": rope.get("rope_theta", 10000.0), "rope_scaling": None,
       "attention_bias": False, "tie_word_embeddings": False,
       "torch_dtype": str(dtype).split(".")[-1],
       "block_size": spec["block_size"], "num_target_layers": tcfg["num_hidden_layers"],
       "target_hidden_size": spec.get("target_hidden_size") or tcfg["hidden_size"],
       # speculators id k = HF hidden_states[k] = output of target layer k-1; z-lab id = layer index.
       "dflash_config": {"mask_token_id": spec["mask_token_id"],
                         "target_layer_ids": [k - 1 for k in spec["aux_hidden_state_layer_ids"]]}}
w = load_file(str(src / "model.safetensors"))
drop = [k for k in w if k.split(".")[0] in ("embed_tokens", "lm_head", "verifier_lm_head", "verifier_norm", "t2d", "d2t")]
assert not [k for k in drop if k in ("t2d", "d2t")], "reduced draft vocab not supported by z-lab format"
w = {k: v.to(dtype).contiguous() for k, v in w.items() if k not in drop}
dst.mkdir(parents=True, exist_ok=True)
save_file(w, str(dst / "model.safetensors"), metadata={"format": "pt"})
(dst / "config.json").write_text(json.dumps(out, indent=2) + "\n")
for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    if (target / f).exists(): shutil.copy(target / f, dst / f)
print("wrote", dst, len(w), "tensors; dropped", drop)
