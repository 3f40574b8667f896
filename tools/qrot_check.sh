#!/usr/bin/env bash
# The device check of q rotated once ahead of the sm_90a prefill kernel (KVATTN_SM90_QROT=1, branch qrot:
# src/cuda/append/rotate_q.cu, the plan in prefill_sm90/launch.hpp), on the GPU machine from the repository
# root, with a CUDA build (90a, every head dim) carried along:
#   run(command="bash tools/qrot_check.sh", carry=["build-ci/libkvattn.so", ".whl"], timeout_s=600)
# 0. a smoke: the bit-equality test at d 128 on one fixed-q and one varlen-q case, 25 s;
# 1. the rotary prefill cases with the switch on against the oracle (switch off: today's path, which the
#    rest of the file covers), the bit-equality tests (QROT 0 vs 1; the persistent kernel on a rotated q vs
#    today's default), the rotation kernel ran (profiler), a broken cu_seqlens_q, a CUDA graph (the other
#    tests' cases have no rotary: the switch does not touch them);
# 2. compute-sanitizer memcheck on a rotary case (varlen q on the line, the element path) and on the broken
#    cu_seqlens_q (the line longer than the grid);
# 3. W3's fixed-q cases (rotary q: with the switch they take the persistent kernel) with KVATTN_SM90_QROT
#    0 and 1, two alternating rounds.
# (It was the default from session 8 to 17; since session 18 the persistent kernel rotates Q itself and the
# switch is an A/B knob: launch.hpp prefill_q_rotated_ahead.)
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/qrot_check}
mkdir -p "$OUT"
source tools/device_env.sh
export KVATTN_LIBRARY=$(device_lib "${KVATTN_LIBRARY:-build-ci/libkvattn.so}" checked)
PT="python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_prefill_sm90.py"
timeout -k 5 25 $PT -x -k "qrot_same_bits and 128 and (strided or mixed)" > "$OUT/smoke.log" 2>&1
echo "smoke rc=$? $(tail -1 "$OUT/smoke.log")"
timeout -k 5 240 $PT -k "qrot and not qrot_off" > "$OUT/qrot.log" 2>&1
echo "qrot tests rc=$? $(tail -1 "$OUT/qrot.log")"
grep -E "^(FAILED|ERROR)" "$OUT/qrot.log" | head -8
timeout -k 5 40 compute-sanitizer --tool memcheck --report-api-errors no $PT \
  -k "test_prefill_sm90_rotary and 128 and ((mixed and 32) or element) and qrot_on" > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
timeout -k 5 30 compute-sanitizer --tool memcheck --report-api-errors no $PT \
  -k "qrot_overlapping and 128" > "$OUT/memcheck_broken.log" 2>&1
echo "memcheck (broken cu_seqlens_q) rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_broken.log" | tail -1)"
FILTER="32/8 b1 +512 over 4k p16|32/8 b8 +512 over 4k p16|32/8 b8 +2048 over 4k p64|32/8 b8 +512 over 32k p16"
for round in 1 2; do
  for v in 0 1; do
    KVATTN_SM90_QROT=$v timeout -k 5 55 python3 -m bench.run --suite W3 --filter "$FILTER" --no-peers \
      --flex none --max-minutes 0.6 --out "$OUT/ab_${v}_$round" > "$OUT/ab_${v}_$round.log" 2>&1
    echo "== KVATTN_SM90_QROT=$v round $round rc=$?"
    grep -E "^\[" "$OUT/ab_${v}_$round.log" | cut -c1-110
  done
done
