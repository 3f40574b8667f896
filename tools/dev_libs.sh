#!/usr/bin/env bash
# Developer builds of branches for device A/B calls, here (no GPU needed): for each NAME:BRANCH:HEAD_DIM, the
# branch's tree (git archive, no worktree) built for sm_90a, one head dim, bf16 (KVATTN_DEV_DTYPE), into
# .dev/NAME.so.xz (git-ignored; ~9 MB at most, under the 64 MiB a device call carries). ~1.5-3 min each on 2
# cores; an existing .dev/NAME.so.xz is kept if built from the same library sources (.dev/NAME.key: the
# branch's src/, include/ and CMakeLists.txt trees, the head dim and the flags; a commit that changes only
# docs, tests or tools keeps it) unless DEV_LIBS_FORCE=1. .dev/NAME.commit: the commit it was built from.
#   tools/dev_libs.sh main128:main:128 pfp8:pfp8:128
#   tools/dev_libs.sh diag128:main:128:-DKVATTN_PREFILL_FP8_DIAG=1   # a fourth field: CMAKE_CUDA_FLAGS
# The libraries of the pending device calls (tools/calls.sh): `tools/dev_libs.sh $(tools/calls.sh libs)`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .dev
for spec in "$@"; do
  IFS=: read -r name branch dim flags <<< "$spec"  # flags (optional): CMAKE_CUDA_FLAGS, e.g. -DX=1
  out=.dev/$name.so.xz
  commit=$(git rev-parse "$branch")
  key="$(git rev-parse "$branch:src" "$branch:include" "$branch:CMakeLists.txt" | tr '\n' ' ')$dim ${flags:-}"
  if [ -f "$out" ] && [ "$(cat ".dev/$name.key" 2> /dev/null)" = "$key" ] && [ "${DEV_LIBS_FORCE:-0}" != 1 ]; then
    echo "$out: kept (the library sources of $branch at ${commit:0:7}; built from $(cut -c1-7 ".dev/$name.commit"))"
    continue
  fi
  src=/tmp/kvattn-devlib/$name
  rm -rf "$src" && mkdir -p "$src"
  git archive "$branch" | tar -x -C "$src"
  t0=$(date +%s)
  cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVATTN_CUDA=ON -DKVATTN_CUDA_ARCHS=90a \
    -DKVATTN_DEV_HEAD_DIM="$dim" -DKVATTN_DEV_DTYPE=bf16 ${flags:+"-DCMAKE_CUDA_FLAGS=$flags"} > "$src/cmake.log" 2>&1 ||
    { tail -20 "$src/cmake.log"; exit 1; }
  ninja -C "$src/build" kvattn > "$src/build.log" 2>&1 || { tail -20 "$src/build.log"; exit 1; }
  xz -T2 -c "$src/build/libkvattn.so" > "$out"
  echo "$commit" > ".dev/$name.commit"
  echo "$key" > ".dev/$name.key"
  echo "$out: $branch (${commit:0:7}) d $dim, $(($(date +%s) - t0)) s, $(du -h "$out" | cut -f1)"
done
