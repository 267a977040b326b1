#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, the CUDA toolkit and a CUDA
# build of PyTorch (2.11-2.13), from the repository root:
#
#   bash scripts/gpu_check.sh                # build, tests/gpu, C++ GPU tests, smoke, bench
#   bash scripts/gpu_check.sh --no-build     # again on the same machine: no unpack, configure or build
#   bash scripts/gpu_check.sh --dry-run      # without a GPU: the budget, and the phases that need none
#
# It is made to fit a cold 10-minute call: it stops itself at 540 s, and
# prints first the budget of each phase, the build's from a measured build
# time (MEASURED_* below; docs/gpu.md, "The budget").
# Phases, in order, each timed and capped, each with its status recorded, none
# stopping the others (docs/gpu.md):
#   env              GPU, driver, torch, CUDA, compilers
#   unpack           .device/deps.tar.xz (scripts/device/pack.sh: LLVM 19, oneTBB, xxHash,
#                    hiredis for a machine without them) into the deps prefix; skipped without it
#   configure        cmake (Release) against the torch of $LAZYJIT_PYTHON (-DLAZYJIT_DEPS_PREFIX
#                    when unpacked); if that fails, once more without libtorch
#   build            ninja -k 0: lazyjit and the extension, what tests/gpu needs, nothing else;
#                    if a compiler error names targets/cuda/cuda_graph.cpp, once more with
#                    CUDA graphs off
#   gpu_tests        pytest -rA --junitxml tests/gpu, its files split over parallel pytest
#                    processes (LAZYJIT_GPU_CHECK_PYTEST_PROCS), cut short by SIGINT at its cap
#                    so that pytest still prints its summary and writes the JUnit report (GPU)
#   build_cpp_tests  ninja: the C++ tests below
#   cpp_tests        executor_tests' CudaDriver*/ModuleLoadsStandIn*/DeviceLaunch*/CudaGraph*, and
#                    every target named gpu*tests (GPU)
#   cpu_smoke        import lazyjit and one graph on the CPU target
#   gpu_smoke        the CUDA target step by step; each step proves that lazyjit's kernels ran
#                    (metrics()["device_kernel_launches"] grew) (GPU)
#   bench            bench/gpu_bench.py with the time left (GPU)
# and a summary table: phase, status, seconds, cap, and the test and bench figures.
#
# Options:
#   --dry-run            skip the phases that need a GPU (their caps printed)
#   --no-build           skip unpack, configure and both builds: use the build folder as the
#                        last run left it (LAZYJIT_GPU_CHECK_BUILD if it has build.ninja, else build/)
#   --budget             print the budget and stop (exit 1 when tests/gpu would get less
#                        than 300 s); with --dry-run, for a 16-core machine
#   --pytest-budget S    the gpu_tests phase's cap (LAZYJIT_GPU_CHECK_PYTEST_S, 330)
#   --out DIR            where logs, the JUnit report and summary.txt go
#                        (LAZYJIT_GPU_CHECK_OUT, /tmp/lazyjit-gpu-check)
# Environment: LAZYJIT_PYTHON (the Python whose torch is built against; default
# .venv/bin/python, else python3), LAZYJIT_GPU_CHECK_BUILD (build folder,
# /tmp/lazyjit-gpu-build), LAZYJIT_GPU_CHECK_BUILD_TYPE (Release),
# LAZYJIT_DEPS_PREFIX (an unpacked pack, or where to unpack one),
# LAZYJIT_GPU_CHECK_SOFT_S (480: no phase starts later), LAZYJIT_GPU_CHECK_HARD_S
# (540: none runs later), LAZYJIT_GPU_CHECK_CALL_S (600: the call the budget is
# for), LAZYJIT_GPU_CHECK_BENCH_S (240), LAZYJIT_GPU_CHECK_GRACE_S (20: after
# SIGINT, the time pytest has before SIGTERM, then SIGKILL 5 s later),
# LAZYJIT_GPU_CHECK_PYTEST_TARGET (tests/gpu), LAZYJIT_GPU_CHECK_PYTEST_PROCS
# (pytest processes for gpu_tests: a core in 4, at most 4), LAZYJIT_GPU_CHECK_CPP_TESTS
# (NAME or NAME=GTEST_FILTER, space-separated, replacing executor_tests' filter),
# LAZYJIT_GPU_CHECK_CMAKE_ARGS, LAZYJIT_JOBS, LAZYJIT_GPU_CHECK_PLAN_CORES (the
# cores the budget assumes: this machine's, 16 in a dry run).
# With this file sourced (not run) only the functions are defined.
set -uo pipefail

# A real compiler error in targets/cuda/cuda_graph.cpp (the one translation unit
# built only against a CUDA torch): gcc's "cuda_graph.cpp:L:C: error:" or
# ninja's "FAILED: ...cuda_graph.cpp.o". Ninja's progress line "Building CXX
# object .../cuda_graph.cpp.o" is no error.
cuda_graph_build_error() {
  grep -qE '(^|/)targets/cuda/cuda_graph\.cpp:[0-9]+(:[0-9]+)?: (fatal )?error|^FAILED: .*targets/cuda/cuda_graph\.cpp\.o' "$1"
}

