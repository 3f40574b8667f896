#!/usr/bin/env bash
# The main job: one checked and timed decode step of the default workload (bench/run.py --main),
# on the GPU when one is present, else on the CPU backend.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash tools/deps.sh main
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then
  dir=build-cuda; bash tools/build.sh build-cuda -DKVATTN_CUDA=ON -DKVATTN_BUILD_TESTS=OFF
else
  dir=build-cpu-main; bash tools/build.sh build-cpu-main -DKVATTN_CUDA=OFF -DKVATTN_BUILD_TESTS=OFF
fi
KVATTN_LIBRARY="$root/$dir/libkvattn.so" PYTHONPATH="$root/python:$root" python3 -m bench.run --main "$@"
