#!/usr/bin/env bash
# Builds tandem against the machine's PyTorch and runs the checks that need an NVIDIA GPU, in one
# command bounded in time (docs/gpu.md, "The GPU check").
#
#   scripts/gpu_check.sh --prepare
#       On a connected Debian bookworm machine: `apt-get download` the Debian packages the build
#       needs into .gpu-debs/ (git-ignored), to carry to the GPU machine, which has no registry.
#   scripts/gpu_check.sh --out OUT [options]        (or: scripts/gpu_check.sh OUT [options])
#       On the GPU machine, in the checkout with .gpu-debs/: unpack those packages into WORK/prefix
#       (never into /), configure with the system's copies excluded, build tandem and tandem_tests
#       in WORK/build with every core, run the checks, each bounded, all within a deadline.
#       OUT receives at most 6 files (for a machine that returns a few small files):
#         summary.txt    one line per step ("PASS|FAIL|SKIP name (seconds): detail"), then totals
#         log.txt        everything, the checks' output included
#         configure.log, build.log
#         failures.log   the logs of the checks that failed (only if one did)
#         results.tar.gz every check's log and the runs' small result files (no prefix, no build)
#       Exit status: 0 every check passed, 1 a check failed or was skipped for lack of time,
#       2 the build could not be set up.
#   Options:
#       --python PY       the Python whose torch to build against (default:
#                         /opt/torch/.venv/bin/python3 if it exists, else python3)
#       --work DIR        prefix/, work/ (runs, logs) and build/ (default: build-gpu/ in the
#                         checkout, git-ignored: a warm machine keeps it, so a second call rebuilds
#                         only what changed)
#       --build-dir DIR   the build directory (default: WORK/build)
#       -j N              compile jobs (default: every core, nproc)
#       --deadline S      seconds from the start within which everything, packaging included,
#                         ends (default 540, or $GPU_CHECK_DEADLINE; 6 hours with --build-only
#                         or --configure-only); checks that no longer fit are skipped
#                         ("SKIP name: no time left")
#       --only A,B        run only these checks (names as in summary.txt)
#       --configure-only  stop after cmake configure (needs no GPU)
#       --build-only      stop after the build, then prove that no header or library of the
#                         system's copies of the dependencies went in (needs no GPU)
#       --rehearse-on-cpu the whole check on the CPU: devices are cpu, the NCCL checks skip, CUDA
#                         tests that skip are not failures; exercises the logic, bounds and output
#       --bench           also build bench/ (TANDEM_BUILD_BENCH=ON)
# GPU_CHECK_PREFIX_PKGCONF=1 uses the unpacked pkgconf even where the machine has pkg-config.

# The checks and the packaging run through run_check and the EXIT trap, which shellcheck can't see.
# shellcheck disable=SC2317
set -uo pipefail
started=$(date +%s)
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
debs_dir=$root/.gpu-debs
# The build's Debian dependencies (GPU-NOTES.md, "Building on the GPU machine"); pkgconf in case
# the GPU machine has no pkg-config. Runtime libraries carry their soname in their name.
deb_packages=(nlohmann-json3-dev libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev libpcre2-dev
  libpcre2-8-0 libgtest-dev libgloo-dev pkgconf pkgconf-bin libpkgconf3)
# What must come from the prefix: headers under the system include directory, and libraries.
# (Anchored: the prefix's own copies live under .../prefix/usr/include and .../prefix/usr/lib.)
system_copies='(^|[[:space:]"=,:;])(/usr/include/(yaml-cpp|nlohmann|CLI|pcre2|gtest|gmock|gloo)|/usr/lib/x86_64-linux-gnu/lib(yaml-cpp|pcre2|gtest|gmock))'
resume_steps=40   # check resume: long enough that the kill after step 4 lands before the run ends
reserve=20        # seconds kept back from the deadline for the summary and the packaging

