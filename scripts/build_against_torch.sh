#!/usr/bin/env bash
# Builds tandem and tandem_tests against another PyTorch release (default 2.11.0, the GPU
# machine's), configured exactly as the GPU machine configures them: scripts/gpu_check.sh
# --build-only unpacks .gpu-debs/ into a private prefix and keeps the system's copies of the
# dependencies out of the configure (see "The GPU check" in docs/gpu.md).
#
#   scripts/build_against_torch.sh [VERSION] [-j N] [--system-cmake] [--rehearse] [-- GPU_CHECK_ARGS]
#       VERSION         torch release from PyPI (default 2.11.0; PyPI's default 2.11.0 wheel is the
#                       CUDA 13.0 build, like the GPU machine's)
#       -j N            parallel compile jobs (default 2)
#       --system-cmake  configure with the CMake and ninja on PATH instead of the venv's pip CMake
#                       4.x and ninja (the GPU machine's CMake is a pip one)
#       --rehearse      then run the whole GPU check on the CPU (gpu_check.sh --rehearse-on-cpu)
#                       with the same Python, prefix and build: the build step is then a no-op
# The Python env with that torch is cached in $TANDEM_CACHE (default ~/.cache/tandem), keyed on
# the version and the pins below; the build goes to build-torchMAJOR.MINOR/ (git-ignored):
# prefix/ (the unpacked .deb files), build/, out/ (logs: configure.log, build.log, log.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

version=2.11.0 jobs=2 system_cmake=0 rehearse=0 passthrough=()
while (($#)); do
  case $1 in
    -j) jobs=${2:?-j needs a number}; shift ;;
    -j[0-9]*) jobs=${1#-j} ;;
    --system-cmake) system_cmake=1 ;;
    --rehearse) rehearse=1 ;;
    --) shift; passthrough=("$@"); break ;;
    -h | --help) sed -n '2,19p' "$0" | cut -c3-; exit 0 ;;
    [0-9]*) version=$1 ;;
    *) echo "build_against_torch: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# The venv is made in place and marked complete at the end (renaming a venv breaks its bin/
# scripts, and cmake and ninja are such scripts).
pins=("torch==$version" "cmake==4.4.5" "ninja==1.13.2")
cache=${TANDEM_CACHE:-$HOME/.cache/tandem}
key=$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)
venv=$cache/venv-torch-$version-$key
if [ ! -f "$venv/.complete" ]; then
  echo "[build_against_torch] creating $venv (pip install ${pins[*]})"
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "${pins[@]}"
  touch "$venv/.complete"
fi
"$venv/bin/python" -W ignore -c 'import torch; print("[build_against_torch] torch", torch.__version__,
  "CUDA", torch.version.cuda)'

dir=$root/build-torch$(cut -d. -f1,2 <<< "$version")
((system_cmake)) || PATH=$venv/bin:$PATH
args=(--python "$venv/bin/python" --work "$dir" -j "$jobs")
start=$(date +%s)
status=0
scripts/gpu_check.sh --out "$dir/out" --build-only "${args[@]}" "${passthrough[@]}" || status=$?
echo "[build_against_torch] torch $version: gpu_check.sh --build-only exited $status after" \
  "$(($(date +%s) - start)) s; logs in $dir/out"
((status == 0)) || exit "$status"
if ((rehearse)); then
  scripts/gpu_check.sh --out "$dir/rehearsal" --rehearse-on-cpu "${args[@]}" "${passthrough[@]}"
fi
