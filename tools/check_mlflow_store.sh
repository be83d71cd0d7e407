#!/usr/bin/env bash
# Checks a tandem MLflow file store with MLflow's own client (tools/check_mlflow_store.py):
#   tools/check_mlflow_store.sh RUN_DIR/mlruns --expect-jsonl RUN_DIR/metrics.jsonl
#   tools/check_mlflow_store.sh tests/fixtures/mlflow/mlruns \
#       --expect-jsonl tests/fixtures/mlflow/metrics.jsonl --expect-status FINISHED
# Makes a throwaway venv with mlflow-skinny (MlflowClient and the file store, without the server
# and UI) the first time, in $TANDEM_CACHE/mlflow-<version> (default ~/.cache/tandem).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=3.17.2
venv="${TANDEM_CACHE:-$HOME/.cache/tandem}/mlflow-$version"
if [ ! -f "$venv/.complete" ]; then
  echo "[check_mlflow_store] installing mlflow-skinny==$version into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "mlflow-skinny==$version" >&2
  touch "$venv/.complete"
fi
exec "$venv/bin/python" "$root/tools/check_mlflow_store.py" "$@"
