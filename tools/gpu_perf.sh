#!/usr/bin/env bash
# The performance loop on the GPU machine (the device tool's `run`), from the repository root:
#   1. the CUDA tests, fail-fast (skipped with KVATTN_SKIP_TESTS=1);
#   2. a no-peer benchmark of KVATTN_LIBRARY and of each library in KVATTN_AB (space-separated), suites
#      KVATTN_SUITES (W1,W2,W4) in --quick mode, or KVATTN_BENCH_ARGS instead;
#      (skipped with KVATTN_SKIP_BENCH=1);
#   3. Nsight Compute on each case of KVATTN_NCU_CASES (';'-separated names; none by default).
# Logs and results go to $OUT (each library's benchmark folder as bench_<name>.tgz: the device tool returns
# at most 8 files). Carry .whl and the libraries.
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/kvattn_perf}
mkdir -p "$OUT"
export PYTHONPATH=python:/tmp/site:.
export PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
lib=${KVATTN_LIBRARY:-build-ci/libkvattn.so}
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
  > "$OUT/wheels.log" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"

if [ -z "${KVATTN_SKIP_TESTS:-}" ]; then
  KVATTN_LIBRARY=$lib timeout -k 10 "${KVATTN_PYTEST_TIMEOUT:-300}" python3 -m pytest -q -x tests/python \
    -k cuda -p no:cacheprovider ${KVATTN_PYTEST_ARGS:-} > "$OUT/pytest_cuda.log" 2>&1
  echo "pytest rc=$? $(tail -1 "$OUT/pytest_cuda.log")"
fi

[ -n "${KVATTN_SKIP_BENCH:-}" ] && lib_list="" || lib_list="$lib ${KVATTN_AB:-}"
bench_args=${KVATTN_BENCH_ARGS:---suite ${KVATTN_SUITES:-W1,W2,W4} --quick}
for l in $lib_list; do
  name=$(echo "$l" | tr '/.' '__')
  KVATTN_LIBRARY=$l timeout -k 10 "${KVATTN_BENCH_TIMEOUT:-200}" python3 -m bench.run $bench_args \
    --no-peers --flex none --out "$OUT/bench_$name" > "$OUT/bench_$name.log" 2>&1
  rc=$?
  # The device tool returns at most 8 files: one archive per benchmarked library.
  tar -czf "$OUT/bench_$name.tgz" -C "$OUT" "bench_$name" && rm -rf "${OUT:?}/bench_$name"
  echo "bench $l rc=$rc"
  grep -E "^W[0-9]|us" "$OUT/bench_$name.log" | grep -v "^$" | tail -40
done

stalls=""
for r in barrier long_scoreboard short_scoreboard lg_throttle mio_throttle wait math_pipe_throttle \
  not_selected selected dispatch_stall no_instruction branch_resolving drain membar sleeping tex_throttle; do
  stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
NCU_METRICS="smsp__inst_executed.sum,sm__cycles_elapsed.avg,dram__bytes_read.sum$stalls"
IFS=';' read -ra cases <<< "${KVATTN_NCU_CASES:-}"
for c in "${cases[@]}"; do
  [ -n "$c" ] || continue
  name=$(echo "$c" | tr ' /+' '___')
  KVATTN_LIBRARY=$lib timeout -k 10 120 ncu --kernel-name regex:attention --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --metrics "$NCU_METRICS" \
    python3 -m bench.profile_case "$c" > "$OUT/ncu_$name.txt" 2>&1
  echo "ncu '$c' rc=$?"
  grep -E "issue_stalled|inst_executed|cycles_elapsed|dram__bytes|DRAM Throughput|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Ipc|Warp Cycles Per Issued|No Eligible|Block Limit" \
    "$OUT/ncu_$name.txt"
done
