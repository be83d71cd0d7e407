#!/usr/bin/env bash
# The main job on the embedded default. Until draft training lands this runs the frozen
# forward pass of a shipped fixture checkpoint (a tiny Llama-3 with llama3 RoPE scaling) and
# writes its logits and hidden states.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
mkdir -p out
build/tandem forward --model tests/fixtures/models/llama3 \
  --input-ids 1,15,27,300,42,7,511,64 --layers 1,2 --dtype fp32 \
  --out out/demo-forward.safetensors
