#!/usr/bin/env bash
# The GPU machine's software, rehearsed on a machine without a GPU: builds this
# working tree against torch 2.11.0 (PyPI's Linux wheel: a CUDA 13.0 build,
# +cu130, as on the GPU machine) and transformers 5.17.0, with the CUDA 13.0
# toolkit from NVIDIA's wheels, configured as scripts/gpu_check.sh configures
# on a GPU machine, and runs the C++ suite, the Python suite's core files and
# tests/cuda_sim there.
#
#   bash scripts/rehearse_gpu_software.sh                   # about 5 GB of wheels the first time
#   bash scripts/rehearse_gpu_software.sh --configure-only  # venv, toolkit and both configures: a minute
#   bash scripts/rehearse_gpu_software.sh --head            # the committed tree (HEAD), not the working tree
#
# Idempotent: the venv, the toolkit folder, the tree's copy and the build are
# reused when present (a second run rebuilds what changed). One line per step,
# then a summary; the tools' output is in the step logs under $DIR/logs. Not
# part of scripts/test.sh (it downloads gigabytes). docs/gpu.md ("torch 2.11
# rehearsed without a GPU") records its last result.
#
# Steps:
#   venv       .venv-torch211: torch 2.11.0, transformers 5.17.0, the CUDA 13.0
#              toolkit wheels (nvcc, runtime, cccl, crt, nvvm) and the suite's packages
#   versions   torch must be 2.11.0 and a CUDA build; `import torch` needs no GPU
#   toolkit    $DIR/cuda-13.0: the wheels laid out as /usr/local/cuda is (bin/,
#              include/, nvvm/, lib64/ with the unversioned .so links a toolkit has)
#   tree       the working tree (tracked and untracked-not-ignored files, as a GPU
#              machine gets it), or with --head the committed tree, copied to
#              $DIR/src, only the files whose content changed: the extension is
#              written next to the package sources, so the real tree's
#              python/lazyjit is left alone
#   configure  cmake as gpu_check.sh's configure: Release, nvcc and the toolkit
#              named, TORCH_CUDA_ARCH_LIST=9.0 (an H100's); prints how torch was
#              linked: libtorch's CMake config, or its libraries directly
#              (cmake/torch_link.cmake, LAZYJIT_TORCH_LINK)
#   fallback   a second configure (configure only) with no toolkit named and none
#              on PATH: libtorch's config cannot set CUDA up, and torch must still
#              be found, linked directly
#   build      ninja: everything (liblazyjit.so is linked with -z defs)
#   symbols    ldd -r: no undefined symbol in liblazyjit.so, none but Python's in _C
#   install    scripts/venv_install.sh into the venv (editable, from $DIR/src)
#   ctest      the C++ suite (but one test that needs line tables: CTEST_EXCLUDE)
#   pytest     the Python suite's core files (CORE_TESTS below)
#   cuda_sim   tests/cuda_sim
#
# Environment: LAZYJIT_REHEARSE_DIR (build-torch211), LAZYJIT_REHEARSE_VENV
# (.venv-torch211), LAZYJIT_JOBS (2), LAZYJIT_REHEARSE_NICE (10: builds and
# tests run under nice), LAZYJIT_REHEARSE_PYTEST_ARGS (extra pytest arguments).
# Python is this machine's python3 (the GPU machine has 3.12; this script makes
# its venv with whatever python3 is here, and says which).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$(realpath -m "${LAZYJIT_REHEARSE_DIR:-build-torch211}")
VENV=$(realpath -m "${LAZYJIT_REHEARSE_VENV:-.venv-torch211}")
JOBS=${LAZYJIT_JOBS:-2}
NICE="nice -n ${LAZYJIT_REHEARSE_NICE:-10}"
PY=$VENV/bin/python
SRC=$DIR/src BUILD=$DIR/src/build TK=$DIR/cuda-13.0 LOGS=$DIR/logs
CONFIGURE_ONLY=0 TREE=worktree
for a in "$@"; do
  case $a in
    --configure-only) CONFIGURE_ONLY=1 ;;
    --head) TREE=head ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "rehearse_gpu_software.sh: unknown argument '$a' (--configure-only, --head, --help)"; exit 2 ;;
  esac
done
mkdir -p "$DIR" "$LOGS"
if [ "$TREE" = head ]; then TREE_NAME="HEAD ($(git rev-parse --short HEAD))"
else TREE_NAME="the working tree (HEAD $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' + changes'))"; fi

TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=5.17.0
# What the GPU machine has (torch, transformers), the toolkit's wheels at its
# CUDA (13.0), and the rest of what the suite imports (scripts/setup.sh).
PY_PACKAGES=("torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION" "pybind11>=2.12" pytest numpy
  expecttest hypothesis "parameterized==0.9.0" "accelerate==1.16.0" "setuptools>=70,<82"
  "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"
  "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*")
# The Python suite's core files: the device, the ops, Dynamo, torch.accelerator
# and the autoload, transformers, the attention route, CUDA graphs' policy.
CORE_TESTS=(test_device test_ops test_semantics test_trace test_step_mode test_interop test_target
  test_accelerator test_autoload test_device_module test_dynamo_backend test_dynamo_device
  test_dynamo_models test_recompiles test_compile_aliasing test_dynamic_shapes test_transformers
  test_attention_route test_graph_replay test_backward_ops test_cat)

names=() sts=() secs=() notes=()
T0=$(date +%s)
FAILED=0
# step NAME NOTE-FUNCTION CMD...: one line, "[rehearse] NAME ... ok|FAILED (T s): note",
# the command's output in $LOGS/NAME.log. NOTE-FUNCTION (or -) prints the note from the log.
step() {
  local name=$1 notef=$2 t0 rc=0 note=""; shift 2
  t0=$(date +%s)
  printf '[rehearse] %-9s ... ' "$name"
  "$@" > "$LOGS/$name.log" 2>&1 < /dev/null || rc=$?
  [ "$notef" = - ] || note=$("$notef" "$LOGS/$name.log" 2>/dev/null)
  local st=ok; [ "$rc" -eq 0 ] || { st="FAILED (exit $rc)"; FAILED=1; }
  echo "$st ($(( $(date +%s) - t0 )) s)${note:+: $note}"
  names+=("$name"); sts+=("$st"); secs+=("$(( $(date +%s) - t0 ))"); notes+=("$note")
  [ "$rc" -eq 0 ] || { echo "---- the last 25 lines of $LOGS/$name.log"; tail -n 25 "$LOGS/$name.log"; echo "----"; }
  return "$rc"
}

do_venv() {
  [ -x "$PY" ] || python3 -m venv "$VENV" || return 1
  local stamp=$VENV/.lazyjit-rehearse-stamp want
  want=$(printf '%s\n' "${PY_PACKAGES[@]}")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then echo "up to date"; return 0; fi
  # (A pip config with a constraints file capping torch below 2.11 would refuse this.)
  "$PY" -m pip install --progress-bar off "${PY_PACKAGES[@]}" && printf '%s' "$want" > "$stamp"
}
note_venv() { grep -q '^up to date' "$1" && echo "reused $VENV" || echo "installed into $VENV"; }

do_versions() {
  "$PY" - "$TORCH_VERSION" "$TRANSFORMERS_VERSION" <<'EOF'
import platform, sys, importlib.metadata as md
import torch, transformers
want_torch, want_tf = sys.argv[1:]
print(f"python {platform.python_version()} torch {torch.__version__} cuda {torch.version.cuda} "
      f"transformers {transformers.__version__} nvcc-wheel {md.version('nvidia-cuda-nvcc')} "
      f"gpu {torch.cuda.is_available()}")
assert torch.__version__.split("+")[0] == want_torch, f"torch is {torch.__version__}, not {want_torch}"
assert torch.version.cuda, f"torch {torch.__version__} is not a CUDA build: the configure would not be rehearsed"
assert transformers.__version__ == want_tf, f"transformers is {transformers.__version__}, not {want_tf}"
EOF
}
note_versions() { head -1 "$1"; }

