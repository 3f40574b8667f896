"""A/B of the Hopper decode kernel (src/cuda/decode_sm90) with 2, 4 and 8 producer warps (KVATTN_DECODE_SM90=
2, 4, 8) against the portable decode kernel (KVATTN_FORCE_PORTABLE=1) in one process, on the same inputs: bf16
and fp8 e4m3 caches, 32/8 heads, d 128, contiguous / page 1 / page 16 (random page permutation) / scattered
batch index, 1-4 query tokens; and W2's ragged batches (bench.run's uniform 256-4096 lengths: "uniform" in the
case name), where a CTA of the balanced schedule computes 5-30 pieces.

    PYTHONPATH=python KVATTN_LIBRARY=<so> python3 -m bench.decode_ab [--filter TEXT] [--json FILE]

Times: CUDA-graph replays (bench/timing.py: median of >= 30, input sets rotated past 3x the L2). TB/s counts
the K/V bytes read once (q and out are < 0.1% of them). The last column is max |new - portable| / max
|portable| over the outputs of the first input set (worst variant): a sanity check, the oracle tests are
the proof. DECODE_AB_VARIANTS (comma list of portable, p2, p4, p8; a trailing b, e.g. p4b, computes fp8
caches in bf16 instead of f16) picks the variants; a variant may set more of the environment for its timing,
e.g. p8+KVATTN_DECODE_UNIT_COST=8 (a variant named twice is timed twice, alternating: p8,p8+X=1,p8,p8+X=1).
"""
import argparse
import json
import os

import torch

import kvattn
from bench.timing import n_sets_for, time_cuda

K = 1024
HQ, HK, D = 32, 8, 128
VARIANTS = os.environ.get("DECODE_AB_VARIANTS", "portable,p2,p4,p8").split(",")
# A variant named again is labelled with its round: p8, p8#2, ...
LABELS = [v + (f"#{VARIANTS[:k].count(v) + 1}" if v in VARIANTS[:k] else "") for k, v in enumerate(VARIANTS)]

# name, batch, keys (the longest when ragged), page (0 = contiguous), query tokens, cache dtype, scattered batch
# index; a name with "uniform" takes bench.run's W2 lengths for its batch.
CASES = [
    ("W1 b1 128k contig", 1, 128 * K, 0, 1, "bf16", False),
    ("W1 b1 128k p16", 1, 128 * K, 16, 1, "bf16", False),
    ("W1 b1 128k p1", 1, 128 * K, 1, 1, "bf16", False),
    ("W1 b1 128k contig+scat", 1, 128 * K, 0, 1, "bf16", True),
    ("W1 b4 32k contig", 4, 32 * K, 0, 1, "bf16", False),
    ("W1 b4 32k p16", 4, 32 * K, 16, 1, "bf16", False),
    ("W1 b4 32k contig+scat", 4, 32 * K, 0, 1, "bf16", True),
    ("W1 b16 32k p16", 16, 32 * K, 16, 1, "bf16", False),
    ("W2 b128 2k p16", 128, 2 * K, 16, 1, "bf16", False),
    ("W2 b128 uniform p16", 128, 4 * K, 16, 1, "bf16", False),
    ("W2 b64 uniform p16", 64, 4 * K, 16, 1, "bf16", False),
    ("W2 b256 uniform p16", 256, 4 * K, 16, 1, "bf16", False),
    ("W2 b128 uniform p1", 128, 4 * K, 1, 1, "bf16", False),
    ("W2 b64 zipf p16", 64, 4 * K, 16, 1, "bf16", False),
    ("W2 b128 zipf p16", 128, 4 * K, 16, 1, "bf16", False),
    ("W2 b256 zipf p16", 256, 4 * K, 16, 1, "bf16", False),
    ("W1 b1 1k p16", 1, 1 * K, 16, 1, "bf16", False),
    ("W1 b1 4k p16", 1, 4 * K, 16, 1, "bf16", False),
    ("W1 b16 128k p16", 16, 128 * K, 16, 1, "bf16", False),
    ("W4 b32 4k q1 p16", 32, 4 * K, 16, 1, "bf16", False),
    ("W4 b32 4k q2 p16", 32, 4 * K, 16, 2, "bf16", False),
    ("W4 b32 4k q4 p16", 32, 4 * K, 16, 4, "bf16", False),
    ("W4 b8 4k q8 p16", 8, 4 * K, 16, 8, "bf16", False),
    ("W4 b32 16k q8 p16", 32, 16 * K, 16, 8, "bf16", False),
    ("fp8 b1 128k p16", 1, 128 * K, 16, 1, "fp8", False),
    ("fp8 b4 32k p16", 4, 32 * K, 16, 1, "fp8", False),
    ("fp8 b16 32k p16", 16, 32 * K, 16, 1, "fp8", False),
    ("fp8 b128 2k p16", 128, 2 * K, 16, 1, "fp8", False),
]


