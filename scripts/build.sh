#!/usr/bin/env bash
# Installs what is missing, then builds everything (C++ libraries, tests, the
# Python extension) into build/. A rebuild on a warm machine takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
ninja -C build -j"${LAZYJIT_JOBS:-2}"
# lazyjit-cache on PATH for whoever activates the venv (README: lazyjit-cache).
if [ -x build/lazyjit-cache ] && [ -d .venv/bin ]; then
  ln -sfn "$PWD/build/lazyjit-cache" .venv/bin/lazyjit-cache
fi
