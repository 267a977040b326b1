#!/usr/bin/env bash
# The layering of docs/design.md ("Layers"), checked on every include: each
# layer includes only the layers below it. Exits non-zero naming each breach.
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
# forbid DIR PATTERN WHY: no file under DIR may include a header matching PATTERN.
forbid() {
  local hits
  hits=$(grep -rnE "^\s*#\s*include\s*[<\"]($2)" "$1" --include='*.h' --include='*.cpp' 2>/dev/null | grep -vE "${4:-^$}")
  if [ -n "$hits" ]; then
    echo "layering: $1 must not include $3:"; echo "$hits"; fail=1
  fi
}
torch='ATen/|c10/|torch/'
# env/: the process environment, read in one place (env/env.h); every layer may include it, it includes none.
forbid env "$torch|llvm/|graph_ir/|cache/|cuda_driver/|formats/|lowering/|executor/|runtime/|tracer/|bridge/|debug/|tools/|python/" "libtorch, LLVM or any layer (every layer reads the environment through it)"
forbid graph_ir "$torch|llvm/|cache/|lowering/|executor/|runtime/|tracer/|bridge/|debug/" "libtorch, LLVM or any other layer"
forbid debug "$torch|llvm/|graph_ir/|cache/|lowering/|executor/|runtime/|tracer/|bridge/" "libtorch, LLVM or any other layer"
forbid cache "$torch|llvm/|lowering/|executor/|runtime/|tracer/|bridge/" "libtorch, LLVM or the layers above it"
# formats/: byte formats lowering/ and lazyjit-cache both read; it includes no layer at all.
forbid formats "$torch|llvm/|graph_ir/|cache/|cuda_driver/|lowering/|executor/|runtime/|tracer/|bridge/|debug/|tools/|python/" "libtorch, LLVM or any layer (lowering/ and lazyjit-cache both read its formats)"
forbid cuda_driver "$torch|llvm/|graph_ir/|cache/|lowering/|executor/|runtime/|tracer/|bridge/|debug/" "libtorch, LLVM or any layer (it is the driver API alone)"
forbid lowering "$torch|cache/|executor/|runtime/|tracer/|bridge/" "libtorch or the layers above it"
forbid lowering "llvm/" "LLVM outside the targets (lowering/cpu/, lowering/cuda/, lowering/cuda_sim/) and their shared element emitters (lowering/element/)" "^lowering/(cpu|cuda|cuda_sim|element)/"
# The two targets are siblings: neither includes the other; cuda-sim (lowering/cuda_sim/) builds on both.
forbid lowering/cpu "lowering/cuda/|lowering/cuda_sim/" "the CUDA targets"
forbid lowering/cuda "lowering/cpu/|lowering/cuda_sim/" "the CPU target or the simulator (cuda-sim runs the CUDA target's kernels: it builds on both, neither on it)"
forbid lowering/element "lowering/cpu/|lowering/cuda/|lowering/cuda_sim/" "any target (they include it)"
forbid bridge "llvm/|cache/|lowering/|executor/|runtime/|tracer/" "LLVM or any layer but graph_ir"
forbid executor "llvm/|cache/|runtime/|tracer/|lowering/cpu/|lowering/cuda/|lowering/element/" "LLVM, the cache or the layers above it"
forbid runtime "llvm/|tracer/|lowering/cpu/|lowering/element/" "LLVM or the tracer"
forbid tools/lazyjit_cache "$torch|llvm/|lowering/|executor/|runtime/|tracer/|bridge/" "libtorch, LLVM or layers above cache/ (it must start fast)"
forbid tracer "llvm/|executor/|lowering/|cache/" "executor/, lowering/ or cache/ (use runtime/runtime.h)"
# The tracer asks the runtime and its backend (runtime/backend.h); it names no executor type.
if grep -rn "executor::" tracer --include='*.h' --include='*.cpp'; then
  echo "layering: tracer/ names executor:: (use runtime/runtime.h, runtime/run_io.h or runtime/backend.h)"; fail=1
fi
# One backend answers what the target is (runtime/backend.h): outside the
# CUDA target's own code (lowering/cuda/, executor/cuda/, cuda_driver/) and the
# backend's files, no product code tests a target name or a device for it.
if grep -rnE 'target == "cuda"|\.is_cuda\(\)|AtenDevice' --include='*.h' --include='*.cpp' \
     graph_ir cache lowering executor runtime tracer bridge debug python tools |
     grep -vE "^(lowering/cuda|executor/cuda|cuda_driver)/|^runtime/backend[a-z_]*\.(h|cpp):"; then
  echo "layering: a target question answered outside the backend (ask runtime/backend.h)"; fail=1
fi
# The cache stores what it is given: nothing downcasts an entry into a program.
if grep -rnE "static_cast<(const )?(lowering::)?Program" --include='*.cpp' --include='*.h' \
     graph_ir cache lowering executor runtime tracer; then
  echo "layering: a cast to a Program (programs are values, not cache entries)"; fail=1
fi
# Bytes become a linkable program in one place only, after a cache entry was
# verified for the key it was looked up under (runtime/program_entry.h).
if grep -rn "program_from_bytes" --include='*.cpp' --include='*.h' \
     graph_ir cache lowering executor runtime tracer bridge debug python tools |
     grep -vE "^(lowering/program_bytes|runtime/program_entry)\.(h|cpp):"; then
  echo "layering: program_from_bytes called outside runtime/program_entry.cpp (use link_entry on a VerifiedEntry)"; fail=1
fi
[ $fail -eq 0 ] && echo "layering: ok"
exit $fail