# The summary line of a pytest log ("3 passed, 1 skipped in 2.1s", with
# "interrupted at the time cap" when SIGINT cut it short), else "no summary".
pytest_figures() {
  local l
  l=$(grep -E '^(=+ )?([0-9]+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)|no tests ran).* in [0-9.]+s' "$1" 2>/dev/null \
      | tail -1 | sed -E 's/^=+ //; s/ =+$//')
  if grep -q 'KeyboardInterrupt' "$1" 2>/dev/null; then l="${l:-nothing ran}; interrupted at the time cap"; fi
  echo "${l:-no summary}"
}

# run_capped CAP GRACE CMD...: CMD in a process group of its own; SIGINT at CAP
# seconds, SIGTERM GRACE seconds later, SIGKILL 5 s after that. Returns CMD's
# status (124 when SIGINT came and CMD then exited on its own, as timeout does).
run_capped() {
  local cap=$1 grace=$2; shift 2
  timeout -k 5 $(( cap + grace )) timeout -s INT "$cap" "$@"
}

# ---- the budget ----------------------------------------------------------------
# A cold build's cost, measured (docs/gpu.md, "The budget", says how): the
# configure and the builds below into an empty folder, Release, with the pack
# (.device/deps.tar.xz), against torch without CUDA, at -j2 on 2 cores: the
# CPU seconds (user + sys) of every compile and link, from /usr/bin/time
# around ninja, split by a compiler launcher's count per step. On C cores a
# build takes at most CPU_S / C + SERIAL_S: SERIAL_S is what no core count
# shortens (the longest compile, then the links of liblazyjit.so and the
# extension, one after the other).
MEASURED_ON="2026-12-07"
MEASURED_BUILD_CPU_S=551          # lazyjit + the extension (lazyjit_python)
MEASURED_BUILD_SERIAL_S=26
MEASURED_TESTS_CPU_S=123          # executor_tests and the stand-in libcuda, after them
MEASURED_TESTS_SERIAL_S=20
MEASURED_UNPACK_S=3               # xz -d of the pack, 185 MiB (wall, 1 core)
MEASURED_CONFIGURE_S=3            # cmake, torch without CUDA (wall)
# Not measured (it needs a CUDA build of torch): libtorch's CUDA setup in
# configure (its FindCUDA, enable_language(CUDA): nvcc compiles a few test programs).
CONFIGURE_CUDA_ALLOWANCE_S=45
# What tests/gpu must have in a cold call.
GPU_TESTS_WANTED_S=300

# est_build CPU_S SERIAL_S CORES: seconds, rounded up.
est_build() { echo $(( ($1 + $3 - 1) / $3 + $2 )); }

# The budget of a cold call: each phase's estimated start and length, and
# what tests/gpu gets, on LAZYJIT_GPU_CHECK_PLAN_CORES cores (this machine's;
# 16 in a dry run, the GPU machine's). Prints it; returns 1 when tests/gpu
# would get less than GPU_TESTS_WANTED_S.
print_budget() {
  local cores=${LAZYJIT_GPU_CHECK_PLAN_CORES:-}
  [ -n "$cores" ] || { [ "$DRY" = 1 ] && cores=16 || cores=$(nproc); }
  local call=${LAZYJIT_GPU_CHECK_CALL_S:-600} t=0 b tb pyt cfg
  b=$(est_build "$MEASURED_BUILD_CPU_S" "$MEASURED_BUILD_SERIAL_S" "$cores")
  tb=$(est_build "$MEASURED_TESTS_CPU_S" "$MEASURED_TESTS_SERIAL_S" "$cores")
  cfg=$(( MEASURED_CONFIGURE_S + CONFIGURE_CUDA_ALLOWANCE_S ))
  local kind="a cold call"; [ "$NOBUILD" = 1 ] && kind="a call with --no-build"
  echo "budget of $kind of $call s (the check stops itself at $HARD s; no phase starts after $SOFT s), on $cores cores:"
  printf '  %-16s %5s %5s  %s\n' phase from secs basis
  row() { printf '  %-16s %5s %5s  %s\n' "$1" "$t" "$2" "$3"; t=$(( t + $2 )); }
  row env 5 "nvidia-smi, torch, compilers"
  if [ "$NOBUILD" = 1 ]; then
    row unpack 0 "--no-build"; row configure 0 "--no-build"; row build 0 "--no-build"
  else
    row unpack "$MEASURED_UNPACK_S" "measured ($MEASURED_ON)"
    row configure "$cfg" "measured $MEASURED_CONFIGURE_S s without CUDA + $CONFIGURE_CUDA_ALLOWANCE_S s allowed for libtorch's CUDA setup"
    row build "$b" "measured: $MEASURED_BUILD_CPU_S CPU-s / $cores cores + $MEASURED_BUILD_SERIAL_S s serial ($MEASURED_ON)"
  fi
  pyt=$(( HARD - t - GRACE ))
  [ "$pyt" -gt "$PYTEST_S" ] && pyt=$PYTEST_S
  [ "$pyt" -lt 0 ] && pyt=0
  row gpu_tests "$pyt" "its cap (--pytest-budget $PYTEST_S), less what the $GRACE s grace after SIGINT needs before $HARD s"
  if [ "$NOBUILD" = 1 ]; then row build_cpp_tests 0 "--no-build"
  else row build_cpp_tests "$tb" "measured: $MEASURED_TESTS_CPU_S CPU-s / $cores cores + $MEASURED_TESTS_SERIAL_S s serial"; fi
  echo "  then cpp_tests, cpu_smoke, gpu_smoke and bench in what is left before $SOFT s (when tests/gpu ends before its cap)"
  echo "budget: tests/gpu gets $pyt s of $kind of $call s (wanted: at least $GPU_TESTS_WANTED_S s);" \
    "what runs before it may take $(( HARD - GRACE - GPU_TESTS_WANTED_S - (t - pyt - tb) )) s longer than this and leave it $GPU_TESTS_WANTED_S s"
  [ "$pyt" -ge "$GPU_TESTS_WANTED_S" ]
}

