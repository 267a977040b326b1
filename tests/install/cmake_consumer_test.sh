#!/usr/bin/env bash
# Usage: cmake_consumer_test.sh BUILD_DIR TORCH_CMAKE_PREFIX   (a ctest test)
# `cmake --install` of BUILD_DIR into a temporary prefix, then a project outside
# the tree (a copy of examples/cmake_consumer) configured with nothing but
# CMAKE_PREFIX_PATH (that prefix and torch's CMake prefix), built, and run: it
# prints OK when its lazy computation matches eager. Also checks that what is
# installed is the public interface only (no static layers, LLVM or oneTBB in
# the package; no path into the build in the library's RUNPATH).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
torch_prefix=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lazyjit-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "cmake_consumer_test: $*" >&2; exit 1; }
quiet() { "$@" > "$tmp/out.log" 2>&1 || { cat "$tmp/out.log"; fail "failed: $*"; }; }

prefix=$tmp/prefix
quiet cmake --install "$build" --prefix "$prefix"
want="bin/lazyjit-cache
include/lazyjit/debug/metrics.h
include/lazyjit/tracer/lazyjit.h
lib/cmake/lazyjit/lazyjitConfig.cmake
lib/cmake/lazyjit/lazyjitConfigVersion.cmake
lib/liblazyjit.so"
got=$(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort)
[ "$got" = "$want" ] || fail "installed files differ from the public interface:"$'\n'"$got"
if grep -v '^ *#' "$prefix/lib/cmake/lazyjit/lazyjitConfig.cmake" | grep -nE 'lazyjit_(graph_ir|debug|cache|lowering)|LLVM|TBB|tbb'; then
  fail "the package's interface names a private dependency"
fi
runpath=$(readelf -d "$prefix/lib/liblazyjit.so" | grep -E 'RUNPATH|RPATH' || true)
# (torch may live in the checkout's .venv; the build tree and python/ are not for it)
case "$runpath" in *"$build"*|*"$root/python"*) fail "the installed library's RUNPATH points into the build: $runpath";; esac

# The consumer: a copy outside the tree, no environment that could find the tree.
cp -r "$root/examples/cmake_consumer" "$tmp/src"
unset CMAKE_PREFIX_PATH CPATH CPLUS_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH
quiet cmake -S "$tmp/src" -B "$tmp/build" -G Ninja "-DCMAKE_PREFIX_PATH=$prefix;$torch_prefix"
quiet cmake --build "$tmp/build" -j2
lib=$(ldd "$tmp/build/consumer" | awk '/liblazyjit\.so/ { print $3 }')
[ "$lib" = "$prefix/lib/liblazyjit.so" ] || fail "the consumer loads liblazyjit.so from '$lib', not from the prefix"
out=$(cd "$tmp" && LAZYJIT_CACHE=off "$tmp/build/consumer") || fail "the consumer failed: $out"
echo "$out"
case "$out" in OK*) ;; *) fail "the consumer did not print OK";; esac
