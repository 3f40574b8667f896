#!/usr/bin/env bash
# The GPU check, in one script, for the lead to run on the GPU machine (the device tool's `run`), from the
# repository root, with a CUDA build of the library and the test wheels carried along:
#
#   tools/fetch_gpu_wheels.sh                          # here, once: .whl/
#   cmake -S . -B build-cuda -DKVATTN_CUDA=ON ... && cmake --build build-cuda
#   run(command="bash tools/gpu_check.sh", carry=[".whl", "build-cuda/libkvattn.so"], timeout_s=600)
#
# Steps: install .whl/*.whl into /tmp/site; nvidia-smi; pytest of the CUDA tests (tests/python -k cuda);
# compute-sanitizer memcheck and racecheck on tools/smoke_cuda.py; a summary line. Every step runs whatever
# the others did; the exit status is 0 only when all passed. Logs go to $OUT (at most 8 files come back):
# gpu_check.log (environment, summary), pytest_cuda.log, sanitizer_memcheck.log, sanitizer_racecheck.log.
#
# Knobs (environment): KVATTN_LIBRARY (build-cuda/libkvattn.so), KVATTN_PYTEST_TIMEOUT (280 s),
# KVATTN_SANITIZER_TIMEOUT (120 s each), KVATTN_PYTEST_ARGS (extra pytest arguments),
# KVATTN_SANITIZER_FLAGS ("--report-api-errors no": torch probes the runtime with calls that fail by
# design; kvattn's own CUDA errors surface as KvattnError in the smoke script), KVATTN_RACECHECK_FILTER
# (e.g. "--kernel-name kns=kvattn" to instrument kvattn's kernels only).
set +e
cd "$(dirname "$0")/.." || exit 2

OUT=${OUT:-/tmp/kvattn_gpu_check}
mkdir -p "$OUT"
export KVATTN_LIBRARY=${KVATTN_LIBRARY:-build-cuda/libkvattn.so}
# An xz-compressed library (a full 90a build is ~46 MB; with FA4's kit part it exceeds a call's carry):
# unpacked once into /tmp.
if [[ "$KVATTN_LIBRARY" == *.xz ]]; then
  mkdir -p /tmp/kvattn_lib && xz -dc "$KVATTN_LIBRARY" > /tmp/kvattn_lib/libkvattn.so
  export KVATTN_LIBRARY=/tmp/kvattn_lib/libkvattn.so
fi
PYTEST_TIMEOUT=${KVATTN_PYTEST_TIMEOUT:-280}
SAN_TIMEOUT=${KVATTN_SANITIZER_TIMEOUT:-120}
SAN_FLAGS=${KVATTN_SANITIZER_FLAGS:---report-api-errors no}
LOG=$OUT/gpu_check.log
: > "$LOG"

results=()
failed=0
record() {  # record NAME RC
  results+=("$1=$2")
  [ "$2" -eq 0 ] || failed=1
}
say() { echo "$*" | tee -a "$LOG"; }

say "== gpu_check $(date -u +%FT%TZ) in $(pwd)"

# ---- 1. wheels (pytest, its dependencies, ml_dtypes): the machine cannot reach a registry
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl >> "$LOG" 2>&1
  rc=$?
  say "wheels: rc=$rc ($(cd .whl && echo *.whl))"
  record wheels $rc
else
  say "wheels: no .whl/ (carry it, after tools/fetch_gpu_wheels.sh); using the image's packages"
fi
# PYTHONPATH (the package, the wheels), PYTEST_DISABLE_PLUGIN_AUTOLOAD (the image's pytest plugins are not
# needed, nor their versions), test_workers (below).
source tools/device_env.sh

# ---- 2. the machine, the library, the Python side
nvidia-smi 2>&1 | tee -a "$LOG"
if [ -f "$KVATTN_LIBRARY" ]; then
  say "library: $KVATTN_LIBRARY ($(stat -c %s "$KVATTN_LIBRARY") bytes)"
  record library 0
else
  say "library: $KVATTN_LIBRARY is MISSING (build it with -DKVATTN_CUDA=ON and carry it)"
  record library 1
fi
python3 - <<'PY' 2>&1 | tee -a "$LOG"
import sys, numpy, torch, kvattn
import pytest, ml_dtypes
print("python", sys.version.split()[0], "| torch", torch.__version__, "| numpy", numpy.__version__,
      "| pytest", pytest.__version__, "| ml_dtypes", ml_dtypes.__version__)
