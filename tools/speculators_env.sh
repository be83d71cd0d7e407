# Sourced (bash) by the checkers that import the speculators package (check_eagle3_export.sh,
# check_dspark_export.sh):
#   speculators_env TAG [EXTRA_PACKAGE==VERSION ...]
# installs speculators once with `pip --target --no-deps` into
# $TANDEM_CACHE/speculators-<version>-<key> (default ~/.cache/tandem) together with the few
# packages `import speculators` needs that .venv-tools lacks, and prepends that directory to
# PYTHONPATH; torch and transformers are reused from .venv-tools, never downloaded. EXTRA
# packages go into a small directory of their own ($TANDEM_CACHE/speculators-extra-<key>), so
# that a checker needing one more module does not change the shared directory's key (which
# would reinstall its ~300 MB for everyone). Expects $py (the .venv-tools python).

speculators_version=0.9.0
# Exactly what `import speculators` (0.9.0) needs on top of .venv-tools: train/data.py imports
# openai and datasets at module level (datasets brings pandas and pyarrow), the package metadata
# lookups need dill and hs-connectors. Pinned so the cache key says what is inside.
speculators_packages=(
  "speculators==$speculators_version"
  "hs-connectors==$speculators_version"
  openai==3.54.0
  sniffio==1.3.1
  datasets==5.1.0
  multiprocess==0.70.19
  dill==0.4.1
  xxhash==4.1.0
  pandas==3.1.1
  python-dateutil==4.0.0
  pyarrow==26.0.1
)

# _speculators_install TAG DIR CHECK_MODULE PACKAGE...: pip into DIR.tmp, check the import, then
# rename, so an interrupted install is never taken for a complete one.
_speculators_install() {
  local tag=$1 dir=$2 module=$3
  shift 3
  [ -f "$dir/.complete" ] && return 0
  echo "[$tag] installing $1 (and $(($# - 1)) more) into $dir" >&2
  mkdir -p "$(dirname "$dir")"
  rm -rf "$dir.tmp"
  "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$dir.tmp" "$@" >&2
  PYTHONPATH="$dir.tmp" "$py" -c "import $module" >/dev/null 2>&1 || {
    echo "$tag.sh: 'import $module' fails in $dir.tmp:" >&2
    PYTHONPATH="$dir.tmp" "$py" -c "import $module" >&2 || true
    exit 2
  }
  touch "$dir.tmp/.complete"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
}

speculators_env() {
  local tag=$1
  shift
  local cache=${TANDEM_CACHE:-$HOME/.cache/tandem}
  local pyver key dir
  pyver=$("$py" -c 'import sys; print(sys.version_info[:2])')
  key=$(printf '%s\n' "${speculators_packages[@]}" "$pyver" | sha256sum | cut -c1-12)
  dir="$cache/speculators-$speculators_version-$key"
  _speculators_install "$tag" "$dir" speculators "${speculators_packages[@]}"
  export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
  if (($#)); then
    key=$(printf '%s\n' "$@" "$pyver" | sha256sum | cut -c1-12)
    dir="$cache/speculators-extra-$key"
    # the first extra's module name is the import check (pip names == module names here)
    _speculators_install "$tag" "$dir" "${1%%==*}" "$@"
    export PYTHONPATH="$dir:$PYTHONPATH"
  fi
}
