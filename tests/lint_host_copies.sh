#!/usr/bin/env bash
# Host-to-device copies in the code that runs every step (models/, objectives/, eval/, the
# offline feature reader) go through to_device (core/device.h): pinned, and ordered on the
# device's stream without the host waiting. A plain `.to(device)` of a host tensor is a pageable
# copy, which makes the host wait for the device: on a GPU, a stall per call that no CPU test can
# time. This lint finds every `.to(...device...)` and `.cuda()` there; the few that are fine are
# listed below with their reason (each entry: a file and a piece of its line).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

allowed=(
  # Loading weights: once per weight, before training; a pageable copy is the cheapest there.
  "src/tandem/models/frozen.cpp|checkpoint.read_weight(name).to(run.device, dtype)"
  "src/tandem/models/stored_weights.cpp|.to(options.device(), c10::typeMetaToScalarType(options.dtype()))"
  "src/tandem/objectives/dflash_export.cpp|export_.mask_embedding.to(device)"
  # PackedBatch::to moves a batch through to_device itself.
  "src/tandem/data/capture.cpp|batch.to(target.device())"
)

found=0
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest#*:}
  ok=0
  for entry in "${allowed[@]}"; do
    [ "$file" = "${entry%%|*}" ] && [[ "$line" == *"${entry#*|}"* ]] && ok=1
  done
  if ((ok == 0)); then
    echo "lint_host_copies: $hit"
    found=$((found + 1))
  fi
# Inside the parentheses of .to(...) only (two levels of nested calls), so a wrapped line with a
# device mentioned after the call does not match.
done < <(grep -rnP '\.to\((?:[^();]|\((?:[^();]|\([^();]*\))*\))*\b(device|kCUDA|kMeta)\b|\.cuda\(\)' \
  src/tandem/models src/tandem/objectives src/tandem/eval src/tandem/data/capture.cpp |
  grep -v 'to_device(' || true)

if ((found > 0)); then
  echo "lint_host_copies: $found host-to-device copies above do not go through to_device" \
    "(core/device.h); use it, or list the line in tests/lint_host_copies.sh with its reason"
  exit 1
fi
echo "lint_host_copies: every host-to-device copy in models/, objectives/, eval/ and the feature" \
  "reader goes through to_device (${#allowed[@]} listed exceptions)"
