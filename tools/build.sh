#!/usr/bin/env bash
# build.sh DIR [cmake args...]: configure and build libkvattn into DIR (2 jobs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"; shift
# The system g++ when there is one: a toolchain that links libstdc++ statically into the library crashes
# in a Python process that has loaded another libstdc++ (seen on the GPU image's /opt/gcc).
compilers=()
if [ -z "${CXX:-}" ] && [ -x /usr/bin/g++ ]; then
  compilers=(-DCMAKE_CXX_COMPILER=/usr/bin/g++ -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/g++)
fi
cmake -S "$root" -B "$dir" "${compilers[@]}" "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"${KVATTN_JOBS:-2}"
