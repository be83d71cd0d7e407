#!/usr/bin/env bash
# Greedy generation tokens/s, tandem (build/bench_generate: KV cache, batched) next to
# transformers' `generate` (greedy, its default dynamic KV cache) on the same CPU, the same model
# and the same prompts, alternating the two ROUNDS times in one run (median reported):
#   the shipped demo target (data/demo/target) and a random
#   Llama of hidden 1024 / 8 layers / vocab 32000 (written here by transformers), batch 1 and 8,
#   32 prompt tokens, 64 new tokens each (no stop token), fp32, THREADS threads on both sides.
# Also checks that both produce the same tokens.
#
#   bench/bench_generate.sh            # after a build (BUILD=build) and scripts/setup.sh --tools
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-.venv-tools/bin/python}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
[[ -x "$BUILD/bench_generate" ]] || { echo "no $BUILD/bench_generate: build first" >&2; exit 1; }
[[ -x "$PYTHON" ]] || { echo "no $PYTHON: run scripts/setup.sh --tools" >&2; exit 1; }

BUILD=$BUILD THREADS=$THREADS ROUNDS=$ROUNDS "$PYTHON" - <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
import torch, transformers

threads, rounds, build = int(os.environ["THREADS"]), int(os.environ["ROUNDS"]), os.environ["BUILD"]
torch.set_num_threads(threads)
print(f"bench_generate: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"{threads} threads, {rounds} rounds alternating, median shown")

models = []
if os.path.exists("data/demo/target/config.json"):
    models.append(("demo target", "data/demo/target"))
else:
    print("(no data/demo/target: restore it with git checkout data/demo/target for the demo-target rows)")
scratch = tempfile.TemporaryDirectory()
config = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                  num_hidden_layers=8, num_attention_heads=16,
                                  num_key_value_heads=8, max_position_embeddings=2048,
                                  rope_theta=500000.0, tie_word_embeddings=False,
                                  bos_token_id=1, eos_token_id=2)
torch.manual_seed(0)
transformers.LlamaForCausalLM(config).save_pretrained(scratch.name)
models.append(("random hidden 1024 / 8 layers", scratch.name))

def run_tandem(path, batch):
    out = subprocess.run([f"{build}/bench_generate", "--model", path, "--batch", str(batch),
                          "--threads", str(threads), "--repeats", "1"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])

def run_transformers(model, prompts, new_tokens):
    ids = torch.tensor(prompts)
    with torch.no_grad():
        start = time.perf_counter()
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             eos_token_id=None, pad_token_id=0)
        seconds = time.perf_counter() - start
    return seconds, out[:, ids.shape[1]:].tolist()

for name, path in models:
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    for batch in (1, 8):
        first = run_tandem(path, batch)  # also the prompts both sides use
        run_transformers(model, first["prompts"], first["new_tokens"])  # warm-up
        ours, theirs, mfu, same = [], [], [], True
        for _ in range(rounds):
            report = run_tandem(path, batch)
            ours.append(report["tokens_per_s"])
            mfu.append(report["mfu"])
            seconds, tokens = run_transformers(model, first["prompts"], first["new_tokens"])
            theirs.append(batch * first["new_tokens"] / seconds)
            same = same and tokens == report["tokens"]
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"  {name}, batch {batch}: tandem {a:8.1f} tokens/s (MFU {100 * statistics.median(mfu):.1f}% "
              f"of {report['matmul_peak_gflops']:.0f} GFLOP/s, peak RSS {report['peak_rss_mib']:.0f} MiB) | "
              f"transformers {b:8.1f} tokens/s | {a / b:.2f}x | tokens {'identical' if same else 'DIFFER'}")
        sys.stdout.flush()
PY
