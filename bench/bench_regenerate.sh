#!/usr/bin/env bash
# `tandem regenerate` tokens/s with static and with continuous batching, in one run on the same
# machine: the demo's regeneration (configs/demo-eagle3.yaml's target, the shipped demo target;
# the first N conversations of data/demo/chat.jsonl; greedy, up to 128 tokens per answer,
# --batch-size 32, as scripts/demo.sh runs it), the two modes alternated ROUNDS times (default 3,
# continuous first). Prints each run's new tokens, seconds, tokens/s, MFU and peak RSS, the median
# tokens/s per mode and their ratio, and checks that every run wrote the same file byte for byte. MFU: 2 x the target's matmul parameters (layers and lm_head) per new
# token (prefill and attention left out: a lower bound) against an fp32 2048 x 2048 matmul's
# FLOP/s measured in the same run by the project env's torch on the same threads.
#
#   bench/bench_regenerate.sh       # after a build (BUILD=build); N=512 MAX_NEW=128 ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
N=${N:-512}
MAX_NEW=${MAX_NEW:-128}
ROUNDS=${ROUNDS:-3}
[[ -x "$BUILD/tandem" ]] || { echo "no $BUILD/tandem: build first" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-bench-regenerate-XXXXXX")
trap 'rm -rf "$work"' EXIT
head -n "$N" data/demo/chat.jsonl > "$work/chat.jsonl"
echo "bench_regenerate: $(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs),"\
     "$(nproc) cores, $N conversations, --max-new-tokens $MAX_NEW --batch-size 32, greedy, $ROUNDS rounds"
peak=$(.venv/bin/python -c '
import time, torch
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
for _ in range(2): a @ b
start = time.perf_counter()
for _ in range(5): a @ b
print(5 * 2 * 2048 ** 3 / (time.perf_counter() - start))')
flops_per_token=$(python3 -c '
import json
c = json.load(open("data/demo/target/config.json"))
h, i, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
d = c.get("head_dim", h // c["num_attention_heads"])
attention = h * d * (2 * c["num_attention_heads"] + 2 * c["num_key_value_heads"])
print(2 * (n * (attention + 3 * h * i) + h * c["vocab_size"]))')
echo "  matmul peak (fp32, 2048^3, this run): $(python3 -c "print(f'{$peak / 1e9:.0f}')") GFLOP/s;" \
     "$(python3 -c "print(f'{$flops_per_token / 1e6:.1f}')") MFLOP per new token"
declare -A rates
for round in $(seq "$ROUNDS"); do
  for mode in continuous static; do
    out="$work/$mode-$round.jsonl"
    /usr/bin/time -f "%M" -o "$work/rss" "$BUILD/tandem" regenerate configs/demo-eagle3.yaml \
      --data "$work/chat.jsonl" --out "$out" --max-new-tokens "$MAX_NEW" --batch-size 32 \
      --batching "$mode" > "$work/log" 2> "$work/err" || { cat "$work/err" >&2; exit 1; }
    summary=$(grep "new tokens in" "$work/log")
    tokens=$(sed -E 's/.* ([0-9]+) new tokens in .*/\1/' <<< "$summary")
    seconds=$(sed -E 's/.* new tokens in ([0-9.]+) s .*/\1/' <<< "$summary")
    rate=$(sed -E 's/.* = ([0-9.]+) tokens\/s.*/\1/' <<< "$summary")
    rates[$mode]="${rates[$mode]:-} $rate"
    mfu=$(python3 -c "print(f'{100 * $rate * $flops_per_token / $peak:.1f}')")
    printf '  round %s %-10s %8s new tokens in %7s s = %7s tokens/s, MFU %s%%, peak RSS %s MiB\n' \
      "$round" "$mode" "$tokens" "$seconds" "$rate" "$mfu" "$(($(cat "$work/rss") / 1024))"
    cmp "$out" "$work/continuous-1.jsonl"
    rm -f "$out.settings.json" "$out.skipped.jsonl"
  done
done
python3 - ${rates[continuous]} -- ${rates[static]} <<'PY'
import statistics, sys
split = sys.argv.index("--")
continuous = statistics.median(map(float, sys.argv[1:split]))
static = statistics.median(map(float, sys.argv[split + 1:]))
print(f"  median: continuous {continuous:.0f} tokens/s, static {static:.0f} tokens/s, "
      f"continuous / static {continuous / static:.2f}x; every run wrote the same file byte for byte")
PY
