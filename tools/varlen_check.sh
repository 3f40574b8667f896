#!/usr/bin/env bash
# The device check that turns on the sm_90a prefill kernel's varlen instantiation (bench/NOTES.md, session 5
# "mixed batches", v5), on the GPU machine from the repository root, with a CUDA build carried along:
#   run(command="bash tools/varlen_check.sh", carry=["build-ci/libkvattn.so", ".whl"], timeout_s=300)
# 1. the prefill tests (the varlen_kernel and overlapping tests set KVATTN_SM90_VARLEN=1 themselves);
# 2. compute-sanitizer memcheck on those;
# 3. W3 with and without KVATTN_SM90_VARLEN=1, two alternating rounds (expected: the mixed cases ~590 /
#    ~940 us against ~1,900 / ~2,790, every other case within noise: it runs main's kernel either way).
# Green: make the varlen kernel the default for varlen q (prefill_sm90/launch.cuh) and drop the switch.
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/varlen_check}
mkdir -p "$OUT"
export KVATTN_LIBRARY=${KVATTN_LIBRARY:-build-ci/libkvattn.so}
export PYTHONPATH=python:/tmp/site:. PYTHONUNBUFFERED=1 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
fi
PT="python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_prefill_sm90.py"
timeout 150 $PT > "$OUT/prefill.log" 2>&1
echo "prefill tests rc=$? $(tail -1 "$OUT/prefill.log")"
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no $PT -k "varlen_kernel or overlapping" \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
for round in 1 2; do
  for v in 0 1; do
    KVATTN_SM90_VARLEN=$v timeout 120 python3 -m bench.run --suite W3 --no-peers --flex none --max-minutes 1.5 \
      --out "$OUT/w3_${v}_$round" > "$OUT/w3_${v}_$round.log" 2>&1
    echo "== KVATTN_SM90_VARLEN=$v round $round"
    grep -E "^\[" "$OUT/w3_${v}_$round.log" | cut -c1-100
  done
done