ready = torch.cuda.is_available() and kvattn.has_backend("cuda")
print("cuda available:", torch.cuda.is_available(),
      "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "-",
      "| kvattn cuda backend:", kvattn.has_backend("cuda"))
sys.exit(0 if ready else 1)  # without both, every CUDA test would skip and the run would prove nothing
PY
record environment "${PIPESTATUS[0]}"

# ---- 3. the CUDA tests
say "== pytest tests/python -k cuda (timeout ${PYTEST_TIMEOUT}s)"
# (In worker processes where .whl/ brought pytest-xdist: device_env.sh test_workers.)
# shellcheck disable=SC2086,SC2046
env "${TEST_WORKER_ENV[@]}" timeout -k 10 "$PYTEST_TIMEOUT" python3 -m pytest -q tests/python -k cuda -rs \
  -p no:cacheprovider $(test_workers) ${KVATTN_PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_cuda.log"
rc=${PIPESTATUS[0]}
summary=$(grep -E "^=*.*(passed|failed|error|skipped|no tests ran)" "$OUT/pytest_cuda.log" | tail -1)
if [ "$rc" -eq 0 ] && ! echo "$summary" | grep -q "passed"; then
  say "pytest: nothing passed (all skipped?) -- counted as a failure"
  rc=5
fi
if [ "$rc" -eq 0 ] && grep -q "needs torch, a GPU and a CUDA build" "$OUT/pytest_cuda.log"; then
  say "pytest: CUDA tests were skipped (no GPU or no CUDA build seen) -- counted as a failure"
  rc=5
fi
[ "$rc" -eq 124 ] && say "pytest: TIMED OUT after ${PYTEST_TIMEOUT}s"
say "pytest: rc=$rc  $summary"
record pytest "$rc"

# ---- 4. compute-sanitizer on the smoke list (adversarial indices included)
for tool in memcheck racecheck; do
  log=$OUT/sanitizer_$tool.log
  extra=""
  [ "$tool" = racecheck ] && extra=${KVATTN_RACECHECK_FILTER:-}
  say "== compute-sanitizer --tool $tool $SAN_FLAGS $extra (timeout ${SAN_TIMEOUT}s)"
  # shellcheck disable=SC2086
  timeout -k 10 "$SAN_TIMEOUT" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 200 \
    $SAN_FLAGS $extra python3 tools/smoke_cuda.py > "$log" 2>&1
  rc=$?
  tail -n 40 "$log"
  [ "$rc" -eq 86 ] && say "$tool: the sanitizer reported errors (see $(basename "$log"))"
  [ "$rc" -eq 124 ] && say "$tool: TIMED OUT after ${SAN_TIMEOUT}s"
  say "$tool: rc=$rc  $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|smoke_cuda:" "$log" | tr '\n' ' ')"
  record "$tool" "$rc"
done

# ---- 4b. the GPU fuzz step (issue 14): random adversarial device values under memcheck
log=$OUT/sanitizer_gpu_fuzz.log
say "== compute-sanitizer --tool memcheck tools/gpu_fuzz.py (${KVATTN_GPU_FUZZ_CASES:-10000} cases, at most ${KVATTN_GPU_FUZZ_SECONDS:-110} s)"
# shellcheck disable=SC2086
timeout -k 10 "$(( ${KVATTN_GPU_FUZZ_SECONDS:-110} + 90 ))" compute-sanitizer --tool memcheck --error-exitcode 86 \
  --print-limit 200 $SAN_FLAGS python3 tools/gpu_fuzz.py --cases "${KVATTN_GPU_FUZZ_CASES:-10000}" --seconds "${KVATTN_GPU_FUZZ_SECONDS:-110}" > "$log" 2>&1
rc=$?
tail -n 20 "$log"
say "gpu_fuzz memcheck: rc=$rc  $(grep -E "ERROR SUMMARY|gpu_fuzz:" "$log" | tr '\n' ' ')"
record gpu_fuzz "$rc"

# ---- 5. summary
verdict=PASS
[ "$failed" -eq 0 ] || verdict=FAIL
say "gpu_check: ${results[*]} -> $verdict"
exit "$failed"
