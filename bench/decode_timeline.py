"""Per-CTA timeline of the Hopper decode kernel (src/cuda/decode_sm90/timeline.cuh), for a library built
with -DKVATTN_DECODE_TIMELINE=1 (a developer build; the stamps cost a few global stores a piece):

    cmake -S . -B build-tl -DKVATTN_CUDA=ON -DKVATTN_CUDA_ARCHS=90a -DKVATTN_DEV_HEAD_DIM=128 \
        -DKVATTN_DEV_DTYPE=bf16 -DCMAKE_CUDA_FLAGS=-DKVATTN_DECODE_TIMELINE=1 && cmake --build build-tl
    PYTHONPATH=python KVATTN_LIBRARY=build-tl/libkvattn.so python3 -m bench.decode_timeline [--filter TEXT]

For each case (bf16, 32/8 heads, d 128, page 16, random page permutation) it calls the kernel on input sets
rotated past the L2, reads the stamps of the last call, and prints each phase's distribution over the CTAs
(min / median / max, us from the earliest CTA entry) and the kernel's span (first entry to last exit).
Cycles become ns at the rate the SM clock and %globaltimer show between each CTA's entry and exit (the
median over the CTAs).
"""
import argparse
import ctypes
import os

import torch

import kvattn

K = 1024
HQ, HK, D, PAGE = 32, 8, 128, 16
SLOTS, MAX_CTAS, PER_PIECE, MAX_PIECES = 32, 1024, 6, 3
ENTRY_NS, ENTRY, STARTED, PDL, FIRST_ISSUE, FIRST_FULL, EXIT, EXIT_NS, PIECES, PIECE0 = range(10)
PIECE_PHASES = ["begin", "q loaded", "first full", "last issued", "last consumed", "written"]
CASES = [("W1 b4 4k p16", 4, 4 * K), ("W1 b4 32k p16", 4, 32 * K), ("W1 b1 128k p16", 1, 128 * K)]


def make_inputs(b, L, gen):
    pages = b * (L // PAGE)
    q = torch.randn(b, 1, HQ, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(pages, PAGE, HK, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn_like(k)
    table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).view(b, L // PAGE)
    seqlens = torch.full((b,), L, dtype=torch.int32, device="cuda")
    return q, k, v, dict(cache_seqlens=seqlens, page_table=table)


def read_timeline(lib):
    buf = (ctypes.c_ulonglong * (SLOTS * MAX_CTAS))()
    err = lib.kvattn_debug_decode_timeline(buf, SLOTS * MAX_CTAS)
    if err != 0:
        raise RuntimeError(f"kvattn_debug_decode_timeline: cudaError {err}")
    rows = [list(buf[c * SLOTS:(c + 1) * SLOTS]) for c in range(MAX_CTAS)]
    return [r for r in rows if r[ENTRY_NS] != 0]


def stats(xs):
    xs = sorted(xs)
    return (xs[0], xs[len(xs) // 2], xs[-1]) if xs else None


def report(name, kv_bytes, rows):
    rates = sorted((r[EXIT] - r[ENTRY]) / max(1, r[EXIT_NS] - r[ENTRY_NS]) for r in rows if r[EXIT])
    rate = rates[len(rates) // 2]  # cycles / ns
    t0 = min(r[ENTRY_NS] for r in rows)

    def at(r, slot):  # us from the earliest entry, or None when not stamped
        if slot == ENTRY_NS or slot == EXIT_NS:
            return (r[slot] - t0) / 1e3 if r[slot] else None
        return (r[ENTRY_NS] - t0 + (r[slot] - r[ENTRY]) / rate) / 1e3 if r[slot] else None

    span = max(at(r, EXIT_NS) for r in rows if r[EXIT_NS])
    working = [r for r in rows if r[PIECES]]
    print(f"\n== {name}: {len(rows)} CTAs ({len(working)} with pieces), kernel span {span:.1f} us, "
          f"{kv_bytes / 1e6:.0f} MB -> {kv_bytes / span / 1e6:.2f} TB/s; SM clock {rate:.2f} GHz; pieces a CTA "
          f"{stats([r[PIECES] for r in rows])}")
    phases = [("entry", ENTRY_NS), ("scan done", STARTED), ("pdl wait done", PDL), ("first issue", FIRST_ISSUE),
              ("first full", FIRST_FULL)]
    for p in range(MAX_PIECES):
        phases += [(f"p{p} {ph}", PIECE0 + p * PER_PIECE + i) for i, ph in enumerate(PIECE_PHASES)]
    phases += [("exit", EXIT_NS)]
    print(f"{'phase':22s} {'CTAs':>5s} {'min':>7s} {'median':>7s} {'max':>7s}")
    for label, slot in phases:
        s = stats([x for x in (at(r, slot) for r in working) if x is not None])
        if s:
            print(f"{label:22s} {sum(1 for r in working if r[slot]):5d} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    # Per CTA durations.
    for label, a, b in [("scan", ENTRY, STARTED), ("issue after scan", PDL, FIRST_ISSUE),
                        ("fill (issue->full)", FIRST_ISSUE, FIRST_FULL)]:
        s = stats([(r[b] - r[a]) / rate / 1e3 for r in working if r[a] and r[b]])
        if s:
            print(f"  d {label:20s} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    last = PIECE0 + (MAX_PIECES - 1) * PER_PIECE
    tails = []
    for r in working:
        n = min(r[PIECES], MAX_PIECES)
        b = PIECE0 + (n - 1) * PER_PIECE
        if r[b + 4] and r[b + 5]:
            tails.append((r[b + 5] - r[b + 4]) / rate / 1e3)
    if tails:
        s = stats(tails)
        print(f"  d {'last piece epilogue':20s} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    del last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="")
    args = ap.parse_args()
    lib = ctypes.CDLL(os.environ["KVATTN_LIBRARY"])
    lib.kvattn_debug_decode_timeline.argtypes = [ctypes.c_void_p, ctypes.c_int]
    for name, b, L in CASES:
        if args.filter and args.filter not in name:
            continue
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1)
        kv_bytes = 2 * b * L * HK * D * 2
        sets = [make_inputs(b, L, gen) for _ in range(max(2, -(-(3 * 60 << 20) // kv_bytes)))]
        for rep in range(8):
            s = sets[rep % len(sets)]
            kvattn.flash_attn_with_kvcache(s[0], s[1], s[2], **s[3])
        torch.cuda.synchronize()
        report(name, kv_bytes, read_timeline(lib))
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
