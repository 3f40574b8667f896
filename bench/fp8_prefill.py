"""fp8 prefill on the sm_90a kernel (branches pfp8 / pfp8w), kvattn alone, in one process:

    PYTHONPATH=python KVATTN_LIBRARY=<so> python3 -m bench.fp8_prefill [--filter TEXT] [--json FILE]

W6's dense prefill shape (16 heads x d 128 over 16k tokens, one sequence, full and causal) and W3's chunked
one (32/8 heads, b8, 2048 new tokens over 32k, page 16) with q / K / V in bf16, with an fp8 e4m3 cache under
bf16 q (the f16 kernel, KvFp8), and fp8 q over it on e4m3 wgmma (KvFp8Mma) and on the f16 kernel
(KVATTN_SM90_FP8_MMA=0), so the three fp8 ratios to bf16 come from one run. Times: CUDA-graph replays
(bench/timing.py); TFLOP/s from 4 hq d sq keys (causal counted exactly). Each case checks its last query row
against a float32 softmax of the first input set (max |diff|), a sanity check: the oracle tests are the proof.
"""
import argparse
import json
import os

import torch

import kvattn
from bench.timing import n_sets_for, time_cuda

K = 1024
# name, q heads, kv heads, batch, cached keys, new queries, page (0 = contiguous), causal
SHAPES = [
    ("W6 16x128 16k full", 16, 16, 1, 0, 16 * K, 0, False),
    ("W6 16x128 16k causal", 16, 16, 1, 0, 16 * K, 0, True),
    ("W3 32/8 b8 +2048 over 32k p16", 32, 8, 8, 32 * K, 2048, 16, True),
]
# q dtype, cache dtype, KVATTN_SM90_FP8_MMA
MODES = [("bf16", "bf16", "1"), ("bf16", "fp8", "1"), ("fp8", "fp8", "1"), ("fp8", "fp8", "0")]


def make_inputs(hq, hk, b, cached, sq, page, causal, q_dt, kv_dt, gen):
    dev, d = "cuda", 128
    L = cached + sq
    q = torch.randn(b, sq, hq, d, device=dev, dtype=torch.bfloat16, generator=gen)
    kw = dict(cache_seqlens=torch.full((b,), L, dtype=torch.int32, device=dev), causal=causal)
    if page:
        n_pages = b * (L // page)
        kw["page_table"] = torch.randperm(n_pages, device=dev, generator=gen).to(torch.int32).view(b, -1)
        lead = (n_pages, page)
    else:
        lead = (b, L)
    k = torch.randn(lead + (hk, d), device=dev, dtype=torch.bfloat16, generator=gen)
    v = torch.randn(lead + (hk, d), device=dev, dtype=torch.bfloat16, generator=gen)
    if kv_dt == "fp8":
        k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    if q_dt == "fp8":
        q = q.to(torch.float8_e4m3fn)
    return q, k, v, kw


def flops(hq, b, cached, sq, causal):
    keys = (cached + (sq + 1) / 2) * sq if causal else (cached + sq) * sq
    return 4 * hq * 128 * keys * b


def last_row_diff(out, q, k, v, kw):
    L = int(kw["cache_seqlens"][0])
    if "page_table" in kw:
        k0, v0 = (x[kw["page_table"][0].long()].flatten(0, 1)[:L] for x in (k, v))
    else:
        k0, v0 = k[0, :L], v[0, :L]
    hq, hk = q.shape[2], k.shape[2]
    k0, v0 = (x.float().repeat_interleave(hq // hk, dim=1) for x in (k0, v0))
    s = torch.einsum("hd,lhd->hl", q[0, -1].float(), k0) * 128 ** -0.5
    ref = torch.einsum("hl,lhd->hd", torch.softmax(s, dim=-1), v0)
    return float((out[0, -1].float() - ref).abs().max())


def run(shape, mode):
    name, hq, hk, b, cached, sq, page, causal = shape
    q_dt, kv_dt, mma = mode
    os.environ["KVATTN_SM90_FP8_MMA"] = mma
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    set_bytes = b * (cached + sq) * hk * 256 * (1 if kv_dt == "fp8" else 2)
    sets = [make_inputs(hq, hk, b, cached, sq, page, causal, q_dt, kv_dt, gen)
            for _ in range(n_sets_for(set_bytes, 24 << 30, 8))]
    fns = [lambda s=s: kvattn.flash_attn_with_kvcache(s[0], s[1], s[2], **s[3]) for s in sets]
    out = fns[0]()
    diff = last_row_diff(out, *sets[0])
    r, _ = time_cuda(fns, torch)
    del sets, fns
    torch.cuda.empty_cache()
    label = f"{name} q {q_dt} kv {kv_dt}" + (" (f16 path)" if q_dt == "fp8" and mma == "0" else "")
    return dict(case=label, us=r["median_us"], p10_p90=(r["p10_us"], r["p90_us"]),
                tflops=flops(hq, b, cached, sq, causal) / (r["median_us"] * 1e-6) / 1e12, max_abs_diff=diff,
                nan=bool(torch.isnan(out.float()).any()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="", help="comma list: shapes whose name contains any of them")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    print(f"{'case':58s} {'us':>9s} {'TFLOP/s':>8s} {'vs bf16':>8s} {'diff':>8s}")
    for shape in SHAPES:
        wanted = [f for f in args.filter.split(",") if f]
        if wanted and not any(f in shape[0] for f in wanted):
            continue
        base = None
        for mode in MODES:
            try:
                r = run(shape, mode)
            except Exception as exc:  # noqa: BLE001 - one failing case must not hide the others
                print(f"{shape[0]} {mode} FAILED: {str(exc).splitlines()[0][:150]}", flush=True)
                continue
            base = base or r["us"]
            rows.append(r)
            print(f"{r['case']:58s} {r['us']:9.1f} {r['tflops']:8.1f} {base / r['us']:7.2f}x {r['max_abs_diff']:8.1e}"
                  + (" NaN!" if r["nan"] else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
