#!/usr/bin/env bash
# Checks what W&B makes of tandem's TensorBoard event files, offline (tools/check_wandb_sync.py):
#   tools/check_wandb_sync.sh tests/fixtures/metrics/events.golden \
#       --expect-jsonl tests/fixtures/metrics/events.golden.jsonl
#   tools/check_wandb_sync.sh RUN_DIR/tensorboard --keep EMPTY_DIR   # leaves the offline run there
# Makes a throwaway venv with wandb and tensorboard the first time, in
# $TANDEM_CACHE/wandb-<version> (default ~/.cache/tandem).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=0.31.0
venv="${TANDEM_CACHE:-$HOME/.cache/tandem}/wandb-$version"
if [ ! -f "$venv/.complete" ]; then
  echo "[check_wandb_sync] installing wandb==$version and tensorboard into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "wandb==$version" \
    "tensorboard==2.21.0" >&2
  touch "$venv/.complete"
fi
exec "$venv/bin/python" "$root/tools/check_wandb_sync.py" "$@"
