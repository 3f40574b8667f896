"""Compare two bench runs (results.jsonl of bench.run): per case, the median time of each and their ratio, and
the host time per call (Python / C ABI). Usage: python3 tools/gpu_ab.py BASE_DIR NEW_DIR."""
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
    return f"{x:7.1f}" if isinstance(x, (int, float)) else "      -"


def main(base_dir, new_dir):
    base, new = load(base_dir), load(new_dir)
    print(f"{'case':52s} {'base us':>8s} {'new us':>8s} {'new/base':>8s}  host py b/n      host C b/n")
    worst = 0.0
    for name, n in new.items():
        b = base.get(name, {})
        tb = (b.get("kvattn") or {}).get("median_us")
        tn = (n.get("kvattn") or {}).get("median_us")
        ratio = tn / tb if tb and tn else float("nan")
        if ratio == ratio:
            worst = max(worst, ratio)
        bad = [r.get("status") for r in (b, n) if r.get("status", "ok") != "ok"]
        if bad:
            print(f"{name[:52]:52s} status: {bad[0][:60]}")
            continue
        print(f"{name[:52]:52s} {us(tb)} {us(tn)} {ratio:8.3f}  {us(b.get('host_us_python'))}/{us(n.get('host_us_python'))}"
              f"  {us(b.get('host_us_c'))}/{us(n.get('host_us_c'))}")
    print(f"worst new/base: {worst:.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
