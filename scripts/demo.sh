#!/usr/bin/env bash
# Builds, then runs the demo: an MLP block in eager and on lazyjit, step by step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
PYTHONPATH=python .venv/bin/python examples/demo.py
./build/demo_cpp
