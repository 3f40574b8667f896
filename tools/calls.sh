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
LIBS="main128:main:128 main192:main:192 main64:main:64 main256:main:256 wide512:wide:512 wide64:wide:64 mla4:mla4r:64 mla:main:64 pfp8tma2_128:pfp8tma2:128 e4m3dead128:e4m3dead:128 pfb128:pfp8batch:128 pstsm64:pstsm:64 pfa128:pfp8ahead:128 pfc128:pfp8tma3:128 pfc256:pfp8tma3:256"

show() {
  cat << 'END'
Session 35 ran 18, 10, 20, 2, 3, 1, 11, 19, 21 and an ad hoc d 256 check (bench/NOTES.md); pvmid landed at
d 128 / 256, fp8 caches take the sm_90a prefill kernel at every head dim, and those calls are history (git
log). First, on an H200: the full run with the peers (bench/NOTES.md, "The full run: three device calls in a
row"; the RESULTS summary is session 25's). Then, in order of value: 15, 25, 24 (+ 26), 10, 23, 12, 5, 7-9 (bench/NOTES.md,
"Where to go next", sessions 35-31). Tree at main for calls 5, 10, 12, 15 and 23-26 (10 needs only
bench/fp8_prefill.py next to pfp8tma2's library), at wide for 7-9.
5. run(command="bash tools/calls.sh run 5", carry=[".dev/main128.so.xz", ".whl"], timeout_s=590)
   W3's fp8kv cases and their bf16 twins: the landed fp8 path against the portable kernel
   (KVATTN_FORCE_PORTABLE=1 for A), same library.
7. run(command="bash tools/calls.sh run 7", carry=[".dev/wide512.so.xz", ".whl"], timeout_s=500)   [tree at wide]
   the d 512 decode kernel against the portable kernel on W1's d512 cases, with its checks.
8. run(command="bash tools/calls.sh run 8", carry=[".dev/mla4.so.xz", ".dev/wide64.so.xz", ".whl"], timeout_s=580)   [tree at wide]
   the MLA stack (splits, rows kernel) against mla4 on W5 128 heads, then 16 heads rows kernel vs ROWS=0.
9. run(command="bash tools/calls.sh run 9", carry=[".dev/mla.so.xz", ".dev/mla4.so.xz", ".whl"], timeout_s=400)   [tree at wide]
   mla4 against main's MLA kernel on W5 128 heads.
10. run(command="bash tools/calls.sh run 10", carry=[".dev/pfp8tma2_128.so.xz", ".whl"], timeout_s=300)
   fp8 K / V by TMA (KVATTN_SM90_FP8_TMA=1) against the cp.async producer, same library, on
   bench/fp8_prefill.py's W6 rows, twice each: session 35 timed only W3's fp8 cache cases (-1%: the
   cache's bound is its conversion), not fp8 q on e4m3 wgmma, whose producer session 33 counted as
   copy-bound (predicted 1.17x -> ~1.3x bf16). Its checks passed in session 35.
12. run(command="bash tools/calls.sh run 12", carry=[".dev/main128.so.xz", ".dev/e4m3dead128.so.xz", ".whl"], timeout_s=400)
   branch e4m3dead (the e4m3 kernel without its unreachable paths; rebased onto main with pvmid in session
   35): the fp8 tests at d 128, racecheck and memcheck on e4m3 cases, then bench/fp8_prefill.py on main
   and on it (level expected). If green, land it.
15. run(command="bash tools/calls.sh run 15", carry=[".dev/main128.so.xz", ".whl"], timeout_s=500)
   session 33's audit fixes (passed on an H100 in session 34, as call 17 then; kept as a regression check):
   the device-error tests (an offending decode with rotary, a sequence past 2^31 - 2^16 keys), the
   negative-stride test, the decode kernel's tests, the persistent prefill tests, and session 35's
   workspace-overlap error (test_workspace_overlapping_an_argument_is_an_error: never run on a GPU yet, so
   first in value after the full run); memcheck on the new cases.
23. run(command="bash tools/calls.sh run 23", carry=[".dev/main128.so.xz", ".whl"], timeout_s=400)
   where the fp8 cache's producer spends its time (session 35's diagnostic: it bounds that kernel, and TMA
   did not move it): ncu on the prefill kernel of W3 b1 +2048 over 32k p16, bf16 and fp8kv: pipe
   utilization (is the conversion pipe the limit, or the issue slots?), warp states, shared-memory
   traffic and bank conflicts. Text tables in $OUT/ncu_*.txt.
24. run(command="bash tools/calls.sh run 24", carry=[".dev/main128.so.xz", ".dev/pfb128.so.xz", ".dev/pfa128.so.xz", ".whl"], timeout_s=400)
   the fp8 producer's two session-35 branches, timing only (bench/fp8_prefill.py, W6 16x128 full: bf16, fp8
   cache, e4m3, f16 kernel), main / pfp8batch / pfp8ahead, two rounds: pfp8batch loads 4 fp8 chunks before
   converting them (16 dependent shared-memory round trips a tile -> 4; +10 spill instructions a tile),
   pfp8ahead issues tile t + 1's copies before converting tile t (the conversion under the copies; the
   persistent kernels' spills unchanged). Predicted (a helper's SASS walk): fp8 cache 4,075 us -> pfb
   -5 to -10%, pfa 3,300-3,600; e4m3 level (pfb) / unknown (pfa: session 31's lookahead lost 1.5-3% on
   e4m3 before pfp8lean). The winner's checks: call 26.