die() { echo "gpu_check: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# --prepare
candidate() {  # the version apt would install, or nothing
  local version
  version=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  [ "$version" != "(none)" ] && echo "$version"
}

prepare() {
  command -v apt-get > /dev/null || die "--prepare needs apt-get (a Debian bookworm machine)"
  if [ -z "$(candidate nlohmann-json3-dev)" ]; then
    echo "[prepare] package lists are empty: apt-get update"
    apt-get update -qq || die "apt-get update failed (run as root, with network)"
  fi
  local names=() p alt
  for p in "${deb_packages[@]}"; do
    if [ -n "$(candidate "$p")" ]; then names+=("$p"); continue; fi
    # Another release renames the runtime libraries: take the one the -dev package depends on.
    case $p in
      libyaml-cpp0.*) alt=$(apt-cache depends libyaml-cpp-dev | grep -o 'libyaml-cpp[0-9][0-9.]*') ;;
      libpcre2-8-*) alt=$(apt-cache depends libpcre2-dev | grep -o 'libpcre2-8-[0-9]*') ;;
      libpkgconf*) alt=$(apt-cache depends pkgconf-bin | grep -o 'libpkgconf[0-9]*') ;;
      *) alt="" ;;
    esac
    alt=$(head -1 <<< "$alt")
    if [ -z "$alt" ] || [ -z "$(candidate "$alt")" ]; then
      die "no Debian package '$p' here (apt-cache policy $p): run --prepare on Debian bookworm"
    fi
    echo "[prepare] $p is called $alt here"
    names+=("$alt")
  done
  mkdir -p "$debs_dir"
  rm -f "$debs_dir"/*.deb  # no stale versions beside the new ones
  (cd "$debs_dir" && apt-get download "${names[@]}") || die "apt-get download ${names[*]} failed"
  local debs=("$debs_dir"/*.deb)
  ls -l "${debs[@]}"
  echo "[prepare] ${#debs[@]} packages, $(du -ch "${debs[@]}" | tail -1 | cut -f1) in all, in" \
    "$debs_dir: carry it to the GPU machine with the checkout (device tool: carry [\".gpu-debs\"])"
}

# ---------------------------------------------------------------------------------------------
# Arguments
out="" python="" bench=0 stop_after="" rehearse=0 jobs="" work_dir="" build_dir="" only=""
deadline=${GPU_CHECK_DEADLINE:-}
while (($#)); do
  case $1 in
    --prepare) prepare; exit 0 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --python) python=${2:?--python needs a path}; shift ;;
    --work) work_dir=${2:?--work needs a folder}; shift ;;
    --build-dir) build_dir=${2:?--build-dir needs a folder}; shift ;;
    -j) jobs=${2:?-j needs a number}; shift ;;
    -j[0-9]*) jobs=${1#-j} ;;
    --deadline) deadline=${2:?--deadline needs seconds}; shift ;;
    --only) only=,${2:?--only needs check names},; shift ;;
    --configure-only) stop_after=configure ;;
    --build-only) stop_after=build ;;
    --rehearse-on-cpu) rehearse=1 ;;
    --bench) bench=1 ;;
    -h | --help) sed -n '2,39p' "$0" | cut -c3-; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$out" ] || die "one OUT only (got '$out' and '$1')"; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || die "usage: scripts/gpu_check.sh --out OUT [options] | --prepare (see --help)"
# --configure-only and --build-only run on CPU machines, where the build takes longer than 540 s.
[ -n "$deadline" ] || { deadline=540; [ -n "$stop_after" ] && deadline=$((6 * 3600)); }
[[ $deadline =~ ^[0-9]+$ ]] || die "--deadline takes whole seconds, got '$deadline'"
[[ ${jobs:-1} =~ ^[1-9][0-9]*$ ]] || die "-j takes a positive number, got '$jobs'"
jobs=${jobs:-$(nproc)}
out=$(mkdir -p "$out" && cd "$out" && pwd) || die "cannot create $out"
work_dir=$(mkdir -p "${work_dir:-$root/build-gpu}" && cd "${work_dir:-$root/build-gpu}" && pwd) ||
  die "cannot create the work folder"
build_dir=$(mkdir -p "${build_dir:-$work_dir/build}" && cd "${build_dir:-$work_dir/build}" && pwd) ||
  die "cannot create the build folder"
case $work_dir/ in "$out"/*) die "--work must not be inside OUT ($out): OUT is what comes back" ;; esac
case $build_dir/ in "$out"/*) die "--build-dir must not be inside OUT ($out)" ;; esac
log=$out/log.txt summary=$out/summary.txt failures_log=$out/failures.log
work=$work_dir/work logs=$work_dir/work/logs
rm -f "$out"/{summary.txt,log.txt,configure.log,build.log,failures.log,results.tar.gz}
: > "$log"
: > "$summary"
rm -rf "$work" && mkdir -p "$logs"
deadline_at=$((started + deadline))
checks_failed=0 checks_passed=0 checks_skipped=0 out_of_time=0

say() { echo "$*" | tee -a "$log"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
first_file() { local f; for f in "$@"; do [ -f "$f" ] && { echo "$f"; return 0; }; done; return 1; }
time_left() { echo $((deadline_at - reserve - $(date +%s))); }  # before the packaging must start
verdict() {  # verdict PASS|FAIL|SKIP NAME SECONDS DETAIL: one summary line
  local line="$1 $2 ($3s): $4"
  say "$line"
  echo "$line" >> "$summary"
}

# The returned files, each under the machine's 16 MiB: a longer log keeps its first 2 MiB and
# its last 12 MiB.
cap_file() {
  local f=$1 size
  [ -f "$f" ] || return 0
  size=$(stat -c %s "$f")
  ((size > 15 * 1024 * 1024)) || return 0
  { head -c $((2 * 1024 * 1024)) "$f"; printf '\n[... %s bytes cut by gpu_check ...]\n' "$size"
    tail -c $((12 * 1024 * 1024)) "$f"; } > "$f.cut" && mv "$f.cut" "$f"
}
packaged=0
package() {
  ((packaged)) && return 0
  packaged=1
  local total=$(($(date +%s) - started))
  {
    echo "TOTAL ${total}s of the ${deadline}s deadline: $checks_passed passed, $checks_failed failed," \
      "$checks_skipped skipped$( ((out_of_time)) && echo " ($out_of_time for lack of time)")"
  } >> "$summary"
  # Every log, plus the runs' small results (metrics, configs, checkpoint pointers, gtest XML,
  # forward logits): no weights, no data cache, no build tree.
  if [ -d "$work" ]; then
    (cd "$work_dir" && find work -type f -size -2M \( -name '*.log' -o -name '*.jsonl' \
      -o -name '*.yaml' -o -name '*.json' -o -name '*.xml' -o -name '*.txt' -o -name 'latest' -o -name '*.time' \
      -o -name 'fwd_*.safetensors' \) -not -path 'work/cache/*' -not -name 'docs.jsonl' \
      -print0 | tar czf "$out/results.tar.gz" --null -T - 2>> "$log")
    if [ "$(stat -c %s "$out/results.tar.gz" 2> /dev/null || echo 0)" -gt $((15 * 1024 * 1024)) ]; then
      (cd "$work_dir" && tar czf "$out/results.tar.gz" work/logs 2>> "$log")
    fi
  fi
  for f in "$out"/*; do cap_file "$f"; done
}
pids=()  # runs in the background (every bounded command is one), killed by id on exit
forget() {  # forget PID: it has been waited for (its id may be reused)
  local p kept=()
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || kept+=("$p"); done
  pids=("${kept[@]}")
}
current_check=""  # the check under way, for the summary line of an interrupted run
on_exit() {
  local p
  for p in "${pids[@]}"; do pkill -KILL -P "$p" 2> /dev/null; kill -KILL "$p" 2> /dev/null; done
  package
}
on_signal() {
  say "gpu_check: interrupted by SIG$1"
  if [ -n "$current_check" ]; then
    verdict FAIL "$current_check" "$(since "$check_start")" "interrupted by SIG$1"
    checks_failed=$((checks_failed + 1))
  fi
  exit 2
}
trap on_exit EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
fatal() {
  say "gpu_check: $*"
  echo "FAIL setup: $*" >> "$summary"
  exit 2
}

# ---------------------------------------------------------------------------------------------
# 1. Prerequisites
t0=$(now)
mode=gpu
((rehearse)) && mode="rehearsal on the CPU"
[ -n "$stop_after" ] && mode="$stop_after only"
say "== prerequisites ($(date -u +%FT%TZ), $(hostname), $(nproc) cores, $mode, deadline ${deadline}s)"
if [ -z "$python" ]; then
  python=/opt/torch/.venv/bin/python3
  [ -x "$python" ] || python=$(command -v python3) || fatal "no python3: pass --python PY"
fi
say "python: $python ($("$python" --version 2>&1))"
torch_info=$(timeout 120 "$python" - 2>> "$log" <<'PY'
import os, torch, torch.utils
gpu = torch.cuda.is_available()
print("version", f"{torch.__version__} (CUDA {torch.version.cuda})")
print("gpu", torch.cuda.get_device_name(0) if gpu else "none")
print("site", os.path.dirname(os.path.dirname(torch.__file__)))
print("cmake", torch.utils.cmake_prefix_path)
PY
) || fatal "'import torch' fails with $python (see log.txt): pass --python PY, a Python with PyTorch"
field() { sed -n "s/^$1 //p" <<< "$torch_info"; }
site=$(field site)
say "torch: $(field version) in $site"
say "torch.cuda: $(field gpu)"
command -v nvidia-smi > /dev/null &&
  say "nvidia-smi: $(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
if [ "$(field gpu)" = none ] && [ -z "$stop_after" ] && ((!rehearse)); then
  fatal "torch.cuda.is_available() is False with $python: run this on the GPU machine (check" \
    "nvidia-smi and CUDA_VISIBLE_DEVICES), or rehearse with --rehearse-on-cpu"
fi
command -v g++ > /dev/null || fatal "no g++ on PATH"
say "g++: $(g++ --version | head -1)"
# CMake and ninja: on PATH, else beside python (a venv may carry them as pip packages).
cmake_bin=$(command -v cmake || first_file "$(dirname "$python")/cmake") ||
  fatal "no cmake on PATH nor beside $python (CMakeLists.txt needs 3.25+)"
say "cmake: $cmake_bin ($("$cmake_bin" --version | head -1))"
ninja_bin=$(command -v ninja || first_file "$(dirname "$python")/ninja") || ninja_bin=""
if [ -n "$ninja_bin" ]; then
  generator=(-G Ninja "-DCMAKE_MAKE_PROGRAM=$ninja_bin")
  say "ninja: $ninja_bin $("$ninja_bin" --version)"
else
  generator=(-G "Unix Makefiles")
  say "ninja: none (Unix Makefiles)"
fi
# TorchConfig looks for the CUDA toolkit through nvcc: put a toolkit's nvcc on PATH if it is not.
nvcc_bin=$(command -v nvcc || first_file /usr/local/cuda/bin/nvcc) || nvcc_bin=""
if [ -n "$nvcc_bin" ]; then
  PATH=$PATH:$(dirname "$nvcc_bin")
  say "nvcc: $nvcc_bin ($("$nvcc_bin" --version | grep -o 'release [^,]*'))"
else
  say "nvcc: none (TorchConfig may not find the CUDA toolkit)"
fi
# CMakeLists.txt builds the NCCL backend only if ${TORCH_LIB_DIR}/../../nvidia/*/include (that
# is $site/nvidia/*/include) has both nccl.h and cuda_runtime_api.h.
cmake_extra=()
if nccl_h=$(first_file "$site"/nvidia/*/include/nccl.h); then
  say "nccl.h: $nccl_h"
else
  say "nccl.h: NOT in the wheel ($site/nvidia/*/include): the build has no NCCL backend and the" \
    "NCCL checks will fail"
fi
if cudart_h=$(first_file "$site"/nvidia/*/include/cuda_runtime_api.h); then
  say "cuda_runtime_api.h: $cudart_h"
elif cudart_h=$(first_file ${nvcc_bin:+"${nvcc_bin%/bin/nvcc}/include/cuda_runtime_api.h"} \
    /usr/local/cuda/include/cuda_runtime_api.h); then
  # CMakeLists.txt searches only the wheel; a preset cache entry takes the toolkit's instead.
  say "cuda_runtime_api.h: not in the wheel, but the CUDA toolkit has $cudart_h: passing" \
    "-DTANDEM_CUDART_INCLUDE_DIR=$(dirname "$cudart_h")"
  cmake_extra+=("-DTANDEM_CUDART_INCLUDE_DIR=$(dirname "$cudart_h")")
else
  say "cuda_runtime_api.h: neither in the wheel nor in a CUDA toolkit: no NCCL backend"
fi
say "[time] prerequisites $(since "$t0") s"

# ---------------------------------------------------------------------------------------------
# 2. The Debian packages in a private prefix, then configure and build
t0=$(now)
debs=("$debs_dir"/*.deb)
[ -f "${debs[0]}" ] || fatal "no $debs_dir/*.deb: run scripts/gpu_check.sh --prepare on a" \
  "connected Debian bookworm machine and carry .gpu-debs along (device tool: carry [\".gpu-debs\"])"
prefix=$work_dir/prefix
lib_dir=$prefix/usr/lib/x86_64-linux-gnu
rm -rf "$prefix" && mkdir -p "$prefix"
for deb in "${debs[@]}"; do
  dpkg -x "$deb" "$prefix" || fatal "dpkg -x $deb $prefix failed (is dpkg installed?)"
done
# .pc files say prefix=/usr (gtest's also libdir=/usr/...): point them at the prefix.
while IFS= read -r pc; do
  sed -i "s#^\([a-z_]*\)=/usr\(/\|$\)#\1=$prefix/usr\2#" "$pc"
done < <(find "$prefix" -name '*.pc')
# pkg-config reads the prefix's .pc files and no others.
export PKG_CONFIG_LIBDIR=$lib_dir/pkgconfig:$prefix/usr/share/pkgconfig
unset PKG_CONFIG_PATH
if ! command -v pkg-config > /dev/null || [ -n "${GPU_CHECK_PREFIX_PKGCONF:-}" ]; then
  # The unpacked pkgconf needs its libpkgconf: a wrapper gives only it that library path.
  mkdir -p "$prefix/bin"
  # shellcheck disable=SC2016  # $LD_LIBRARY_PATH and $@ are the wrapper's, at its run time
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$lib_dir" "$prefix/usr/bin/pkgconf" > "$prefix/bin/pkg-config"
  chmod +x "$prefix/bin/pkg-config"
  PATH=$prefix/bin:$PATH
fi
# Named, or CMake would take the prefix's usr/bin/pkg-config, which runs only where the machine
# has its libpkgconf.
cmake_extra+=("-DPKG_CONFIG_EXECUTABLE=$(command -v pkg-config)")
pcre2_flags=$(pkg-config --cflags --libs libpcre2-8) ||
  fatal "pkg-config cannot read the unpacked libpcre2-8.pc (is libpcre2-dev in .gpu-debs?)"
say "unpacked ${#debs[@]} packages into $prefix; pkg-config: $(command -v pkg-config)" \
  "$(pkg-config --version); libpcre2-8: $pcre2_flags"
say "[time] unpack $(since "$t0") s"

t0=$(now)
bench_flag=OFF
((bench)) && bench_flag=ON
# find_package searches <prefix>/<name>*/ too: the cmake dirs work as prefixes on any distro.
prefix_path="$(field cmake);$prefix/usr;$lib_dir/cmake;$prefix/usr/share/cmake"
# The system's own copies are out of reach: /usr and / (where /lib is /usr/lib) are no search
# prefixes, no package registry; the CUDA toolkit (/usr/local/cuda, found through nvcc) stays.
isolation=("-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
# ...but the C library's librt is the system's: FindCUDAToolkit's search for it is answered here.
librt=$(g++ -print-file-name=librt.a)
[[ $librt == /* ]] && isolation+=("-DCUDAToolkit_rt_LIBRARY=$librt")
rm -f "$build_dir/CMakeCache.txt"  # no paths cached from another prefix or another torch
say "== configure: $build_dir (${generator[1]}, TANDEM_BUILD_BENCH=$bench_flag)"
configure=("$cmake_bin" -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
  "-DTANDEM_BUILD_BENCH=$bench_flag" "-DCMAKE_PREFIX_PATH=$prefix_path"
  "-DCMAKE_INCLUDE_PATH=$prefix/usr/include" "-DCMAKE_LIBRARY_PATH=$lib_dir" "${isolation[@]}"
  "${cmake_extra[@]}")
{ echo "PKG_CONFIG_LIBDIR=$PKG_CONFIG_LIBDIR"; printf '%q ' "${configure[@]}"; echo; } > "$out/configure.log"
bound=$(($(time_left) < 300 ? $(time_left) : 300))
((bound > 0)) || fatal "no time left for the configure"
if ! timeout -k 5 "$bound" "${configure[@]}" >> "$out/configure.log" 2>&1; then
  tail -20 "$out/configure.log" | tee -a "$log"
  verdict FAIL build "$(since "$t0")" "cmake configure failed (or passed its ${bound}s bound), see configure.log"
  fatal "cmake configure failed: see configure.log"
fi
grep 'tandem:' "$out/configure.log" | tee -a "$log"
# Where each dependency was found; the Debian packages' must all be in the prefix.
cached() { sed -n "s#^$1:[A-Z]*=##p" "$build_dir/CMakeCache.txt" | head -1; }
leaks=0
{
  echo "== resolved (gpu_check.sh): each dependency and where it was found"
  for var in nlohmann_json_DIR yaml-cpp_DIR CLI11_DIR GTest_DIR TANDEM_GLOO_INCLUDE_DIR \
      pkgcfg_lib_PCRE2_pcre2-8 PCRE2_INCLUDEDIR Torch_DIR TANDEM_NCCL_INCLUDE_DIR \
      TANDEM_CUDART_INCLUDE_DIR CUDAToolkit_BIN_DIR PKG_CONFIG_EXECUTABLE; do
    value=$(cached "$var")
    case $var in
      Torch_DIR | TANDEM_NCCL_* | TANDEM_CUDART_* | CUDAToolkit_* | PKG_CONFIG_*) where="" ;;
      *) case $value in
           "$prefix"/*) where="  [prefix]" ;;
           *) where="  [NOT FROM THE PREFIX]"; leaks=$((leaks + 1)) ;;
         esac ;;
    esac
    echo "  $var = ${value:-(unset)}$where"
  done
} > "$work/resolved.txt"
tee -a "$log" < "$work/resolved.txt" >> "$out/configure.log"
configure_s=$(since "$t0")
if ((leaks)); then
  say "gpu_check: $leaks dependencies resolved outside $prefix (see configure.log)"
  [ -n "$stop_after" ] && fatal "the configure used the system's copies: the prefix alone must suffice"
fi
say "[time] configure $configure_s s"
[ "$stop_after" = configure ] && { say "--configure-only: stopping here"; exit 0; }

t0=$(now)
targets=(--target tandem tandem_tests)
((bench)) && targets=()  # --bench: every target, the benchmarks included
bound=$(time_left)
((bound > 10)) || fatal "no time left for the build (${bound}s before the deadline's reserve)"
say "== build: ${targets[*]:-all} -j$jobs, at most ${bound}s (log: build.log)"
TIMEFORMAT='%R %U %S'
# Keep going past a failed compile: one call then reports every compile error, not the first.
keep_going=(-k 0)
[ -n "$ninja_bin" ] || keep_going=(-k)
{ time timeout -k 10 "$bound" "$cmake_bin" --build "$build_dir" -j "$jobs" "${targets[@]}" \
    -- "${keep_going[@]}" > "$out/build.log" 2>&1; } 2> "$work/build.time"
build_rc=$?
read -r build_wall build_user build_sys < "$work/build.time"
build_cpu=$(awk -v u="$build_user" -v s="$build_sys" 'BEGIN { printf "%.0f", u + s }')
build_note="configure ${configure_s}s, build ${build_wall}s wall, ${build_cpu} CPU-s (user+sys), -j$jobs"
echo "[gpu_check] $build_note" >> "$out/build.log"
if ((build_rc != 0)); then
  say "failed: $(grep -cE '^FAILED:|\*\*\* \[' "$out/build.log") build steps; the first errors:"
  grep -A3 -m6 'error:' "$out/build.log" | cut -c1-300 | head -40 | tee -a "$log"
  ((build_rc == 124 || build_rc == 137)) && build_note="timed out after ${bound}s; $build_note"
  verdict FAIL build "$(since "$t0")" "exit $build_rc, see build.log; $build_note"
  fatal "build failed: see build.log"
fi
# Proof that no header or library of the system's copies went in: the compilers' dependency
# lists and the link lines.
if [ -f "$build_dir/build.ninja" ]; then
  "$ninja_bin" -C "$build_dir" -t deps > "$work/deps.txt" 2>> "$log"
  link_files=("$build_dir/build.ninja")
else
  find "$build_dir" \( -name '*.d' -o -name 'compiler_depend.make' \) -print0 | xargs -0 cat > "$work/deps.txt"
  mapfile -t link_files < <(find "$build_dir" -name link.txt)
fi
headers_seen=$(grep -c '^ *\(/\|[a-zA-Z]\)' "$work/deps.txt")
leaked=$(grep -hoE "$system_copies" "$work/deps.txt" "${link_files[@]}" | sort | uniq -c)
from_prefix=$(grep -hoE "$prefix/usr/include/(yaml-cpp|nlohmann|CLI|pcre2|gtest|gmock|gloo)" "$work/deps.txt" |
  sed "s#$prefix/usr/include/##" | sort -u | tr '\n' ' ')
if [ -n "$leaked" ]; then
  say "isolation: the build used the system's copies:"; say "$leaked"
  [ -n "$stop_after" ] && { verdict FAIL build "$(since "$t0")" "system copies used: $(tr '\n' ' ' <<< "$leaked")"; exit 1; }
else
  say "isolation: $headers_seen dependency lines, none under /usr/include/{yaml-cpp,nlohmann,CLI,pcre2*,gtest,gmock,gloo};" \
    "headers from the prefix: $from_prefix; no link line names /usr/lib/x86_64-linux-gnu/lib{yaml-cpp,pcre2,gtest,gmock}"
fi
say "runtime: $(ldd "$build_dir/tandem" 2>&1 | grep -E 'yaml-cpp|pcre2|libtorch_cpu' | sed 's/ (0x.*//' | tr -s ' \t' ' ' | tr '\n' ';')"
verdict PASS build "$(since "$t0")" "${targets[*]:-all}; $build_note"
say "[time] build $(since "$t0") s"
[ "$stop_after" = build ] && { say "--build-only: stopping here"; exit 0; }

# ---------------------------------------------------------------------------------------------
# 3. The checks: each a function that sets $detail and returns 0 (PASS), 2 (SKIP) or else FAIL.
# Every command a check starts is bounded by the check's end ($check_end: its own bound, or the
# deadline's reserve if that comes first), so the summary always comes back.
tandem=$build_dir/tandem
dev=cuda dev0=cuda:0  # the devices the checks put on the GPU; the rehearsal puts them on the CPU
((rehearse)) && dev=cpu dev0=cpu
# The binaries find libyaml-cpp / libpcre2 in the prefix (only they get this library path).
run_env=(env "LD_LIBRARY_PATH=$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
check_end=0 timed_out=0

run_check() {  # run_check NAME BOUND_SECONDS FUNCTION ARGS...
  local name=$1 bound=$2 start status result left_s
  shift 2
  if [ -n "$only" ] && [[ $only != *",$name,"* ]]; then return 0; fi
  start=$(now) detail="" timed_out=0 clog=$logs/$name.log check_name=$name check_start=$start
  left_s=$(time_left)
  say "== check $name (bound ${bound}s, ${left_s}s left before the deadline's reserve)"
  if ((left_s < 15)); then
    checks_skipped=$((checks_skipped + 1)) out_of_time=$((out_of_time + 1))
    verdict SKIP "$name" 0 "no time left (${left_s}s before the ${deadline}s deadline's ${reserve}s reserve)"
    return 0
  fi
  ((bound > left_s)) && bound=$left_s
  check_end=$(($(date +%s) + bound))
  : > "$clog"
  current_check=$name
  "$@"
  status=$?
  current_check=""
  ((timed_out)) && detail="stopped at its ${bound}s bound: $detail"
  case $status in
    0) result=PASS checks_passed=$((checks_passed + 1)) ;;
    2) result=SKIP checks_skipped=$((checks_skipped + 1)) ;;
    *) result=FAIL checks_failed=$((checks_failed + 1))
       { echo "===== $name: $detail"; cat "$clog"; echo; } >> "$failures_log" ;;
  esac
  { echo "--- $name.log"; cat "$clog"; } >> "$log"
  verdict "$result" "$name" "$(since "$start")" "$detail"
}

left() { echo $((check_end - $(date +%s))); }  # seconds left to this check
# bounded CMD...: CMD, killed at the check's end (status 124, and $timed_out set). It runs in
# the background so that a signal to this script is handled at once, not when CMD ends.
bounded() {
  local t rc pid
  t=$(left)
  ((t > 0)) || { timed_out=1; return 124; }
  timeout -k 5 "$t" "$@" &
  pid=$!
  pids+=("$pid")
  wait "$pid"
  rc=$?
  forget "$pid"
  ((rc == 124 || rc == 137)) && timed_out=1
  return "$rc"
}
last_error() { grep -v '^[[:space:]]*$' "$1" | tail -1 | cut -c1-200; }
# tandem_run ARGS...: the binary, bounded, its output appended to the check's log.
tandem_run() { bounded "${run_env[@]}" "$tandem" "$@" >> "$clog" 2>&1; }
# train CONFIG OVERRIDES...: sets $detail on failure.
train() {
  tandem_run train "$@" && return 0
  local rc=$?
  detail="tandem train ${*:2:1} exited $rc: $(last_error "$clog")"
  return 1
}
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Comparisons in Python with torch; safetensors files read by hand (the package may be absent).
cat > "$work/compare.py" <<'PY'
import json, math, struct, sys
import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}

def load(path):  # 8-byte little-endian header length, JSON header, data
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        data = bytearray(f.read())
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        flat = torch.frombuffer(data[begin:end], dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        out[name] = flat.reshape(info["shape"]).double()
    return out

def logits(a, b, tol):
    x, y = load(a)["logits"], load(b)["logits"]
    if x.shape != y.shape:
        return f"logits shapes differ: {tuple(x.shape)} vs {tuple(y.shape)}", False
    worst = (x - y).abs().max().item()
    return f"logits {tuple(x.shape)}: max |cuda - cpu| {worst:.3g} (bound {tol:g})", worst <= tol

def models(a, b, tol):
    x, y = load(a), load(b)
    if x.keys() != y.keys():
        return f"tensor names differ: {sorted(x.keys() ^ y.keys())[:3]}", False
    diffs = {k: (x[k] - y[k]).abs().max().item() if x[k].numel() else 0.0 for k in x}
    name = max(diffs, key=lambda k: diffs[k] if not math.isnan(diffs[k]) else math.inf)
    return (f"{len(x)} tensors, max |2 ranks - 1 process| {diffs[name]:.3g} ({name}; bound {tol:g})",
            all(d <= tol for d in diffs.values()))

def losses(cpu_path, cuda_path, steps):
    read = lambda p: {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
    cpu, cuda = read(cpu_path), read(cuda_path)
    if len(cpu) != steps or cpu.keys() != cuda.keys():
        return f"steps logged: cpu {len(cpu)}, cuda {len(cuda)} (want {steps} each)", False
    bound = lambda s: 0.05 * abs(cpu[s]) + 0.05  # |cuda - cpu| <= 5% of |cpu| + 0.05
    ratio = lambda s: abs(cuda[s] - cpu[s]) / bound(s) if math.isfinite(cuda[s]) else math.inf
    s = max(cpu, key=ratio)
    first, last = min(cpu), max(cpu)
    return (f"|cuda - cpu| <= 0.05*|cpu| + 0.05; worst step {s}: cpu {cpu[s]:.4f} cuda {cuda[s]:.4f}"
            f" diff {abs(cuda[s] - cpu[s]):.4f} vs bound {bound(s):.4f}; cpu loss"
            f" {cpu[first]:.3f} -> {cpu[last]:.3f}, cuda {cuda[first]:.3f} -> {cuda[last]:.3f}",
            ratio(s) <= 1)

kind, a, b, arg = sys.argv[1:5]
text, ok = {"logits": logits, "models": models, "losses": losses}[kind](
    a, b, int(arg) if kind == "losses" else float(arg))
print(text)
sys.exit(0 if ok else 1)
PY
# compare KIND A B ARG: sets $detail to the comparison's line.
compare() {
  detail=$(bounded "$python" "$work/compare.py" "$@" 2>> "$clog") && return 0
  [ -n "$detail" ] || detail="comparison crashed: $(last_error "$clog")"
  return 1
}

# Data and configs, modelled on tests/e2e_*.sh: random documents over the fixture's 512-token
# vocab (511 is DFlash's mask token), the first 4 tokens unmasked.
fixture=$root/tests/fixtures/models/llama3
timeout 60 "$python" - "$work/docs.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as out:
    for _ in range(48):
        n = random.randint(16, 30)
        out.write(json.dumps({"input_ids": [random.randrange(3, 511) for _ in range(n)],
                              "loss_mask": [0] * 4 + [1] * (n - 4)}) + "\n")
PY
cat > "$work/student.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512,
 "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "max_position_embeddings": 512, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
JSON
data="data: {path: $work/docs.jsonl, format: pretokenized, seq_len: 32, micro_batch_rows: 2,
       cache_dir: $work/cache}"
train_keys="lr: 1.0e-3, log_every: 1, seed: 3, steps: 20"  # steps: the loss curves' 20
cat > "$work/sft.yaml" <<YAML
model: {path: $fixture, dtype: fp32}
$data
training: {objective: sft, $train_keys}
distributed: {timeout_s: 60}
YAML
cat > "$work/eagle3.yaml" <<YAML
target: {path: $fixture, dtype: fp32}
draft: {aux_layer_ids: [0, 1, 2], ttt_length: 3, draft_vocab_size: 128, intermediate_size: 96}
$data
training: {objective: eagle3, $train_keys}
YAML
cat > "$work/dflash.yaml" <<YAML
target: {path: $fixture, dtype: fp32}
draft: {num_layers: 2, target_layer_ids: [0, 2], block_size: 4, mask_token_id: 511,
        intermediate_size: 96}
loss: {max_anchors: 8}
$data
training: {objective: dflash, $train_keys}
YAML
cat > "$work/dspark.yaml" <<YAML
target: {path: $fixture, dtype: fp32}
draft: {num_layers: 2, target_layer_ids: [0, 2], block_size: 4, mask_token_id: 511,
        intermediate_size: 96, markov_rank: 8}
loss: {max_anchors: 8}
$data
training: {objective: dspark, $train_keys}
YAML
cat > "$work/distill.yaml" <<YAML
model: {config: $work/student.json, dtype: fp32}
teacher: {path: $fixture, dtype: fp32}
$data
training: {objective: distill, $train_keys}
YAML


# a. gtests: the CUDA-gated tests. They skip without a GPU, so a skip here means a GPU went unused
# (in the rehearsal, skips are expected). DecoderParity is parameterized: its tests are named
# Fixtures/DecoderParity.*, hence *DecoderParity*. gtests-meta: the dry runs on the meta device
# that plan CUDA runs (they need no GPU).
check_gtests() {  # FILTER
  local xml=$logs/$check_name.xml
  bounded "${run_env[@]}" "$build_dir/tandem_tests" --gtest_filter="$1" --gtest_output="xml:$xml" \
    >> "$clog" 2>&1
  local rc=$? passed skipped failed
  # gtest's closing lines: "[  PASSED  ] N tests.", "[  SKIPPED ] N tests, listed below:", then
  # one "[  SKIPPED ] Suite.Name" line per test (the same for FAILED).
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\.$/\1/p' "$clog")
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below:$/\1/p' "$clog")
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below:$/\1/p' "$clog")
  detail="${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed (exit $rc)"
  [ -n "$passed" ] || detail="$detail: $(last_error "$clog")"
  listed() { grep "^\[  $1 *\] [A-Za-z]" "$clog" | grep -v ' ms)$' | cut -c14- | cut -d' ' -f1 | sed 's/,$//' | head -3 | tr '\n' ' '; }
  if ((${skipped:-0})); then
    if ((rehearse)); then detail="$detail (skips expected without a GPU): $(listed SKIPPED)"
    else detail="$detail; skipped with a GPU visible: $(listed SKIPPED)"; fi
  fi
  ((${failed:-0})) && detail="$detail; failed: $(listed FAILED)"
  if [ "$rc" = 0 ] && grep -q '^\[==========\] 0 tests from 0 test suites ran' "$clog"; then
    detail="no test matches '$1' in this tandem_tests"
    return 2
  fi
  [ "$rc" = 0 ] && ((${passed:-0} > 0)) && { ((rehearse)) || ((${skipped:-0} == 0)); }
}

# b. tandem forward on CUDA against the CPU (fp32 logits).
check_forward() {
  tandem_run forward --help
  grep -q -- '--device' "$clog" || { detail="tandem forward --help lists no --device"; return 1; }
  local side device
  for side in gpu cpu; do
    device=cpu
    [ "$side" = gpu ] && device=$dev
    tandem_run forward --model "$fixture" --input-ids 5,6,7,8,9 --device "$device" \
      --out "$work/fwd_$side.safetensors" ||
      { detail="forward --device $device failed: $(last_error "$clog")"; return 1; }
  done
  compare logits "$work/fwd_gpu.safetensors" "$work/fwd_cpu.safetensors" 1e-4
}

# c. Loss curves: 20 steps on the CPU in fp32 against 20 on CUDA in bf16, same seed.
check_losses() {  # OBJECTIVE DTYPE_KEY... (KEY=VALUE: the same setting on both devices)
  local objective=$1 key cpu=() cuda=()
  shift
  for key in "$@"; do
    case $key in
      *=*) cpu+=("$key"); cuda+=("$key") ;;
      *) cpu+=("$key=fp32"); cuda+=("$key=bf16") ;;
    esac
  done
  train "$work/$objective.yaml" "training.run_dir=$work/loss-$objective-cpu" training.device=cpu \
    "${cpu[@]}" || return 1
  train "$work/$objective.yaml" "training.run_dir=$work/loss-$objective-cuda" "training.device=$dev" \
    "${cuda[@]}" || return 1
  compare losses "$work/loss-$objective-cpu/metrics.jsonl" "$work/loss-$objective-cuda/metrics.jsonl" 20
}

# d. Deterministic resume on CUDA: run B is SIGKILLed once it has committed step 4, then resumed;
# its final export must be byte for byte run A's, which ran uninterrupted.
check_resume() {
  local a=$work/resume-a b=$work/resume-b pid latest="" t
  local settings=("training.device=$dev" training.deterministic=true model.dtype=fp32
    training.schedule=constant "training.steps=$resume_steps" training.save_every=2)
  train "$work/sft.yaml" "training.run_dir=$a" "${settings[@]}" || return 1
  t=$(left)
  ((t > 0)) || { timed_out=1; detail="no time left for run B"; return 1; }
  timeout -k 5 "$t" "${run_env[@]}" "$tandem" train "$work/sft.yaml" "training.run_dir=$b" \
    "${settings[@]}" > "$logs/resume-b1.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  # `latest` names the newest committed checkpoint (step-00000004 itself may be pruned already).
  while (($(left) > 0)); do
    [ -f "$b/latest" ] && latest=$(sed 's/^step-0*//' "$b/latest")
    [ "${latest:-0}" -ge 4 ] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
  done
  (($(left) > 0)) || timed_out=1
  pkill -KILL -P "$pid"  # the tandem process under `timeout`
  wait "$pid"
  forget "$pid"
  cat "$logs/resume-b1.log" >> "$clog"
  if grep -q '^\[train\] finished' "$logs/resume-b1.log"; then
    detail="run B finished all $resume_steps steps before the kill at step 4 (raise resume_steps)"
    return 1
  fi
  [ "${latest:-0}" -ge 4 ] || { detail="run B never committed step 4: $(last_error "$logs/resume-b1.log")"; return 1; }
  train "$work/sft.yaml" "training.run_dir=$b" "${settings[@]}" || return 1
  local resumed
  resumed=$(grep -o 'resuming from [^ ]*' "$clog" | tail -1)
  [ -n "$resumed" ] || { detail="the rerun of B did not resume"; return 1; }
  detail="B killed with step $latest committed, $resumed, finished at step $resume_steps"
  cmp "$a/export/model.safetensors" "$b/export/model.safetensors" >> "$clog" 2>&1 ||
    { detail="$detail: export differs from A's"; return 1; }
  detail="$detail: export byte-identical to A's"
}

# e. NCCL through the trainer with one rank (NCCL refuses two ranks on one GPU). NCCL_DEBUG=VERSION
# makes NCCL print "NCCL version ..." when a communicator starts: the proof that NCCL ran (the
# process group runs one eager all-reduce when an NCCL group connects, so ddp with one rank has a
# communicator too). MASTER_PORT is honoured at world size 1: a free port, not 29500.
check_nccl1() {  # MODE
  if ((rehearse)); then
    detail="NCCL needs CUDA: not run in the CPU rehearsal"
    return 2
  fi
  RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) \
    NCCL_DEBUG=VERSION train "$work/sft.yaml" "training.run_dir=$work/nccl-$1" "training.device=$dev" \
    training.steps=4 distributed.backend=nccl "distributed.mode=$1" || return 1
  local group version
  group=$(grep -m1 '^\[dist\] .*nccl' "$clog") || { detail="the log names no nccl group"; return 1; }
  version=$(grep -m1 -o 'NCCL version [^ ]*' "$clog") ||
    { detail="$group; but no 'NCCL version' line with NCCL_DEBUG=VERSION: NCCL never started"; return 1; }
  detail="$group; $version"
}