gc_main() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  T0=$(date +%s)
  export REPO=$PWD
  DRY=0 NOBUILD=0 BUDGET_ONLY=0
  export OUTDIR=${LAZYJIT_GPU_CHECK_OUT:-/tmp/lazyjit-gpu-check}
  PYTEST_S=${LAZYJIT_GPU_CHECK_PYTEST_S:-330}
  while [ $# -gt 0 ]; do
    case $1 in
      --dry-run) DRY=1 ;;
      --no-build) NOBUILD=1 ;;
      --budget) BUDGET_ONLY=1 ;;
      --pytest-budget) PYTEST_S=${2:?--pytest-budget needs seconds}; shift ;;
      --out) OUTDIR=${2:?--out needs a folder}; shift ;;
      -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; return 0 ;;
      *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; return 2 ;;
    esac
    shift
  done
  case $PYTEST_S in ''|*[!0-9]*) echo "gpu_check: --pytest-budget wants whole seconds, got '$PYTEST_S'" >&2; return 2 ;; esac
  SOFT=${LAZYJIT_GPU_CHECK_SOFT_S:-480}
  HARD=${LAZYJIT_GPU_CHECK_HARD_S:-540}
  GRACE=${LAZYJIT_GPU_CHECK_GRACE_S:-20}
  # --budget: the budget alone; fails when tests/gpu would get too little.
  if [ "$BUDGET_ONLY" = 1 ]; then print_budget; return; fi
  mkdir -p "$OUTDIR" || return 1
  OUTDIR=$(cd "$OUTDIR" && pwd)
  export LAZYJIT_DEVICE_MORE=$OUTDIR/more   # tests/gpu and the bench write extra files here
  rm -rf "$LAZYJIT_DEVICE_MORE"; mkdir -p "$LAZYJIT_DEVICE_MORE"
  export PREFIX=${LAZYJIT_DEPS_PREFIX:-/tmp/lazyjit-deps}
  export BUILD=${LAZYJIT_GPU_CHECK_BUILD:-/tmp/lazyjit-gpu-build}
  # --no-build: the folder the last run built (a second call on the same
  # machine), else the tree's own build/.
  if [ "$NOBUILD" = 1 ] && [ -z "${LAZYJIT_GPU_CHECK_BUILD:-}" ] && [ ! -f "$BUILD/build.ninja" ]; then
    BUILD=$REPO/build
  fi
  export BUILD_TYPE=${LAZYJIT_GPU_CHECK_BUILD_TYPE:-Release}
  export JOBS=${LAZYJIT_JOBS:-$(nproc)}
  # tests/gpu's files over this many pytest processes (one GPU: each has its own
  # CUDA context; the OpInfo sweep starts its own workers, a core in 4).
  export GPU_TEST_WEIGHTS
  export PYTEST_PROCS=${LAZYJIT_GPU_CHECK_PYTEST_PROCS:-$(( $(nproc) / 4 > 4 ? 4 : ( $(nproc) / 4 < 1 ? 1 : $(nproc) / 4 ) ))}
  export SITE=$OUTDIR/site
  PY=${LAZYJIT_PYTHON:-}
  [ -n "$PY" ] || { [ -x "$REPO/.venv/bin/python" ] && PY=$REPO/.venv/bin/python; }
  [ -n "$PY" ] || PY=$(command -v python3)
  export PY
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export PATH="$CUDA_HOME/bin:$PATH"
  export PYTHONUNBUFFERED=1
  # cmake 4 refuses packages' configs that ask for a policy version below 3.5.
  export CMAKE_POLICY_VERSION_MINIMUM=${CMAKE_POLICY_VERSION_MINIMUM:-3.5}
  # Each new graph's first sync compiles before it runs, so that the smoke
  # steps and tests run lazyjit's kernels, not ATen's op-by-op fallback.
  export LAZYJIT_BACKGROUND_COMPILE=off
  export NOTORCH=0 PYTEST_TARGET=${LAZYJIT_GPU_CHECK_PYTEST_TARGET:-tests/gpu}
  # The GPU's arch for libtorch's CUDA config (TORCH_CUDA_ARCH_LIST), when torch sees one.
  if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ] && [ "$DRY" = 0 ]; then
    TORCH_CUDA_ARCH_LIST=$("$PY" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null) \
      && export TORCH_CUDA_ARCH_LIST || unset TORCH_CUDA_ARCH_LIST
  fi

  names=() sts=() secs=() caps=() notes=()
  NOTE=""
  export -f ph_env ph_unpack cmake_args ph_configure ph_configure_notorch ph_rebuild_without_graphs \
    gpu_test_targets cpp_tests ph_build ph_build_cpp_tests ph_cpp_tests ph_cpu_smoke ph_gpu_smoke \
    ph_gpu_tests ph_bench pytest_figures gpu_test_groups merge_gpu_tests

  mkdir -p "$SITE/lazyjit-0.1.0.dist-info"
  # torch.compile(backend="lazyjit") finds the backend through an entry point: a
  # dist-info naming it, on PYTHONPATH, stands in for `pip install`.
  printf 'Metadata-Version: 2.1\nName: lazyjit\nVersion: 0.1.0\n' > "$SITE/lazyjit-0.1.0.dist-info/METADATA"
  printf '[torch_dynamo_backends]\nlazyjit = lazyjit.dynamo:backend\n' > "$SITE/lazyjit-0.1.0.dist-info/entry_points.txt"
  : > "$OUTDIR/build.log"; : > "$OUTDIR/tests.log"; : > "$OUTDIR/gpu_tests.log"; : > "$OUTDIR/bench.log"
  rm -rf "$OUTDIR/gpu_tests.xml" "$OUTDIR/gpu_tests.d"

  print_budget | tee "$OUTDIR/budget.txt"

  phase env 30 "$LAZYJIT_DEVICE_MORE/env.txt" ph_env nogpu
  if [ "$NOBUILD" = 1 ]; then
    for n in unpack:90 configure:150 build:300; do skip "${n%%:*}" "${n#*:}" "--no-build (uses $BUILD)"; done
  else
    if [ -f .device/deps.tar.xz ]; then phase unpack 90 "$OUTDIR/build.log" ph_unpack nogpu
    elif [ -n "${LAZYJIT_DEPS_PREFIX:-}" ]; then skip unpack 90 "no pack: uses $PREFIX as it is"
    else unset PREFIX; skip unpack 90 "no pack (.device/deps.tar.xz): the system's LLVM 19, oneTBB, xxHash, hiredis"; fi
    phase configure 150 "$OUTDIR/build.log" ph_configure nogpu
    if failed_last; then
      export NOTORCH=1
      phase configure_notorch 90 "$OUTDIR/build.log" ph_configure_notorch nogpu
    fi
    phase build 300 "$OUTDIR/build.log" ph_build nogpu
    if failed_last && cuda_graph_build_error "$OUTDIR/build.log"; then
      phase build_without_graphs 200 "$OUTDIR/build.log" ph_rebuild_without_graphs nogpu
    fi
  fi
  # tests/gpu first: the C++ tests, smoke steps and bench get what it leaves.
  if [ "$NOTORCH" = 0 ]; then
    phase gpu_tests "$PYTEST_S" "$OUTDIR/gpu_tests.log" ph_gpu_tests gpu-or-dry-pytest
  else
    skip gpu_tests "$PYTEST_S" "no libtorch build (configure failed)"
  fi
  if [ "$NOBUILD" = 1 ]; then skip build_cpp_tests 120 "--no-build (uses $BUILD)"
  else phase build_cpp_tests 120 "$OUTDIR/build.log" ph_build_cpp_tests nogpu; fi
  phase cpp_tests 90 "$OUTDIR/tests.log" ph_cpp_tests gpu
  if [ "$NOTORCH" = 0 ]; then
    phase cpu_smoke 60 "$OUTDIR/tests.log" ph_cpu_smoke nogpu
    phase gpu_smoke 90 "$OUTDIR/tests.log" ph_gpu_smoke gpu
    # The bench stops itself 25 s before its cap to write its results.
    local bench_cap=${LAZYJIT_GPU_CHECK_BENCH_S:-240}
    [ $(( HARD - $(elapsed) )) -lt "$bench_cap" ] && bench_cap=$(( HARD - $(elapsed) ))
    [ "$bench_cap" -lt 0 ] && bench_cap=0
    export LAZYJIT_GPU_BENCH_BUDGET_S=$(( bench_cap > 55 ? bench_cap - 25 : 30 ))
    phase bench "$bench_cap" "$OUTDIR/bench.log" ph_bench gpu
    # gpu_bench.py rewrites them after every pair: there even if the phase was cut short
    [ "$DRY" = 1 ] || cp bench/results/gpu.md bench/results/gpu.json "$LAZYJIT_DEVICE_MORE/" 2>/dev/null
  else
    for n in cpu_smoke:60 gpu_smoke:90 bench:240; do skip "${n%%:*}" "${n#*:}" "no libtorch build (configure failed)"; done
  fi
  summary
}

