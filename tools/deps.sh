#!/usr/bin/env bash
# deps.sh [main|test|torch|sass]: installs what building (and, for `test`, testing) kvattn needs on a fresh
# Debian/Ubuntu machine; idempotent. Pinned Python packages come from requirements-dev.txt.
# `torch`: a venv with requirements-dev.txt and requirements-torch.txt (pinned torch from PyPI), for every
# suite that needs torch on a CPU machine; its python's path is the last line printed. One reusable place,
# shared by checkouts and CI runs on this machine: $KVATTN_TORCH_VENV, default ~/.cache/kvattn/venv-torch-<pin>.
set -euo pipefail
mode=${1:-test}
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "$mode" = torch ]; then
  pin=$(grep -m1 '^torch==' "$root/requirements-torch.txt")
  venv=${KVATTN_TORCH_VENV:-$HOME/.cache/kvattn/venv-torch-${pin#torch==}}
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  flock 9  # one installer at a time; the others wait and reuse its venv
  if ! "$venv/bin/python" -c "import torch, numpy, ml_dtypes, pytest" 2>/dev/null; then
    python3 -c "import ensurepip" 2>/dev/null || {
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; }
    echo "deps: installing $pin into $venv (PyPI; ~4.6 GB)" >&2
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt" \
      -r "$root/requirements-torch.txt" >&2
    echo "deps: torch venv ready in $(( $(date +%s) - start )) s" >&2
  fi
  # Pins added to requirements-torch.txt after a venv was made (transformers): installed into it as they
  # are, without rebuilding the venv (pip keeps the torch it has, which satisfies the pin).
  tf_pin=$(grep -m1 '^transformers==' "$root/requirements-torch.txt" || true)
  if [ -n "$tf_pin" ] && ! "$venv/bin/python" -c \
      "import sys, transformers; sys.exit(transformers.__version__ != '${tf_pin#transformers==}')" 2>/dev/null; then
    echo "deps: installing $tf_pin into $venv (PyPI)" >&2
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements-torch.txt" >&2
  fi
  echo "$venv/bin/python"
  exit 0
fi
if [ "$mode" = sass ]; then
  # cuobjdump and nvdisasm for tools/sass_diff.py where the CUDA toolkit lacks them: the pinned PyPI wheels of
  # requirements-sass.txt, in one reusable place; the binary's path is the last line printed.
  pin=$(grep -m1 '^nvidia-cuda-cuobjdump==' "$root/requirements-sass.txt")
  dir=$HOME/.cache/kvattn/sass-tools-${pin#*==}
  bin=$(find "$dir" -name cuobjdump -type f 2>/dev/null | head -1 || true)
  if [ -z "$bin" ] || [ ! -f "$(dirname "$bin")/nvdisasm" ]; then  # cuobjdump -sass runs nvdisasm
    rm -rf "$dir" && python3 -m pip install -q --disable-pip-version-check --no-deps --target "$dir" -r "$root/requirements-sass.txt" >&2
    bin=$(find "$dir" -name cuobjdump -type f | head -1)
    chmod +x "$bin" "$(dirname "$bin")/nvdisasm"
  fi
  echo "$bin"
  exit 0
fi
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
if [ "$mode" = test ]; then
  [ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
  command -v clang-format >/dev/null || need_apt+=(clang-format)
  command -v git >/dev/null || need_apt+=(git)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# Only what is missing, so that a machine without a registry (the GPU machine) but with the packages works.
mods="numpy, ml_dtypes"
[ "$mode" = test ] && mods="$mods, pytest"
if ! python3 -c "import $mods" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt"
fi