# f. Two ranks on one GPU over Gloo with CUDA tensors against one process. AdamW eps 1e-2 as in
# tests/e2e_distributed.sh (sharded sums in another order; eps 1e-8 would amplify 1-ulp changes).
check_gloo2() {  # MODE
  local mode=$1 port rank status=0 ranks=() t
  local settings=("training.device=$dev0" distributed.backend=gloo "distributed.mode=$mode"
    training.steps=4 training.micro_batches=2 optimizer.eps=1.0e-2)
  train "$work/sft.yaml" "training.run_dir=$work/gloo-$mode-1" "${settings[@]}" || return 1
  port=$(free_port)
  t=$(left)
  ((t > 0)) || { timed_out=1; detail="no time left for the 2 ranks"; return 1; }
  for rank in 0 1; do
    RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout -k 5 "$t" "${run_env[@]}" "$tandem" train "$work/sft.yaml" \
      "training.run_dir=$work/gloo-$mode-2" "${settings[@]}" > "$logs/gloo-$mode.rank$rank.log" 2>&1 &
    ranks+=($!)
    pids+=($!)
  done
  for rank in 0 1; do wait "${ranks[$rank]}" || status=$?; forget "${ranks[$rank]}"; done
  ((status == 124 || status == 137)) && timed_out=1
  cat "$logs/gloo-$mode.rank0.log" "$logs/gloo-$mode.rank1.log" >> "$clog"
  [ "$status" = 0 ] || { detail="a rank exited $status: $(last_error "$logs/gloo-$mode.rank0.log")"; return 1; }
  grep -q '^\[dist\] 2 ranks .*gloo' "$clog" || { detail="no 2-rank gloo group in the log"; return 1; }
  compare models "$work/gloo-$mode-1/export/model.safetensors" \
    "$work/gloo-$mode-2/export/model.safetensors" 1e-6
}

