# Sourced (bash) by the checkers that run Python from .venv-tools (check_eagle3_export.sh,
# check_dspark_export.sh, check_dspark_sglang_export.sh, through speculators_env.sh for the
# first two). Expects $root (the repository).
#
#   tools_python TAG
#     sets $py to .venv-tools' python, or exits 2 naming TAG when `scripts/setup.sh --tools` has
#     not made it.
#   pip_cached TAG NAME CHECK_MODULE PACKAGE==VERSION...
#     installs the packages once with `pip --target --no-deps` into $TANDEM_CACHE/NAME-<key>
#     (default ~/.cache/tandem; the key hashes the packages and the python version), checks that
#     `import CHECK_MODULE` works there, and prepends the directory to PYTHONPATH. torch and
#     transformers come from .venv-tools, never downloaded. pip writes into DIR.tmp, renamed when
#     complete, so an interrupted install is never taken for a complete one.

tools_python() {
  py="$root/.venv-tools/bin/python"
  if [ ! -x "$py" ]; then
    echo "$1.sh: $py is missing; run scripts/setup.sh --tools" >&2
    exit 2
  fi
}

pip_cached() {
  local tag=$1 name=$2 module=$3
  shift 3
  local key dir
  key=$(printf '%s\n' "$@" "$("$py" -c 'import sys; print(sys.version_info[:2])')" |
    sha256sum | cut -c1-12)
  dir="${TANDEM_CACHE:-$HOME/.cache/tandem}/$name-$key"
  if [ ! -f "$dir/.complete" ]; then
    echo "[$tag] installing $1 (and $(($# - 1)) more) into $dir" >&2
    mkdir -p "$(dirname "$dir")"
    rm -rf "$dir.tmp"
    "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp" "$@" >&2
    PYTHONPATH="$dir.tmp" "$py" -c "import $module" > /dev/null 2>&1 || {
      echo "$tag.sh: 'import $module' fails in $dir.tmp:" >&2
      PYTHONPATH="$dir.tmp" "$py" -c "import $module" >&2 || true
      exit 2
    }
    touch "$dir.tmp/.complete"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
  fi
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
}
