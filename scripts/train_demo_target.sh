#!/usr/bin/env bash
# The demo target, from the committed data and configs, in one command:
#   1. configs/demo-target.yaml: pre-training from scratch on the Austen novels
#      (data/demo/corpus.jsonl) -> runs/demo-target-pretrain,
#   2. configs/demo-target-chat.yaml: fine-tuning on the Austen chat conversations through the
#      Llama 3 chat template -> runs/demo-target-chat,
#   3. the last checkpoint exported in bf16 (tandem export --dtype bf16) to OUT
#      (default runs/demo-target-chat/export-bf16).
# The repository ships the result as data/demo/target (see data/demo/SOURCE.md); scripts/demo.sh
# uses that copy unless given --retrain-target, which runs this script. Each stage resumes if
# interrupted and is skipped when finished. About 30 minutes on 2 cores once built.
#
#   scripts/train_demo_target.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/demo-target-chat/export-bf16}
finished() {  # CONFIG: its final checkpoint and its end-of-run export both exist
  local run steps
  run=$(sed -n 's/^ *run_dir: *\([^ #]*\).*/\1/p' "$1")
  steps=$(sed -n 's/^ *steps: *\([0-9]*\).*/\1/p' "$1")
  [ -d "$(printf '%s/step-%08d' "$run" "$steps")" ] && [ -f "$run/export/config.json" ]
}
for config in configs/demo-target.yaml configs/demo-target-chat.yaml; do
  if finished "$config"; then
    echo "== $config: finished"
  else
    echo "== $config"
    build/tandem train "$config"
  fi
done
if [ -f "$out/config.json" ]; then
  echo "== $out exists; left as it is"
else
  # Written beside OUT and renamed into place, so an interrupted export leaves no half model.
  rm -rf "$out.partial"
  build/tandem export runs/demo-target-chat --dtype bf16 --out "$out.partial"
  mv "$out.partial" "$out"
fi
echo "demo target: $out"
