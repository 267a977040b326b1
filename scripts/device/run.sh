#!/usr/bin/env bash
# Runs ON the lent GPU machine, in the repository root, as the one device call
# of a session (docs/gpu.md):
#   run(command="bash scripts/device/run.sh", carry=[".device"], timeout_s=600)
# after `bash scripts/device/pack.sh` here. Phases, each timed, each with its
# exit status recorded, none stopping the others:
#   env        GPU, driver, torch, CUDA, compilers (into summary.txt)
#   unpack     .device/deps.tar.xz -> /tmp/lazyjit-deps (LLVM 19, oneTBB, xxHash, hiredis)
#   configure  cmake -DLAZYJIT_DEPS_PREFIX=... -DLAZYJIT_PYTHON=<the machine's python>;
#              if that fails, once more without libtorch (-DLAZYJIT_WITH_TORCH=OFF)
#   build      ninja -j<cores>: lazyjit, the extension, lazyjit-cache and the C++ tests
#   cpp_tests  lowering_tests, executor_tests' CudaDriver*, DeviceLaunch* and CudaGraph* tests, and
#              every test target named gpu*tests/cuda*tests (LAZYJIT_DEVICE_CPP_TESTS
#              replaces the first two: NAME or NAME=GTEST_FILTER, space-separated)
#   py_smoke   import lazyjit; one small graph on the CPU target, then the CUDA
#              target step by step ("gpu_smoke: <step>: ok|FAIL")
#   gpu_tests  pytest tests/gpu (PYTHONPATH=python)
#   bench      bench/gpu_bench.py with a time budget that fits what is left (results:
#              gpu.md, gpu.json in more.tar.gz), else bench/gpu_chain.py
# No phase starts after LAZYJIT_DEVICE_SOFT_S (480 s) and none runs past
# LAZYJIT_DEVICE_HARD_S (570 s), so the call ends inside the tool's 600 s.
# What comes back in $OUT (the tool returns 8 files at most; this writes 7):
#   summary.txt  the phase table, versions, test and bench result lines (printed last too)
#   build.log    unpack + configure + ninja output
#   tests.log    C++ tests and the Python smoke test
#   gpu_tests.log, gpu_tests.xml   pytest's output and its JUnit report
#   bench.log    the bench's tables
#   more.tar.gz  CMakeCache.txt, .ninja_log, env details, bench JSON, and whatever a
#                test or bench writes into $LAZYJIT_DEVICE_MORE
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
export REPO=$PWD
export OUT=${OUT:-/tmp/lazyjit-device-out}   # the tool sets OUT on the device
mkdir -p "$OUT"
export LAZYJIT_DEVICE_MORE=$OUT/more
mkdir -p "$LAZYJIT_DEVICE_MORE"
SOFT=${LAZYJIT_DEVICE_SOFT_S:-480}
HARD=${LAZYJIT_DEVICE_HARD_S:-570}
export PREFIX=${LAZYJIT_DEVICE_PREFIX:-/tmp/lazyjit-deps}
export BUILD=${LAZYJIT_DEVICE_BUILD:-/tmp/lazyjit-build}
export JOBS=${LAZYJIT_JOBS:-$(nproc)}
export SITE=/tmp/lazyjit-site
PY=${LAZYJIT_DEVICE_PYTHON:-/opt/torch/.venv/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3)
export PY
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
export PYTHONUNBUFFERED=1
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
# cmake 4 refuses packages' configs that ask for a policy version below 3.5.
export CMAKE_POLICY_VERSION_MINIMUM=${CMAKE_POLICY_VERSION_MINIMUM:-3.5}
export NOTORCH=0

