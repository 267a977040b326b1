#!/usr/bin/env bash
# Proves here, without a GPU, that .device/deps.tar.xz is enough to build
# lazyjit: unpacks it, copies the working tree to a scratch folder (the
# extension is written next to the package sources, so the real tree's
# python/lazyjit is left alone), then configures and builds with
# -DLAZYJIT_DEPS_PREFIX in a mount namespace where the system's LLVM 19, oneTBB,
# xxHash and hiredis are hidden (empty folders and files mounted over them), and
# runs lowering_tests and an import of the Python package from that build.
#   bash scripts/device/check_prefix.sh [TARGET...]
# Default targets: lowering_tests lazyjit lazyjit_python lazyjit-cache.
# No ccache (it links the hiredis and xxHash that are hidden). LAZYJIT_JOBS (2) ninja jobs; LAZYJIT_CHECK_DIR (/tmp/lazyjit-check) the scratch folder.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dir=${LAZYJIT_CHECK_DIR:-/tmp/lazyjit-check}
jobs=${LAZYJIT_JOBS:-2}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(lowering_tests lazyjit lazyjit_python lazyjit-cache)
[ -f .device/deps.tar.xz ] || { echo "check: no .device/deps.tar.xz (bash scripts/device/pack.sh)"; exit 1; }

if [ "${_LAZYJIT_HIDDEN:-}" != 1 ]; then
  rm -rf "$dir/prefix" "$dir/src" && mkdir -p "$dir/prefix" "$dir/src"
  tar -C "$dir/prefix" -xJf .device/deps.tar.xz || exit 1
  # The working tree as a run call would send it: tracked and untracked-not-ignored files.
  git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$dir/src" -xf - || exit 1
  if unshare -m --propagation private true 2>/dev/null; then
    exec unshare -m --propagation private env _LAZYJIT_HIDDEN=1 bash "$0" "$@"
  fi
  echo "check: unshare -m refused; building WITHOUT hiding the system's copies"
fi

if [ "${_LAZYJIT_HIDDEN:-}" = 1 ]; then
  ma=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  mkdir -p "$dir/empty"; : > "$dir/empty.file"
  hidden=0
  for d in /usr/lib/llvm-19 /usr/include/llvm-19 /usr/include/llvm-c-19 /usr/include/tbb /usr/include/oneapi \
           /usr/include/hiredis "/usr/lib/$ma/cmake/TBB"; do
    [ -d "$d" ] && mount --bind "$dir/empty" "$d" && hidden=$((hidden + 1))
  done
  for f in /usr/include/xxhash.h /usr/include/xxh3.h /usr/include/xxh_x86dispatch.h \
           /usr/lib/"$ma"/libtbb* /usr/lib/"$ma"/libhiredis* /usr/lib/"$ma"/libxxhash* /usr/lib/"$ma"/libLLVM* \
           /usr/lib/"$ma"/libz3*; do
    [ -f "$f" ] && [ ! -L "$f" ] && mount --bind "$dir/empty.file" "$f" && hidden=$((hidden + 1))
  done
  echo "check: hid $hidden system folders and files (LLVM 19, oneTBB, xxHash, hiredis, z3)"
fi

src=$dir/src build=$dir/build prefix=$dir/prefix
rc=0
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYJIT_DEPS_PREFIX="$prefix" \
  -DLAZYJIT_PYTHON="$root/.venv/bin/python" -DCCACHE=OFF > "$dir/configure.log" 2>&1 || { echo "check: configure FAILED"; tail -30 "$dir/configure.log"; exit 1; }
echo "check: configured ($build)"
# No compile or link line may name the system's copies.
if grep -nE '/usr/lib/llvm-19|/usr/include/llvm|libtbb|libhiredis|/usr/include/(tbb|oneapi|hiredis)' "$build/build.ninja" "$build/compile_commands.json" |
   grep -v "$prefix" | head -5 | grep .; then
  echo "check: FAILED: build.ninja names a system copy"; rc=1
else
  echo "check: build.ninja and compile_commands.json name no system LLVM, oneTBB, xxHash or hiredis"
fi
t0=$(date +%s)
flock /tmp/lazyjit-build.lock ninja -C "$build" -j"$jobs" "${targets[@]}" > "$dir/build.log" 2>&1 ||
  { echo "check: build FAILED"; grep -m20 -B2 -A10 'FAILED\|error' "$dir/build.log"; exit 1; }
echo "check: built ${targets[*]} in $(( $(date +%s) - t0 )) s"
if [ -x "$build/lowering_tests" ]; then
  echo "check: lowering_tests needs: $(ldd "$build/lowering_tests" | grep -E 'tbb|LLVM|hiredis|xxhash' | awk '{print $1 " => " $3}' | tr '\n' ' ')"
  "$build/lowering_tests" --gtest_brief=1 > "$dir/lowering_tests.log" 2>&1; r=$?
  echo "check: lowering_tests exit $r: $(grep -E '^\[  (PASSED|FAILED)  \]' "$dir/lowering_tests.log" | tr '\n' ' ')"
  [ $r -eq 0 ] || rc=1
fi
if ls "$src"/python/lazyjit/_C*.so > /dev/null 2>&1; then
  (cd /tmp && PYTHONPATH="$src/python" LAZYJIT_CACHE=off "$root/.venv/bin/python" -c '
import torch, lazyjit
x = torch.randn(1000)
y = ((x.to("lazyjit") * 2 + 1).relu()).cpu()
assert torch.equal(y, (x * 2 + 1).relu()), "wrong result"
lazyjit.wait_for_compiles()
print("check: import lazyjit from the prefix build: ok, metrics", {k: v for k, v in lazyjit.metrics().items() if k in ("ops_traced", "compiles", "llvm_compiles")})
') || rc=1
  echo "check: liblazyjit.so needs: $(ldd "$src/python/lazyjit/lib/liblazyjit.so" | grep -E 'tbb|LLVM|hiredis|xxhash' | awk '{print $1 " => " $3}' | tr '\n' ' ')"
  echo "check: LLVM symbols exported by liblazyjit.so: $(nm -D --defined-only "$src/python/lazyjit/lib/liblazyjit.so" | grep -c ' _ZN4llvm')"
fi
exit $rc
