"""Short-context decode (GPU): the same inputs under each schedule the library offers, to see which
pays for batch 1-4 at 1k-8k keys, where the fixed cost of a call dominates (bench/NOTES.md). A diagnostic
for NOTES, not a suite.

    PYTHONPATH=python:. python3 -m bench.short_decode

Schedules: the default (sm_90a decode kernel, balanced), the portable kernel balanced
(KVATTN_DECODE_SM90=0), and the portable kernel with static splits num_splits = 1, 2, 4, 8, 16.
"""
import functools
import json
import os
import sys

from bench import timing as T

# (name, hq, hk, batch, keys, page)
SHAPES = (
    ("32/8 b1 1k p16", 32, 8, 1, 1024, 16),
    ("32/8 b1 2k p16", 32, 8, 1, 2048, 16),
    ("32/8 b1 4k p16", 32, 8, 1, 4096, 16),
    ("32/8 b1 8k p16", 32, 8, 1, 8192, 16),
    ("32/8 b4 2k p16", 32, 8, 4, 2048, 16),
)
SCHEDULES = (("sm90 balanced", None, 0), ("portable balanced", "0", 0)) + tuple(
    (f"portable splits={s}", "0", s) for s in (1, 2, 4, 8, 16))


def make_set(torch, hq, hk, b, s, page, gen, d=128):
    dev, dt = "cuda", torch.bfloat16
    pages_per_seq = s // page
    n_pages = b * pages_per_seq
    q = torch.randn(b, 1, hq, d, device=dev, dtype=dt, generator=gen)
    k = torch.randn(n_pages, page, hk, d, device=dev, dtype=dt, generator=gen)
    v = torch.randn(n_pages, page, hk, d, device=dev, dtype=dt, generator=gen)
    perm = torch.randperm(n_pages, device=dev, generator=gen).to(torch.int32)
    page_table = perm.view(b, pages_per_seq)
    seqlens = torch.full((b,), s, device=dev, dtype=torch.int32)
    return dict(q=q, k_cache=k, v_cache=v, page_table=page_table, cache_seqlens=seqlens)


def main():
    import torch
    import kvattn
    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    for name, hq, hk, b, s, page in SHAPES:
        nbytes = 2 * b * s * hk * 128 * 2
        sets = [make_set(torch, hq, hk, b, s, page, gen) for _ in range(T.n_sets_for(nbytes, 8 << 30))]
        ref = kvattn.flash_attn_with_kvcache(**sets[0]).float()
        for label, env, splits in SCHEDULES:
            if env is None:
                os.environ.pop("KVATTN_DECODE_SM90", None)
            else:
                os.environ["KVATTN_DECODE_SM90"] = env
            fns = [functools.partial(kvattn.flash_attn_with_kvcache, num_splits=splits, **kw) for kw in sets]
            err = float((kvattn.flash_attn_with_kvcache(num_splits=splits, **sets[0]).float() - ref).abs().max())
            timing, _ = T.time_cuda(fns, torch)
            print(json.dumps(dict(case=name, schedule=label, us=round(timing["median_us"], 2),
                                  max_diff_vs_default=err)), flush=True)
        os.environ.pop("KVATTN_DECODE_SM90", None)
        del sets
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
