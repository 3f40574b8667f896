#!/usr/bin/env bash
# One device call for a prefill kernel change (the device tool's `run`, from the repository root): library B
# (the change) checked, then timed against library A (main) in alternating rounds, with the SM clock logged.
#   1. a smoke test of B (the persistent kernel's many-unit cases, 45 s at most): if it fails or hangs, the call
#      stops there (session 23 lost 570 s of device time to a hang that every later step hit again);
#   2. B's prefill tests (tests/python/test_cuda_prefill_sm90.py at the head dims of KVATTN_AB_DIMS), in
#      worker processes where .whl/ brought pytest-xdist (device_env.sh test_workers; KVATTN_TEST_WORKERS=0:
#      one process);
#   3. racecheck and memcheck of B on small persistent cases;
#   4. bench.run (no peers) of the cases of KVATTN_AB_FILTER, A B A B ..., and tools/gpu_ab.py's table with
#      the samples in time order; nvidia-smi's clocks (SM, memory), power, temperatures (GPU, memory) and
#      throttle reasons every 250 ms meanwhile.
# Knobs: KVATTN_AB_A, KVATTN_AB_B (libraries, .so or .xz), KVATTN_AB_DIMS ("128"; "64 128 256": the tests'
# head dims, KVATTN_TEST_HEAD_DIMS), KVATTN_AB_CHECK (0: steps 1-3 skipped),
# KVATTN_AB_K (a pytest -k expression for step 2), KVATTN_AB_TEST_TIMEOUT (200 s), KVATTN_AB_FILTER,
# KVATTN_AB_SUITES (W6,W3), KVATTN_AB_ROUNDS (2), KVATTN_AB_ENV_B (variables set for B, its checks and its
# timing, e.g. "KVATTN_SM90_PINGPONG=1"; then A and B may be the same library), KVATTN_AB_ENV_A (variables set
# for A's timing), KVATTN_AB_SMOKE_TIMEOUT (45 s;
# a full build at d 256 needs ~60), KVATTN_AB_SAN_TIMEOUT (45 s: racecheck's and memcheck's each). Output
# under $OUT.
# For another kernel (the decode kernel: KVATTN_AB_TESTS=tests/python/test_cuda_decode_sm90.py
# KVATTN_AB_SUITES=W1,W2 and the three -k below): KVATTN_AB_TESTS (the test file), KVATTN_AB_SMOKE_K
# (persistent_many_units), KVATTN_AB_RACE_K (persistent_cp_async_producer), KVATTN_AB_MEM_K
# (persistent_nan_page).
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/kvattn_ab}
mkdir -p "$OUT"
source tools/device_env.sh
A=$(device_lib "${KVATTN_AB_A:?library A}" a)
B=$(device_lib "${KVATTN_AB_B:?library B}" b)
read -r -a env_b <<< "${KVATTN_AB_ENV_B:-}"
B_RUN=(env "${env_b[@]}" KVATTN_LIBRARY="$B")  # B's checks: its library and its variables
t0=$(date +%s)
say() { echo "[$(($(date +%s) - t0)) s] $*"; }
export KVATTN_TEST_HEAD_DIMS=${KVATTN_AB_DIMS:-128}
# (.dev/'s libraries are bf16 developer builds: their tests skip fp16 cases; calls.sh exports the same. Run
# by hand without it, every fp16 case fails "unsupported in this developer build": session 50.)
export KVATTN_TEST_DTYPES=${KVATTN_TEST_DTYPES:-bf16}
PT="python3 -m pytest -q -p no:cacheprovider ${KVATTN_AB_TESTS:-tests/python/test_cuda_prefill_sm90.py}"
q=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active,clocks.mem,temperature.memory
( nvidia-smi --query-gpu=$q \
    --format=csv,noheader -lms 250 > "$OUT/smi.csv" 2> /dev/null ) &
smi=$!
trap 'kill $smi 2> /dev/null' EXIT

