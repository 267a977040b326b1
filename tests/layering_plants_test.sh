#!/usr/bin/env bash
# tests/layering_test.sh on planted breaches: a copy of the tree with one line
# planted at a time must fail, naming it; the copy as it is must pass.
set -uo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$src" && git ls-files -co --exclude-standard -- docs tests/layering_test.sh graph_ir cache lowering executor \
   runtime tracer bridge debug python tools targets formats env examples | grep -vE '\.(so|pyc)$' | tar -cf - -T - 2>/dev/null) |
  (cd "$tmp" && tar -xf -)
check() {  # check NAME EXPECTED: the copy fails, printing EXPECTED
  out=$(LAYERING_ROOT="$tmp" bash "$src/tests/layering_test.sh" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAIL: $1: layering_test.sh did not refuse it (rc $rc), wanted \"$2\":"; echo "$out"; exit 1
  fi
  echo "ok: $1 refused: $(grep -F -- "$2" <<<"$out" | head -1)"
}
plant() {  # plant FILE LINE: appends LINE to FILE (restored by unplant)
  cp "$tmp/$1" "$tmp/$1.orig"; printf '%s\n' "$2" >>"$tmp/$1"
}
unplant() { mv "$tmp/$1.orig" "$tmp/$1"; }

LAYERING_ROOT="$tmp" bash "$src/tests/layering_test.sh" >/dev/null || { echo "FAIL: the unplanted copy does not pass"; exit 1; }

plant tracer/capture.cpp 'bool on_gpu(const std::string& target) { return target == "cuda"; }'
check "a target name compared in the tracer" 'tracer/capture.cpp'; unplant tracer/capture.cpp
plant runtime/pipeline.cpp 'static bool gpu = lazyjit::runtime::backend().library_key() == c10::DispatchKey::CUDA;'
check "a CUDA dispatch key in the runtime" 'runtime/pipeline.cpp'; unplant runtime/pipeline.cpp
plant python/lazyjit/dynamo.py 'CUDA = _C.target() == "cuda"'
check "a target name compared in Python" 'python/lazyjit/dynamo.py'; unplant python/lazyjit/dynamo.py
plant executor/executable.cpp '#include "targets/cuda/graph_replays.h"'
check "the executor including a target" 'executor/ must not include targets/cuda/'; unplant executor/executable.cpp
plant targets/cuda/backend.cpp '#include "targets/cpu/backend.h"'
check "one target including another" 'targets/cuda/ must not include targets/cpu/'; unplant targets/cuda/backend.cpp
plant env/env.cpp '#include "graph_ir/hash.h"'
check "env/ including a layer (every layer includes it)" 'env/ must not include graph_ir/'; unplant env/env.cpp
plant formats/manifest.cpp '#include "runtime/config.h"'
check "a byte format including the runtime" 'formats/ must not include runtime/'; unplant formats/manifest.cpp
plant tracer/capture.cpp 'static lazyjit::lowering::Plan* planted = nullptr;'
check "the tracer naming a lowering type" 'tracer/ names lowering::'; unplant tracer/capture.cpp
plant runtime/run_io.h $'namespace lazyjit::runtime {\nusing executor::Thunk;\n}'
plant tracer/capture.cpp 'static const lazyjit::runtime::Thunk* planted = nullptr;'
check "an executor type reaching the tracer through a runtime header" 'tracer/ names Thunk of executor/ through runtime/run_io.h'
unplant tracer/capture.cpp; unplant runtime/run_io.h
cp "$tmp/docs/design.md" "$tmp/docs/design.md.orig"
sed -i 's#^- `bridge/`: #- `bridges/`: #' "$tmp/docs/design.md"
check "docs/design.md's layers unlike docs/layout.md's" "docs/design.md's Layers list differs"; unplant docs/design.md
cp "$tmp/docs/layout.md" "$tmp/docs/layout.md.orig"
sed -i 's#^| `executor/` | \(.*\) | lowering, #| `executor/` | \1 | runtime, lowering, #' "$tmp/docs/layout.md"
check "a row naming a row above it" 'docs/layout.md: executor/ includes runtime/, which is not below it'; unplant docs/layout.md
echo "layering plants: ok"