names=() rcs=() secs=() notes=()
elapsed() { echo $(( $(date +%s) - T0 )); }
# phase NAME CAP LOG FUNCTION: runs FUNCTION (exported) in bash under a timeout
# of min(CAP, what is left before HARD), its output appended to LOG.
phase() {
  local name=$1 cap=$2 log=$3 fn=$4 left t0 rc
  left=$(( HARD - $(elapsed) ))
  if [ "$(elapsed)" -ge "$SOFT" ] || [ "$left" -lt 15 ]; then
    names+=("$name"); rcs+=("-"); secs+=(0); notes+=("skipped: out of time at $(elapsed) s")
    echo "[$(elapsed) s] $name: skipped (time budget)"; return 0
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "[$(elapsed) s] $name (at most $cap s) ..."
  printf '\n==== %s (at %s s, at most %s s)\n' "$name" "$(elapsed)" "$cap" >> "$log"
  t0=$(date +%s)
  timeout -k 5 "$cap" bash -c "$fn" >> "$log" 2>&1 < /dev/null
  rc=$?
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note "timed out after $cap s"
  names+=("$name"); rcs+=("$rc"); secs+=($(( $(date +%s) - t0 ))); notes+=("${NOTE:-}")
  NOTE=""
  echo "[$(elapsed) s] $name: exit $rc in $(( $(date +%s) - t0 )) s"
  return 0
}
NOTE=""
note() { NOTE="${NOTE:+$NOTE; }$*"; }

