"""Compare bench runs (results.jsonl of bench.run): per case, each run's kvattn median and p10 time and its
ratio to the first run's median, and the host time per call (Python / C ABI) of the first and last run.

    python3 tools/gpu_ab.py BASE_DIR NEW_DIR [MORE_DIRS...] [--series]

Runs of an A/B in one device call alternate (A B A B: tools/prefill_ab.sh); the p10 next to the median
shows the clock's step (the first ~second of a long load runs at 1,980 MHz, then the H200's power cap
takes the clock to ~1,750: bench/NOTES.md, session 23). --series prints the samples in time order
(series_us) where a record has them. Records with the SM clock (bench/gpu_clock.py) show its median during
the replays, the share of its samples under the power cap and the median board power."""
import json
import os
import sys


def load(d):
    recs = {}
    with open(os.path.join(d, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if "case" in r:
                recs[r["case"]] = r
    return recs


def us(x):
    return f"{x:8.1f}" if isinstance(x, (int, float)) else "       -"


def clock(timing):
    """' 1755 MHz  80% 690 W' (the median SM clock of the replays, the share under the power cap, the median
    board power where recorded), or ''."""
    c = timing.get("sm_clock_mhz")
    if not c:
        return ""
    watts = f" {timing['power_w']:3.0f} W" if "power_w" in timing else ""
    return f" {c['median']:4d} MHz {100 * timing.get('power_capped', 0):3.0f}%{watts}"


def main(dirs, series=False):
    runs = [load(d) for d in dirs]
    names = [os.path.basename(os.path.normpath(d)) for d in dirs]
    print(f"{'case':52s} " + " ".join(f"{n[:17]:>17s}" for n in names) + "   ratios to the first")
    worst = 0.0
    for case in runs[-1]:
        recs = [run.get(case, {}) for run in runs]
        bad = [r.get("status") for r in recs if r.get("status", "ok") != "ok"]
        if bad:
            print(f"{case[:52]:52s} status: {str(bad[0])[:60]}")
            continue
        k = [(r.get("kvattn") or {}) for r in recs]
        med = [x.get("median_us") for x in k]
        cells = " ".join(f"{us(m)} ({us(x.get('p10_us')).strip():>6s}){clock(x)}" for m, x in zip(med, k))
        ratios = [m / med[0] if m and med[0] else float("nan") for m in med[1:]]
        worst = max([worst] + [r for r in ratios if r == r])
        host = f"  host py {us(recs[0].get('host_us_python')).strip()}/{us(recs[-1].get('host_us_python')).strip()}"
        print(f"{case[:52]:52s} {cells}  " + " ".join(f"{r:6.3f}" for r in ratios) + host)
        if series:
            for n, x in zip(names, k):
                if x.get("series_us"):
                    print(f"    {n[:12]:12s} " + " ".join(f"{v:.0f}" for v in x["series_us"]))
    print(f"worst ratio to the first: {worst:.3f}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--series"]
    if len(args) < 2:
        sys.exit(__doc__)
    main(args, series="--series" in sys.argv[1:])
