#!/usr/bin/env bash
# The Python envs scripts/setup.sh makes: their console scripts (torchrun, which the README's
# multi-GPU commands use, and pip) start, and no script in their bin/ names a path outside the env
# (the envs are built under a temporary name and renamed; a stale shebang fails with "No such
# file or directory").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
for link in "$root/.venv" "$root/.venv-tools"; do
  if [ ! -e "$link" ]; then
    [ "$link" = "$root/.venv-tools" ] && continue  # made by scripts/setup.sh --tools only
    echo "no $link: run scripts/setup.sh"
    status=1
    continue
  fi
  env_dir=$(cd "$link" && pwd -P)
  for script in "$env_dir"/bin/*; do
    if [ ! -f "$script" ] || [ -L "$script" ]; then continue; fi
    if grep -qIF -- "$env_dir.tmp" "$script"; then
      echo "$script names $env_dir.tmp, a path that no longer exists"
      status=1
    fi
  done
  if ! "$env_dir/bin/torchrun" --help > /dev/null 2>&1; then
    echo "$env_dir/bin/torchrun does not start: $("$env_dir/bin/torchrun" --help 2>&1 | head -1)"
    status=1
  fi
done
((status == 0)) && echo "setup_env_scripts: the envs' console scripts start"
exit $status
