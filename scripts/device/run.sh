#!/usr/bin/env bash
# The GPU check under its older name: the same as `bash scripts/gpu_check.sh`
# (docs/gpu.md), with the same options. When OUT names a folder, the logs,
# the JUnit report and summary.txt go there.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${OUT:-}" ] && [ -z "${LAZYJIT_GPU_CHECK_OUT:-}" ]; then export LAZYJIT_GPU_CHECK_OUT=$OUT; fi
exec bash "$here/scripts/gpu_check.sh" "$@"
