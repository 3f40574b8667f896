#!/usr/bin/env bash
# One device call for the sm_90a prefill kernel (bench/NOTES.md): the correctness check and the timing of
# bench/prefill_sm90_check.py (paged b4 x 8192, W6's contiguous b1 x 16k at d 64 / 128 / 256; TMA and
# cp.async producers), the prefill pytest file (plus an optional subset of the CUDA suites, with
# the kernel forced on every problem it covers), and compute-sanitizer memcheck on a small case. Run from a
# directory holding python/, tests/python/, bench/ and the library:
#   KVATTN_LIBRARY=$PWD/libkvattn.so bash tools/prefill_sm90_device.sh ["pytest -k expression for the suites"]
# Optional: KVATTN_PREV_LIBRARY=<previous libkvattn.so> times its sm90 kernel in the same run (A/B);
# PREFILL_SHORT=1 times the main variants only (a short call). If the smoke fails with the TMA producer,
# the rest runs with KVATTN_SM90_TMA=0 (the cp.async producer) and the summary says so.
# Logs under $OUT; a short table last.
set +e
OUT=${OUT:-/tmp/prefill_sm90}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/python:$PWD/tests/python PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/smi.txt" 2>&1
# A short smoke first: a hang (a barrier protocol bug) costs 30 s, not the whole call.
timeout -k 5 30 python3 bench/prefill_sm90_check.py --small > "$OUT/smoke.log" 2>&1
rc=$?
echo "smoke rc=$rc" >> "$OUT/summary.txt"
if [ "$rc" -ne 0 ]; then
  tail -20 "$OUT/smoke.log"
  export KVATTN_SM90_TMA=0
  timeout -k 5 30 python3 bench/prefill_sm90_check.py --small > "$OUT/smoke_cpasync.log" 2>&1
  rc=$?
  echo "smoke with KVATTN_SM90_TMA=0 rc=$rc (the rest runs the cp.async producer)" >> "$OUT/summary.txt"
  if [ "$rc" -ne 0 ]; then tail -20 "$OUT/smoke_cpasync.log"; cat "$OUT/summary.txt"; exit 1; fi
fi
short=""
[ -n "${PREFILL_SHORT:-}" ] && short="--short"
timeout -k 5 120 python3 bench/prefill_sm90_check.py $short > "$OUT/check.log" 2>&1
echo "check rc=$?" >> "$OUT/summary.txt"
if [ -n "${KVATTN_PREV_LIBRARY:-}" ]; then
  KVATTN_LIBRARY=$KVATTN_PREV_LIBRARY timeout -k 5 60 python3 bench/prefill_sm90_check.py --prev \
    > "$OUT/prev.log" 2>&1
  echo "prev library timing rc=$?" >> "$OUT/summary.txt"
fi
# The tests and the sanitizer together (no timing runs now).
timeout -k 5 200 python3 -m pytest -q tests/python/test_cuda_prefill_sm90.py -p no:cacheprovider -rs \
  > "$OUT/pytest_prefill.log" 2>&1 &
pytest_pid=$!
timeout -k 5 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 86 \
  python3 bench/prefill_sm90_check.py --small > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log")" >> "$OUT/summary.txt"
wait $pytest_pid
echo "pytest prefill rc=$? $(tail -1 "$OUT/pytest_prefill.log")" >> "$OUT/summary.txt"
if [ -n "$1" ]; then
  KVATTN_FORCE_SM90_PREFILL=1 timeout -k 5 120 python3 -m pytest -q tests/python/test_cuda_kernels.py \
    tests/python/test_cuda_torch.py -k "$1" -p no:cacheprovider > "$OUT/pytest_suites.log" 2>&1
  echo "pytest suites (forced) rc=$? $(tail -1 "$OUT/pytest_suites.log")" >> "$OUT/summary.txt"
fi
if [ -n "${KVATTN_NCU:-}" ]; then  # the stall breakdown of one non-causal b4 x 8192 launch
  stalls=""
  for r in barrier long_scoreboard short_scoreboard lg_throttle mio_throttle wait math_pipe_throttle \
    not_selected selected dispatch_stall no_instruction branch_resolving membar sleeping; do
    stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  timeout -k 5 120 ncu --clock-control none --kernel-name regex:prefill_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --metrics "smsp__inst_executed.sum,sm__cycles_elapsed.avg,dram__bytes_read.sum,lts__t_bytes.sum$stalls" \
    python3 bench/prefill_sm90_check.py --profile > "$OUT/ncu.txt" 2>&1
  echo "ncu rc=$?" >> "$OUT/summary.txt"
  grep -E "issue_stalled|inst_executed|cycles_elapsed|bytes|Throughput|Duration|Issued Ipc|Warp Cycles Per Issued|No Eligible|Pipe" \
    "$OUT/ncu.txt" | head -60
fi
grep -E "FAIL|Error|error" "$OUT/pytest_prefill.log" | head -20
cat "$OUT/smi.txt"
grep -E "FAIL" "$OUT/check.log" | head -10
grep -E "^time|vs portable" "$OUT/check.log" "$OUT/prev.log" 2>/dev/null | sed 's/^[^:]*://' | cut -c1-150
cat "$OUT/summary.txt"