if [ "${KVATTN_AB_CHECK:-1}" != 0 ]; then  # 0: the timing only (a dry run without a GPU)
"${B_RUN[@]}" timeout -k 3 "${KVATTN_AB_SMOKE_TIMEOUT:-45}" $PT -x -k "${KVATTN_AB_SMOKE_K:-persistent_many_units}" \
  > "$OUT/smoke.log" 2>&1
rc=$?
say "smoke rc=$rc $(tail -1 "$OUT/smoke.log")"
if [ $rc -ne 0 ]; then  # (5: no test ran, which is a failure here too)
  grep -E "^(FAILED|ERROR)|Error" "$OUT/smoke.log" | head -5
  say "B failed its smoke test: nothing else runs"
  exit 1
fi
"${B_RUN[@]}" "${TEST_WORKER_ENV[@]}" timeout -k 5 "${KVATTN_AB_TEST_TIMEOUT:-200}" $PT $(test_workers) \
  ${KVATTN_AB_K:+-k "$KVATTN_AB_K"} > "$OUT/tests.log" 2>&1
say "tests rc=$? $(tail -1 "$OUT/tests.log")"
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -8
"${B_RUN[@]}" timeout -k 5 "${KVATTN_AB_SAN_TIMEOUT:-45}" compute-sanitizer --tool racecheck --report-api-errors no $PT \
  -k "${KVATTN_AB_RACE_K:-persistent_cp_async_producer}" > "$OUT/racecheck.log" 2>&1
say "racecheck rc=$? $(grep 'RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1)"
"${B_RUN[@]}" timeout -k 5 "${KVATTN_AB_SAN_TIMEOUT:-45}" compute-sanitizer --tool memcheck --report-api-errors no $PT \
  -k "${KVATTN_AB_MEM_K:-persistent_nan_page}" > "$OUT/memcheck.log" 2>&1
say "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

filter=${KVATTN_AB_FILTER:-W6 prefill 16k 16x128|W3 32/8 b8 +512 over 4k p16|W3 32/8 b1 +512 over 4k p16|W3 32/8 b1 +2048 over 32k p64}
dirs=()
for round in $(seq 1 "${KVATTN_AB_ROUNDS:-2}"); do
  for v in a b; do
    lib=$A env_v=()
    read -r -a env_v <<< "${KVATTN_AB_ENV_A:-}"
    if [ $v = b ]; then lib=$B; read -r -a env_v <<< "${KVATTN_AB_ENV_B:-}"; fi
    env "${env_v[@]}" KVATTN_LIBRARY="$lib" timeout -k 5 120 python3 -m bench.run \
      --suite "${KVATTN_AB_SUITES:-W6,W3}" --filter "$filter" --no-peers --flex none --warmup-s 1 \
      --max-minutes 1.5 --out "$OUT/${v}_$round" > "$OUT/${v}_$round.log" 2>&1
    say "$v round $round rc=$?"
    dirs+=("$OUT/${v}_$round")
  done
done
[ ${#dirs[@]} -gt 0 ] && python3 tools/gpu_ab.py "${dirs[@]}" --series | tee "$OUT/ab.txt"  # (ROUNDS=0: checks only)
kill $smi 2> /dev/null
python3 - "$OUT/smi.csv" << 'EOF'
import collections, sys
rows = [[x.strip() for x in line.split(",")] for line in open(sys.argv[1]) if line[:1].isdigit()]
clocks = collections.Counter((r[1], r[4]) for r in rows if len(r) > 4)
print("SM clock, throttle reasons (0x4: SW power cap), samples:",
      ", ".join(f"{c} {w}: {n}" for (c, w), n in clocks.most_common(8)))
# The memory's clock and temperature (session 26: long fp8 streams drift in steps at a steady SM clock).
mem = collections.Counter(r[5] for r in rows if len(r) > 6)
temps = [float(r[6].split()[0]) for r in rows if len(r) > 6 and r[6].split()[0].replace(".", "").isdigit()]
print("memory clock, samples:", ", ".join(f"{c}: {n}" for c, n in mem.most_common(4)),
      f"; memory temperature {min(temps):.0f}-{max(temps):.0f} C" if temps else "; memory temperature n/a")
EOF