25. run(command="bash tools/calls.sh run 25", carry=[".dev/main64.so.xz", ".dev/pstsm64.so.xz", ".whl"], timeout_s=500)
   branch pstsm (session 35: P into the d 64 consumers' shared buffer by stmatrix.x4, 8 stores a tile
   instead of 32, and P V's V descriptor once a tile): the d 64 prefill and fp8 tests, racecheck, memcheck,
   W6 32x64 A B A B against main.
   Predicted -5 to -9% at d 64 (a helper's SASS count: d 64 is issue-bound, ~40 fewer instructions a warp
   a tile of ~510).
26. run(command="LIB=.dev/pfa128.so.xz bash tools/calls.sh run 26", carry=[".dev/pfa128.so.xz", ".whl"], timeout_s=400)
   the checks of call 24's winner (pfa128 or pfb128): the fp8 and negative-stride tests at d 128, racecheck,
   memcheck. If green and faster, land it (and time W3's fp8kv cases: call 5's filter).
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
        for round in 1 2; do
          for tma in 0 1; do KVATTN_SM90_FP8_TMA=$tma fp8_rows 90 "tma${tma}_$round:.dev/pfp8tma2_128.so.xz"; done
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
          KVATTN_AB_K="offending_sequence_with_rotary or longest_sequence or negative_strides or decode_sm90 or persistent or workspace_overlapping" \
          KVATTN_AB_SMOKE_TIMEOUT=120 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SAN_TIMEOUT=60 \
          KVATTN_AB_RACE_K="q_at_odd_elements" \
          KVATTN_AB_MEM_K="offending_sequence_with_rotary or longest_sequence or q_at_odd_elements or negative_strides" \
          bash tools/prefill_ab.sh
        ;;
      23)
        source tools/device_env.sh
        lib=$(device_lib "${LIB:-.dev/main128.so.xz}" m)
        for c in "W3 32/8 b1 +2048 over 32k p16" "W3 32/8 b1 +2048 over 32k p16 fp8kv"; do
          name=$(echo "$c" | tr -c 'a-z0-9\n' '_')
          KVATTN_LIBRARY="$lib" timeout -k 5 150 ncu --kernel-name regex:prefill --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
            --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
            --section Occupancy python3 -m bench.profile_case "$c" --calls 4 > "$OUT/ncu_$name.txt" 2>&1
          echo "ncu $c rc=$? $(grep -c . "$OUT/ncu_$name.txt") lines"
          grep -E "Issue Slots Busy|Executed Ipc|No Eligible|Shared Memory|Bank Conflicts|Duration" "$OUT/ncu_$name.txt" | head -12
        done
        ;;
      24)  # timing only
        for round in 1 2; do
          fp8_rows 60 "main$round:.dev/main128.so.xz" "pfb$round:.dev/pfb128.so.xz" "pfa$round:.dev/pfa128.so.xz"
        done
        ;;
      26)  # checks of one fp8 producer branch: LIB=.dev/pfa128.so.xz (or pfb128)
        KVATTN_AB_A="${LIB:?LIB=.dev/NAME.so.xz}" KVATTN_AB_B="$LIB" KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90_fp8.py tests/python/test_negative_strides.py" \
          KVATTN_AB_SMOKE_K="fp8 and persistent" KVATTN_AB_SMOKE_TIMEOUT=100 KVATTN_AB_TEST_TIMEOUT=200 \
          KVATTN_AB_SAN_TIMEOUT=60 KVATTN_AB_RACE_K="fp8_nan_page or (fp8 and split)" \
          KVATTN_AB_MEM_K="fp8_nan_page or negative_strides" bash tools/prefill_ab.sh
        ;;
      27)  # branch pfp8tma3 (pfp8batch + fp8 K / V by TMA by default at d 128 / 256): its checks, then timing
        KVATTN_AB_A=.dev/pfc128.so.xz KVATTN_AB_B=.dev/pfc128.so.xz KVATTN_AB_DIMS=128 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90_fp8.py tests/python/test_negative_strides.py" \
          KVATTN_AB_SMOKE_K="tma_variants" KVATTN_AB_SMOKE_TIMEOUT=100 KVATTN_AB_TEST_TIMEOUT=200 \
          KVATTN_AB_SAN_TIMEOUT=60 KVATTN_AB_RACE_K="tma_variants or (producers and paged and 16 and fp8)" \
          KVATTN_AB_MEM_K="fp8_nan_page or (producers and (leftpad or varlen))" OUT=$OUT/c128 bash tools/prefill_ab.sh
        KVATTN_AB_A=.dev/pfc256.so.xz KVATTN_AB_B=.dev/pfc256.so.xz KVATTN_AB_DIMS=256 KVATTN_AB_ROUNDS=0 \
          KVATTN_AB_TESTS=tests/python/test_cuda_prefill_sm90_fp8.py KVATTN_AB_SMOKE_K="tma_variants" \
          KVATTN_AB_SMOKE_TIMEOUT=100 KVATTN_AB_TEST_TIMEOUT=150 KVATTN_AB_SAN_TIMEOUT=40 \
          KVATTN_AB_RACE_K="tma_variants and split" KVATTN_AB_MEM_K="producers and leftpad and fp8" \
          OUT=$OUT/c256 bash tools/prefill_ab.sh
        for round in 1 2; do
          fp8_rows 60 "main$round:.dev/main128.so.xz" "pfc$round:.dev/pfc128.so.xz"
        done
        source tools/device_env.sh  # (the workspace-overlap test by name: call 15's -q log does not list it)
        KVATTN_LIBRARY=$(device_lib .dev/pfc128.so.xz c) KVATTN_TEST_HEAD_DIMS=128 timeout 60 python3 -m pytest -q -rA \
          -p no:cacheprovider tests/python/test_cuda_kernels.py -k workspace_overlapping 2>&1 | grep -E "PASSED|FAILED|SKIPPED|passed|failed"
        ;;
      25)
        KVATTN_AB_A=.dev/main64.so.xz KVATTN_AB_B=.dev/pstsm64.so.xz KVATTN_AB_DIMS=64 KVATTN_AB_ROUNDS=2 \
          KVATTN_AB_TESTS="tests/python/test_cuda_prefill_sm90.py tests/python/test_cuda_prefill_sm90_fp8.py" \
          KVATTN_AB_SMOKE_TIMEOUT=100 KVATTN_AB_TEST_TIMEOUT=240 KVATTN_AB_SUITES=W6 KVATTN_AB_FILTER="32x64" \
          bash tools/prefill_ab.sh
        ;;
      *) echo "no call $2" >&2; exit 2 ;;
    esac
    ;;
  *) echo "usage: tools/calls.sh [libs|show|run N]" >&2; exit 2 ;;
esac
