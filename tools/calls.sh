#!/usr/bin/env bash
# The pending device calls (branches written without a GPU, waiting to be measured), so that a session lent
# a device runs them without rewriting them. Here:
#   tools/dev_libs.sh $(tools/calls.sh libs)   # the libraries (.dev/, ~15-20 min for all on 2 cores)
#   tools/fetch_gpu_wheels.sh                  # .whl/ (pytest for the device), once
#   tools/calls.sh show                        # each call's run() arguments, in order of value
# On the device (the run tool, from the repository root): bash tools/calls.sh run N.
# Checks and timing are separate calls (tools/prefill_ab.sh: smoke test, tests, racecheck and memcheck of B;
# then A B A B timing with the SM clock logged), so that each fits the 600 s a call may run. A / B are
# libraries of .dev/ (or one library with KVATTN_AB_ENV_B switching B). A call runs from the checkout: put
# it at the branch whose tests and bench cases the call needs (the list says which): `git checkout --detach
# BRANCH` (a branch checked out in another worktree cannot be checked out by name; .dev/ and .whl/ are
# git-ignored and stay). The checkout's own copy of this script runs: a fix made on main after the branches
# were rebased needs `git checkout main -- tools/` in that checkout too.
set -uo pipefail
cd "$(dirname "$0")/.."

# NAME:BRANCH:HEAD_DIM (bf16 developer builds; tools/dev_libs.sh)
LIBS="main128:main:128 main192:main:192 main64:main:64 main256:main:256 wide512:wide:512 wide64:wide:64 mla4:mla4r:64 mla:main:64 pfp8tma2_128:pfp8tma2:128 fp8diag128:main:128:-DKVATTN_PREFILL_FP8_DIAG=1 e4m3dead128:e4m3dead:128 pvmid128:pvmid:128 pvmid64:pvmid:64"

show() {
  cat << 'END'
Session 34 ran 17 (= 15 + 16), 13, 14, 1, 2, 3, 4 and 6 (bench/NOTES.md); ptile and pfp8lean landed, and
calls 4, 6, 13, 14, 16 and 17 are history (git log). In order of value now: 18 (pvmid, W6 d 128's schedule), 10 (fp8 K / V by TMA, from pfp8tma2), 19, 20, 2-3 and 1 again (fp8 at d 64 /
256 / 192 on the landed producer), then 5, 7-9, 11, 12 (bench/NOTES.md, "Where to go next", sessions 34-31).
Tree at main for calls 1-5 and 11-15, at wide for 7-9, at pfp8tma2 for 10. Calls 1-3 check what the force
switch still holds back: fp8 caches at d 64 / 192 / 256 (prefill.cu; (192, 128) itself is a default since 34).
1. run(command="bash tools/calls.sh run 1", carry=[".dev/main192.so.xz", ".whl"], timeout_s=590)
   checks at (192, 128): every prefill test and the fp8 ones (forced), racecheck, memcheck.
2. run(command="bash tools/calls.sh run 2", carry=[".dev/main64.so.xz", ".whl"], timeout_s=400)
   fp8 caches at d 64: the fp8 tests (forced), racecheck, memcheck.
3. run(command="bash tools/calls.sh run 3", carry=[".dev/main256.so.xz", ".whl"], timeout_s=400)
   fp8 caches at d 256: the same.
5. run(command="bash tools/calls.sh run 5", carry=[".dev/main128.so.xz", ".whl"], timeout_s=590)
   W3's fp8kv cases and their bf16 twins: the landed fp8 path against the portable kernel
   (KVATTN_FORCE_PORTABLE=1 for A), same library.
7. run(command="bash tools/calls.sh run 7", carry=[".dev/wide512.so.xz", ".whl"], timeout_s=500)   [tree at wide]
   the d 512 decode kernel against the portable kernel on W1's d512 cases, with its checks.
8. run(command="bash tools/calls.sh run 8", carry=[".dev/mla4.so.xz", ".dev/wide64.so.xz", ".whl"], timeout_s=580)   [tree at wide]
   the MLA stack (splits, rows kernel) against mla4 on W5 128 heads, then 16 heads rows kernel vs ROWS=0.
9. run(command="bash tools/calls.sh run 9", carry=[".dev/mla.so.xz", ".dev/mla4.so.xz", ".whl"], timeout_s=400)   [tree at wide]
   mla4 against main's MLA kernel on W5 128 heads.
10. run(command="bash tools/calls.sh run 10", carry=[".dev/pfp8tma2_128.so.xz", ".whl"], timeout_s=590)   [tree at pfp8tma2]
   fp8 K / V by TMA (opt-in KVATTN_SM90_FP8_TMA=1) against the cp.async producer, same library: its tests,
   sanitizers, then W3's fp8kv cases.
11. run(command="bash tools/calls.sh run 11", carry=[".dev/fp8diag128.so.xz", ".whl"], timeout_s=300)
   where fp8 prefill's time goes (issue #12's 1.5x): bench/fp8_prefill.py on W6 16x128 full with
   KVATTN_SM90_DIAG unset / 4 (no K/V loads, and for fp8 no conversion or transpose) / 8 (no softmax) /
   12 (neither), a -DKVATTN_PREFILL_FP8_DIAG=1 build. If fp8 with DIAG=4 runs at or past bf16 with DIAG=4,
   the producer's per-tile work is the bound.
