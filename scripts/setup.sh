#!/usr/bin/env bash
# Installs what tandem needs on a fresh machine and builds build/tandem.
#   scripts/setup.sh            Debian packages, the cached Python envs (torch; pyarrow for
#                               Parquet), then the build
#   scripts/setup.sh --tools    also the fixture-generator env (transformers, tokenizers)
#   scripts/setup.sh --no-build everything but the build
# The Python environments live in $TANDEM_CACHE (default ~/.cache/tandem), keyed by the hash of
# the lock files, so fresh clones and CI reuse them and a changed lock makes a new one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

want_tools=0
want_build=1
for arg in "$@"; do
  case "$arg" in
    --tools) want_tools=1 ;;
    --no-build) want_build=0 ;;
    *) echo "setup.sh: unknown argument '$arg' (use --tools, --no-build)" >&2; exit 2 ;;
  esac
done

# 1. Debian packages (C++ toolchain, libraries, clang for the fuzzer, clang-format for the lint).
debian_packages=(build-essential cmake pkg-config git python3 python3-venv clang libclang-rt-14-dev
  clang-format-14 ccache
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev libpcre2-dev libgtest-dev
  libgloo-dev)  # libgloo-dev: headers for libtorch's own c10d Gloo backend (distributed training)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. Python environments, built in a temp dir and renamed so a broken install is never reused.
cache=${TANDEM_CACHE:-$HOME/.cache/tandem}
mkdir -p "$cache"
make_venv() {  # make_venv NAME LOCKFILE... ; prints the venv path
  local name=$1; shift
  local key
  key=$(cat "$@" | sha256sum | cut -c1-16)
  local dir="$cache/$name-$key"
  if [ ! -x "$dir/bin/python" ]; then
    echo "[setup] creating Python env $dir (pip install -r $*)" >&2
    rm -rf "$dir.tmp"
    python3 -m venv "$dir.tmp"
    local reqs=()
    for f in "$@"; do reqs+=(-r "$f"); done
    "$dir.tmp/bin/pip" install -q "${reqs[@]}" >&2
    mv "$dir.tmp" "$dir"
  fi
  # The env was built under $dir.tmp and renamed (a half-built env is never taken for done); its
  # console scripts (torchrun, pip, ...) and activate scripts name that path: point them at
  # $dir. Also repairs an env an earlier setup left that way.
  local script
  for script in "$dir"/bin/*; do
    [ -f "$script" ] && [ ! -L "$script" ] && grep -qIF -- "$dir.tmp" "$script" &&
      sed -i "s#$dir\.tmp#$dir#g" "$script"
  done
  echo "$dir"
}
venv=$(make_venv venv requirements.lock)
ln -sfn "$venv" .venv
parquet_venv=$(make_venv venv-parquet requirements-parquet.lock)
ln -sfn "$parquet_venv" .venv-parquet
if ((want_tools)); then
  tools_venv=$(make_venv venv-tools requirements.lock tools/requirements.lock)
  ln -sfn "$tools_venv" .venv-tools
  echo "[setup] fixture tools env: .venv-tools ($tools_venv)"
fi

# 3. The build.
if ((want_build)); then
  torch_prefix=$("$venv/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  jobs=${TANDEM_JOBS:-$(nproc)}
  pyarrow_dir=$("$parquet_venv/bin/python" -c 'import os, pyarrow; print(os.path.dirname(pyarrow.__file__))')
  # A new build directory compiles through ccache, its cache beside the Python envs, so a fresh
  # clone (CI) reuses the objects of earlier builds of the same sources. The settings travel in
  # the launcher: every later build of this directory uses them. BASEDIR makes the checkout's
  # own paths relative; the sloppiness lets the precompiled header be cached.
  launcher=()
  if [ ! -f build/CMakeCache.txt ] && command -v ccache >/dev/null; then
    launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_DIR=$cache/ccache;CCACHE_BASEDIR=$root;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;CCACHE_MAXSIZE=8G;CCACHE_COMPRESS=1;ccache")
  fi
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DTANDEM_PYARROW_DIR="$pyarrow_dir" "${launcher[@]}" >/dev/null
  cmake --build build -j "$jobs"
  echo "[setup] built $root/build/tandem"
fi
