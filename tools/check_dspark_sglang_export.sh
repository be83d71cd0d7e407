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
# shellcheck source=tools_env.sh
source "$root/tools/tools_env.sh"
tools_python check_dspark_sglang_export
# msgspec is the import check: `import sglang` runs its package __init__, which needs a GPU stack.
pip_cached check_dspark_sglang_export sglang-0.5.16 msgspec sglang==0.5.16 msgspec==0.22.0
exec "$py" "$root/tools/check_dspark_sglang_export.py" "$@"
