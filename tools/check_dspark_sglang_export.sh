#!/usr/bin/env bash
# Checks a tandem DSpark draft's SGLang export with SGLang 0.5.16's own DSpark config parser and
# head builders (tools/check_dspark_sglang_export.py says what and how):
#   tools/check_dspark_sglang_export.sh --sglang RUN/export/sglang --target TARGET_DIR \
#     [--speculators RUN/export/speculators]
# Runs with .venv-tools' python (`scripts/setup.sh --tools`); installs the SGLang wheel and msgspec
# once, without their dependencies (torch and transformers come from .venv-tools), into
# $TANDEM_CACHE/sglang-0.5.16-<key> (default ~/.cache/tandem).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv-tools/bin/python"
if [ ! -x "$py" ]; then
  echo "check_dspark_sglang_export.sh: $py is missing; run scripts/setup.sh --tools" >&2
  exit 2
fi
packages=(sglang==0.5.16 msgspec==0.22.0)
key=$(printf '%s\n' "${packages[@]}" "$("$py" -c 'import sys; print(sys.version_info[:2])')" |
  sha256sum | cut -c1-12)
dir=${TANDEM_CACHE:-$HOME/.cache/tandem}/sglang-0.5.16-$key
if [ ! -f "$dir/.complete" ]; then
  echo "[check_dspark_sglang_export] installing ${packages[*]} into $dir" >&2
  rm -rf "$dir.tmp"
  "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp" "${packages[@]}" >&2
  touch "$dir.tmp/.complete"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$root/tools/check_dspark_sglang_export.py" "$@"