# g. Generation on CUDA: `tandem eval` decodes with the drafts the loss checks trained there (the
# KV cache, chain verification of each draft's proposals) and checks its output against the
# target's own greedy decoding on the same device, token for token (exit 4 on a mismatch). In fp32
# with the cache and without it, and in bf16 without that check (it runs; tau is reported). The
# CPU's tau beside CUDA's is information, not a bound.
check_generate() {
  local kind exported line=""
  local args=(--target "$fixture" --data "$work/docs.jsonl" --format pretokenized --num-prompts 8
    --max-new-tokens 24 --cache-dir "$work/cache")
  tau_of() { "$python" -c 'import json, sys; print(f"{json.load(open(sys.argv[1]))["tau"]:.3f}")' "$1"; }
  for kind in eagle3 dflash dspark; do
    exported=$work/loss-$kind-cuda/export
    [ -d "$exported" ] || { detail="no $kind export in $exported (loss-$kind did not finish)"; return 1; }
    tandem_run eval "${args[@]}" --draft "$exported" --device "$dev" --out "$work/eval-$kind-cuda.json" ||
      { detail="$kind: eval on $dev exited $? (4: speculative != greedy): $(last_error "$clog")"; return 1; }
    tandem_run eval "${args[@]}" --draft "$exported" --device "$dev" --no-kv-cache \
      --out "$work/eval-$kind-cuda-nocache.json" ||
      { detail="$kind: eval --no-kv-cache on $dev exited $?: $(last_error "$clog")"; return 1; }
    tandem_run eval "${args[@]}" --draft "$exported" --device "$dev" --dtype bf16 --no-greedy-check \
      --out "$work/eval-$kind-cuda-bf16.json" ||
      { detail="$kind: eval --dtype bf16 on $dev exited $?: $(last_error "$clog")"; return 1; }
    tandem_run eval "${args[@]}" --draft "$exported" --device cpu --out "$work/eval-$kind-cpu.json" ||
      { detail="$kind: eval on the CPU exited $?: $(last_error "$clog")"; return 1; }
    line="$line$kind tau fp32 $(tau_of "$work/eval-$kind-cuda.json") (uncached"
    line="$line $(tau_of "$work/eval-$kind-cuda-nocache.json"), cpu $(tau_of "$work/eval-$kind-cpu.json"))"
    line="$line bf16 $(tau_of "$work/eval-$kind-cuda-bf16.json"); "
  done
  detail="speculative = greedy on $dev in fp32, cached and uncached; ${line%; }"
}

