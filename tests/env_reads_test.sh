#!/usr/bin/env bash
# One module reads the process environment (env/env.h): no product code
# outside env/ calls getenv/setenv/unsetenv or reads environ. Exits non-zero
# naming each read.
set -uo pipefail
cd "$(dirname "$0")/.."
# Files that still read the environment themselves, to switch to env/env.h.
pending='^(lowering/cuda/toolkit\.cpp|lowering/cuda/ptxas\.cpp|tracer/streams\.cpp|cuda_driver/driver\.cpp):'
hits=$(grep -rnE '\b(getenv|secure_getenv|setenv|unsetenv|putenv)\s*\(|\benviron\b' \
         --include='*.h' --include='*.cpp' graph_ir cache cuda_driver formats lowering executor runtime tracer bridge \
         debug tools python 2>/dev/null | grep -vE "$pending")
if [ -n "$hits" ]; then
  echo "env reads: read the environment through env/env.h, not here:"; echo "$hits"; exit 1
fi
echo "env reads: ok"