# The toolkit wheels (nvidia/cu13/ in site-packages) as /usr/local/cuda lays a
# toolkit out. bin/ is a folder of links, not a link: nvcc finds lib64/ and
# nvvm/ from the folder it was started from (bin/..).
do_toolkit() {
  local cu
  cu=$("$PY" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))') || return 1
  [ -x "$cu/bin/nvcc" ] || { echo "no nvcc in $cu/bin"; return 1; }
  rm -rf "$TK" && mkdir -p "$TK/bin" "$TK/lib64" || return 1
  ln -s "$cu/include" "$TK/include" && ln -s "$cu/nvvm" "$TK/nvvm" && ln -s lib64 "$TK/lib" || return 1
  local f b
  for f in "$cu"/bin/*; do ln -s "$f" "$TK/bin/"; done
  for f in "$cu"/lib/*; do
    b=$(basename "$f"); ln -s "$f" "$TK/lib64/$b"
    case $b in *.so.*) [ -e "$TK/lib64/${b%%.so.*}.so" ] || ln -s "$f" "$TK/lib64/${b%%.so.*}.so" ;; esac
  done
  "$TK/bin/nvcc" --version | tail -1
}
note_toolkit() { echo "$TK: $(tail -1 "$1")"; }

do_tree() {
  local stage=$DIR/stage f n=0
  rm -rf "$stage" && mkdir -p "$stage" "$SRC" || return 1
  if [ "$TREE" = head ]; then
    git archive HEAD | tar -C "$stage" -xf - || return 1
  else
    git ls-files -z --cached --others --exclude-standard |
      tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$stage" -xf - || return 1
  fi
  (cd "$stage" && find . -type f | sed 's|^\./||' | sort) > "$DIR/files.list"
  # Only files whose content changed are copied (their mtime is now's, so ninja
  # rebuilds what they touch; an unchanged file keeps its old one).
  while IFS= read -r f; do
    if ! cmp -s "$stage/$f" "$SRC/$f"; then
      mkdir -p "$SRC/$(dirname "$f")" && cp "$stage/$f" "$SRC/$f" || return 1
      n=$((n + 1))
    fi
  done < "$DIR/files.list"
  # Files the tree no longer has (moved, deleted): removed from the copy, outside
  # the build and what the build writes into the package.
  local gone
  gone=$(cd "$SRC" && find . -type f ! -path './build/*' ! -path './python/lazyjit/lib/*' ! -path './python/lazyjit/bin/*' \
           ! -name '_C*.so' ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -path './.pytest_cache/*' ! -path './.hypothesis/*' \
           | sed 's|^\./||' | sort | comm -23 - "$DIR/files.list")
  if [ -n "$gone" ]; then (cd "$SRC" && printf '%s\n' "$gone" | xargs -d '\n' rm -f); fi
  rm -rf "$stage"
  echo "$TREE_NAME: $(wc -l < "$DIR/files.list") files, $n new or changed, $(printf '%s' "$gone" | grep -c .) removed"
}
note_tree() { tail -1 "$1"; }

# gpu_check.sh's cmake_args on a GPU machine, with this toolkit for /usr/local/cuda.
cuda_env() { CUDA_HOME=$TK PATH="$TK/bin:$PATH" CMAKE_POLICY_VERSION_MINIMUM=3.5 TORCH_CUDA_ARCH_LIST=9.0 "$@"; }
do_configure() {
  cuda_env $NICE cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAZYJIT_PYTHON="$PY" -DLAZYJIT_VENV="$VENV" \
      -DCMAKE_CUDA_COMPILER="$TK/bin/nvcc" -DCUDAToolkit_ROOT="$TK" -DCUDA_TOOLKIT_ROOT_DIR="$TK"
}
# "-- lazyjit torch: 2.11.0+cu130 (CUDA 13.0) linked through ..."
note_link() {
  grep -q 'lazyjit torch: ' "$1" || { echo "torch was not linked (the configure stopped before)"; return; }
  grep -m1 -o 'lazyjit torch: .*' "$1" | sed 's/^lazyjit torch: //'
  grep -q 'lazyjit CUDA graphs: .*libtorch_cuda' "$1" && echo "; CUDA graphs built"
}
note_configure() { echo "$(note_link "$1" | tr -d '\n')"; }

# No toolkit named, none on PATH, no CUDA_HOME: libtorch's config cannot set
# CUDA up (it stops with a fatal error), and the configure must still have torch.
do_fallback() {
  rm -rf "$DIR/fallback"
  env -u CUDA_HOME -u CUDA_PATH PATH=/usr/bin:/bin $NICE cmake -S "$SRC" -B "$DIR/fallback" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DLAZYJIT_PYTHON="$PY" -DLAZYJIT_VENV="$VENV" > "$DIR/fallback.cmake.log" 2>&1
  local rc=$?
  cat "$DIR/fallback.cmake.log"
  [ "$rc" = 0 ] || return "$rc"
  # The link line of liblazyjit.so (the last command building the target) must name libtorch.
  ninja -C "$DIR/fallback" -t commands lazyjit | tail -1 | grep -q '/libtorch\.so' ||
    { echo "liblazyjit.so's link line names no libtorch.so"; return 1; }
}
note_fallback() { note_link "$1" | tr -d '\n'; }

do_build() {
  cuda_env $NICE ninja -C "$BUILD" -j"$JOBS" -k 0
}
note_build() {
  local n; n=$(grep -c 'FAILED: ' "$1")
  if [ "$n" -gt 0 ]; then echo "$n failed steps: $(grep 'FAILED: ' "$1" | head -3 | sed 's/FAILED: //' | tr '\n' ' ')"
  else echo "$(grep -c '^\[' "$1") build steps"; fi
}

do_symbols() {
  local lib=$SRC/python/lazyjit/lib/liblazyjit.so ext rc=0 u
  ext=$(ls "$SRC"/python/lazyjit/_C*.so 2>/dev/null | head -1)
  [ -f "$lib" ] && [ -n "$ext" ] || { echo "not built: $lib or _C"; return 1; }
  u=$(LD_LIBRARY_PATH="$SRC/python/lazyjit/lib" ldd -r "$lib" 2>&1 | grep -E 'undefined symbol|not found')
  if [ -n "$u" ]; then echo "liblazyjit.so: $(printf '%s\n' "$u" | wc -l) unresolved:"; printf '%s\n' "$u" | head -20; rc=1; fi
  # The extension's Python symbols come from the interpreter that loads it.
  u=$(ldd -r "$ext" 2>&1 | grep -E 'undefined symbol|not found' | grep -vE 'undefined symbol: _?Py|undefined symbol: _Py')
  if [ -n "$u" ]; then echo "_C: $(printf '%s\n' "$u" | wc -l) unresolved (besides Python's):"; printf '%s\n' "$u" | head -20; rc=1; fi
  readelf -d "$lib" | grep -q 'NEEDED.*libtorch_cuda' && echo "liblazyjit.so needs libtorch_cuda.so"
  [ "$rc" = 0 ] && echo "no undefined symbols (liblazyjit.so; _C besides Python's)"
  return "$rc"
}
note_symbols() { tail -1 "$1"; }

do_install() { (cd "$SRC" && LAZYJIT_SETUP_LOG=/dev/null bash scripts/venv_install.sh "$VENV"); }

# Release, as the GPU check builds: no line tables, so the one test that reads a
# C++ caller's file and line from them (addr2line) is left out.
CTEST_EXCLUDE=Lazyjit.SyncsAndFallbacksNameTheCallersFileAndLine
# With the toolkit in the environment: install_cmake_consumer's find_package(lazyjit)
# runs libtorch's config, which needs one for a CUDA torch.
do_ctest() { (cd "$BUILD" && cuda_env $NICE ctest -j"$JOBS" --output-on-failure --timeout 900 -E "$CTEST_EXCLUDE"); }
note_ctest() { echo "$(grep -E 'tests passed|tests failed' "$1" | tail -1) (left out: $CTEST_EXCLUDE, needs -g)"; }

run_pytest() {
  (cd "$SRC" && PYTHONPATH=python $NICE "$PY" -m pytest -q -p no:logging -p no:cacheprovider "$@" ${LAZYJIT_REHEARSE_PYTEST_ARGS:-})
}
do_pytest() { local t f=(); for t in "${CORE_TESTS[@]}"; do f+=("tests/python/$t.py"); done; run_pytest "${f[@]}"; }
do_cuda_sim() { run_pytest tests/cuda_sim; }
note_pytest() { grep -E '[0-9]+ (passed|failed|errors?)|no tests ran' "$1" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//'; }

step venv note_venv do_venv || { echo "[rehearse] no venv: stopping"; exit 1; }
step versions note_versions do_versions || exit 1
step toolkit note_toolkit do_toolkit
step tree note_tree do_tree || exit 1
step configure note_configure do_configure
configured=$?
step fallback note_fallback do_fallback
if [ "$configured" = 0 ] && [ "$CONFIGURE_ONLY" = 0 ]; then
  step build note_build do_build
  step symbols note_symbols do_symbols
  step install - do_install
  step ctest note_ctest do_ctest
  step pytest note_pytest do_pytest
  step cuda_sim note_pytest do_cuda_sim
fi

{
  echo
  echo "rehearsal of the GPU machine's software, $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - T0 )) s"
  echo "  $(head -1 "$LOGS/versions.log")"
  echo "  tree: $TREE_NAME"
  for i in "${!names[@]}"; do printf '  %-9s %-18s %5s s  %s\n' "${names[$i]}" "${sts[$i]}" "${secs[$i]}" "${notes[$i]}"; done
  if [ "$FAILED" = 0 ] && [ "$configured" = 0 ]; then echo "rehearsal: ok"; else echo "rehearsal: FAILED"; fi
} | tee "$DIR/summary.txt"
[ "$FAILED" = 0 ] && [ "$configured" = 0 ]
