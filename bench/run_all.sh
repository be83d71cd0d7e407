#!/usr/bin/env bash
# Runs every benchmark with its documented defaults, one after the other, after printing the date
# and the machine (CPU model, cores, GPUs) the figures belong to: what docs/benchmarks.md quotes.
# Usage: bench/run_all.sh BUILD_DIR OUT_DIR [NAMES...]
#   NAMES: forward sft eagle3 dflash long_context gated_delta hybrid_forward family_forward moe
#   distill dpo tokenizer generate regenerate distributed
#   (default: all; long_context alone takes about 14 minutes on 2 cores)
#   distributed needs the demo target (scripts/demo.sh); regenerate runs it (the shipped
#   data/demo/target); tokenizer and generate need
#   scripts/setup.sh --tools (generate also uses the demo target when present).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: bench/run_all.sh BUILD_DIR OUT_DIR [NAMES...]}" && pwd)
out=${2:?usage: bench/run_all.sh BUILD_DIR OUT_DIR [NAMES...]}
shift 2
names=("$@")
((${#names[@]})) || names=(forward sft eagle3 dflash long_context gated_delta hybrid_forward family_forward moe distill dpo tokenizer generate regenerate distributed)
mkdir -p "$out"
cd "$root" || exit 2
{
  echo "date: $(date -u +%Y-%m-%d)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores," \
    "$(grep -m1 'cpu MHz' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') MHz," \
    "$(grep -m1 -o 'avx512f' /proc/cpuinfo || echo 'no avx512f')"
  command -v nvidia-smi > /dev/null && nvidia-smi -L
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
} | tee "$out/machine.txt"
status=0
for name in "${names[@]}"; do
  echo "== $name"
  case $name in
    tokenizer) BUILD="$build" bench/bench_tokenizer.sh ;;
    generate) BUILD="$build" bench/bench_generate.sh ;;
    regenerate) BUILD="$build" bench/bench_regenerate.sh ;;
    distributed) bench/bench_distributed.sh "$build" ;;
    *) "$build/bench_$name" ;;
  esac > "$out/$name.txt" 2>&1 || { status=1; echo "   failed (see $out/$name.txt)"; }
  tail -n 30 "$out/$name.txt"
done
exit $status