elapsed() { echo $(( $(date +%s) - T0 )); }
note() { NOTE="${NOTE:+$NOTE; }$*"; }
record() { names+=("$1"); sts+=("$2"); secs+=("$3"); caps+=("$4"); notes+=("$5"); }
skip() { record "$1" skipped 0 "$2" "$3"; echo "[$(elapsed) s] $1: skipped (cap $2 s): $3"; }
failed_last() { [ "${sts[-1]}" != ok ] && [ "${sts[-1]}" != skipped ]; }

# phase NAME CAP LOG FUNCTION NEEDS: FUNCTION (exported) in its own bash, capped at
# min(CAP, what is left before HARD), its output appended to LOG. NEEDS is gpu
# (skipped by --dry-run), nogpu, or gpu-or-dry-pytest (runs in both: the dry
# run's pytest finds no GPU and skips the tests, which checks the phase itself).
phase() {
  local name=$1 cap=$2 log=$3 fn=$4 needs=$5 left t0 rc st grace=0
  if [ "$DRY" = 1 ] && [ "$needs" = gpu ]; then skip "$name" "$cap" "dry run: needs a GPU"; return 0; fi
  [ "$name" = gpu_tests ] && grace=$GRACE
  left=$(( HARD - $(elapsed) - grace ))
  if [ "$(elapsed)" -ge "$SOFT" ] || [ "$left" -lt 5 ]; then
    skip "$name" "$cap" "out of time at $(elapsed) s"; return 0
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "[$(elapsed) s] $name (at most $cap s) ..."
  printf '\n==== %s (at %s s, at most %s s)\n' "$name" "$(elapsed)" "$cap" >> "$log"
  t0=$(date +%s)
  if [ "$name" = gpu_tests ]; then
    run_capped "$cap" "$grace" bash -c "$fn" >> "$log" 2>&1 < /dev/null
  else
    timeout -k 5 "$cap" bash -c "$fn" >> "$log" 2>&1 < /dev/null
  fi
  rc=$?
  case $rc in
    0) st=ok ;;
    124|137) st=cut; note "cut short at its cap of $cap s (exit $rc)" ;;
    *) st="exit $rc" ;;
  esac
  [ "$name" = gpu_tests ] && [ "$rc" = 2 ] && grep -q KeyboardInterrupt "$log" && { st=cut; note "interrupted at its cap of $cap s"; }
  record "$name" "$st" $(( $(date +%s) - t0 )) "$cap" "$NOTE"
  NOTE=""
  echo "[$(elapsed) s] $name: $st in $(( $(date +%s) - t0 )) s"
  return 0
}

