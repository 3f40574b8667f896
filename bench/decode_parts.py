"""Where a decode call's time goes on the CUDA backend: the call's graph-timed median (bench/timing.py)
and, from torch.profiler over eager calls, each kernel's median device time (attention, split combine, ...)
over a length sweep, so that time = bytes / rate + fixed can be fitted per part.

    PYTHONPATH=python KVATTN_LIBRARY=<so> python3 -m bench.decode_parts [--lengths 4096,...] [--json FILE]
"""
import argparse
import json
import numpy as np
import torch

import kvattn
from bench.decode_ab import make_inputs, HK, D
from bench.timing import n_sets_for, time_cuda

K = 1024


def kernel_times(fn, calls=20):
    """Mean device time (us) per kernel name over `calls` eager calls (torch.profiler's averages)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out = {}
    for ka in prof.key_averages():
        total = getattr(ka, "device_time_total", None)
        if total is None:
            total = getattr(ka, "cuda_time_total", 0.0)
        if total > 0 and ka.count > 0 and "Memcpy" not in ka.key and "Memset" not in ka.key:
            name = ka.key.replace("(anonymous namespace)::", "").split("<")[0].split("(")[0].split("::")[-1]
            out[name[:30]] = total / ka.count  # split_combine_kernel starts early (PDL): it spans the attention
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lengths", default="4096,8192,16384,32768,65536")
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    for L in [int(x) for x in args.lengths.split(",")]:
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1)
        kv_bytes = 2 * args.batch * L * HK * D * 2
        sets = [make_inputs(args.batch, L, args.page, 1, "bf16", False, gen)
                for _ in range(n_sets_for(kv_bytes, 24 << 30, 8))]
        fns = [lambda s=s: kvattn.flash_attn_with_kvcache(s[0], s[1], s[2], **s[3]) for s in sets]
        r, _ = time_cuda(fns, torch)
        parts = kernel_times(fns[0])
        rows.append(dict(batch=args.batch, keys=L, page=args.page, kv_bytes=kv_bytes, us=r["median_us"],
                         parts=parts))
        print(f"b{args.batch} {L:6d} p{args.page}: {r['median_us']:8.1f} us {kv_bytes / r['median_us'] / 1e6:5.2f} TB/s  "
              + "  ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items())), flush=True)
        del sets, fns
        torch.cuda.empty_cache()
    x = np.array([r["kv_bytes"] for r in rows], np.float64)
    y = np.array([r["us"] for r in rows], np.float64)
    slope, icpt = np.polyfit(x, y, 1)
    print(f"fit: time = bytes / {1 / slope / 1e6:.2f} TB/s + {icpt:.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