def lengths_of(name, b, L):
    """Keys of each sequence: L, or bench.run's W2 uniform (256-4096) or Zipf lengths for batch b."""
    dist = next((d for d in ("uniform", "zipf") if d in name), None)
    if dist is None:
        return [L] * b
    from bench import layouts, suites
    case = next(c for c in suites.w2() if c.name == f"W2 32/8 b{b} {dist} p16")
    import numpy as np
    return [int(x) for x in layouts.cached_lengths(case, np.random.default_rng(1))]


def make_inputs(lens, L, page, sq, kv, scattered, gen):
    dev = "cuda"
    b = len(lens)
    q = torch.randn(b, sq, HQ, D, device=dev, dtype=torch.bfloat16, generator=gen)
    kw = dict(cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=dev), causal=sq > 1)
    if page:
        need = [-(-n // page) for n in lens]
        n_pages = sum(need)
        shape = (n_pages, page, HK, D)
        perm = torch.randperm(n_pages, device=dev, generator=gen).to(torch.int32)
        if len(set(need)) == 1:
            kw["page_table"] = perm.view(b, need[0])
        else:  # ragged: rows as long as the longest, unused entries page 0 (valid, never read)
            table = torch.zeros(b, max(need), dtype=torch.int32, device=dev)
            at = 0
            for i, n in enumerate(need):
                table[i, :n] = perm[at:at + n]
                at += n
            kw["page_table"] = table
    else:
        rows = 2 * b if scattered else b
        shape = (rows, L, HK, D)
        if scattered:
            kw["cache_batch_idx"] = torch.randperm(rows, device=dev, generator=gen)[:b].to(torch.int32)
    k = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=gen)
    v = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=gen)
    if kv == "fp8":
        k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    return q, k, v, kw


def run_case(name, b, L, page, sq, kv, scattered):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    elem = 1 if kv == "fp8" else 2
    lens = lengths_of(name, b, L)
    kv_bytes = 2 * sum(lens) * HK * D * elem
    set_bytes = kv_bytes * (2 if scattered else 1)
    sets = [make_inputs(lens, L, page, sq, kv, scattered, gen) for _ in range(n_sets_for(set_bytes, 24 << 30, 8))]
    fns = [lambda s=s: kvattn.flash_attn_with_kvcache(s[0], s[1], s[2], **s[3]) for s in sets]
    row = dict(case=name, kv_bytes=kv_bytes)
    outs = {}
    for label, variant in zip(LABELS, VARIANTS):
        kernel, *extra = variant.split("+")
        os.environ["KVATTN_FORCE_PORTABLE"] = "1" if kernel == "portable" else "0"
        os.environ["KVATTN_DECODE_SM90"] = kernel[1:].rstrip("b") if kernel != "portable" else "0"
        os.environ["KVATTN_DECODE_SM90_FP8_BF16"] = "1" if kernel.endswith("b") else "0"
        saved = {}
        for kv_pair in extra:
            key, value = kv_pair.split("=", 1)
            saved[key] = os.environ.get(key)
            os.environ[key] = value
        outs[label] = fns[0]().float()
        r, _ = time_cuda(fns, torch)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key)
            else:
                os.environ[key] = value
        row[label + "_us"] = r["median_us"]
        row[label + "_p10_p90"] = (r["p10_us"], r["p90_us"])
        row[label + "_tbs"] = kv_bytes / (r["median_us"] * 1e-6) / 1e12
    ref = outs[LABELS[0]]
    row["max_rel_diff"] = max(float((o - ref).abs().max() / ref.abs().max()) for o in outs.values())
    row["nan"] = any(bool(torch.isnan(o).any()) for o in outs.values())
    del sets, fns
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="", help="comma list: cases whose name contains any of them")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    print(f"{'case':24s}" + "".join(f" {v[-10:] + ' us':>13s} {'TB/s':>5s}" for v in LABELS) + f" {'diff':>8s}")
    for c in CASES:
        wanted = [f for f in args.filter.split(",") if f]
        if wanted and not any(f in c[0] for f in wanted):
            continue
        try:
            r = run_case(*c)
        except Exception as exc:  # noqa: BLE001 - one failing case must not hide the others
            print(f"{c[0]:24s} FAILED: {str(exc).splitlines()[0][:150]}")
            continue
        rows.append(r)
        print(f"{r['case']:24s}" + "".join(f" {r[v + '_us']:13.1f} {r[v + '_tbs']:5.2f}" for v in LABELS)
              + f" {r['max_rel_diff']:8.1e}" + (" NaN!" if r["nan"] else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