12. run(command="bash tools/calls.sh run 12", carry=[".dev/main128.so.xz", ".dev/e4m3dead128.so.xz", ".whl"], timeout_s=400)
   branch e4m3dead (the e4m3 kernel without its unreachable paths; its SASS changed after session 31's GPU
   run): the fp8 tests at d 128, racecheck and memcheck on e4m3 cases, then bench/fp8_prefill.py on main
   and on it (level expected). If green, land it.
15. run(command="bash tools/calls.sh run 15", carry=[".dev/main128.so.xz", ".whl"], timeout_s=500)
   session 33's audit fixes (passed on an H100 in session 34, as call 17 then; kept as a regression check):
   the device-error tests (an offending decode with rotary, a sequence past 2^31 - 2^16 keys), the
   negative-stride test, the decode kernel's tests, the persistent prefill tests; memcheck on the new cases.
18. run(command="bash tools/calls.sh run 18", carry=[".dev/main128.so.xz", ".dev/pvmid128.so.xz", ".whl"], timeout_s=590)
   branch pvmid (session 34: the P V wait a third into the softmax's exponentials, FA3's place, so that O's
   rescale and P's packing run under the rest of the MUFU stream): its prefill and fp8 tests at d 128 (the
   other bits, the same math: the oracle checks), racecheck, memcheck, then W6 16x128 / W3 A B A B against main and the fp8 rows
   (bench/fp8_prefill.py) A B. Predicted -3 to -6% on W6 d 128 (the timeline's P V wait 103 + tail 262 of a
   3,736-clock tile, half of it hidden). If green and faster, call 19 (d 64: P through shared memory), land.
19. run(command="bash tools/calls.sh run 19", carry=[".dev/main64.so.xz", ".dev/pvmid64.so.xz", ".whl"], timeout_s=500)
   pvmid at d 64 (three consumers, P by shared memory: keep_p's store and barrier in the last exponentials'
   block): its prefill tests at d 64, racecheck, memcheck, W6 32x64 A B A B against main.
20. run(command="bash tools/calls.sh run 20", carry=[".dev/main128.so.xz", ".whl"], timeout_s=300)
   the 32-row rule's unmeasured case (session 34): W4 32/8 b1 32k q1-q8, the old floor (64: the decode
   kernel's two row groups at q8) against the new default (32: the split kernel), same library. If q8 is
   slower on the split kernel there, the rule needs a batch / length condition.
END
}

# bench/fp8_prefill.py's W6 16k full rows, once a library: fp8_rows TIMEOUT NAME:LIB ... (into $OUT/fp8_NAME.*)
fp8_rows() {
  local limit=$1 lib
  shift
  source tools/device_env.sh
  for lib in "$@"; do
    KVATTN_LIBRARY=$(device_lib "${lib#*:}" "${lib%%:*}") timeout -k 5 "$limit" python3 -m bench.fp8_prefill \
      --filter "16k full" --json "$OUT/fp8_${lib%%:*}.json" 2>&1 | tee "$OUT/fp8_${lib%%:*}.txt"
  done
}