# ---- phases (each runs in its own bash: exported functions and variables) ----
ph_env() {
  echo "date: $(date -u +%FT%TZ)  host: $(uname -n)  cores: $(nproc)  mem: $(free -g 2>/dev/null | awk '/Mem:/{print $2 " GiB"}')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  "$PY" -c 'import sys, torch; print("python:", sys.executable, sys.version.split()[0]); print("torch:", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
  echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
  echo "ptxas: $(command -v ptxas)  libdevice: $(ls "$CUDA_HOME"/nvvm/libdevice/libdevice*.bc 2>/dev/null | head -1)"
  echo "gcc: $(gcc --version | head -1)  cmake: $(cmake --version | head -1)  ninja: $(ninja --version)"
  "$PY" -c 'import sysconfig, os; i = sysconfig.get_paths()["include"]; print("Python.h:", i, os.path.exists(os.path.join(i, "Python.h")))'
  "$PY" -c 'import pybind11; print("pybind11:", pybind11.__version__)'
  echo "disk: $(df -h /tmp | tail -1)"
}
ph_unpack() {
  rm -rf "$PREFIX" && mkdir -p "$PREFIX" || return 1
  if command -v xz > /dev/null; then
    tar -C "$PREFIX" -xJf .device/deps.tar.xz || return 1
  else
    echo "no xz: unpacking with Python's tarfile"
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .device/deps.tar.xz "$PREFIX" || return 1
  fi
  cat .device/MANIFEST.txt 2>/dev/null
  du -sh "$PREFIX"
}
cmake_args() {
  local args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYJIT_DEPS_PREFIX="$PREFIX" -DLAZYJIT_PYTHON="$PY")
  # libtorch's config enables CUDA for a CUDA build of torch (its own FindCUDA,
  # then enable_language(CUDA)): name the toolkit. The arch comes from
  # TORCH_CUDA_ARCH_LIST (exported below); it ignores CMAKE_CUDA_ARCHITECTURES.
  args+=(-DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" -DCUDAToolkit_ROOT="$CUDA_HOME" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_HOME")
  # Python headers: the machine's, else the packed 3.12 ones.
  if ! "$PY" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
     && [ -e "$PREFIX/python3.12/include/python3.12/Python.h" ]; then
    args+=(-DPython_INCLUDE_DIR="$PREFIX/python3.12/include/python3.12")
  fi
  # OpenMP: torch's own libgomp when its lib/ has one by that name, else the system's.
  local tlib
  tlib=$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
  if [ -n "$tlib" ] && [ ! -e "$tlib/libgomp.so.1" ]; then
    local g
    g=$(ls "$tlib"/libgomp*.so* 2>/dev/null | head -1)
    [ -n "$g" ] || g=$(gcc -print-file-name=libgomp.so.1)
    args+=(-DTORCH_GOMP_LIBRARY="$g")
  fi
  printf '%s\n' "${args[@]}" ${LAZYJIT_DEVICE_CMAKE_ARGS:-}
}
ph_configure() {
  mapfile -t a < <(cmake_args)
  echo "cmake -S . -B $BUILD ${a[*]}"
  cmake -S . -B "$BUILD" "${a[@]}"
}
ph_configure_notorch() {
  mapfile -t a < <(cmake_args)
  echo "cmake -S . -B $BUILD ${a[*]} -DLAZYJIT_WITH_TORCH=OFF"
  rm -rf "$BUILD"
  cmake -S . -B "$BUILD" "${a[@]}" -DLAZYJIT_WITH_TORCH=OFF
}
# After a failed build whose log names executor/cuda_graph.cpp (PyTorch's
# CUDAGraph, the one translation unit built only against a CUDA torch): the same
# build with CUDA graphs off, so the rest still runs.
ph_rebuild_without_graphs() {
  echo "cmake -S . -B $BUILD -DLAZYJIT_CUDA_GRAPHS_BUILD=OFF"
  cmake -S . -B "$BUILD" -DLAZYJIT_CUDA_GRAPHS_BUILD=OFF && ph_build
}
gpu_test_targets() {
  ninja -C "$BUILD" -t targets all 2>/dev/null | grep -oE '^(gpu|cuda)[A-Za-z0-9_]*tests?:' | tr -d ':' | sort -u
}
# The C++ tests to build and run: NAME or NAME=GTEST_FILTER, from
# LAZYJIT_DEVICE_CPP_TESTS, then every target named gpu*tests / cuda*tests.
cpp_tests() {
  local - t seen=" "
  set -f   # the filters' * are gtest's
  for t in ${LAZYJIT_DEVICE_CPP_TESTS:-lowering_tests executor_tests=CudaDriver*:DeviceLaunch*:CudaGraph*} $(gpu_test_targets); do
    case "$seen" in *" ${t%%=*} "*) continue ;; esac
    [ "$NOTORCH" = 1 ] && [ "${t%%=*}" = executor_tests ] && continue
    seen+="${t%%=*} "
    echo "$t"
  done
}
ph_build() {
  local t=() g
  [ "$NOTORCH" = 1 ] || t+=(lazyjit lazyjit_python lazyjit-cache)
  for g in $(cpp_tests); do t+=("${g%%=*}"); done
  echo "ninja -C $BUILD -j$JOBS -k 0 ${t[*]}"
  ninja -C "$BUILD" -j"$JOBS" -k 0 "${t[@]}"
}
ph_cpp_tests() {
  local - rc=0 t b f
  set -f
  for t in $(cpp_tests); do
    b=${t%%=*}; f=""
    [ "$b" != "$t" ] && f="--gtest_filter=${t#*=}"
    if [ -x "$BUILD/$b" ]; then
      echo "---- $b $f"
      LAZYJIT_BACKGROUND_COMPILE=off LAZYJIT_CACHE=off "$BUILD/$b" --gtest_brief=1 $f || rc=1
    else
      echo "---- $b: not built"; rc=1
    fi
  done
  return $rc
}
ph_py_smoke() {
  cd /tmp && PYTHONPATH="$REPO/python:$SITE" LAZYJIT_CACHE=off "$PY" -c '
import torch, lazyjit
x = torch.randn(1000)
y = ((x.to("lazyjit") * 2 + 1).relu()).cpu()
assert torch.equal(y, (x * 2 + 1).relu()), "wrong result on the CPU target"
lazyjit.wait_for_compiles()
print("py_smoke: ok; torch", torch.__version__, "cuda available", torch.cuda.is_available())
print("metrics:", {k: v for k, v in lazyjit.metrics().items() if k in ("ops_traced", "compiles", "llvm_compiles", "fallbacks")})
'
  # The CUDA target, one step at a time, each step's outcome on a line of its
  # own ("gpu_smoke: <step>: ok|FAIL ..."), so that the summary says where the
  # GPU path first breaks even when the tests below cannot tell.
  cd /tmp && PYTHONPATH="$REPO/python:$SITE" LAZYJIT_CACHE=off LAZYJIT_TARGET=cuda "$PY" -c '
import traceback, torch
def step(name, fn):
    try:
        r = fn()
        print("gpu_smoke:", name + ": ok", "" if r is None else r, flush=True)
        return True
    except Exception as e:
        print("gpu_smoke:", name + ": FAIL", type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "", flush=True)
        traceback.print_exc()
        return False
import lazyjit
step("target", lambda: lazyjit.target())
x = torch.randn(4099, device="cuda")
def device_route():
    y = ((x.to("lazyjit") * 2 + 1).relu()).to("cuda")
    torch.testing.assert_close(y, (x * 2 + 1).relu())
    return {k: lazyjit.metrics()[k] for k in ("compiles", "llvm_compiles", "fallbacks")}
step("device route, element kernel", device_route)
def rows():
    a = torch.randn(37, 1000, device="cuda")
    torch.testing.assert_close(torch.softmax(a.to("lazyjit"), -1).to("cuda"), torch.softmax(a, -1))
step("device route, row kernel (softmax)", rows)
def library():
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    torch.testing.assert_close((a.to("lazyjit") @ b.to("lazyjit")).relu().to("cuda"), (a @ b).relu())
step("device route, ATen matmul + kernel", library)
def backend():
    f = torch.compile(lambda t: torch.tanh(t) * 3 + t.sum(), backend="lazyjit")
    torch.testing.assert_close(f(x), torch.tanh(x) * 3 + x.sum())
    return lazyjit.dynamo.stats()
step("torch.compile backend", backend)
'
}
ph_gpu_tests() {
  [ -d tests/gpu ] || { echo "no tests/gpu"; return 0; }
  local extra=()
  "$PY" -c 'import pytest_timeout' 2>/dev/null && extra+=(--timeout=180)
  PYTHONPATH="$REPO/python:$SITE" "$PY" -m pytest -q -rfEs -p no:cacheprovider "${extra[@]}" \
    --junitxml="$OUT/gpu_tests.xml" tests/gpu
}
# bench/gpu_bench.py within LAZYJIT_GPU_BENCH_BUDGET_S (set below from the time
# the phase has; its bench/results/gpu.{md,json} are copied into
# $LAZYJIT_DEVICE_MORE after the phase), else bench/gpu_chain.py.
ph_bench() {
  local rc=0
  if [ -f bench/gpu_bench.py ]; then
    echo "---- bench/gpu_bench.py --budget $LAZYJIT_GPU_BENCH_BUDGET_S"
    PYTHONPATH="$REPO/python:$SITE" "$PY" bench/gpu_bench.py --budget "$LAZYJIT_GPU_BENCH_BUDGET_S" || rc=1
  elif [ -f bench/gpu_chain.py ]; then
    echo "---- bench/gpu_chain.py"
    PYTHONPATH="$REPO/python:$SITE" "$PY" bench/gpu_chain.py --json "$LAZYJIT_DEVICE_MORE/gpu_chain.json" || rc=1
  else
    echo "no GPU bench in bench/"
  fi
  return $rc
}
export -f ph_env ph_unpack cmake_args ph_configure ph_configure_notorch ph_rebuild_without_graphs gpu_test_targets cpp_tests ph_build \
  ph_cpp_tests ph_py_smoke ph_gpu_tests ph_bench

