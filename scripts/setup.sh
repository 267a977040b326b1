#!/usr/bin/env bash
# Installs everything lazyjit needs on a fresh Debian machine. Idempotent: on a
# set-up machine it checks and returns in a few seconds, changing nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

LLVM_VERSION=19
TORCH_VERSION=2.13.0
APT_PACKAGES=(cmake ninja-build ccache g++ "llvm-${LLVM_VERSION}-dev" libxxhash-dev libtbb-dev libgtest-dev zlib1g-dev libzstd-dev libedit-dev libcurl4-openssl-dev libffi-dev libxml2-dev nlohmann-json3-dev libssl-dev libcli11-dev graphviz chromium)
PY_PACKAGES=("torch==${TORCH_VERSION}" "pybind11>=2.12" pytest numpy "transformers==5.24.0" expecttest hypothesis)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] apt: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.lazyjit-setup-stamp
want="$(printf '%s\n' "${PY_PACKAGES[@]}")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[setup] pip: installing ${PY_PACKAGES[*]}"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "${PY_PACKAGES[@]}"
  printf '%s' "$want" > "$stamp"
fi
echo "[setup] ok: $(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'), llvm $(llvm-config-${LLVM_VERSION} --version)"
