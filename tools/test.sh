#!/usr/bin/env bash
# Runs the tests of kvattn that need no GPU:
#  1. clang-format;
#  2. the CPU backend, C ABI and validation under AddressSanitizer + UBSan: GoogleTest, then the Python
#     suites (oracle, CPU sweep, API errors) against that sanitized library;
#  3. the examples (examples/): the numpy decode loop, the C program, the torch loop (compiled; run where
#     torch is importable);
#  4. the suites that need torch on the CPU (kvattn.distributed over gloo; the engine call replays on
#     torch CPU tensors; kvattn inside transformers' models; the optional stable-ABI torch op, built here;
#     caches with negative strides given through torch tensors' descriptors),
#     in the torch venv of `tools/deps.sh torch` (installed once per machine, reused), against the sanitized
#     library; KVATTN_TORCH_TESTS=0 skips this stage;
#  5. only with --cuda-build or KVATTN_TEST_CUDA_BUILD=1 (CI sets it, .ci/run), and when nvcc is present:
#     every CUDA source compiled once (archs 80;90a), with a progress line a minute. Nothing is run from it
#     (no GPU here); the GPU suites run on the GPU machine (tools/gpu_check.sh).
# Environment: KVATTN_JOBS build jobs (2), KVATTN_SWEEP_CASES random sweep cases (4000).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cuda_build=${KVATTN_TEST_CUDA_BUILD:-0}
for arg in "$@"; do
  case "$arg" in
    --cuda-build) cuda_build=1 ;;
    *) echo "tools/test.sh: unknown argument $arg (only --cuda-build)" >&2; exit 2 ;;
  esac
done
bash tools/deps.sh

echo "== clang-format (the committed .clang-format)"
git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' '*.c' | xargs clang-format --dry-run --Werror

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
preload="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)"
LD_PRELOAD="$preload" KVATTN_LIBRARY="$root/build-asan/libkvattn.so" \
  PYTHONPATH="$root/python:$root" python3 -m pytest -q -p no:cacheprovider tests/python

echo "== examples (sanitized library)"
LD_PRELOAD="$preload" KVATTN_LIBRARY="$root/build-asan/libkvattn.so" PYTHONPATH="$root/python" \
  python3 examples/numpy_decode.py
cc -std=c11 -Wall -Wextra -Werror -fsanitize=address,undefined -Iinclude examples/decode.c -o build-asan/decode_example \
  -Lbuild-asan -lkvattn -Wl,-rpath,"$root/build-asan" -lm
build-asan/decode_example
python3 -m py_compile examples/torch_paged_decode.py
if python3 -c "import torch" 2>/dev/null; then
  LD_PRELOAD="$preload" KVATTN_LIBRARY="$root/build-asan/libkvattn.so" PYTHONPATH="$root/python" \
    python3 examples/torch_paged_decode.py
else
  echo "examples/torch_paged_decode.py: compiled; not run (torch is not importable here)"
fi

if [ "${KVATTN_TORCH_TESTS:-1}" != 0 ]; then
  echo "== torch (CPU) suites, sanitized library"
  torch_python=$(bash tools/deps.sh torch | tail -1)
  # The optional stable-ABI torch op (tools/build_torch_op.sh), built against the venv's torch, tested there.
  torch_op="$root/build-asan/_kvattn_stable.so"
  bash tools/build_torch_op.sh "$torch_python" "$torch_op" > /dev/null
  KVATTN_TORCH_OP="$torch_op" LD_PRELOAD="$preload" KVATTN_LIBRARY="$root/build-asan/libkvattn.so" \
    PYTHONPATH="$root/python:$root" "$torch_python" -m pytest -q -p no:cacheprovider -rs \
    tests/python/test_distributed.py tests/python/test_engine_replays.py \
    tests/python/test_transformers_integration.py tests/python/test_torch_stable_op.py \
    tests/python/test_transformers_paged.py tests/python/test_ragged.py tests/python/test_engine_replays_ragged.py \
    tests/python/test_negative_strides.py tests/python/test_torch_inputs.py \
    tests/python/test_fa3_shim.py tests/python/test_bench_driver.py
fi

nvcc_path=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ "$cuda_build" != 1 ]; then
  echo "== CUDA build: not run (pass --cuda-build or KVATTN_TEST_CUDA_BUILD=1; CI does)"
elif [ -z "$nvcc_path" ]; then
  echo "== CUDA build: not run (no nvcc on this machine)"
else
  echo "== build (CUDA backend, archs 80;90a): every CUDA source compiled once, nothing run (no GPU here)"
  export PATH="$PATH:$(dirname "$nvcc_path")"
  total=$(find src/cuda -name '*.cu' | wc -l)
  start=$(date +%s)
  bash tools/build.sh build-cuda -DKVATTN_CUDA=ON -DKVATTN_BUILD_TESTS=OFF &
  build=$!
  # nvcc prints nothing while it compiles a file (minutes each): say where the build is once a minute.
  while kill -0 "$build" 2>/dev/null; do
    for _ in $(seq 60); do kill -0 "$build" 2>/dev/null && sleep 1; done
    if kill -0 "$build" 2>/dev/null; then
      done_count=$(find build-cuda -name '*.cu.o' 2>/dev/null | wc -l)
      echo "   ... CUDA build: $done_count of $total .cu files compiled, $(( $(date +%s) - start )) s"
    fi
  done
  wait "$build"
  echo "full CUDA build took $(( $(date +%s) - start )) s"
fi
