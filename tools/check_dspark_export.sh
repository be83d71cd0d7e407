#!/usr/bin/env bash
# Checks a tandem DSpark draft export in the speculators format with speculators 0.9.0's own
# DSpark classes (config parse, strict weight set, from_pretrained, logits vs an independent
# forward):
#   tools/check_dspark_export.sh --speculators RUN/export/speculators --target TARGET_DIR
# Runs tools/check_dspark_export.py with .venv-tools' python (`scripts/setup.sh --tools`) and
# the speculators install of tools/speculators_env.sh, plus loguru: speculators' from_pretrained
# rebuilds the embedding and lm_head through speculators/utils/loading.py, which imports it
# (nothing `import speculators` alone pulls in, so the shared install lacks it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=speculators_env.sh
source "$root/tools/speculators_env.sh"
tools_python check_dspark_export
case " $* " in
  *" -h "* | *" --help "*) ;;
  *) speculators_env check_dspark_export loguru==0.7.3 ;;
esac
exec "$py" "$root/tools/check_dspark_export.py" "$@"
