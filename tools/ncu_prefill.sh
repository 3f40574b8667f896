#!/usr/bin/env bash
# Where the sm_90a prefill kernel's time goes, per head dim (the next step of bench/NOTES.md "Where to go
# next", session 8): ncu on the persistent prefill kernel of W6 at d 64 and d 128, and on W3's b1 +512 over
# 4k (one wave of 128 CTAs of 36 tiles: 126 us where FA4 takes 65, twice W6's time a tile), with
# the pipes that bound a tile (tensor, MUFU for exp2, FMA / ALU), the issue rate and the warp stall
# reasons, then the SASS lines with the most stall samples (a -lineinfo-free build: SASS addresses only).
# On the GPU machine, from the repository root, with a 90a library (.so or .xz) carried:
#   run(command="KVATTN_LIBRARY=<lib>.xz bash tools/ncu_prefill.sh", carry=[<lib>.xz, ".whl"], timeout_s=400)
# KVATTN_NCU_CASES="case;case" overrides the cases (bench.run --list names them), KVATTN_NCU_KERNEL the
# kernel's name regex (e.g. decode_sm90 with "W1 32/8 b1 1k p16 short": the decode start's ~2,700
# instructions a warp, bench/NOTES.md session 7). ~60-90 s a case.
set +e
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/ncu_prefill}
mkdir -p "$OUT"
rm -f "$OUT/summary.txt"
source tools/device_env.sh
export KVATTN_LIBRARY=$(device_lib "${KVATTN_LIBRARY:?a 90a library}" ncu)
stalls=""
for r in barrier long_scoreboard short_scoreboard mio_throttle wait math_pipe_throttle not_selected \
  selected dispatch_stall no_instruction branch_resolving membar sleeping; do
  stalls="$stalls,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
done
pipes="sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
pipes="$pipes,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"
pipes="$pipes,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
pipes="$pipes,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"
pipes="$pipes,sm__inst_executed.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active"
pipes="$pipes,smsp__inst_executed.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum"
# Memory-side figures (L2 and HBM throughput: whether a case is bound by its K/V loads).
pipes="$pipes,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum.per_second"
pipes="$pipes,dram__bytes_read.sum.per_second${KVATTN_NCU_METRICS:+,$KVATTN_NCU_METRICS}"
IFS=';' read -ra cases <<< "${KVATTN_NCU_CASES:-W6 prefill 16k 32x64 full;W6 prefill 16k 16x128 full;W3 32/8 b1 +512 over 4k p16}"
for c in "${cases[@]}"; do
  name=$(echo "$c" | tr ' /+' '___')
  # The kernel's 3rd launch (two warm-up calls first); W3's append kernel is skipped by the name.
  timeout -k 10 150 ncu --kernel-name "regex:${KVATTN_NCU_KERNEL:-prefill_kernel}" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --metrics "$pipes$stalls" --export "$OUT/ncu_$name" --force-overwrite \
    python3 -m bench.profile_case "$c" --calls 4 > "$OUT/ncu_$name.log" 2>&1
  echo "== ncu '$c' rc=$?"
  ncu --import "$OUT/ncu_$name.ncu-rep" --page raw --csv --metrics "$pipes$stalls" 2>/dev/null > "$OUT/raw_$name.csv"
  python3 - "$OUT/raw_$name.csv" <<'EOF'
import csv, sys
with open(sys.argv[1], newline="") as f:
    rows = list(csv.reader(f))
if len(rows) >= 3:
    for name, unit, value in zip(rows[0], rows[1], rows[2]):
        if "__" in name:
            short = name.replace("smsp__average_warps_issue_stalled_", "stall ")
            print(f"   {short[:78]:78s} {value:>12s} {unit}")
EOF
  # One line a case, printed again at the end (a device call returns only its output's tail).
  python3 - "$OUT/raw_$name.csv" "$c" >> "$OUT/summary.txt" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
d = dict(zip(rows[0], rows[2])) if len(rows) >= 3 else {}
def f(key):
    try:
        return float(d.get(key, "nan").replace(",", ""))
    except ValueError:
        return float("nan")
stall = "smsp__average_warps_issue_stalled_"
stalls = sorted(((f(k), k[len(stall):].replace("_per_issue_active.ratio", ""))
                 for k in d if k.startswith(stall) and "selected" not in k), reverse=True)[:3]
print(f"{sys.argv[2][:34]:34s} {f('gpu__time_duration.sum'):10.1f} "
      f"tensor {f('sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed'):5.1f}% "
      f"xu {f('sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active'):5.1f}% "
      f"issue {f('smsp__issue_active.avg.pct_of_peak_sustained_active'):5.1f}% "
      f"L2 {f('lts__throughput.avg.pct_of_peak_sustained_elapsed'):5.1f}% | "
      + ", ".join(f"{n} {v:.2f}" for v, n in stalls))
EOF
  # The 12 SASS instructions with the most stall samples (SourceCounters), with their reasons.
  ncu --import "$OUT/ncu_$name.ncu-rep" --page source --csv --print-source sass 2>/dev/null > "$OUT/sass_$name.csv"
  python3 - "$OUT/sass_$name.csv" <<'EOF'
import csv, sys
with open(sys.argv[1], newline="") as f:
    rows = list(csv.reader(f))
head = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" == c for c in r)), None)
if head is None:
    print("   (no source page)"); sys.exit(0)
cols = rows[head]
def col(*names):
    return next((cols.index(n) for n in names if n in cols), None)
src, samp = col("Source"), col("Warp Stall Sampling (All Samples)", "Sampling Data (All)")
if src is None or samp is None:
    print("   columns:", cols[:12]); sys.exit(0)
body = [r for r in rows[head + 1:] if len(r) > max(src, samp)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[samp]) for r in body) or 1.0
print(f"   stall samples {total:.0f}; top instructions:")
for r in sorted(body, key=lambda r: -num(r[samp]))[:12]:
    print(f"   {100 * num(r[samp]) / total:5.1f}%  {r[src][:100]}")
EOF
done
echo "== summary (case, kernel time in ncu's unit, pipes, the top three stalls a issue)"
cat "$OUT/summary.txt"
