#!/usr/bin/env bash
# Tokenizer throughput on one thread, tandem next to HF `tokenizers`, on the identical corpus:
# copies of the fixture text set (tests/fixtures/tokenizers/texts.json: prose, code, whitespace,
# numbers, many scripts, emoji), one document per copy, MB (default 4) megabytes in all.
#
#   bench/bench_tokenizer.sh                 # after a build (BUILD=build by default)
#   BUILD=build-tok MB=8 NAMES="qwen2 anthropic qwen2-llama3" bench/bench_tokenizer.sh
#
# Both sides encode each document once untimed (filling their BPE caches), then report the best of
# three passes, in MB per second of CPU time (steadier than wall time on a shared machine). HF is called with `Tokenizer.encode` per document (no encode_batch), with
# RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MB=${MB:-4}
NAMES=${NAMES:-"qwen2 anthropic qwen2-llama3"}
PYTHON=${PYTHON:-.venv-tools/bin/python}
FIXTURES=tests/fixtures/tokenizers
export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false

[[ -x "$BUILD/bench_tokenizer" ]] || { echo "no $BUILD/bench_tokenizer: build first" >&2; exit 1; }
[[ -x "$PYTHON" ]] || { echo "no $PYTHON: run scripts/setup.sh --tools" >&2; exit 1; }

corpus=$(mktemp --suffix .json)
trap 'rm -f "$corpus"' EXIT
"$PYTHON" - "$FIXTURES/texts.json" "$corpus" "$MB" <<'EOF'
import json, sys
texts = json.load(open(sys.argv[1], encoding="utf-8"))
document = "\n\n".join(texts)
size = len(document.encode("utf-8"))
copies = max(1, int(float(sys.argv[3]) * 1e6 / size))
json.dump([document] * copies, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
EOF

"$BUILD/bench_tokenizer" "$corpus" "$FIXTURES" $NAMES

"$PYTHON" - "$corpus" "$FIXTURES" $NAMES <<'EOF'
import json, sys, time
sys.path.insert(0, "tools")
from make_tokenizer_fixtures import merge_patch
import tokenizers
from tokenizers import Tokenizer

documents = json.load(open(sys.argv[1], encoding="utf-8"))
megabytes = sum(len(d.encode("utf-8")) for d in documents) / 1e6
fixtures = sys.argv[2]
variants = json.load(open(f"{fixtures}/variants.json", encoding="utf-8"))

def config(name):
    try:
        return json.load(open(f"{fixtures}/{name}/tokenizer.json", encoding="utf-8"))
    except FileNotFoundError:
        return merge_patch(config(variants[name]["base"]), variants[name]["patch"])

for name in sys.argv[3:]:
    tok = Tokenizer.from_str(json.dumps(config(name)))
    tokens = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in documents)  # warm-up
    best = 1e30
    for _ in range(3):
        start = time.process_time()
        for d in documents:
            tok.encode(d, add_special_tokens=False)
        best = min(best, time.process_time() - start)
    print(f"HF tokenizers {tokenizers.__version__} {name:<14} ids+offsets: "
          f"{megabytes / best:7.2f} MB/s  ({tokens} tokens)")
EOF
