"""Head dim 512 (d = dv = 512, Gemma's global layers) and MLA decode (d 64 / dv 512 with qv, 1 kv head, page
64: W5) on the CUDA backend, kvattn alone (no peer runs either shape on kvattn's paged inputs), in one process:

    PYTHONPATH=python KVATTN_LIBRARY=<so> python3 -m bench.wide_heads [--filter TEXT] [--json FILE]

Times: CUDA-graph replays (bench/timing.py: median of >= 30, input sets rotated past 3x the L2). TB/s counts
the K/V bytes read once (q and out are < 0.5% of them); the H200's read ceiling is 4.8 TB/s (HARDWARE.md).
Each case also checks its output against a float32 torch softmax of the first input set (max |diff|), a
sanity check: the oracle tests (tests/python/test_head_dim_512.py) are the proof.
"""
import argparse
import json

import torch

import kvattn
from bench.timing import n_sets_for, time_cuda

K = 1024

# name, q heads, kv heads, d, dv (qv when d != dv), batch, keys, page (0 = contiguous), q tokens, cache dtype
CASES = [
    ("d512 32/8 b1 128k p16", 32, 8, 512, 512, 1, 128 * K, 16, 1, "bf16"),
    ("d512 32/8 b4 32k contig", 32, 8, 512, 512, 4, 32 * K, 0, 1, "bf16"),
    ("d512 32/8 b4 32k p1", 32, 8, 512, 512, 4, 32 * K, 1, 1, "bf16"),
    ("d512 32/8 b4 32k p16", 32, 8, 512, 512, 4, 32 * K, 16, 1, "bf16"),
    ("d512 32/8 b4 32k p64", 32, 8, 512, 512, 4, 32 * K, 64, 1, "bf16"),
    ("d512 32/8 b16 32k p16", 32, 8, 512, 512, 16, 32 * K, 16, 1, "bf16"),
    ("d512 32/8 b128 2k p16", 32, 8, 512, 512, 128, 2 * K, 16, 1, "bf16"),
    ("d512 16/2 b16 32k p16", 16, 2, 512, 512, 16, 32 * K, 16, 1, "bf16"),
    ("d512 32/8 b32 4k q4 p16", 32, 8, 512, 512, 32, 4 * K, 16, 4, "bf16"),
    ("d512 32/8 b4 32k p16 fp8", 32, 8, 512, 512, 4, 32 * K, 16, 1, "fp8"),
    ("d512 32/8 b16 32k p16 fp8", 32, 8, 512, 512, 16, 32 * K, 16, 1, "fp8"),
    ("d128 32/8 b4 32k p16", 32, 8, 128, 128, 4, 32 * K, 16, 1, "bf16"),
    ("W5 MLA 128/1 b64 4k p64", 128, 1, 64, 512, 64, 4 * K, 64, 1, "bf16"),
    ("W5 MLA 128/1 b64 32k p64", 128, 1, 64, 512, 64, 32 * K, 64, 1, "bf16"),
    ("W5 MLA 128/1 b128 4k p64", 128, 1, 64, 512, 128, 4 * K, 64, 1, "bf16"),
    ("W5 MLA 128/1 b128 32k p64", 128, 1, 64, 512, 128, 32 * K, 64, 1, "bf16"),
    ("W5 MLA 16/1 b64 32k p64", 16, 1, 64, 512, 64, 32 * K, 64, 1, "bf16"),
    ("W5 MLA 128/1 b64 32k p64 fp8", 128, 1, 64, 512, 64, 32 * K, 64, 1, "fp8"),
]


def make_inputs(hq, hk, d, dv, b, L, page, sq, kv, gen):
    dev, bf = "cuda", torch.bfloat16
    q = torch.randn(b, sq, hq, d, device=dev, dtype=bf, generator=gen)
    kw = dict(cache_seqlens=torch.full((b,), L, dtype=torch.int32, device=dev), causal=sq > 1)
    if d != dv:
        kw["qv"] = torch.randn(b, sq, hq, dv, device=dev, dtype=bf, generator=gen)
    if page:
        n_pages = b * (L // page)
        lead = (n_pages, page)
        kw["page_table"] = torch.randperm(n_pages, device=dev, generator=gen).to(torch.int32).view(b, -1)
    else:
        lead = (b, L)
    k = torch.randn(lead + (hk, d), device=dev, dtype=bf, generator=gen)
    v = torch.randn(lead + (hk, dv), device=dev, dtype=bf, generator=gen)
    if kv == "fp8":
        k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    return q, k, v, kw


def reference(q, k, v, kw):
    """float32 softmax attention of sequence 0 (contiguous view through the page table), last q token."""
    L = int(kw["cache_seqlens"][0])
    if "page_table" in kw:
        k0, v0 = k[kw["page_table"][0].long()].flatten(0, 1)[:L], v[kw["page_table"][0].long()].flatten(0, 1)[:L]
    else:
        k0, v0 = k[0, :L], v[0, :L]
    hq, hk = q.shape[2], k.shape[2]
    k0 = k0.float().repeat_interleave(hq // hk, dim=1)  # (L, hq, d)
    v0 = v0.float().repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("hd,lhd->hl", q[0, -1].float(), k0)
    if "qv" in kw:
        s += torch.einsum("hd,lhd->hl", kw["qv"][0, -1].float(), v0)
    s *= (q.shape[-1] + (kw["qv"].shape[-1] if "qv" in kw else 0)) ** -0.5
    return torch.einsum("hl,lhd->hd", torch.softmax(s, dim=-1), v0)


def run_case(name, hq, hk, d, dv, b, L, page, sq, kv):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    kv_bytes = b * L * hk * (d + dv) * (1 if kv == "fp8" else 2)
    sets = [make_inputs(hq, hk, d, dv, b, L, page, sq, kv, gen) for _ in range(n_sets_for(kv_bytes, 24 << 30, 8))]
    fns = [lambda s=s: kvattn.flash_attn_with_kvcache(s[0], s[1], s[2], **s[3]) for s in sets]
    out = fns[0]()
    diff = float((out[0, -1].float() - reference(*sets[0])).abs().max())
    r, _ = time_cuda(fns, torch)
    row = dict(case=name, kv_bytes=kv_bytes, us=r["median_us"], p10_p90=(r["p10_us"], r["p90_us"]),
               tbs=kv_bytes / (r["median_us"] * 1e-6) / 1e12, max_abs_diff=diff, nan=bool(torch.isnan(out).any()))
    del sets, fns
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="", help="comma list: cases whose name contains any of them")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    print(f"{'case':30s} {'MB':>7s} {'us':>9s} {'TB/s':>5s} {'diff':>8s}")
    for c in CASES:
        wanted = [f for f in args.filter.split(",") if f]
        if wanted and not any(f in c[0] for f in wanted):
            continue
        try:
            r = run_case(*c)
        except Exception as exc:  # noqa: BLE001 - one failing case must not hide the others
            print(f"{c[0]:30s} FAILED: {str(exc).splitlines()[0][:150]}", flush=True)
            continue
        rows.append(r)
        print(f"{r['case']:30s} {r['kv_bytes'] / 1e6:7.0f} {r['us']:9.1f} {r['tbs']:5.2f} {r['max_abs_diff']:8.1e}"
              + (" NaN!" if r["nan"] else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
