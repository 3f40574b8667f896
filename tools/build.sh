#!/usr/bin/env bash
# build.sh DIR [cmake args...]: configure and build libkvattn into DIR (2 jobs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"; shift
cmake -S "$root" -B "$dir" "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
cmake --build "$dir" -j"${KVATTN_JOBS:-2}"
