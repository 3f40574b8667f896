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
tile; then how far apart the two warpgroups' iterations run, and how much of each warpgroup's softmax (and
S wait) coincides with the other's on the same SM sub-partition.
"""
import argparse
import ctypes
import os

import kvattn

# timeline.cuh's PrefillTlStamp, in its order (the order an iteration passes them).
STAMPS = ["head", "stage", "fenced", "issued", "S", "softmax", "pv", "end"]
HEAD, STAGE, FENCED, ISSUED, S_LANDED, SOFTMAX, PV, END = range(len(STAMPS))
CTAS, WARPS, TILE0, TILES = 8, 9, 16, 16  # 8 consumer warps, then the producer's thread 0
CONSUMER_WARPS = 8
# The units' timeline after the tiles' words (timeline.cuh kPu*): per (CTA, slot, unit) the heads of tiles
# 0..PU_TILES-1, then the events.
PU_UNITS, PU_TILES = 12, 40
PU_EVENTS = ["desc", "q ready", "last pv issued", "next q issued", "pv done", "written", "prod start",
             "prod desc", "prod first", "prod last", "prod next", "next q met"]
PU_SLOT = PU_TILES + len(PU_EVENTS)


def units_report(buf, base):
    """Per unit of CTAs 0-7: where a unit's time goes around its tiles (consumer warps 0 and 4, producer).
    Units of PU_TILES tiles or more stamp every later tile head into the last slot: their "tiles a unit" reads
    PU_TILES and their middle tiles are left out."""
    def rec(c, w, n):
        at = base + ((c * WARPS + w) * PU_UNITS + n) * PU_SLOT
        r = list(buf[at:at + PU_SLOT])
        return r[:PU_TILES], dict(zip(PU_EVENTS, r[PU_TILES:]))
    seg = {k: [] for k in ["prev written -> desc", "desc -> q ready", "q ready -> tile 0 head", "tile 0",
                           "tile 1", "tile 2", "tiles 3..n-3 (each)", "tile n-2", "tile n-1 -> last pv issued",
                           "last pv issued -> pv done", "  -> next desc + barrier", "  -> next q issued",
                           "  -> pv done", "pv done -> written", "unit (written -> written)",
                           "tiles a unit", "prod start -> desc", "prod desc -> first issued",
                           "prod first -> last issued", "prod last -> next claimed",
                           "prod desc - cons written(prev)"]}
    for c in range(CTAS):
        for w in (0, 4):
            prev_written = None
            for n in range(PU_UNITS):
                tiles, ev = rec(c, w, n)
                heads = [t for t in tiles if t]
                if ev["written"] == 0 or not heads:
                    prev_written = None
                    continue
                nt = len(heads)
                if prev_written and ev["desc"]:
                    seg["prev written -> desc"].append(ev["desc"] - prev_written)
                    seg["unit (written -> written)"].append(ev["written"] - prev_written)
                if ev["desc"] and ev["q ready"]:
                    seg["desc -> q ready"].append(ev["q ready"] - ev["desc"])
                if ev["q ready"]:
                    seg["q ready -> tile 0 head"].append(heads[0] - ev["q ready"])
                seg["tiles a unit"].append(nt)
                if nt >= 6:
                    seg["tile 0"].append(heads[1] - heads[0])
                    seg["tile 1"].append(heads[2] - heads[1])
                    seg["tile 2"].append(heads[3] - heads[2])
                    if nt < PU_TILES:  # (a unit of more tiles stamps its later heads into the last slot)
                        seg["tiles 3..n-3 (each)"].append((heads[nt - 2] - heads[3]) / (nt - 5))
                        seg["tile n-2"].append(heads[nt - 1] - heads[nt - 2])
                if ev["last pv issued"]:
                    seg["tile n-1 -> last pv issued"].append(ev["last pv issued"] - heads[-1])
                    seg["last pv issued -> pv done"].append(ev["pv done"] - ev["last pv issued"])
                    if ev["next q met"] and ev["next q issued"]:
                        seg["  -> next desc + barrier"].append(ev["next q met"] - ev["last pv issued"])
                        seg["  -> next q issued"].append(ev["next q issued"] - ev["next q met"])
                        seg["  -> pv done"].append(ev["pv done"] - ev["next q issued"])
                seg["pv done -> written"].append(ev["written"] - ev["pv done"])
                if w == 0:
                    _, pe = rec(c, WARPS - 1, n)
                    if pe["prod start"] and pe["prod desc"]:
                        seg["prod start -> desc"].append(pe["prod desc"] - pe["prod start"])
                    if pe["prod desc"] and pe["prod first"]:
                        seg["prod desc -> first issued"].append(pe["prod first"] - pe["prod desc"])
                    if pe["prod first"] and pe["prod last"]:
                        seg["prod first -> last issued"].append(pe["prod last"] - pe["prod first"])
                    if pe["prod last"] and pe["prod next"]:
                        seg["prod last -> next claimed"].append(pe["prod next"] - pe["prod last"])
                    if pe["prod desc"] and prev_written:
                        seg["prod desc - cons written(prev)"].append(pe["prod desc"] - prev_written)
                prev_written = ev["written"]
    print("units (consumer warps 0 and 4 of CTAs 0-7, the producer's thread 0), SM clocks:")
    print(f"{'segment':32s} {'n':>5s} {'p10':>8s} {'median':>8s} {'p90':>8s} {'mean':>8s}")
    for name, xs in seg.items():
        if xs:
            print(f"{name:32s} {len(xs):5d} {pct(xs, .1):8.0f} {pct(xs, .5):8.0f} {pct(xs, .9):8.0f} "
                  f"{sum(xs) / len(xs):8.0f}")


def overlap(a, b):
    """Clocks of the intervals a that fall inside intervals b (each a list of disjoint (start, end))."""
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def phase_overlap(rows, first, last):
    """How much of a consumer warp's phase [first, last) (stamp indices) the warp of the other warpgroup on
    the same SM sub-partition spends in the same phase: timeline warps w and w + 4 are the kernel's warps 4 + w
    and 8 + w, both on sub-partition w, so two softmax phases at once share its MUFU and FMA pipes (and the
    tensor cores wait for both). Returns (overlapping clocks, all clocks of the phase) over the stamped
    tiles of every CTA and warp pair."""
    both = total = 0
    ctas = {c for c, _, _ in rows}
    for c in ctas:
        for w in range(4):
            spans = []
            for warp in (w, w + 4):
                spans.append([(r[first], r[last]) for t in range(TILES)
                              for r in [rows.get((c, warp, t))] if r and r[first] and r[last] >= r[first]])
            if spans[0] and spans[1]:
                both += overlap(spans[0], spans[1]) + overlap(spans[1], spans[0])
                total += sum(e - s for s, e in spans[0]) + sum(e - s for s, e in spans[1])
    return both, total


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    import torch  # (here: the report's functions above run without it)

    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, nargs="*", default=[64], help="head dims (the library must hold them)")
    ap.add_argument("--seqlen", type=int, default=16384)
    ap.add_argument("--case", choices=["w6", "w3"], default="w6")
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--chunk", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    lib = ctypes.CDLL(os.environ["KVATTN_LIBRARY"])
    tile_words = CTAS * WARPS * TILES * len(STAMPS)
    words = tile_words + CTAS * WARPS * PU_UNITS * PU_SLOT
    buf = (ctypes.c_ulonglong * words)()
    lib.kvattn_debug_prefill_timeline_buffer.argtypes = [ctypes.c_void_p]
    got = lib.kvattn_debug_prefill_timeline_buffer(buf)
    if got != words:
        raise SystemExit(f"the library's timeline has {got} words, this script reads {words}")
    for d in args.d:
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1)
        if args.case == "w6":
            heads = {64: 32, 128: 16, 256: 8}[d]
            n = args.seqlen
            q = torch.randn(1, n, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            k = torch.randn(1, n, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            v = torch.randn_like(k)
            seqlens = torch.full((1,), n, dtype=torch.int32, device="cuda")
            call = dict(cache_seqlens=seqlens, causal=False)
            title = f"W6-like full prefill, b1 x {n}, {heads} heads, d {d}"
        else:
            b, pg, keys = args.batch, args.page, args.ctx + args.chunk
            per_seq = (keys + pg - 1) // pg
            q = torch.randn(b, args.chunk, 32, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            k = torch.randn(b * per_seq, pg, 8, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            v = torch.randn_like(k)
            table = torch.randperm(b * per_seq, device="cuda", generator=gen).to(torch.int32).view(b, per_seq)
            seqlens = torch.full((b,), keys, dtype=torch.int32, device="cuda")
            call = dict(cache_seqlens=seqlens, page_table=table, causal=True)
            title = f"W3-like chunk, b{b} x {args.chunk} over {args.ctx}, page {pg}, 32/8 heads, d {d}, causal"
        for _ in range(4):
            for i in range(words):
                buf[i] = 0
            kvattn.flash_attn_with_kvcache(q, k, v, **call)
            torch.cuda.synchronize()
        rows = {}
        for c in range(CTAS):
            for w in range(WARPS):
                for t in range(TILES):
                    at = ((c * WARPS + w) * TILES + t) * len(STAMPS)
                    rows[(c, w, t)] = list(buf[at:at + len(STAMPS)])
        units_report(buf, tile_words)
        phases = {name: [] for name in ["stage wait", "  loop head", "  wait_full", "issue", "  fence",
                                        "  wgmma", "S wait", "softmax", "pv wait", "tail", "tile"]}
        for (c, w, t), r in rows.items():
            if w >= CONSUMER_WARPS or t == 0 or 0 in r or 0 in rows[(c, w, t - 1)]:
                continue
            prev_end = rows[(c, w, t - 1)][END]
            # (Since pvmid the d 128 / 256 kernels stamp "softmax" a third into the exponentials, at the P V
            # wait: the rest of the softmax falls in "tail" with O's rescale and P's packing.)
            for name, a, b in [("stage wait", None, STAGE), ("  loop head", None, HEAD), ("  wait_full", HEAD, STAGE),
                               ("issue", STAGE, ISSUED), ("  fence", STAGE, FENCED), ("  wgmma", FENCED, ISSUED),
                               ("S wait", ISSUED, S_LANDED), ("softmax", S_LANDED, SOFTMAX), ("pv wait", SOFTMAX, PV),
                               ("tail", PV, END), ("tile", None, END)]:
                phases[name].append((r[b] - (prev_end if a is None else r[a])))
        stamped = sum(1 for (c, w, t), r in rows.items() if w < CONSUMER_WARPS and 0 not in r)
        print(f"\n== {title}: {stamped} of {CTAS * CONSUMER_WARPS * TILES} "
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
        # The two warpgroups' softmax at the same time on a sub-partition (session 23's question).
        for name, a, b in [("softmax", S_LANDED, SOFTMAX), ("S wait", ISSUED, S_LANDED)]:
            both, total = phase_overlap(rows, a, b)
            if total:
                print(f"{name} of one warpgroup while the other's warp on its sub-partition is in it too: "
                      f"{100 * both / total:.0f}% of {total} clocks")
        # The TMA producer (its thread 0): stamps head (before the empty wait), stage (past it),
        # fenced (copies issued); against the consumers' stamps of the same tile (the same SM's clock).
        prod = {name: [] for name in ["empty wait", "copies issue", "issue -> first full seen",
                                      "consumer head - issue", "consumer waits on copies"]}
        for c in range(CTAS):
            for t in range(TILES):
                pr = rows[(c, CONSUMER_WARPS, t)]
                if pr[HEAD] == 0 or pr[STAGE] == 0 or pr[FENCED] == 0:
                    continue
                prod["empty wait"].append(pr[STAGE] - pr[HEAD])
                prod["copies issue"].append(pr[FENCED] - pr[STAGE])
                cons = [rows[(c, w, t)] for w in range(CONSUMER_WARPS) if rows[(c, w, t)][STAGE] != 0]
                if not cons:
                    continue
                prod["issue -> first full seen"].append(min(r[STAGE] for r in cons) - pr[FENCED])
                for r in cons:
                    if r[HEAD] != 0:
                        prod["consumer head - issue"].append(r[HEAD] - pr[FENCED])
                        prod["consumer waits on copies"].append(max(0, r[STAGE] - max(r[HEAD], pr[FENCED])))
        if prod["empty wait"]:
            print("TMA producer (thread 0) and the consumers, same tiles, SM clocks:")
            for name, xs in prod.items():
                if xs:
                    print(f"{name:26s} {len(xs):5d} {pct(xs, .1):7.0f} {pct(xs, .5):7.0f} {pct(xs, .9):7.0f} "
                          f"{sum(xs) / len(xs):7.0f}")
        del q, k, v
        torch.cuda.empty_cache()
    lib.kvattn_debug_prefill_timeline_buffer(None)


if __name__ == "__main__":
    main()
