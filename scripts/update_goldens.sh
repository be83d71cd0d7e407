#!/usr/bin/env bash
# Rewrites the golden files that tandem's own code writes (tests/fixtures/metrics: TensorBoard
# events and metrics.jsonl), which no test run ever rewrites, then shows the diff for review.
# Usage: scripts/update_goldens.sh   (after a build: build/tandem_tests)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
test -x build/tandem_tests || { echo "update_goldens: build first (scripts/setup.sh)" >&2; exit 2; }
build/tandem_tests --gtest_also_run_disabled_tests --gtest_filter='Goldens.DISABLED_*'
if [ -x .venv-tools/bin/python ] && .venv-tools/bin/python -c 'import tensorboard' 2>/dev/null; then
  .venv-tools/bin/python tools/check_tensorboard_events.py tests/fixtures/metrics/events.golden \
    --expect-jsonl tests/fixtures/metrics/events.golden.jsonl
else
  echo "update_goldens: no TensorBoard in .venv-tools: read events.golden back by hand" \
    "(tests/fixtures/metrics/README.md)"
fi
git --no-pager diff --stat -- tests/fixtures
echo "update_goldens: review the diff above before committing it"
