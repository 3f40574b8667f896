"""Time kvattn over a range of num_splits on a few decode shapes (GPU), to tune the split heuristic.

    PYTHONPATH=python:. python3 -m bench.sweep_splits [--out FILE]

Prints one line per (case, num_splits): median time and TB/s; 0 is the library's own choice.
"""
import argparse
import functools
import json
import sys

from bench import layouts as L
from bench import suites as S
from bench import timing as T

SPLITS = (0, 1, 2, 4, 8, 16, 32, 64, 128)
CASES = (
    S.Case("sweep", "32/8 b1 128k", 32, 8, 1, 128 * S.K),
    S.Case("sweep", "32/8 b8 32k", 32, 8, 8, 32 * S.K),
    S.Case("sweep", "32/8 b8 32k page16", 32, 8, 8, 32 * S.K, page=16),
    S.Case("sweep", "32/8 b8 32k page1", 32, 8, 8, 32 * S.K, page=1),
    S.Case("sweep", "32/8 b16 32k", 32, 8, 16, 32 * S.K),
    S.Case("sweep", "64/8 b16 8k", 64, 8, 16, 8 * S.K),
    S.Case("sweep", "32/8 b128 2k", 32, 8, 128, 2 * S.K),
    S.Case("sweep", "32/8 b32 8k q4", 32, 8, 32, 8 * S.K, sq=4, causal=True, page=16),
)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    import kvattn
    records = []
    for case in CASES:
        plan = L.make_plan(case)
        be = L.TorchBackend("cuda", "bf16", 0)
        sets = [L.materialize(plan, be, i) for i in range(2)]
        nbytes, _ = L.count(plan, "bf16")
        for n in SPLITS:
            fns = [functools.partial(kvattn.flash_attn_with_kvcache, num_splits=n, **kw) for kw in sets]
            timing, _ = T.time_cuda(fns, torch)
            us = timing["median_us"]
            rec = dict(case=case.name, num_splits=n, us=round(us, 1), tbps=round(nbytes / us / 1e6, 3))
            records.append(rec)
            print(json.dumps(rec), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