# h. regenerate and rollout on CUDA with the shipped demo target (trained: its argmax has
# margins, unlike the random fixture's): greedy regeneration of 16 held-out conversations in fp32,
# 8 at a time, must write the CPU's file byte for byte; in bf16 it runs (tokens/s in the detail);
# rollout samples 4 groups of 3 on CUDA in bf16 and scores them.
check_regenerate() {
  local demo=$root/data/demo side device line=""
  [ -f "$demo/target/model.safetensors" ] ||
    { detail="data/demo/target/model.safetensors is not in this checkout"; return 1; }
  local args=(--target "$demo/target" --tokenizer "$demo/tokenizer" --chat-template llama3
    --data "$demo/chat_heldout.jsonl" --limit 16 --max-new-tokens 48 --batch-size 8)
  for side in gpu cpu; do
    device=cpu
    [ "$side" = gpu ] && device=$dev
    tandem_run regenerate "${args[@]}" --device "$device" --out "$work/regen-$side.jsonl" ||
      { detail="regenerate --device $device exited $?: $(last_error "$clog")"; return 1; }
  done
  tandem_run regenerate "${args[@]}" --device "$dev" --dtype bf16 --out "$work/regen-bf16.jsonl" ||
    { detail="regenerate --dtype bf16 on $dev exited $?: $(last_error "$clog")"; return 1; }
  line=$(grep -o '= [0-9.]* tokens/s' "$clog" | cut -c3- | tr '\n' ' ')
  tandem_run rollout --model "$demo/target" --tokenizer "$demo/tokenizer" \
    --data "$demo/chat_heldout.jsonl" --num-prompts 4 --samples-per-prompt 3 --max-new-tokens 24 \
    --reward-regex 'e' --seed 1 --dtype bf16 --device "$dev" --cache-dir "$work/cache" \
    --out "$work/rollouts.jsonl" || { detail="rollout on $dev exited $?: $(last_error "$clog")"; return 1; }
  [ "$(wc -l < "$work/rollouts.jsonl")" -eq 12 ] ||
    { detail="rollout on $dev wrote $(wc -l < "$work/rollouts.jsonl") lines, not 12"; return 1; }
  detail="regenerate tokens/s (gpu fp32, cpu fp32, gpu bf16): $line; rollout: 12 samples on $dev"
  cmp "$work/regen-gpu.jsonl" "$work/regen-cpu.jsonl" >> "$clog" 2>&1 ||
    { detail="$detail; fp32 greedy output on $dev differs from the CPU's"; return 1; }
  detail="$detail; fp32 greedy output on $dev = the CPU's, byte for byte"
}