# ---- phases (each runs in its own bash: exported functions and variables) ----
ph_env() {
  echo "date: $(date -u +%FT%TZ)  cores: $(nproc)  mem: $(free -g 2>/dev/null | awk '/Mem:/{print $2 " GiB"}')"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  else
    echo "gpu: none found (no nvidia-smi)"
  fi
  "$PY" -c 'import sys, torch; print("python:", sys.executable, sys.version.split()[0]); print("torch:", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
  echo "nvcc: $(nvcc --version 2>&1 | tail -1)"
  echo "ptxas: $(command -v ptxas)  libdevice: $(ls "$CUDA_HOME"/nvvm/libdevice/libdevice*.bc 2>/dev/null | head -1)"
  echo "gcc: $(gcc --version | head -1)  cmake: $(cmake --version | head -1)  ninja: $(ninja --version)"
  "$PY" -c 'import sysconfig, os; i = sysconfig.get_paths()["include"]; print("Python.h:", i, os.path.exists(os.path.join(i, "Python.h")))'
  return 0
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
  local args=(-G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DLAZYJIT_PYTHON="$PY")
  [ -n "${PREFIX:-}" ] && args+=(-DLAZYJIT_DEPS_PREFIX="$PREFIX")
  # libtorch's config enables CUDA for a CUDA build of torch (its own FindCUDA,
  # then enable_language(CUDA)): name the toolkit. The arch comes from
  # TORCH_CUDA_ARCH_LIST; it ignores CMAKE_CUDA_ARCHITECTURES.
  args+=(-DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" -DCUDAToolkit_ROOT="$CUDA_HOME" -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_HOME")
  # Python headers: the Python's own, else the pack's 3.12 ones.
  if ! "$PY" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
     && [ -e "${PREFIX:-/nonexistent}/python3.12/include/python3.12/Python.h" ]; then
    args+=(-DPython_INCLUDE_DIR="$PREFIX/python3.12/include/python3.12")
  fi
  # OpenMP: torch's own libgomp when its lib/ has one by that name, else the system's.
  local tlib g
  tlib=$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
  if [ -n "$tlib" ] && [ ! -e "$tlib/libgomp.so.1" ]; then
    g=$(ls "$tlib"/libgomp*.so* 2>/dev/null | head -1)
    [ -n "$g" ] || g=$(gcc -print-file-name=libgomp.so.1)
    args+=(-DTORCH_GOMP_LIBRARY="$g")
  fi
  printf '%s\n' "${args[@]}" ${LAZYJIT_GPU_CHECK_CMAKE_ARGS:-}
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
ph_rebuild_without_graphs() {
  echo "cmake -S . -B $BUILD -DLAZYJIT_CUDA_GRAPHS_BUILD=OFF"
  cmake -S . -B "$BUILD" -DLAZYJIT_CUDA_GRAPHS_BUILD=OFF && ph_build
}
# Test targets named gpu*tests: GPU tests of their own. (cuda_target_tests and
# cuda_cache_tool_tests need no GPU: CI runs them.)
gpu_test_targets() {
  ninja -C "$BUILD" -t targets all 2>/dev/null | grep -oE '^gpu[A-Za-z0-9_]*tests?:' | tr -d ':' | sort -u
}
cpp_tests() {
  local - t seen=" " default="executor_tests=CudaDriver*:ModuleLoadsStandIn*:DeviceLaunch*:CudaGraph*"
  set -f   # the filters' * are gtest's
  # Without libtorch nothing of the CUDA executor is built: lowering_tests shows the pack links.
  [ "$NOTORCH" = 1 ] && default=lowering_tests
  for t in ${LAZYJIT_GPU_CHECK_CPP_TESTS:-$default} $(gpu_test_targets); do
    case "$seen" in *" ${t%%=*} "*) continue ;; esac
    [ "$NOTORCH" = 1 ] && [ "${t%%=*}" = executor_tests ] && continue
    seen+="${t%%=*} "
    echo "$t"
  done
}
# What tests/gpu, the smoke steps and the bench need: the library and the extension.
ph_build() {
  if [ "$NOTORCH" = 1 ]; then echo "without libtorch: nothing for tests/gpu to build"; return 0; fi
  echo "ninja -C $BUILD -j$JOBS -k 0 lazyjit lazyjit_python"
  ninja -C "$BUILD" -j"$JOBS" -k 0 lazyjit lazyjit_python
}
ph_build_cpp_tests() {
  local t=() g
  for g in $(cpp_tests); do t+=("${g%%=*}"); done
  [ ${#t[@]} -gt 0 ] || { echo "no C++ tests to build"; return 0; }
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
      LAZYJIT_CACHE=off "$BUILD/$b" --gtest_brief=1 $f || rc=1
    else
      echo "---- $b: not built"; rc=1
    fi
  done
  return $rc
}
ph_cpu_smoke() {
  cd /tmp && PYTHONPATH="$REPO/python:$SITE" LAZYJIT_CACHE=off "$PY" -c '
import torch, lazyjit
x = torch.randn(1000)
before = lazyjit.metrics().get("compiles", 0)
y = ((x.to("lazyjit") * 2 + 1).relu()).cpu()
assert torch.equal(y, (x * 2 + 1).relu()), "wrong result on the CPU target"
m = lazyjit.metrics()
assert m.get("compiles", 0) > before, "no program compiled: %r" % m
print("cpu_smoke: ok; torch", torch.__version__, "cuda available", torch.cuda.is_available())
'
}
# The CUDA target, one step at a time, each step's outcome on a line of its own
# ("gpu_smoke: <step>: ok|FAIL ..."). A step passes only when its result equals
# CUDA eager and device_kernel_launches grew: lazyjit's kernels ran.
ph_gpu_smoke() {
  cd /tmp && PYTHONPATH="$REPO/python:$SITE" LAZYJIT_CACHE=off LAZYJIT_TARGET=cuda "$PY" -c '
import sys, traceback, torch
import lazyjit
failed = []
def launches():
    n = lazyjit.metrics().get("device_kernel_launches")
    if n is None:
        raise RuntimeError("lazyjit.metrics() has no device_kernel_launches: cannot tell that kernels ran")
    return n
def step(name, fn):
    try:
        n0 = launches()
        r = fn()
        n = launches() - n0
        if n <= 0:
            raise RuntimeError("result right, but no lazyjit kernel was launched (device_kernel_launches did not grow)")
        print("gpu_smoke:", name + ": ok,", n, "kernel launches", "" if r is None else r, flush=True)
    except Exception as e:
        failed.append(name)
        print("gpu_smoke:", name + ": FAIL", type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "", flush=True)
        traceback.print_exc()
print("gpu_smoke: target:", lazyjit.target(), flush=True)
x = torch.randn(4099, device="cuda")
def elements():
    torch.testing.assert_close(((x.to("lazyjit") * 2 + 1).relu()).to("cuda"), (x * 2 + 1).relu())
step("element kernel", elements)
def rows():
    a = torch.randn(37, 1000, device="cuda")
    torch.testing.assert_close(torch.softmax(a.to("lazyjit"), -1).to("cuda"), torch.softmax(a, -1))
step("row kernel (softmax)", rows)
def library():
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    torch.testing.assert_close(((a.to("lazyjit") @ b.to("lazyjit")).relu() * 2).to("cuda"), (a @ b).relu() * 2)
step("ATen matmul + kernel", library)
def backend():
    f = torch.compile(lambda t: torch.tanh(t) * 3 + t.sum(), backend="lazyjit")
    torch.testing.assert_close(f(x), torch.tanh(x) * 3 + x.sum())
    return lazyjit.dynamo.stats()
step("torch.compile backend", backend)
sys.exit(1 if failed else 0)
'
}
# tests/gpu's files in PYTEST_PROCS groups, one line each: the heaviest file
# first, each onto the lightest group. A file's weight is its expected seconds
# alone (GPU_TEST_WEIGHTS: what it runs, judged from its code; the JUnit
# report of a run on a GPU gives the real ones), else 5 s a test. One line,
# the targets as given, for one process, a single file or a test id.
GPU_TEST_WEIGHTS="test_opinfo_cuda.py=150 test_transformers_cuda.py=90 test_cuda_backend.py=90 \
test_device_route.py=80 test_gemm_epilogue_cuda.py=60 test_cuda_graphs.py=40 test_attention_cuda.py=30 \
test_launch_shapes.py=30"
gpu_test_groups() {
  GPU_TEST_WEIGHTS=$GPU_TEST_WEIGHTS "$PY" - "$PYTEST_PROCS" $PYTEST_TARGET <<'EOF'
import glob, os, re, sys
procs, targets = int(sys.argv[1]), sys.argv[2:]
weights = dict(w.split("=") for w in os.environ["GPU_TEST_WEIGHTS"].split())
files = []
for t in targets:
    files += sorted(glob.glob(os.path.join(t, "**", "test_*.py"), recursive=True)) if os.path.isdir(t) else [t]
if procs <= 1 or len(files) <= 1 or any("::" in t for t in targets):
    print(" ".join(targets))
    sys.exit()
def weight(f):
    if os.path.basename(f) in weights:
        return int(weights[os.path.basename(f)])
    with open(f, errors="replace") as fh:
        return 5 * max(1, len(re.findall(r"^def test_", fh.read(), re.M)))
groups = [[0, []] for _ in range(min(procs, len(files)))]
for f in sorted(files, key=lambda f: (-weight(f), f)):
    g = min(groups, key=lambda g: g[0])
    g[0] += weight(f)
    g[1].append(f)
for _, fs in groups:
    print(" ".join(fs))
EOF
}
# The groups' JUnit reports as one (gpu_tests.xml), and their pytest
# summaries summed into one line in pytest's form, printed last.
merge_gpu_tests() {
  "$PY" - "$1" "$OUTDIR/gpu_tests.xml" "$2" <<'EOF'
import glob, os, re, sys
import xml.etree.ElementTree as ET
d, out, secs = sys.argv[1], sys.argv[2], sys.argv[3]
key = lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)
root = ET.Element("testsuites")
for x in sorted(glob.glob(os.path.join(d, "*.xml")), key=key):
    try:
        r = ET.parse(x).getroot()
    except Exception as e:  # a process killed before it wrote it
        print(f"{x}: no JUnit report ({e})")
        continue
    for suite in [r] if r.tag == "testsuite" else r.findall("testsuite"):
        root.append(suite)
ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)
order = ["failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "errors"]
counts, logs = {}, sorted(glob.glob(os.path.join(d, "*.log")), key=key)
for lg in logs:
    with open(lg, errors="replace") as fh:
        lines = [l for l in fh if re.search(r"^(=+ )?(\d+ \w+|no tests ran).* in [\d.]+s", l)]
    if lines:
        for n, k in re.findall(r"(\d+) (\w+)", lines[-1].split(" in ")[0]):
            k = {"error": "errors", "warning": "warnings"}.get(k, k)
            counts[k] = counts.get(k, 0) + int(n)
parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
print(f"==== {', '.join(parts) or 'no tests ran'} in {secs}.00s ({len(logs)} pytest processes) ====")
EOF
}
ph_gpu_tests() {
  local extra=() groups=() pids=() i r rc=0 t0 d="$OUTDIR/gpu_tests.d" threads
  t0=$(date +%s)
  "$PY" -c 'import pytest_timeout' 2>/dev/null && extra+=(--timeout=180)
  mapfile -t groups < <(gpu_test_groups)
  if [ ${#groups[@]} -le 1 ]; then
    # exec: pytest itself takes the SIGINT and writes its summary and report.
    PYTHONPATH="$REPO/python:$SITE" exec "$PY" -m pytest -q -rA -p no:cacheprovider "${extra[@]}" \
      --junitxml="$OUTDIR/gpu_tests.xml" $PYTEST_TARGET
  fi
  # Each file's tests in one process (module fixtures, Dynamo's caches), the
  # files over several: each has its own CUDA context on the one GPU.
  mkdir -p "$d"
  threads=$(( $(nproc) / ${#groups[@]} )); [ "$threads" -ge 1 ] || threads=1
  # The cap's SIGINT, and the SIGTERM after the grace, reach every process of
  # the phase (timeout signals its process group): each pytest writes its
  # summary and report, and this shell waits for them, then merges.
  trap ':' INT TERM
  for i in "${!groups[@]}"; do
    echo "---- pytest process $i: ${groups[$i]}"
    # A script's background job starts with SIGINT ignored, and Python keeps
    # it so: the default restored first, so that pytest takes SIGINT.
    PYTHONPATH="$REPO/python:$SITE" OMP_NUM_THREADS=$threads "$PY" -c \
      'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.executable, [sys.executable, "-m", "pytest"] + sys.argv[1:])' \
      -q -rA -p no:cacheprovider "${extra[@]}" --junitxml="$d/$i.xml" ${groups[$i]} > "$d/$i.log" 2>&1 < /dev/null &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    while :; do
      wait "${pids[$i]}"; r=$?
      [ "$r" -gt 128 ] && kill -0 "${pids[$i]}" 2>/dev/null && continue   # a signal came to this shell
      break
    done
    # pytest: 0 passed, 5 no tests collected; 2 interrupted (SIGINT) outranks 1 failed
    case $r in 0|5) ;; 2) rc=2 ;; *) [ "$rc" = 2 ] || rc=$r ;; esac
  done
  for i in "${!groups[@]}"; do
    echo; echo "==== pytest process $i: ${groups[$i]}"; cat "$d/$i.log"
  done
  merge_gpu_tests "$d" $(( $(date +%s) - t0 ))
  return $rc
}
ph_bench() {
  if [ -f bench/gpu_bench.py ]; then
    echo "---- bench/gpu_bench.py --budget $LAZYJIT_GPU_BENCH_BUDGET_S"
    PYTHONPATH="$REPO/python:$SITE" "$PY" bench/gpu_bench.py --budget "$LAZYJIT_GPU_BENCH_BUDGET_S"
  else
    echo "no GPU bench in bench/"; return 1
  fi
}

summary() {
  cp "$BUILD/CMakeCache.txt" "$BUILD/.ninja_log" "$LAZYJIT_DEVICE_MORE/" 2>/dev/null
  local i mode=""
  [ "$DRY" = 1 ] && mode=" (dry run)"
  {
    echo "lazyjit GPU check$mode: $(elapsed) s in all (no phase starts after $SOFT s, none runs past $HARD s)"
    tail -1 "$OUTDIR/budget.txt" 2>/dev/null
    printf '%-20s %-8s %6s %6s  %s\n' phase status secs cap note
    for i in "${!names[@]}"; do
      printf '%-20s %-8s %6s %6s  %s\n' "${names[$i]}" "${sts[$i]}" "${secs[$i]}" "${caps[$i]}" "${notes[$i]}"
    done
    echo
    grep -E '^(gpu|python|torch|nvcc|gcc|Python.h):' "$LAZYJIT_DEVICE_MORE/env.txt" 2>/dev/null
    echo "build: $(grep -cE '^\[[0-9]+/[0-9]+\]' "$OUTDIR/build.log") steps; failed: $(grep -c '^FAILED:' "$OUTDIR/build.log")"
    # How torch was linked: libtorch's CMake config, or its libraries directly (cmake/torch_link.cmake).
    grep -m1 -o 'lazyjit torch: .*' "$OUTDIR/build.log"
    grep -m5 -A12 '^FAILED:' "$OUTDIR/build.log" | grep -E 'error|FAILED|undefined' | head -20
    grep -m3 -B3 -A20 'CMake Error' "$OUTDIR/build.log" | head -40
    echo "cpp tests: $(grep -E '^----|^\[  (PASSED|FAILED)  \]|tests? ran' "$OUTDIR/tests.log" | tr '\n' ' ')"
    grep -E '^cpu_smoke|^gpu_smoke' "$OUTDIR/tests.log" | head -12
    echo "gpu tests: $(pytest_figures "$OUTDIR/gpu_tests.log"); JUnit: $( [ -s "$OUTDIR/gpu_tests.xml" ] && echo "$OUTDIR/gpu_tests.xml" || echo none)"
    grep -E '^(FAILED|ERROR) ' "$OUTDIR/gpu_tests.log" | head -20
    echo "bench:"
    grep -E '^\||^Every workload|absent|no GPU bench|Error' "$OUTDIR/bench.log" | tail -30
  } > "$OUTDIR/summary.txt" 2>&1
  tar -C "$OUTDIR" -czf "$OUTDIR/more.tar.gz" more 2>/dev/null && rm -rf "$LAZYJIT_DEVICE_MORE"
  cat "$OUTDIR/summary.txt"
  echo "(in $OUTDIR: $(ls "$OUTDIR" | tr '\n' ' '))"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  gc_main "$@"
fi
