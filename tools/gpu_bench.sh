#!/usr/bin/env bash
# The benchmark with every peer on the GPU machine (the device tool's `run`), from the repository root:
#   1. the test wheels of .whl/ into /tmp/site (when carried);
#   2. the peer kit (.peerkit/, built here by tools/peer_kit.sh) unpacked into /tmp/kvattn-peerkit and
#      imported (python3 -m bench.peerkit): a kit whose parts came in earlier calls is completed from
#      the stash there (the machine stays up ~30 s after a call: chain the calls);
#   3. python3 -m bench.run on the suites of $1 (default W1,W2,W4,W6,W3,W5) with every peer, output in
#      $OUT/bench_<suites>/ (results.jsonl, results.md, summary.md, plots), packed as one .tgz (the device
#      tool returns at most 8 files); with KVATTN_MAIN=1 also the MAIN JOB;
#   4. the summary and plots of every call's records on this machine so far (a run cut into several
#      calls): <name>/all_calls/ in the same archive.
# Knobs: KVATTN_LIBRARY (build-ci/libkvattn.so), KVATTN_TORCH_OP (1, the default: build the torch op first
# when absent; 0: the ctypes path), KVATTN_BENCH_MINUTES (--max-minutes, 7.5, 6.5 with the
# MAIN JOB: no case starts after it), KVATTN_BENCH_TIMEOUT (540 s, 450 with the MAIN JOB: the whole bench.run),
# KVATTN_BENCH_ARGS (more bench.run arguments, e.g. "--peers flashinfer,fa4 --flex none"),
# KVATTN_BENCH_FILTER (case names: substrings separated by '|', spaces allowed).
# Locally, afterwards: python3 -m bench.report <run>/results.jsonl [more .jsonl] --results-md bench/RESULTS.md
set +e
cd "$(dirname "$0")/.." || exit 2
suites=${1:-W1,W2,W4,W6,W3,W5}
OUT=${OUT:-/tmp/kvattn_bench}
mkdir -p "$OUT"
export PYTHONPATH=python:/tmp/site:.
export PYTHONUNBUFFERED=1
export KVATTN_LIBRARY=${KVATTN_LIBRARY:-build-ci/libkvattn.so}
# An xz-compressed library (a full 90a build is ~46 MB; with FA4's kit part it exceeds a call's carry):
# unpacked once into /tmp.
if [[ "$KVATTN_LIBRARY" == *.xz ]]; then
  mkdir -p /tmp/kvattn_lib && xz -dc "$KVATTN_LIBRARY" > /tmp/kvattn_lib/libkvattn.so
  export KVATTN_LIBRARY=/tmp/kvattn_lib/libkvattn.so
fi
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/wheels.log" 2>&1
fi
# The optional torch op (tools/build_torch_op.sh: one g++ compile against the machine's torch), so that the
# host column times the package as users run it; KVATTN_TORCH_OP=0 keeps the ctypes path (session 7's run
# had no op: its Python column was the ctypes path's, 83 us against 28 with the op).
if [ "${KVATTN_TORCH_OP:-1}" != 0 ] && [ ! -s python/kvattn/_kvattn_stable.so ]; then
  t_op=$(date +%s)
  bash tools/build_torch_op.sh > "$OUT/torch_op.log" 2>&1
  echo "torch op: rc=$? in $(($(date +%s) - t_op)) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
t0=$(date +%s)
python3 -m bench.peerkit 2>&1 | tee "$OUT/peerkit.log"
echo "peer kit: $(($(date +%s) - t0)) s"
name=bench_$(echo "$suites" | tr ',' '_')
# Inside the device call's 600 s: the suites, then (KVATTN_MAIN=1) the MAIN JOB's ~1 min.
if [ -n "${KVATTN_MAIN:-}" ]; then minutes=6.5 limit=450; else minutes=7.5 limit=540; fi
timeout -k 10 "${KVATTN_BENCH_TIMEOUT:-$limit}" python3 -m bench.run --suite "$suites" \
  --max-minutes "${KVATTN_BENCH_MINUTES:-$minutes}" \
  --out "$OUT/$name" ${KVATTN_BENCH_FILTER:+--filter "$KVATTN_BENCH_FILTER"} ${KVATTN_BENCH_ARGS:-} \
  > "$OUT/$name.log" 2>&1
rc=$?
if [ -n "${KVATTN_MAIN:-}" ]; then
  timeout -k 10 90 python3 -m bench.run --main --out "$OUT/$name/main" >> "$OUT/$name.log" 2>&1
fi
# Every call's records stay on the machine (while it stays up): the summary and plots of all of them.
runs=/tmp/kvattn-bench-runs
mkdir -p "$runs"
[ -s "$OUT/$name/results.jsonl" ] && cp "$OUT/$name/results.jsonl" "$runs/$name.jsonl"
python3 -m bench.report "$runs"/*.jsonl --out "$OUT/$name/all_calls" > "$OUT/$name/all_calls.log" 2>&1
tar -czf "$OUT/$name.tgz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
echo "bench rc=$rc after $(($(date +%s) - t0)) s"
grep -E "^W[0-9]|^repeat|cases in|MAIN|check:" "$OUT/$name.log" | tail -30
exit $rc
