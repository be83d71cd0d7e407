#!/usr/bin/env bash
# Validates tandem's EAGLE-3 exports against what SGLang, vLLM and the speculators library read:
#   tools/check_eagle3_export.sh --sglang runs/x/export/sglang --speculators runs/x/export/speculators
#       [--target TARGET_DIR] [--no-speculators-lib] [--no-cross-compare]
# Runs tools/check_eagle3_export.py with .venv-tools' python (torch + transformers, from
# `scripts/setup.sh --tools`). For the speculators-format checks it adds speculators itself,
# installed once with `pip --target --no-deps` into $TANDEM_CACHE/speculators-<version>-<key>
# (default ~/.cache/tandem) together with the few packages `import speculators` needs that
# .venv-tools lacks (tools/speculators_env.sh); torch and transformers are reused, never
# downloaded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# shellcheck source=speculators_env.sh
source "$root/tools/speculators_env.sh"
tools_python check_eagle3_export

need_lib=0
for arg in "$@"; do
  case "$arg" in
    --speculators|--speculators=*) need_lib=1 ;;
  esac
done
for arg in "$@"; do
  [ "$arg" = --no-speculators-lib ] && need_lib=0
done

if ((need_lib)); then
  speculators_env check_eagle3_export
fi

exec "$py" "$root/tools/check_eagle3_export.py" "$@"
