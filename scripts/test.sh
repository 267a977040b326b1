#!/usr/bin/env bash
# Builds, then runs the whole test suite: C++ (IR, lowering, end to end) with
# ctest, then the Python package with pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j2)
PYTHONPATH=python .venv/bin/python -m pytest -q tests/python "$@"
# The CUDA target's kernels on the host (LAZYJIT_TARGET=cuda-sim), in a process
# of their own, against CPU eager: every machine runs what the CUDA target emits.
PYTHONPATH=python .venv/bin/python -m pytest -q tests/cuda_sim
# The GPU tests, in a process of their own (they set LAZYJIT_TARGET=cuda): run
# on a GPU machine (docs/gpu.md); here they are collected and skip.
PYTHONPATH=python .venv/bin/python -m pytest -q tests/gpu
