# Usage: gen_hs.py PREPARED_DATA_DIR TARGET_DIR OUT_DIR [LAYER_IDS e.g. 2,6]
# Offline hidden-state generation with HF transformers on CPU, in speculators' FileTransfer format:
#   <out>/hs_{i}.safetensors: token_ids [T] int64, hidden_states [T, L+1, H]
# where layer ids follow vLLM/speculators numbering (id k = HF hidden_states[k] = output of decoder layer k-1),
# and the last slot is id num_hidden_layers = PRE-final-norm output of the last decoder layer.
import sys, torch
from pathlib import Path
from datasets import load_from_disk
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
data, target, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
ids = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else None
torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32, attn_implementation="eager").eval()
n = model.config.num_hidden_layers
ids = (ids or [2, n // 2, n - 3]) + [n]
captured = {}
model.model.layers[-1].register_forward_hook(lambda m, i, o: captured.__setitem__("last", o[0] if isinstance(o, tuple) else o))
out.mkdir(parents=True, exist_ok=True)
ds = load_from_disk(data)
for i in range(len(ds)):
    tok = torch.as_tensor(ds[i]["input_ids"], dtype=torch.long)
    with torch.no_grad():
        o = model(tok[None], output_hidden_states=True)
    hs = list(o.hidden_states)
    if i == 0:
        print("len(hidden_states)", len(hs), "HF hs[n] equals pre-norm last-layer output:",
              torch.allclose(hs[n][0], captured["last"][0]),
              "equals norm(last):", torch.allclose(hs[n][0], model.model.norm(captured["last"])[0], atol=1e-5))
    layers = [hs[k][0] for k in ids[:-1]] + [captured["last"][0]]
    save_file({"token_ids": tok.contiguous(), "hidden_states": torch.stack(layers, 1).contiguous()},
              str(out / f"hs_{i}.safetensors"))
print("wrote", len(ds), "files, layer ids", ids)
