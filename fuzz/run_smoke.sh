#!/usr/bin/env bash
# Builds every libFuzzer target in fuzz/ (libFuzzer + ASan + UBSan) into build-fuzz/ and runs
# each for a bounded time, seeded from committed files. Exits non-zero on any finding.
#   FUZZ_SECONDS=30 fuzz/run_smoke.sh            # seconds per target (default 30)
#   FUZZ_SECONDS=600 fuzz/run_smoke.sh tokenizer # one target, longer
# Targets: safetensors (headers), tokenizer (tokenizer.json; encode/decode round trip), parquet
# (Parquet files through Apache Arrow), model_config
# (config.json), jsonl (every data format), config (YAML + overrides), manifest (checkpoints),
# jinja (chat templates: parse and render).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=build-fuzz
obj_dir="$build_dir/obj"
mkdir -p "$obj_dir"
seconds=${FUZZ_SECONDS:-30}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors tokenizer model_config jsonl config manifest jinja parquet)

# Apache Arrow for the Parquet reader (jsonl and parquet targets): scripts/setup.sh's pyarrow env.
pyarrow=$(.venv-parquet/bin/python -c 'import os, pyarrow; print(os.path.dirname(pyarrow.__file__))' 2>/dev/null) ||
  { echo "fuzz: no .venv-parquet with pyarrow (run scripts/setup.sh): the Parquet reader cannot be built" >&2; exit 1; }

# -fno-sanitize-recover makes a UBSan report fatal, so the fuzzer counts it as a crash.
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
       -I src)

# Through ccache when it is installed (scripts/setup.sh installs it), in the same cache as the
# main build: a fresh clone recompiles only what changed. The debug info names the checkout as
# ".", so the objects do not depend on where it is.
compile=(clang++)
if command -v ccache > /dev/null; then
  compile=(env "CCACHE_DIR=${TANDEM_CACHE:-$HOME/.cache/tandem}/ccache" "CCACHE_BASEDIR=$PWD"
           CCACHE_NOHASHDIR=1 CCACHE_COMPRESS=1 ccache clang++)
fi
flags+=("-fdebug-prefix-map=$PWD=.")

# The engine sources each target needs (compiled once, shared by the targets).
core=(src/tandem/core/json_parse.cpp src/tandem/core/file_io.cpp src/tandem/core/hash.cpp
      src/tandem/core/json_file.cpp)