case "${1:-show}" in
  libs) echo "$LIBS" ;;
  show) show ;;
  run)
    export OUT=${OUT:-/tmp/kvattn_calls} KVATTN_TEST_DTYPES=bf16
    case "${2:?call number}" in
      1)  # checks only
        KVATTN_AB_A=.dev/main192.so.xz KVATTN_AB_B=.dev/main192.so.xz KVATTN_AB_ROUNDS=0 KVATTN_AB_DIMS=192 \
          KVATTN_AB_TEST_TIMEOUT=300 KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_SAN_TIMEOUT=75 \
          KVATTN_AB_RACE_K="persistent_cp_async_producer or fp8_nan_page" \
          KVATTN_AB_MEM_K="persistent_nan_page or fp8_nan_page" \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          bash tools/prefill_ab.sh
        ;;
      2 | 3)  # fp8 checks at d 64 / 256
        d=$([ "$2" = 2 ] && echo 64 || echo 256)
        KVATTN_AB_A=.dev/main$d.so.xz KVATTN_AB_B=.dev/main$d.so.xz KVATTN_AB_ROUNDS=0 KVATTN_AB_DIMS=$d \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90_fp8.py tests/python/test_negative_strides.py" \
          KVATTN_AB_SMOKE_K="fp8_q_variants and persistent" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="fp8_q_variants and split" KVATTN_AB_MEM_K="fp8_nan_page or negative_strides" \
          bash tools/prefill_ab.sh
        ;;
      5)
        export KVATTN_FORCE_PORTABLE=1  # A: the portable kernel; B overrides it
        KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/main128.so.xz \
          KVATTN_AB_ENV_B="KVATTN_FORCE_PORTABLE=0" KVATTN_AB_SUITES=W3 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_FILTER="fp8kv|=W3 32/8 b8 +512 over 4k p16|=W3 32/8 b8 +2048 over 32k p16|=W3 32/8 b1 +2048 over 32k p16" \
          bash tools/prefill_ab.sh
        ;;
      7)
        export KVATTN_SM90_WIDE=0  # A: the portable (512, 512) kernel
        KVATTN_AB_A=.dev/wide512.so.xz KVATTN_AB_B=.dev/wide512.so.xz KVATTN_AB_ENV_B="KVATTN_SM90_WIDE=1" \
          KVATTN_AB_TESTS="tests/python/test_cuda_wide_sm90.py tests/python/test_head_dim_512.py" \
          KVATTN_AB_SMOKE_K="test_wide_sm90 and splits" KVATTN_AB_RACE_K="test_wide_sm90 and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W1 KVATTN_AB_FILTER="d512" \
          bash tools/prefill_ab.sh
        ;;
      8)
        export KVATTN_SM90_MLA=1
        KVATTN_AB_A=.dev/mla4.so.xz KVATTN_AB_B=.dev/wide64.so.xz KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py \
          KVATTN_AB_SMOKE_K="splits and plan" KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_RACE_K="test_mla_sm90_rows and plan" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5 MLA 128/1" \
          bash tools/prefill_ab.sh
        OUT=$OUT/rows KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/wide64.so.xz KVATTN_AB_B=.dev/wide64.so.xz \
          KVATTN_AB_ENV_B="KVATTN_SM90_MLA_ROWS=0" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5 MLA 16/1" \
          bash tools/prefill_ab.sh
        ;;
      9)
        export KVATTN_SM90_MLA=1
        # (the tests of the wide tree, less what mla4 does not have: the rows kernel, splits)
        KVATTN_AB_A=.dev/mla.so.xz KVATTN_AB_B=.dev/mla4.so.xz KVATTN_AB_TESTS=tests/python/test_cuda_mla_sm90.py \
          KVATTN_AB_K="not rows and not split and not deterministic and not rule and not hopper" \
          KVATTN_AB_SMOKE_K="test_mla_sm90 and hnd and not rows" KVATTN_AB_RACE_K="test_mla_sm90 and hnd and not rows" \
          KVATTN_AB_MEM_K="nan_page" KVATTN_AB_SUITES=W5 KVATTN_AB_FILTER="W5 MLA 128/1" \
          bash tools/prefill_ab.sh
        ;;
      10)
        KVATTN_AB_A=.dev/pfp8tma2_128.so.xz KVATTN_AB_B=.dev/pfp8tma2_128.so.xz KVATTN_AB_ENV_B="KVATTN_SM90_FP8_TMA=1" \
          KVATTN_AB_DIMS=128 KVATTN_AB_TESTS=tests/python/test_cuda_prefill_sm90_fp8.py KVATTN_AB_K="fp8_tma" \
          KVATTN_AB_SMOKE_K="fp8_tma_variants" KVATTN_AB_RACE_K="fp8_tma_variants and split" \
          KVATTN_AB_MEM_K="fp8_tma_variants" KVATTN_AB_SAN_TIMEOUT=90 KVATTN_AB_SUITES=W3 KVATTN_AB_FILTER="fp8kv" \
          KVATTN_AB_ROUNDS=2 bash tools/prefill_ab.sh
        ;;
      11)
        source tools/device_env.sh
        lib=$(device_lib .dev/fp8diag128.so.xz d)
        for diag in none 4 8 12; do
          env $([ $diag = none ] || echo KVATTN_SM90_DIAG=$diag) KVATTN_LIBRARY="$lib" timeout -k 5 65 \
            python3 -m bench.fp8_prefill --filter "16k full" --json "$OUT/diag_$diag.json" 2>&1 |
            tee "$OUT/diag_$diag.txt"
        done
        ;;
      12)
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/e4m3dead128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS=tests/python/test_cuda_prefill_sm90_fp8.py KVATTN_AB_SMOKE_K="fp8_q_variants and persistent" \
          KVATTN_AB_SMOKE_TIMEOUT=90 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="fp8_q_variants and split" KVATTN_AB_MEM_K="fp8_q_variants and persistent" \
          bash tools/prefill_ab.sh
        fp8_rows 60 a:.dev/main128.so.xz b:.dev/e4m3dead128.so.xz
        ;;
      15)
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/main128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS="tests/python/test_cuda_kernels.py tests/python/test_negative_strides.py tests/python/test_cuda_decode_sm90.py tests/python/test_cuda_prefill_sm90.py" \
          KVATTN_AB_SMOKE_K="offending_sequence_with_rotary or longest_sequence or q_at_odd_elements" \
          KVATTN_AB_K="offending_sequence_with_rotary or longest_sequence or negative_strides or decode_sm90 or persistent" \
          KVATTN_AB_SMOKE_TIMEOUT=120 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="q_at_odd_elements" \
          KVATTN_AB_MEM_K="offending_sequence_with_rotary or longest_sequence or q_at_odd_elements or negative_strides" \
          bash tools/prefill_ab.sh
        ;;
      18)
        KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/pvmid128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SUITES=W6,W3 \
          KVATTN_AB_FILTER="16x128|=W3 32/8 b8 +512 over 32k p16|=W3 32/8 b1 +2048 over 32k p64" \
          bash tools/prefill_ab.sh
        fp8_rows 90 a:.dev/main128.so.xz b:.dev/pvmid128.so.xz
        ;;
      19)
        KVATTN_AB_A=.dev/main64.so.xz KVATTN_AB_B=.dev/pvmid64.so.xz KVATTN_AB_DIMS=64 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TEST_TIMEOUT=200 KVATTN_AB_SUITES=W6 KVATTN_AB_FILTER="32x64" bash tools/prefill_ab.sh
        ;;
      20)
        export KVATTN_SM90_SPLIT_ROWS=64  # A: the floor before session 34; B: the default rule
        KVATTN_AB_CHECK=0 KVATTN_AB_A=.dev/main128.so.xz KVATTN_AB_B=.dev/main128.so.xz \
          KVATTN_AB_ENV_B="KVATTN_SM90_SPLIT_ROWS=32" KVATTN_AB_SUITES=W4 KVATTN_AB_FILTER="b1 32k" \
          KVATTN_AB_ROUNDS=2 bash tools/prefill_ab.sh
        ;;
      *) echo "no call $2" >&2; exit 2 ;;
    esac
    ;;
  *) echo "usage: tools/calls.sh [libs|show|run N]" >&2; exit 2 ;;
esac
