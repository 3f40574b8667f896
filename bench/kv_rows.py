"""The decode stream's read rate by KV head count at the same bytes (GPU): a diagnostic for NOTES, not a
suite. A paged cache stores a token's KV heads side by side, so one KV head's row is d x element bytes
(256 for bf16 at d 128, 128 for fp8) with the other heads' rows between two of its tokens; with one KV
head a page's rows are contiguous. If the fp8 stream's rate (~4.0 TB/s against bf16's ~4.5, session 26)
is the row size's, the 1-KV-head cases read faster than the 8-KV-head ones at the same bytes.

    PYTHONPATH=python:. python3 -m bench.kv_rows

Shapes: 32/8 heads b16 x 128k (W1's largest) and 4/1 b128 x 128k (the same K/V bytes, one KV head), page
16, random page permutation, bf16 q, bf16 and fp8 e4m3 caches (descale 1).
"""
import functools
import json
import sys

from bench import timing as T

# (name, hq, hk, batch, keys)
SHAPES = (("32/8 b16 128k", 32, 8, 16, 128 * 1024), ("4/1 b128 128k", 4, 1, 128, 128 * 1024),
          ("32/8 b4 32k", 32, 8, 4, 32 * 1024), ("4/1 b32 32k", 4, 1, 32, 32 * 1024))
PAGE, D = 16, 128


def make_set(torch, hq, hk, b, s, fp8, gen):
    dev, dt = "cuda", torch.bfloat16
    n_pages = b * s // PAGE
    q = torch.randn(b, 1, hq, D, device=dev, dtype=dt, generator=gen)
    k = torch.randn(n_pages, PAGE, hk, D, device=dev, dtype=dt, generator=gen)
    v = torch.randn(n_pages, PAGE, hk, D, device=dev, dtype=dt, generator=gen)
    kw = {}
    if fp8:
        k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
        ones = torch.ones(b, hk, device=dev, dtype=torch.float32)
        kw = dict(k_descale=ones, v_descale=ones)
    page_table = torch.randperm(n_pages, device=dev, generator=gen).to(torch.int32).view(b, s // PAGE)
    seqlens = torch.full((b,), s, device=dev, dtype=torch.int32)
    return dict(q=q, k_cache=k, v_cache=v, page_table=page_table, cache_seqlens=seqlens, **kw)


def main():
    import torch
    import kvattn
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    for name, hq, hk, b, s in SHAPES:
        for fp8 in (False, True):
            kv_bytes = 2 * b * s * hk * D * (1 if fp8 else 2)
            sets = [make_set(torch, hq, hk, b, s, fp8, gen) for _ in range(T.n_sets_for(kv_bytes, 12 << 30))]
            fns = [functools.partial(kvattn.flash_attn_with_kvcache, **kw) for kw in sets]
            timing, _ = T.time_cuda(fns, torch)
            us = timing["median_us"]
            print(json.dumps(dict(case=name, cache="fp8" if fp8 else "bf16", us=round(us, 1),
                                  kv_tbps=round(kv_bytes / us / 1e6, 3))), flush=True)
            del sets, fns
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