# The order: the most telling per second first, so that a deadline skips the slow ones. Bounds
# in seconds, each several times what the check takes (docs/gpu.md, "The GPU check").
gtest_filter='Cuda*:*DecoderParity*:Device*:StepParity*-*OnMeta*:*CudaDryRun*'
run_check gtests 150 check_gtests "$gtest_filter"
run_check gtests-meta 60 check_gtests '*OnMeta*:*CudaDryRun*'
run_check forward 30 check_forward
run_check nccl1-ddp 45 check_nccl1 ddp
run_check nccl1-shard 45 check_nccl1 shard
run_check resume 60 check_resume
run_check loss-sft 45 check_losses sft model.dtype
# EAGLE-3 keeps its frozen target in fp32 on both devices: the loss counts only positions whose
# target argmax is in the draft vocab, and the random fixture target's near-tied logits flip
# argmaxes in bf16, changing that set (measured on the CPU: 0.56 apart at step 11 with a bf16
# target, 0.005 with the target in fp32 and only the draft in bf16).
run_check loss-eagle3 45 check_losses eagle3 draft.dtype target.dtype=fp32
run_check loss-dflash 45 check_losses dflash draft.dtype target.dtype
run_check loss-dspark 45 check_losses dspark draft.dtype target.dtype
run_check loss-distill 45 check_losses distill model.dtype teacher.dtype
run_check generate 60 check_generate
run_check regenerate 90 check_regenerate
run_check gloo2-ddp 60 check_gloo2 ddp
run_check gloo2-shard 60 check_gloo2 shard

# 4. The summary (package() adds the totals and writes results.tar.gz on exit).
say "== summary ($summary)"
tee -a "$log" < "$summary"
((checks_failed == 0 && out_of_time == 0)) || { say "$checks_failed failed, $out_of_time skipped for lack of time"; exit 1; }
exit 0
