#!/usr/bin/env bash
# The whole test suite: set-up and build if needed, every GoogleTest case through CTest, then a
# bounded libFuzzer pass over every fuzz target in fuzz/ (safetensors headers, tokenizer.json,
# config.json, the JSONL readers, YAML configs, checkpoint manifests). Exits non-zero on any
# failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# --tools: the e2e test checks exports with transformers and speculators' own config classes.
scripts/setup.sh --tools
# Two test processes on two cores, one libtorch thread each: no pools fighting over cores.
export OMP_NUM_THREADS=1 TANDEM_THREADS=1
jobs=${TANDEM_JOBS:-$(nproc)}
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
FUZZ_SECONDS=${FUZZ_SECONDS:-20} fuzz/run_smoke.sh  # seconds per target
