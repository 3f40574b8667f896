#!/usr/bin/env bash
# deps.sh [main|test]: installs what building (and, for `test`, testing) kvattn needs on a fresh
# Debian/Ubuntu machine; idempotent. Pinned Python packages come from requirements-dev.txt.
set -euo pipefail
mode=${1:-test}
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
root="$(cd "$(dirname "$0")/.." && pwd)"
# Only what is missing, so that a machine without a registry (the GPU machine) but with the packages works.
mods="numpy, ml_dtypes"
[ "$mode" = test ] && mods="$mods, pytest"
if ! python3 -c "import $mods" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt"
fi
