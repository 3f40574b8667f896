"""Run one benchmark case a few times, eagerly, for a profiler (GPU):

    ncu --kernel-name regex:attention --launch-skip 3 --launch-count 1 --set full \\
        python3 -m bench.profile_case "W1 32/8 b4 32k p16"

The case is looked up by its exact name in the suites (python3 -m bench.run --list names them).
"""
import argparse
import sys

from bench import layouts as L
from bench import suites as S


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("case", help="exact case name, e.g. 'W1 32/8 b4 32k p16'")
    ap.add_argument("--calls", type=int, default=5)
    args = ap.parse_args(argv)
    import torch
    import kvattn
    cases = [c for suite in S.SUITES.values() for c in suite()]
    match = [c for c in cases if c.name == args.case]
    if not match:
        print(f"profile_case: no case named {args.case!r}", file=sys.stderr)
        return 2
    plan = L.make_plan(match[0])
    kw = L.materialize(plan, L.TorchBackend("cuda", "bf16", 0, kv=match[0].kv), 0)
    for _ in range(args.calls):
        kvattn.flash_attn_with_kvcache(**kw)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
