#!/usr/bin/env bash
# FlashAttention-3's own forward tests (hopper/test_flash_attn.py: kvcache, varlen output, output, combine;
# backward disabled), unmodified, against kvattn: the acceptance test of the drop-in (CONTRACT.md).
# The test files are fetched, never committed; the GPU machine has no network, so there are two halves:
#
#   bash tools/fa3_tests.sh prepare DIR FA3_CHECKOUT   here: copies hopper/{test_flash_attn,padding,
#                                                      test_util}.py from a git clone (or bare mirror) of
#                                                      Dao-AILab/flash-attention into DIR, with the einops
#                                                      wheel (PyPI) that they import
#   bash tools/fa3_tests.sh run DIR                    on the GPU machine, from the repository root
#   KVATTN_FA3_DEVICE=cpu bash tools/fa3_tests.sh run DIR   the same on the CPU backend (torch CPU tensors;
#                                                      the fp8 cases and cases with seqlen_q * seqlen_k >
#                                                      KVATTN_FA3_MAX_WORK (8192) left out), with torch
#
# `run` puts tools/fa3_shim first on the path: its flash_attn_interface.py is kvattn (so the test file's
# `from flash_attn_interface import ...` gets kvattn), its flash_attn/layers/rotary.py is the reference
# rotary the kvcache tests use (written here from CONTRACT.md), and its conftest.py samples
# KVATTN_FA3_SAMPLE cases per test function (default 40; 0 = all). Knobs: KVATTN_LIBRARY
# (build-cuda/libkvattn.so; build/libkvattn.so on the CPU), PYTHON (python3), KVATTN_FA3_K (the -k
# selection), KVATTN_FA3_TIMEOUT (480 s), KVATTN_FA3_SEED (0).
# Logs to $OUT/fa3_tests.log; the last line is pytest's summary.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode=${1:-}
dir=${2:-}
FILES=(test_flash_attn.py padding.py test_util.py)

case "$mode" in
prepare)
  src=${3:?usage: fa3_tests.sh prepare DIR FA3_CHECKOUT}
  mkdir -p "$dir"
  gitdir=$src/.git
  [ -d "$gitdir" ] || gitdir=$src  # a bare mirror
  for f in "${FILES[@]}"; do
    git --git-dir="$gitdir" show "HEAD:hopper/$f" > "$dir/$f" || exit 1
  done
  git --git-dir="$gitdir" rev-parse HEAD > "$dir/COMMIT"
  python3 -m pip download -q --no-deps -d "$dir" einops==0.8.1 || exit 1
  echo "prepared $dir: $(ls "$dir" | tr '\n' ' ')"
  ;;
run)
  [ -f "$dir/test_flash_attn.py" ] || { echo "no $dir/test_flash_attn.py: run 'prepare' first"; exit 2; }
  OUT=${OUT:-/tmp/kvattn_fa3}
  mkdir -p "$OUT"
  work=$(mktemp -d)
  cp "$dir"/*.py "$root/tools/fa3_shim/conftest.py" "$work/"
  einops=$(ls "$dir"/einops-*.whl 2>/dev/null | head -1)
  [ -n "$einops" ] && einops=$(cd "$(dirname "$einops")" && pwd)/$(basename "$einops")  # the tests run elsewhere
  default_lib=build-cuda/libkvattn.so
  [ "${KVATTN_FA3_DEVICE:-}" = cpu ] && default_lib=build/libkvattn.so
  export KVATTN_LIBRARY=${KVATTN_LIBRARY:-$root/$default_lib}
  case "$KVATTN_LIBRARY" in /*) ;; *) KVATTN_LIBRARY="$root/$KVATTN_LIBRARY" ;; esac
  # The shim first, then the fetched files (padding, test_util), einops (a wheel is importable as it is).
  export PYTHONPATH="$root/tools/fa3_shim:$work:$root/python${einops:+:$einops}:/tmp/site"
  export FLASH_ATTENTION_DISABLE_BACKWARD=TRUE PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
  export KVATTN_FA3_SAMPLE=${KVATTN_FA3_SAMPLE:-40}
  [ "${KVATTN_FA3_DEVICE:-}" = cpu ] && export KVATTN_FA3_MAX_WORK=${KVATTN_FA3_MAX_WORK:-8192}
  select=${KVATTN_FA3_K:-"test_flash_attn_kvcache or test_flash_attn_varlen_output or test_flash_attn_output or test_flash_attn_combine"}
  echo "== FA3 tests ($(cat "$dir/COMMIT" 2>/dev/null || echo unknown commit)) against $KVATTN_LIBRARY," \
    "-k '$select', $KVATTN_FA3_SAMPLE cases per function" > "$OUT/fa3_tests.log"
  (cd "$work" && timeout "${KVATTN_FA3_TIMEOUT:-480}" "${PYTHON:-python3}" -m pytest -q -p no:cacheprovider --tb=short \
    -k "$select" test_flash_attn.py) >> "$OUT/fa3_tests.log" 2>&1
  rc=$?
  tail -40 "$OUT/fa3_tests.log"
  exit $rc
  ;;
*)
  echo "usage: fa3_tests.sh prepare DIR FA3_CHECKOUT | run DIR"; exit 2 ;;
esac
