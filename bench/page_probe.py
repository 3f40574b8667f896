"""Prefill time by page size, TMA producer against the cp.async one (KVATTN_SM90_TMA=0), one library, one run:
which page sizes take TMA (tma_pages_ok, src/cuda/prefill_sm90/config.hpp) and what it is worth there.

    PYTHONPATH=python:. KVATTN_LIBRARY=... python3 -m bench.page_probe --d 256 [--pages 16,32,48,...]

Causal prefill of b sequences of sk tokens over a paged cache (pages in a random permutation, the slots past
each sequence NaN), q = the whole sequence (sq = sk), GQA hq / hk; each time the median of bench.timing's
CUDA-graph replays. Prints one row a page size: microseconds and TFLOP/s (causal FLOPs, 4 sq sk d / 2 a
head) of each producer, their ratio and the TMA time against page 16's.
"""
import argparse
import os

import torch

import kvattn
from bench.prefill_sm90_check import paged_cache
from bench.timing import time_cuda


def paged_inputs(b, sk, hq, hk, d, page, gen):
    """q and a paged cache of b sequences of sk tokens (prefill_sm90_check's: shuffled pages, NaN past sk)."""
    k, v, table = paged_cache(b, sk, hk, d, page, torch.bfloat16, gen)
    q = torch.randn(b, sk, hq, d, generator=gen, device="cuda").to(torch.bfloat16)
    seqlens = torch.full((b,), sk, dtype=torch.int32, device="cuda")
    return q, k, v, table, seqlens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=int(os.environ.get("KVATTN_TEST_HEAD_DIMS", "128").split()[0]))
    ap.add_argument("--pages", default="16,32,48,64,96,128,256")
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--sk", type=int, default=8192)
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hk", type=int, default=8)
    args = ap.parse_args()
    d, dv = args.d, (128 if args.d == 192 else args.d)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(54)
    flops = 2 * args.b * args.hq * args.sk * args.sk * (d + dv) / 2
    print(f"bench.page_probe: b{args.b} x {args.sk} causal, {args.hq}/{args.hk} heads, d {d}, bf16, "
          f"{torch.cuda.get_device_name()}")
    print(f"{'page':>5} {'tma us':>9} {'TF/s':>6} {'cp.async us':>12} {'TF/s':>6} {'tma/cp':>7} {'vs p16':>7} "
          f"{'SM MHz':>10}")
    p16 = None
    for page in [int(x) for x in args.pages.split(",")]:
        q, k, v, table, seqlens = paged_inputs(args.b, args.sk, args.hq, args.hk, d, page, gen)
        if dv != d:
            v = v[..., :dv].contiguous()

        def call():
            return kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, page_table=table, causal=True)

        times, mhz = {}, []
        for tma in ("1", "0"):
            os.environ["KVATTN_SM90_TMA"] = tma
            out = call()
            assert torch.isfinite(out).all(), f"page {page} TMA={tma}: non-finite output"
            r, _ = time_cuda([call], torch)
            times[tma] = r["median_us"]
            mhz.append(r.get("sm_clock_mhz", {}).get("median", 0))
        os.environ.pop("KVATTN_SM90_TMA", None)
        t, c = times["1"], times["0"]
        if page == 16:
            p16 = t
        rel = f"{t / p16:7.3f}" if p16 else f"{'-':>7}"
        print(f"{page:>5} {t:9.1f} {flops / t / 1e6:6.0f} {c:12.1f} {flops / c / 1e6:6.0f} {t / c:7.3f} {rel} "
              f"{mhz[0]:>4.0f}/{mhz[1]:<4.0f}", flush=True)
        del q, k, v, table


if __name__ == "__main__":
    main()
