#!/usr/bin/env bash
# Builds fuzz/fuzz_safetensors.cpp with libFuzzer + ASan + UBSan into build-fuzz/ and runs a
# bounded pass seeded from the committed .safetensors fixtures. Exits non-zero on any finding.
#   FUZZ_SECONDS=30 fuzz/run_smoke.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=build-fuzz
corpus_dir="$build_dir/corpus-safetensors"
binary="$build_dir/fuzz_safetensors"
mkdir -p "$build_dir" "$corpus_dir"

# -fno-sanitize-recover makes a UBSan report fatal, so the fuzzer counts it as a crash.
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I src src/tandem/io/safetensors.cpp src/tandem/core/file_io.cpp src/tandem/core/json_parse.cpp \
  fuzz/fuzz_safetensors.cpp -o "$binary"

seeds=0
while IFS= read -r -d '' fixture; do
  cp "$fixture" "$corpus_dir/seed-$(basename "$fixture")"
  seeds=$((seeds + 1))
done < <(find tests/fixtures -name '*.safetensors' -type f -print0 2>/dev/null)
echo "seeded $seeds fixture(s) into $corpus_dir"

log="$build_dir/fuzz_safetensors.log"
status=0
"$binary" "$corpus_dir" -max_total_time="${FUZZ_SECONDS:-30}" -rss_limit_mb=2048 \
  -artifact_prefix="$build_dir/" -print_final_stats=1 >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  tail -n 60 "$log"
  echo "fuzz_safetensors: FAILED (exit $status); crashing input saved under $build_dir/" >&2
  exit "$status"
fi
grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" || true
echo "fuzz_safetensors: no findings"
