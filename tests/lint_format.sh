#!/usr/bin/env bash
# The C++ sources are formatted by the repository's .clang-format with clang-format 14 (installed by
# scripts/setup.sh; another version formats some lines differently). Lists every file that differs
# and how to fix it; formatting is checked, never applied, so a test run changes nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
format=clang-format-14
if ! command -v "$format" >/dev/null; then
  echo "lint_format: $format is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh' | grep -v '^tools/')
if ((${#files[@]} == 0)); then
  echo "lint_format: no C++ files found: run it in the git checkout" >&2
  exit 1
fi
unformatted=()
for file in "${files[@]}"; do
  "$format" --style=file "$file" | cmp -s - "$file" || unformatted+=("$file")
done
if ((${#unformatted[@]} > 0)); then
  printf 'lint_format: not formatted: %s\n' "${unformatted[@]}"
  echo "lint_format: ${#unformatted[@]} files differ from .clang-format; run:" \
    "$format -i ${unformatted[*]}"
  exit 1
fi
echo "lint_format: all ${#files[@]} C++ files match .clang-format ($("$format" --version))"
