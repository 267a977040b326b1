#!/usr/bin/env bash
# Usage: scripts/venv_install.sh [VENV]   (default .venv; scripts/build.sh runs it)
# Installs this checkout into VENV in editable mode (pip install -e): `import
# lazyjit` from VENV's python works in any directory, from python/ in place (a
# rebuild is seen at once, no reinstall), with the package's metadata, entry
# points and the `lazyjit-cache` console script. PYTHONPATH still comes first in
# sys.path, so PYTHONPATH=python picks a checkout explicitly. Done again only
# when the packaging files change or the install is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
venv=${1:-.venv}
if [ "$venv" = .venv ] && [ -L .venv ] && [ "${LAZYJIT_DEV_INSTALL:-0}" != 1 ]; then
  # A worktree sharing another checkout's environment: installing would point
  # that checkout's `import lazyjit` here.
  echo "[build] .venv links to $(readlink -f .venv): this checkout is not installed into it (LAZYJIT_DEV_INSTALL=1 would)"
  exit 0
fi
py=$venv/bin/python
stamp=$venv/.lazyjit-dev-install-stamp
want="$PWD $(cat pyproject.toml setup.py setup.cfg | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   "$py" -c "import importlib.metadata as m; m.distribution('lazyjit')" 2>/dev/null; then
  exit 0
fi
# Older set-ups linked build/lazyjit-cache into the venv's bin: pip would write
# its console script through the link, over the binary.
if [ -L "$venv/bin/lazyjit-cache" ]; then rm -f "$venv/bin/lazyjit-cache"; fi
step build "pip: installing lazyjit into $venv (editable, from $PWD/python)" \
  "$py" -m pip install --no-build-isolation --no-deps --no-index --progress-bar off -e .
printf '%s' "$want" > "$stamp"
