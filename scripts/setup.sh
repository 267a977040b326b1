#!/usr/bin/env bash
# Installs everything lazyjit needs on a fresh Debian machine. Idempotent: on a
# set-up machine it checks and returns in a few seconds, changing nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
t_setup=$(_lazyjit_now)

LLVM_VERSION=19
TORCH_VERSION=2.13.0
APT_PACKAGES=(cmake ninja-build ccache g++ "llvm-${LLVM_VERSION}-dev" libxxhash-dev libtbb-dev libgtest-dev zlib1g-dev libzstd-dev libedit-dev libcurl4-openssl-dev libffi-dev libxml2-dev nlohmann-json3-dev libssl-dev libcli11-dev graphviz chromium redis-server libhiredis-dev)
# nvidia-cuda-nvcc (ptxas) and nvidia-nvvm (libdevice): the CUDA target compiles
# PTX to cubins without a GPU (targets/cuda/toolkit.h; CMake finds them in .venv).
# parameterized and requests-mock: what diffusers' own tests import
# (tests/third_party/diffusers, run by tests/python/test_diffusers_suite.py).
PY_PACKAGES=("torch==${TORCH_VERSION}" "pybind11>=2.12" pytest numpy "transformers==5.24.0" "diffusers==0.42.1" expecttest hypothesis
  "parameterized==0.9.0" "requests-mock==1.12.1"
  "accelerate==1.16.0" "nvidia-cuda-nvcc==13.0.*" "nvidia-nvvm==13.0.*")

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  apt_install() {
    $SUDO apt-get update &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
  }
  step setup "apt: installing ${missing[*]}" apt_install
fi

if [ ! -x .venv/bin/python ]; then
  step setup "creating .venv ($(python3 --version))" python3 -m venv .venv
fi
stamp=.venv/.lazyjit-setup-stamp
want="$(printf '%s\n' "${PY_PACKAGES[@]}")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  pip_install() {
    .venv/bin/python -m pip install --progress-bar off --upgrade pip &&
      .venv/bin/python -m pip install --progress-bar off "${PY_PACKAGES[@]}"
  }
  step setup "pip: installing ${PY_PACKAGES[*]} into .venv" pip_install
  printf '%s' "$want" > "$stamp"
fi
# Optional: what tools/hf_suite.py (transformers' own model tests on lazyjit) needs
# beyond the above. Not part of CI; installed only with LAZYJIT_HF_SUITE=1.
HF_SUITE_PACKAGES=("pytest-xdist==3.8.0" "pytest-timeout==2.4.0" "parameterized==0.9.0" "httpx==0.28.1")
if [ "${LAZYJIT_HF_SUITE:-0}" = 1 ]; then
  hf_stamp=.venv/.lazyjit-hf-suite-stamp
  hf_want="$(printf '%s\n' "${HF_SUITE_PACKAGES[@]}")"
  if [ ! -f "$hf_stamp" ] || [ "$(cat "$hf_stamp")" != "$hf_want" ]; then
    step setup "pip (LAZYJIT_HF_SUITE=1): installing ${HF_SUITE_PACKAGES[*]}" \
      .venv/bin/python -m pip install --progress-bar off "${HF_SUITE_PACKAGES[@]}"
    printf '%s' "$hf_want" > "$hf_stamp"
  fi
fi
echo "[setup] ok: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'), llvm $(llvm-config-${LLVM_VERSION} --version) (checked in $(_lazyjit_since "$t_setup"))"