# torch.compile(backend="lazyjit") finds the backend through an entry point: a
# dist-info naming it, on PYTHONPATH, stands in for `pip install`.
mkdir -p "$SITE/lazyjit-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: lazyjit\nVersion: 0.1.0\n' > "$SITE/lazyjit-0.1.0.dist-info/METADATA"
printf '[torch_dynamo_backends]\nlazyjit = lazyjit.dynamo:backend\n' > "$SITE/lazyjit-0.1.0.dist-info/entry_points.txt"

: > "$OUT/build.log"; : > "$OUT/tests.log"; : > "$OUT/gpu_tests.log"; : > "$OUT/bench.log"
phase env 30 "$LAZYJIT_DEVICE_MORE/env.txt" ph_env
phase unpack 90 "$OUT/build.log" ph_unpack
phase configure 150 "$OUT/build.log" ph_configure
if [ "${rcs[-1]}" != 0 ] && [ "${rcs[-1]}" != "-" ]; then
  export NOTORCH=1
  phase configure_notorch 90 "$OUT/build.log" ph_configure_notorch
fi
phase build 330 "$OUT/build.log" ph_build
if [ "${rcs[-1]}" != 0 ] && [ "${rcs[-1]}" != "-" ] && grep -q 'cuda_graph\.cpp' "$OUT/build.log"; then
  phase build_without_graphs 200 "$OUT/build.log" ph_rebuild_without_graphs
