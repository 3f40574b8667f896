#!/usr/bin/env bash
# Builds the optional torch op kvattn_stable::fwd (src/torch/stable_op.cpp) against torch's stable ABI:
# one build for every torch >= 2.10 (TORCH_TARGET_VERSION 2.10). Needs g++ and an importable torch
# (its headers; libtorch_cpu and libc10 to link against). Without it the package keeps the ctypes path.
#   bash tools/build_torch_op.sh [PYTHON] [OUTPUT]   (defaults: python3, python/kvattn/_kvattn_stable.so)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
output=${2:-python/kvattn/_kvattn_stable.so}
torch_dir=$("$python" -c "import os, torch; print(os.path.dirname(torch.__file__))")
${CXX:-g++} -O2 -std=c++17 -shared -fPIC -fvisibility=hidden -Wall -Wextra \
  -DTORCH_TARGET_VERSION=0x020a000000000000 -Iinclude -isystem "$torch_dir/include" \
  src/torch/stable_op.cpp -o "$output" -L"$torch_dir/lib" -ltorch_cpu -lc10 -ldl
echo "$output"
