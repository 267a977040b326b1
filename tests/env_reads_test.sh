#!/usr/bin/env bash
# One module reads the process environment (env/env.h): no product code
# outside env/ calls getenv/setenv/unsetenv or reads environ. Exits non-zero
# naming each read.
set -uo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rnE '\b(getenv|secure_getenv|setenv|unsetenv|putenv)\s*\(|\benviron\b' \
         --include='*.h' --include='*.cpp' graph_ir cache targets formats lowering executor runtime tracer bridge \
         debug tools python 2>/dev/null)
if [ -n "$hits" ]; then
  echo "env reads: read the environment through env/env.h, not here:"; echo "$hits"; exit 1
fi
echo "env reads: ok"
