"""Decode bandwidth by cache memory order and head count, at equal bytes (GPU): does the KV read reach the
ceiling when each CTA's rows are contiguous (HND, or one KV head) and not when they are 2 KiB apart (NHD
with 8 heads)? A diagnostic for bench/NOTES.md, not a suite.

    PYTHONPATH=python:. python3 -m bench.layout_probe
"""
import functools
import json
import sys

from bench import timing as T

# (name, hq, hk, batch, seqlen, memory order of the cache)
SHAPES = (
    ("32/8 b4 32k NHD", 32, 8, 4, 32768, "nhd"),
    ("32/8 b4 32k HND", 32, 8, 4, 32768, "hnd"),
    ("4/1 b32 32k", 4, 1, 32, 32768, "nhd"),
    ("32/8 b16 128k NHD", 32, 8, 16, 131072, "nhd"),
    ("32/8 b16 128k HND", 32, 8, 16, 131072, "hnd"),
    ("32/8 b1 128k NHD", 32, 8, 1, 131072, "nhd"),
    ("32/8 b1 128k HND", 32, 8, 1, 131072, "hnd"),
)


def make_set(torch, hq, hk, b, s, order, d=128):
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(b, 1, hq, d, device=dev, dtype=dt)
    if order == "hnd":  # storage (b, hk, s, d), seen as (b, s, hk, d)
        k = torch.randn(b, hk, s, d, device=dev, dtype=dt).transpose(1, 2)
        v = torch.randn(b, hk, s, d, device=dev, dtype=dt).transpose(1, 2)
    else:
        k = torch.randn(b, s, hk, d, device=dev, dtype=dt)
        v = torch.randn(b, s, hk, d, device=dev, dtype=dt)
    return dict(q=q, k_cache=k, v_cache=v)


def main():
    import torch
    import kvattn
    for name, hq, hk, b, s, order in SHAPES:
        nbytes = 2 * b * s * hk * 128 * 2
        n_sets = T.n_sets_for(nbytes, 24 << 30)
        sets = [make_set(torch, hq, hk, b, s, order) for _ in range(n_sets)]
        fns = [functools.partial(kvattn.flash_attn_with_kvcache, **kw) for kw in sets]
        timing, _ = T.time_cuda(fns, torch)
        us = timing["median_us"]
        print(json.dumps(dict(case=name, us=round(us, 1), tbps=round(nbytes / us / 1e6, 3), sets=n_sets)),
              flush=True)
        del sets, fns
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
