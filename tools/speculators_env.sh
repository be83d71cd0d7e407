# Sourced (bash) by the checkers that import the speculators package (check_eagle3_export.sh,
# check_dspark_export.sh):
#   speculators_env TAG [EXTRA_PACKAGE==VERSION ...]
# installs speculators once with `pip --target --no-deps` into
# $TANDEM_CACHE/speculators-<version>-<key> (default ~/.cache/tandem) together with the few
# packages `import speculators` needs that .venv-tools lacks, and prepends that directory to
# PYTHONPATH; torch and transformers are reused from .venv-tools, never downloaded. EXTRA
# packages go into a small directory of their own ($TANDEM_CACHE/speculators-extra-<key>), so
# that a checker needing one more module does not change the shared directory's key (which
# would reinstall its ~300 MB for everyone). Expects $root and $py (tools_env.sh's
# tools_python sets it).

# shellcheck source=tools_env.sh
source "$root/tools/tools_env.sh"

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

speculators_env() {
  local tag=$1
  shift
  pip_cached "$tag" "speculators-$speculators_version" speculators "${speculators_packages[@]}"
  # the first extra's module name is the import check (pip names == module names here)
  if (($#)); then pip_cached "$tag" speculators-extra "${1%%==*}" "$@"; fi
}
