#!/usr/bin/env bash
# Validates tandem's EAGLE-3 exports against what SGLang, vLLM and the speculators library read:
#   tools/check_eagle3_export.sh --sglang runs/x/export/sglang --speculators runs/x/export/speculators
#       [--target TARGET_DIR] [--no-speculators-lib] [--no-cross-compare]
# Runs tools/check_eagle3_export.py with .venv-tools' python (torch + transformers, from
# `scripts/setup.sh --tools`). For the speculators-format checks it adds speculators itself,
# installed once with `pip --target --no-deps` into $TANDEM_CACHE/speculators-<version>-<key>
# (default ~/.cache/tandem) together with the few packages `import speculators` needs that
# .venv-tools lacks; torch and transformers are reused, never downloaded.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv-tools/bin/python"
if [ ! -x "$py" ]; then
  echo "check_eagle3_export.sh: $py is missing; run scripts/setup.sh --tools" >&2
  exit 2
fi

speculators_version=0.9.0
# Exactly what `import speculators` (0.9.0) needs on top of .venv-tools: train/data.py imports
# openai and datasets at module level (datasets brings pandas and pyarrow), the package metadata
# lookups need dill and hs-connectors. Pinned so the cache key says what is inside.
packages=(
  "speculators==$speculators_version"
  "hs-connectors==$speculators_version"
  openai==3.54.0
  sniffio==1.3.1
  datasets==5.1.0
  multiprocess==0.70.19
  dill==0.4.1
  xxhash==4.1.0
  pandas==3.1.1
  python-dateutil==4.0.0
  pyarrow==26.0.1
)

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
  cache=${TANDEM_CACHE:-$HOME/.cache/tandem}
  key=$(printf '%s\n' "${packages[@]}" "$("$py" -c 'import sys; print(sys.version_info[:2])')" |
    sha256sum | cut -c1-12)
  dir="$cache/speculators-$speculators_version-$key"
  if [ ! -f "$dir/.complete" ]; then
    echo "[check_eagle3_export] installing speculators $speculators_version into $dir" >&2
    mkdir -p "$cache"
    rm -rf "$dir.tmp"
    "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp" \
      "${packages[@]}" >&2
    PYTHONPATH="$dir.tmp" "$py" -c 'import speculators' >/dev/null 2>&1 || {
      echo "check_eagle3_export.sh: 'import speculators' fails in $dir.tmp:" >&2
      PYTHONPATH="$dir.tmp" "$py" -c 'import speculators' >&2 || true
      exit 2
    }
    touch "$dir.tmp/.complete"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
  fi
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
fi

exec "$py" "$root/tools/check_eagle3_export.py" "$@"
