#!/usr/bin/env bash
# The device check of the sm_90a prefill kernel's persistent instantiation (KVATTN_SM90_PERSISTENT=1,
# prefill_sm90/persistent.cuh; v2: units claimed from a workspace counter in L2-sized longest-first
# sections, the next unit's Q under the last P V), on the GPU machine from the repository root, with a
# CUDA build (90a, every head dim) carried along:
#   run(command="bash tools/persist_check.sh", carry=["build-ci/libkvattn.so", ".whl"], timeout_s=600)
# 0. a smoke: the cp.async and TMA producers' unit loops at d 128, 25 s (a barrier protocol hang costs 30 s, not the call);
# 1. the persistent prefill tests (they set KVATTN_SM90_PERSISTENT themselves; v2's: every unit order, twice
#    in a row, a CUDA graph);
# 2. compute-sanitizer memcheck and racecheck on a few persistent cases;
# 3. W3 (chunked prefill, fixed q: 1024 units of ~36 tiles at b8 over 4k; b1: 64 units) and W6 causal / full
#    with KVATTN_SM90_PERSISTENT 0 and 1, two alternating rounds (the mixed W3 cases are varlen q: the
#    persistent kernel is not used); then W6 16x128 causal's unit order: KVATTN_SM90_SECTIONS=16 (v1's
#    unit-major order, claimed dynamically), 1 (longest first over the grid), the default (6 sections).
# Green (tests pass, 0 errors, W3/W6 faster): make it the default for fixed q in launch.cuh.
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/persist_check}
mkdir -p "$OUT"
source tools/device_env.sh
export KVATTN_LIBRARY=$(device_lib "${KVATTN_LIBRARY:-build-ci/libkvattn.so}" checked)
PT="python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_prefill_sm90.py"
timeout -k 5 25 $PT -x -k "persistent_cp_async_producer and 128" > "$OUT/smoke.log" 2>&1
echo "smoke rc=$? $(tail -1 "$OUT/smoke.log")"
timeout -k 5 170 $PT -k "persistent" > "$OUT/persistent.log" 2>&1
echo "persistent tests rc=$? $(tail -1 "$OUT/persistent.log")"
grep -E "^(FAILED|ERROR)" "$OUT/persistent.log" | head -5
timeout -k 5 35 compute-sanitizer --tool memcheck --report-api-errors no $PT -k "persistent_nan_page and 128" \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
timeout -k 5 30 compute-sanitizer --tool racecheck --report-api-errors no $PT \
  -k "persistent_cp_async_producer and 128" > "$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
# A short A/B: W3's fixed-q cases and W6 causal (v1: +37% on 16x128 causal) and full.
FILTER="32/8 b8 +512 over 4k p16|32/8 b1 +512 over 4k p16|32/8 b8 +2048 over 4k p64|prefill 16k 16x128|prefill 16k 32x64 causal"
for round in 1 2; do
  for v in 0 1; do
    KVATTN_SM90_PERSISTENT=$v timeout -k 5 40 python3 -m bench.run --suite W3,W6 --filter "$FILTER" --no-peers \
      --flex none --max-minutes 0.45 --out "$OUT/ab_${v}_$round" > "$OUT/ab_${v}_$round.log" 2>&1
    echo "== KVATTN_SM90_PERSISTENT=$v round $round rc=$?"
    grep -E "^\[" "$OUT/ab_${v}_$round.log" | cut -c1-110
  done
done
for sections in 16 1 0; do
  KVATTN_SM90_PERSISTENT=1 KVATTN_SM90_SECTIONS=$sections timeout -k 5 22 python3 -m bench.run --suite W6 \
    --filter "prefill 16k 16x128 causal" --no-peers --flex none --max-minutes 0.2 --out "$OUT/sections_$sections" \
    > "$OUT/sections_$sections.log" 2>&1
  echo "== KVATTN_SM90_SECTIONS=$sections (0: the launcher's) rc=$?"
  grep -E "^\[" "$OUT/sections_$sections.log" | cut -c1-110
done
