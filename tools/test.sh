#!/usr/bin/env bash
# Runs every test of kvattn that this machine can run:
#  1. the CPU backend, C ABI and validation under AddressSanitizer + UBSan: GoogleTest, then the Python
#     suites (oracle, CPU sweep, API errors) against that sanitized library;
#  2. when nvcc is present, the full build with the CUDA backend (archs 80;90a) and its GoogleTest run;
#     the GPU suites run only where a GPU is (tools/gpu_check.sh on the GPU machine);
#  3. the suites that need torch on the CPU (kvattn.distributed over gloo; the engine call replays on
#     torch CPU tensors), in the torch venv of
#     `tools/deps.sh torch` (installed once per machine, reused), against the sanitized library.
#     KVATTN_TORCH_TESTS=0 skips this stage.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash tools/deps.sh

echo "== clang-format (the committed .clang-format)"
git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' | xargs clang-format --dry-run --Werror

echo "== build (CPU backend, ASan + UBSan)"
bash tools/build.sh build-asan -DKVATTN_CUDA=OFF -DKVATTN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== GoogleTest (sanitized)"
ctest --test-dir build-asan --output-on-failure -j2
echo "== fuzz: the C ABI on the CPU backend, sanitized, against the float64 reference (about 2 minutes)"
# A fixed seed keeps CI reproducible; the long run on demand: docs/DESIGN.md, "Fuzzing".
build-asan/tests/fuzz/kvattn_fuzz --seed "${KVATTN_FUZZ_SEED:-1}" --cases 100000000 --seconds "${KVATTN_FUZZ_SECONDS:-110}" --quiet
echo "== pytest (sanitized library)"
export KVATTN_SWEEP_CASES=${KVATTN_SWEEP_CASES:-4000}  # random feature-product cases (seeds in the names)
# libstdc++ preloaded too: ASan must see it at start to intercept C++ throws in a non-C++ host (python).
LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" KVATTN_LIBRARY="$root/build-asan/libkvattn.so" \
  PYTHONPATH="$root/python:$root" python3 -m pytest -q -p no:cacheprovider tests/python

if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "== build (CUDA backend, archs 80;90a)"
  export PATH="$PATH:/usr/local/cuda/bin"
  start=$(date +%s)
  bash tools/build.sh build-cuda -DKVATTN_CUDA=ON
  echo "full CUDA build took $(( $(date +%s) - start )) s"
  echo "== GoogleTest (CUDA build, CPU backend cases)"
  ctest --test-dir build-cuda --output-on-failure -j2
fi

if [ "${KVATTN_TORCH_TESTS:-1}" != 0 ]; then
  echo "== torch (CPU) suites, sanitized library"
  torch_python=$(bash tools/deps.sh torch | tail -1)
  LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)" \
    KVATTN_LIBRARY="$root/build-asan/libkvattn.so" PYTHONPATH="$root/python:$root" \
    "$torch_python" -m pytest -q -p no:cacheprovider -rs tests/python/test_distributed.py \
    tests/python/test_engine_replays.py
fi
