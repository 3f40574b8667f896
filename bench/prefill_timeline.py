"""Where a tile's clocks go in the Hopper prefill kernel's loop (src/cuda/prefill_sm90/timeline.cuh), for a
library built with -DKVATTN_PREFILL_TIMELINE=1 (a developer build; the stamps cost eight global stores a
tile from lane 0 of a warp):

    cmake -S . -B build-tl -DKVATTN_CUDA=ON -DKVATTN_CUDA_ARCHS=90a -DKVATTN_DEV_HEAD_DIM=64 \\
        -DKVATTN_DEV_DTYPE=bf16 -DCMAKE_CUDA_FLAGS=-DKVATTN_PREFILL_TIMELINE=1 && cmake --build build-tl
    PYTHONPATH=python:. KVATTN_LIBRARY=build-tl/libkvattn.so python3 -m bench.prefill_timeline [--d 64]

It runs W6's full (non-causal) prefill, b1 x 16k, bf16, contiguous cache (32 heads at d 64, 16 at d 128, 8 at
d 256; every unit has the same tiles, so the stamps of the last unit a CTA ran are a steady-state sample),
and prints, in SM clocks over the consumer warps of 8 CTAs and 16 tiles each, the phases of an iteration:
stage wait (the previous iteration's end to the tile's stage full: the loop head, then wait_full), issue
(wgmma.fence, then the wgmma groups), S wait, softmax, P V wait, tail (O rescale, P pack), and the whole
tile; then how far apart the two warpgroups' iterations run.
"""
import argparse
import ctypes
import os

import torch

import kvattn

# timeline.cuh's PrefillTlStamp, in its order (the order an iteration passes them).
STAMPS = ["head", "stage", "fenced", "issued", "S", "softmax", "pv", "end"]
HEAD, STAGE, FENCED, ISSUED, S_LANDED, SOFTMAX, PV, END = range(len(STAMPS))
CTAS, WARPS, TILE0, TILES = 8, 8, 16, 16


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="*", default=[64], help="head dims (the library must hold them)")
    ap.add_argument("--seqlen", type=int, default=16384)
    args = ap.parse_args()
    lib = ctypes.CDLL(os.environ["KVATTN_LIBRARY"])
    words = CTAS * WARPS * TILES * len(STAMPS)
    buf = (ctypes.c_ulonglong * words)()
    lib.kvattn_debug_prefill_timeline_buffer.argtypes = [ctypes.c_void_p]
    got = lib.kvattn_debug_prefill_timeline_buffer(buf)
    if got != words:
        raise SystemExit(f"the library's timeline has {got} words, this script reads {words}")
    for d in args.d:
        heads = {64: 32, 128: 16, 256: 8}[d]
        n = args.seqlen
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1)
        q = torch.randn(1, n, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(1, n, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn_like(k)
        seqlens = torch.full((1,), n, dtype=torch.int32, device="cuda")
        for _ in range(4):
            for i in range(words):
                buf[i] = 0
            kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=False)
            torch.cuda.synchronize()
        rows = {}
        for c in range(CTAS):
            for w in range(WARPS):
                for t in range(TILES):
                    at = ((c * WARPS + w) * TILES + t) * len(STAMPS)
                    rows[(c, w, t)] = list(buf[at:at + len(STAMPS)])
        phases = {name: [] for name in ["stage wait", "  loop head", "  wait_full", "issue", "  fence",
                                        "  wgmma", "S wait", "softmax", "pv wait", "tail", "tile"]}
        for (c, w, t), r in rows.items():
            if t == 0 or 0 in r or 0 in rows[(c, w, t - 1)]:
                continue
            prev_end = rows[(c, w, t - 1)][END]
            for name, a, b in [("stage wait", None, STAGE), ("  loop head", None, HEAD), ("  wait_full", HEAD, STAGE),
                               ("issue", STAGE, ISSUED), ("  fence", STAGE, FENCED), ("  wgmma", FENCED, ISSUED),
                               ("S wait", ISSUED, S_LANDED), ("softmax", S_LANDED, SOFTMAX), ("pv wait", SOFTMAX, PV),
                               ("tail", PV, END), ("tile", None, END)]:
                phases[name].append((r[b] - (prev_end if a is None else r[a])))
        stamped = sum(1 for r in rows.values() if 0 not in r)
        print(f"\n== W6-like full prefill, b1 x {n}, {heads} heads, d {d}: {stamped} of {len(rows)} "
              f"(CTA, warp, tile) stamped; SM clocks an iteration, one consumer warp")
        print(f"{'phase':12s} {'n':>5s} {'p10':>7s} {'median':>7s} {'p90':>7s} {'mean':>7s}")
        for name, xs in phases.items():
            if xs:
                print(f"{name:12s} {len(xs):5d} {pct(xs, .1):7.0f} {pct(xs, .5):7.0f} {pct(xs, .9):7.0f} "
                      f"{sum(xs) / len(xs):7.0f}")
        # The two warpgroups: warp w of warpgroup 0 against warp w + 4 of warpgroup 1, the same tile.
        lag = [rows[(c, w + 4, t)][STAGE] - rows[(c, w, t)][STAGE] for c in range(CTAS) for w in range(4)
               for t in range(TILES) if 0 not in rows[(c, w, t)] and 0 not in rows[(c, w + 4, t)]]
        if lag:
            print(f"warpgroup 1's stage stamp minus warpgroup 0's, same tile: p10 {pct(lag, .1):.0f}, median "
                  f"{pct(lag, .5):.0f}, p90 {pct(lag, .9):.0f} clocks")
        del q, k, v
        torch.cuda.empty_cache()
    lib.kvattn_debug_prefill_timeline_buffer(None)


if __name__ == "__main__":
    main()
