#!/usr/bin/env bash
# Builds lazyjit, then runs the benchmark: eager vs lazyjit vs torch.compile(inductor).
#   bash bench/run.sh            # full run -> bench/results/latest.{json,md}
#   bash bench/run.sh --quick    # smoke test (small sizes) -> bench/results/quick.{json,md}
# Other options: bash bench/run.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
PYTHONPATH=python exec .venv/bin/python bench/run.py "$@"