text=(src/tandem/text/*.cpp)
data=(src/tandem/data/datasets.cpp src/tandem/data/jsonl.cpp src/tandem/data/preference_split.cpp
      src/tandem/data/parquet_rows.cpp src/tandem/data/heldout_split.cpp)
declare -A sources=(
  [safetensors]="src/tandem/io/safetensors.cpp ${core[*]}"
  [tokenizer]="${text[*]} ${core[*]}"
  [model_config]="src/tandem/models/decoder_config.cpp src/tandem/models/family_traits.cpp src/tandem/io/quantization_config.cpp ${core[*]}"
  [jsonl]="${data[*]} ${text[*]} ${core[*]}"
  [parquet]="${data[*]} ${text[*]} ${core[*]}"
  [config]="src/tandem/core/config.cpp ${core[*]}"
  [manifest]="src/tandem/train/checkpoint_manifest.cpp ${core[*]}"
  [jinja]="${text[*]} ${core[*]}"
)
arrow_libs="$(ls "$pyarrow"/libparquet.so.[0-9]* | head -1) $(ls "$pyarrow"/libarrow.so.[0-9]* | head -1) -Wl,-rpath,$pyarrow"
declare -A libraries=([config]="-lyaml-cpp" [tokenizer]="-lpcre2-8" [jsonl]="-lpcre2-8 $arrow_libs"
                      [jinja]="-lpcre2-8" [parquet]="-lpcre2-8 $arrow_libs")

object_of() { echo "$obj_dir/$(echo "$1" | tr '/' '_').o"; }

# Objects, two compilers at a time; an object older than its source or than any header under
# src/ or fuzz/ is rebuilt.
needed=$(for target in "${targets[@]}"; do echo ${sources[$target]}; echo "fuzz/fuzz_$target.cpp"; done |
         tr ' ' '\n' | sort -u)
for source in $needed; do
  object=$(object_of "$source")
  if [ ! -f "$object" ] || [ "$source" -nt "$object" ] ||
     [ -n "$(find src fuzz -name '*.h' -newer "$object" -print -quit)" ]; then echo "$source"; fi
done | xargs -r -P 2 -I{} sh -c '"$@" $(case {} in *parquet_rows.cpp) echo "-DTANDEM_WITH_PARQUET -I'"$pyarrow"'/include";; esac) -c {} -o "'"$obj_dir"'/$(echo {} | tr / _).o"' _ "${compile[@]}" "${flags[@]}"

# Seeds: committed files each target reads in real use.
seed() {  # seed TARGET FILE [PREFIX-BYTE [BYTES]]: FILE's first BYTES into TARGET's corpus
  local corpus="$build_dir/corpus-$1" name
  mkdir -p "$corpus"
  name="$corpus/seed-$(echo "$2" | tr '/' '_')${3:+-$3}"
  if [ -n "${3:-}" ]; then
    { printf "\\$(printf '%03o' "$3")"; head -c "${4:-20000}" "$2"; } > "$name"
  else
    head -c 200000 "$2" > "$name"
  fi
}
for target in "${targets[@]}"; do
  case $target in
    safetensors) while IFS= read -r -d '' f; do seed safetensors "$f"; done \
                   < <(find tests/fixtures -name '*.safetensors' -size -200k -type f -print0) ;;
    tokenizer) for f in tests/fixtures/tokenizers/{tiny,llama2,gemma}/tokenizer.json \
                        data/demo/tokenizer/tokenizer.json
               do seed tokenizer "$f" 0 2000000; done
               for mode in 1 2 3 4; do seed tokenizer data/demo/chat_heldout.jsonl $mode; done ;;
    model_config) for f in tests/fixtures/models/*/config.json configs/*-model.json
                  do seed model_config "$f"; done ;;
    jsonl) seed jsonl data/demo/chat.jsonl 0; seed jsonl data/demo/corpus.jsonl 1
           seed jsonl data/demo/preference.jsonl 3
           # The same records as JSON arrays (ShareGPT's downloads), under each role policy.
           python3 -c 'import sys
for mode, name in ((0, "chat"), (13, "preference"), (20, "chat")):
    lines = [l for l in open(f"data/demo/{name}.jsonl", encoding="utf-8").read().split("\n") if l][:20]
    open(f"{sys.argv[1]}/seed-array-{mode}", "wb").write(bytes([mode]) + ("[" + ",\n".join(lines) + "]").encode())' \
             "$build_dir/corpus-jsonl" ;;
    config) for f in configs/*.yaml configs/examples/*.yaml; do seed config "$f"; done ;;
    manifest) seed manifest fuzz/seeds/manifest.json ;;
    parquet) for f in tests/fixtures/parquet/*.parquet; do seed parquet "$f"; done ;;
    jinja) mkdir -p "$build_dir/corpus-jinja"  # every fixture case's template, mode byte 1
           python3 -c 'import json, sys
for i, case in enumerate(json.load(open("tests/fixtures/jinja/cases.json"))["cases"]):
    open(f"{sys.argv[1]}/seed-{i}", "wb").write(b"\x01" + case["template"].encode())' \
             "$build_dir/corpus-jinja" ;;
  esac
done

status=0
for target in "${targets[@]}"; do
  binary="$build_dir/fuzz_$target"
  objects=()
  for source in ${sources[$target]} "fuzz/fuzz_$target.cpp"; do objects+=("$(object_of "$source")"); done
  clang++ -fsanitize=fuzzer,address,undefined "${objects[@]}" ${libraries[$target]:-} -o "$binary"
  log="$build_dir/fuzz_$target.log"
  result=0
  "$binary" "$build_dir/corpus-$target" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -timeout=20 -artifact_prefix="$build_dir/$target-" -print_final_stats=1 \
    >"$log" 2>&1 || result=$?
  if [ "$result" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz_$target: FAILED (exit $result); the input is saved as $build_dir/$target-*" >&2
    status=$result
    continue
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  echo "fuzz_$target: ${runs:-?} runs in ${seconds} s, no findings"
done
exit "$status"
