#!/usr/bin/env bash
# Installs what is missing, then builds everything (C++ libraries, tests, the
# Python extension) into build/ and installs the package into .venv (editable:
# scripts/venv_install.sh), so `.venv/bin/python -c "import lazyjit"` works from
# anywhere. One line per step; the tools' output goes to build/setup.log. A
# rebuild on a warm machine takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
bash scripts/setup.sh
t_build=$(_lazyjit_now)
if [ ! -f build/build.ninja ]; then
  step build "cmake: configuring build/ (RelWithDebInfo, Ninja)" \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
jobs=${LAZYJIT_JOBS:-2}
# What ninja has to do (a dry run; it also re-runs cmake when a CMakeLists changed).
todo=$(ninja -C build -n 2>>"$LAZYJIT_SETUP_LOG" | grep -c '^\[' || true)
state="build/ was up to date"
if [ "$todo" -gt 0 ]; then
  state="built"
  what="ninja -j$jobs: $todo build steps"
  [ "$todo" -gt 50 ] && what+=" (a first build takes about 10 minutes on 2 cores; tail -f ${LAZYJIT_SETUP_LOG#"$PWD"/} to follow)"
  step build "$what" ninja -C build -j"$jobs"
fi
bash scripts/venv_install.sh .venv
echo "[build] ok in $(_lazyjit_since "$t_build") ($state)"