fi
phase cpp_tests 90 "$OUT/tests.log" ph_cpp_tests
if [ "$NOTORCH" = 0 ]; then
  phase py_smoke 90 "$OUT/tests.log" ph_py_smoke
  phase gpu_tests 240 "$OUT/gpu_tests.log" ph_gpu_tests
  # The bench stops itself 25 s before the phase's limit (what is left before HARD,
  # at most LAZYJIT_DEVICE_BENCH_S), to write its results.
  BENCH_CAP=${LAZYJIT_DEVICE_BENCH_S:-240}
  [ $(( HARD - $(elapsed) )) -lt "$BENCH_CAP" ] && BENCH_CAP=$(( HARD - $(elapsed) ))
  export LAZYJIT_GPU_BENCH_BUDGET_S=$(( BENCH_CAP > 55 ? BENCH_CAP - 25 : 30 ))
  phase bench "$BENCH_CAP" "$OUT/bench.log" ph_bench
  # gpu_bench.py rewrites them after every pair: there even if the phase timed out
  cp bench/results/gpu.md bench/results/gpu.json "$LAZYJIT_DEVICE_MORE/" 2>/dev/null
else
  for n in py_smoke gpu_tests bench; do
    names+=("$n"); rcs+=("-"); secs+=(0); notes+=("skipped: no libtorch build (configure failed)")
  done
fi

# ---- summary -------------------------------------------------------------------
cp "$BUILD/CMakeCache.txt" "$BUILD/.ninja_log" "$LAZYJIT_DEVICE_MORE/" 2>/dev/null
cp "$BUILD/CMakeFiles/CMakeConfigureLog.yaml" "$LAZYJIT_DEVICE_MORE/" 2>/dev/null
{
  echo "lazyjit on the device: scripts/device/run.sh, $(elapsed) s in all (soft limit $SOFT s, hard $HARD s)"
  printf '%-18s %5s %6s  %s\n' phase exit secs note
  for i in "${!names[@]}"; do
    printf '%-18s %5s %6s  %s\n' "${names[$i]}" "${rcs[$i]}" "${secs[$i]}" "${notes[$i]}"
  done
  echo
  grep -E '^(gpu|python|torch|nvcc|gcc|Python.h):' "$LAZYJIT_DEVICE_MORE/env.txt" 2>/dev/null
  echo
  echo "build: $(grep -cE '^\[[0-9]+/[0-9]+\]' "$OUT/build.log") steps; failed: $(grep -c '^FAILED:' "$OUT/build.log")"
  grep -m5 -A12 '^FAILED:' "$OUT/build.log" | grep -E 'error|FAILED|undefined' | head -20
  grep -m3 -B3 -A20 'CMake Error' "$OUT/build.log" | head -40
  echo "cpp tests: $(grep -E '^----|^\[  (PASSED|FAILED)  \]|tests? ran' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E '^py_smoke|^metrics|^gpu_smoke|Error' "$OUT/tests.log" | head -12
  echo "gpu tests: $(grep -E '(passed|failed|error|skipped|no tests ran)' "$OUT/gpu_tests.log" | tail -1)"
  grep -E '^(FAILED|ERROR) ' "$OUT/gpu_tests.log" | head -20
  echo
  echo "bench:"
  grep -E '^\||^Every workload|absent|no GPU bench|Error' "$OUT/bench.log" | tail -30
} > "$OUT/summary.txt" 2>&1
tar -C "$OUT" -czf "$OUT/more.tar.gz" more && rm -rf "$LAZYJIT_DEVICE_MORE"
cat "$OUT/summary.txt"
echo "(in \$OUT: $(ls "$OUT" | tr '\n' ' '))"
