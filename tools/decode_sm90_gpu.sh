#!/usr/bin/env bash
# One device call for the Hopper decode kernel (src/cuda/decode_sm90), from a folder holding python/,
# tests/, bench/ and the library (KVATTN_LIBRARY): SASS summary, the decode tests (4 pytest processes in
# parallel), compute-sanitizer memcheck + racecheck on a small case, and the A/B timing against the
# portable kernel (bench/decode_ab.py). Logs under $OUT; a short table last.
#   DECODE_AB_FILTER: only A/B cases whose name contains it; DECODE_SKIP_TESTS=1: timing only.
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/decode_sm90}
mkdir -p "$OUT"
export PYTHONPATH=python:tests/python:. PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
lib=${KVATTN_LIBRARY:?set KVATTN_LIBRARY}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cuobjdump -sass "$lib" > "$OUT/sass.txt" 2>&1
awk '/Function : .*decode_sm90/{on=1} /Function : / && !/decode_sm90/{on=0} on' "$OUT/sass.txt" \
  | grep -oE "UBLKCP[.A-Z0-9_]*|SYNCS[.A-Z0-9_]*|LDL|STL|HMMA[.A-Z0-9]*|LDSM[.A-Z0-9]*|BAR[.A-Z]*" \
  | sort | uniq -c | tr '\n' ' '
echo

t0=$(date +%s)
ab() {  # ab FILTER TIMEOUT JSON
  timeout -k 5 "$2" python3 -m bench.decode_ab --filter "$1" --json "$OUT/$3" 2>&1 | tee -a "$OUT/ab.log"
}
# 1. a first A/B on three cases: a hang or a wrong answer shows here first (diff column, NaN flag)
ab "${DECODE_AB_FIRST:-b4 32k p16,W2}" 40 ab1.json
echo "first A/B: $(( $(date +%s) - t0 )) s"
if [ -z "${DECODE_SKIP_TESTS:-}" ]; then
  # 2. the decode tests, 4 pytest processes in parallel
  py="timeout -k 5 ${DECODE_TEST_TIMEOUT:-80} python3 -m pytest -q -x -p no:cacheprovider"
  K="balanced or splits_long or 128-128 or nan_outside"
  $py tests/python/test_cuda_decode_sm90.py -k "layouts or many or dispatch" > "$OUT/pytest1.log" 2>&1 &
  $py tests/python/test_cuda_decode_sm90.py -k "not (layouts or many or dispatch)" > "$OUT/pytest2.log" 2>&1 &
  KVATTN_DECODE_SM90=${KVATTN_TEST_DECODE_SM90:-8} $py tests/python/test_cuda_kernels.py -k "($K) and not fp8" > "$OUT/pytest3.log" 2>&1 &
  KVATTN_DECODE_SM90=${KVATTN_TEST_DECODE_SM90:-8} $py tests/python/test_cuda_kernels.py -k "($K) and fp8" > "$OUT/pytest4.log" 2>&1 &
  wait
  for f in "$OUT"/pytest*.log; do echo "$(basename "$f"): $(tail -1 "$f")"; done
  grep -hE "^(FAILED|ERROR)|Error:|assert " "$OUT"/pytest*.log | head -12
  echo "tests: $(( $(date +%s) - t0 )) s"
  # 3. sanitizers on two small cases (bf16 and fp8 caches, page 16), the decode kernel only
  for tool in ${DECODE_SANITIZERS:-memcheck}; do
    [ "$tool" = none ] && continue
    timeout -k 5 "${DECODE_SAN_TIMEOUT:-45}" compute-sanitizer --tool $tool --error-exitcode 9 --report-api-errors no \
      --kernel-name kns=decode_sm90 python3 -m pytest -q -p no:cacheprovider \
      "tests/python/test_cuda_decode_sm90.py::test_layouts_edges[paged-16-False]" \
      "tests/python/test_cuda_decode_sm90.py::test_layouts_edges[paged-16-True]" > "$OUT/$tool.log" 2>&1
    echo "$tool rc=$? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/$tool.log" | tail -1) $(tail -1 "$OUT/$tool.log")"
  done
  echo "sanitizers: $(( $(date +%s) - t0 )) s"
fi
# 4. the rest of the A/B
ab "${DECODE_AB_FILTER:-}" "${DECODE_AB_TIMEOUT:-60}" ab2.json
echo "total: $(( $(date +%s) - t0 )) s"
