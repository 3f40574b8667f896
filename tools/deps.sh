#!/usr/bin/env bash
# Installs what building and testing kvattn needs on a fresh Debian/Ubuntu machine (idempotent).
set -euo pipefail
need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
command -v clang-format >/dev/null || need_apt+=(clang-format)
command -v git >/dev/null || need_apt+=(git)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
python3 -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt" 2>&1 | grep -v "Running pip as the 'root' user" || true
