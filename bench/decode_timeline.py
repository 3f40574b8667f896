"""Per-CTA timeline of the Hopper decode kernel (src/cuda/decode_sm90/timeline.cuh), for a library built
with -DKVATTN_DECODE_TIMELINE=1 (a developer build; the stamps cost a few global stores a piece):

    cmake -S . -B build-tl -DKVATTN_CUDA=ON -DKVATTN_CUDA_ARCHS=90a -DKVATTN_DEV_HEAD_DIM=128 \
        -DKVATTN_DEV_DTYPE=bf16 -DCMAKE_CUDA_FLAGS=-DKVATTN_DECODE_TIMELINE=1 && cmake --build build-tl
    PYTHONPATH=python:. KVATTN_LIBRARY=build-tl/libkvattn.so python3 -m bench.decode_timeline [--filter TEXT]

For each case (bf16; the "fp8kv" cases an e4m3 cache under bf16 q; 32/8 heads, d 128, page 16, random page
permutation) it calls the kernel on input sets rotated past the L2, reads the stamps of the last call, and
prints each phase's distribution over the CTAs (min / median / max, us from the earliest CTA entry) and the
kernel's span (first entry to last exit).
Cycles become ns at the rate the SM clock and %globaltimer show between each CTA's entry and exit (the
median over the CTAs).

W1 cases put one piece on a CTA; W2 cases (b128 / b64 sequences, equal or bench.run's uniform 256-4096
lengths) put 5-30, so the script also prints the piece switches: per piece after a CTA's first, the
consumers' gap from the previous piece's last stage to this piece's first (epilogue, Q install, wait for
the first stage), and per CTA its pieces, the sum of its gaps and its exit, so that a CTA that ends late
can be told from one that streams slowly. The library says how many pieces a CTA stamps
(kvattn_debug_decode_timeline_layout; libraries without it stamp 3).

The decode kernel's cluster form (cluster.cuh; the W1 b1 1k / 4k cases take it by default: few units, a
short cache) stamps the same slots, a CTA one piece: "scan done" is its sequence and keys known, "prod
addresses" / "first issue" its warp 0's first page entries and copies, "p0 inbox full" every other rank's
part of the merge landed in its shared memory (session 41's push merge; before it, "the first cluster
barrier passed"), "p0 written" its slice of out written. Compare with
KVATTN_DECODE_CLUSTER=0 (the persistent kernel).
"""
import argparse
import ctypes
import os

import torch

import kvattn

K = 1024
HQ, HK, D, PAGE = 32, 8, 128, 16
MAX_CTAS = 1024
ENTRY_NS, ENTRY, STARTED, PDL, FIRST_ISSUE, FIRST_FULL, EXIT, EXIT_NS, PIECES = range(9)
PROD_PIECE, PROD_SEQ, PROD_ADDR, PIECE0 = range(9, 13)  # the first stage's producer lane: walk, keys, entries
PIECE_PHASES = ["begin", "q loaded", "first full", "last issued", "last consumed", "written", "keys known",
                "checked", "q rows landed", "inbox full"]
BEGIN, QLOADED, PFULL, LISSUED, LCONSUMED, WRITTEN, KEYS, CHECKED, QROWS, CLUSTER = range(10)


def w2_lengths(batch):
    """bench.run's W2 uniform lengths (256-4096) for this batch."""
    from bench import layouts, suites
    case = next(c for c in suites.w2() if c.name == f"W2 32/8 b{batch} uniform p16")
    return [int(x) for x in layouts.cached_lengths(case, None)]


CASES = [("W1 b1 1k p16", lambda: [1 * K]), ("W1 b1 4k p16", lambda: [4 * K]), ("W1 b4 4k p16", lambda: [4 * K] * 4), ("W1 b4 32k p16", lambda: [32 * K] * 4),
         ("W1 b1 32k p16", lambda: [32 * K]), ("W1 b1 128k p16", lambda: [128 * K]), ("W2 b128 2k p16", lambda: [2 * K] * 128),
         ("W2 b128 uniform p16", lambda: w2_lengths(128)), ("W2 b64 uniform p16", lambda: w2_lengths(64)),
         # fp8 e4m3 caches under bf16 q (the fp8 kernel: 64-key stages), names ending in "fp8kv"
         ("W1 b4 32k p16 fp8kv", lambda: [32 * K] * 4), ("W2 b128 uniform p16 fp8kv", lambda: w2_lengths(128))]


def kv_elem_bytes(name):
    return 1 if name.endswith("fp8kv") else 2


def make_inputs(lens, gen, spread=1, fp8=False, contig=False):
    """One input set; spread > 1 puts the pages in a pool that many times larger (a random subset of it),
    so that the copies touch more distinct 2 MB translation pages; fp8: the caches in e4m3; contig: one
    contiguous (batch, keys, heads, d) cache a sequence, no page table."""
    b = len(lens)
    need = [-(-L // PAGE) for L in lens]
    pages = sum(need)
    q = torch.randn(b, 1, HQ, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    shape = (b, max(lens), HK, D) if contig else (pages * spread, PAGE, HK, D)
    k = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn_like(k)
    if fp8:
        k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if contig:
        return q, k, v, dict(cache_seqlens=seqlens)
    perm = torch.randperm(pages * spread, device="cuda", generator=gen)[:pages].to(torch.int32)
    table = torch.zeros(b, max(need), dtype=torch.int32, device="cuda")  # unused entries: page 0
    at = 0
    for i, n in enumerate(need):
        table[i, :n] = perm[at:at + n]
        at += n
    return q, k, v, dict(cache_seqlens=seqlens, page_table=table)


def layout(lib):
    """(slots a CTA, pieces a CTA with stamps, slots a piece) of the library's timeline."""
    try:
        f = lib.kvattn_debug_decode_timeline_layout
    except AttributeError:
        return 32, 3, 6
    f.argtypes = [ctypes.POINTER(ctypes.c_int)] * 3
    s, m, pp = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    f(ctypes.byref(s), ctypes.byref(m), ctypes.byref(pp))
    return s.value, m.value, pp.value


def read_timeline(lib, slots):
    buf = (ctypes.c_ulonglong * (slots * MAX_CTAS))()
    err = lib.kvattn_debug_decode_timeline(buf, slots * MAX_CTAS)
    if err != 0:
        raise RuntimeError(f"kvattn_debug_decode_timeline: cudaError {err}")
    rows = [list(buf[c * slots:(c + 1) * slots]) for c in range(MAX_CTAS)]
    return [r for r in rows if r[ENTRY_NS] != 0]


def stats(xs):
    xs = sorted(xs)
    return (xs[0], xs[len(xs) // 2], xs[-1]) if xs else None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(name, kv_bytes, rows, max_pieces, per_piece):
    rates = sorted((r[EXIT] - r[ENTRY]) / max(1, r[EXIT_NS] - r[ENTRY_NS]) for r in rows if r[EXIT])
    rate = rates[len(rates) // 2]  # cycles / ns
    t0 = min(r[ENTRY_NS] for r in rows)

    def at(r, slot):  # us from the earliest entry, or None when not stamped
        if slot == ENTRY_NS or slot == EXIT_NS:
            return (r[slot] - t0) / 1e3 if r[slot] else None
        return (r[ENTRY_NS] - t0 + (r[slot] - r[ENTRY]) / rate) / 1e3 if r[slot] else None

    def ps(p, phase):  # the slot of piece p's phase
        return PIECE0 + p * per_piece + phase

    def dur(r, a, b):  # us between two stamps of a CTA, or None
        return (r[b] - r[a]) / rate / 1e3 if r[a] and r[b] else None

    span = max(at(r, EXIT_NS) for r in rows if r[EXIT_NS])
    working = [r for r in rows if r[PIECES]]
    print(f"\n== {name}: {len(rows)} CTAs ({len(working)} with pieces), kernel span {span:.1f} us, "
          f"{kv_bytes / 1e6:.0f} MB -> {kv_bytes / span / 1e6:.2f} TB/s; SM clock {rate:.2f} GHz; pieces a CTA "
          f"{stats([r[PIECES] for r in rows])} (stamped: the first {max_pieces})")
    first_copy, eighth_copy = len(rows[0]) - 2, len(rows[0]) - 1  # timeline.cuh's kTlFirstCopy, kTlEighthCopy
    phases = [("entry", ENTRY_NS), ("scan done", STARTED), ("pdl wait done", PDL), ("prod piece", PROD_PIECE),
              ("prod keys", PROD_SEQ), ("prod addresses", PROD_ADDR), ("copy 1 issued", first_copy),
              ("copy 8 issued", eighth_copy), ("first issue", FIRST_ISSUE),
              ("first full", FIRST_FULL)]
    for p in range(min(3, max_pieces)):
        phases += [(f"p{p} {ph}", ps(p, i)) for i, ph in enumerate(PIECE_PHASES[:per_piece])]
    phases += [("exit", EXIT_NS)]
    print(f"{'phase':22s} {'CTAs':>5s} {'min':>7s} {'median':>7s} {'max':>7s}")
    for label, slot in phases:
        s = stats([x for x in (at(r, slot) for r in working) if x is not None])
        if s:
            print(f"{label:22s} {sum(1 for r in working if r[slot]):5d} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    # Per CTA durations.
    for label, a, b in [("scan", ENTRY, STARTED), ("issue after scan", PDL, FIRST_ISSUE),
                        ("walk", PDL, PROD_PIECE), ("piece_keys", PROD_PIECE, PROD_SEQ),
                        ("entries", PROD_SEQ, PROD_ADDR), ("addresses->issue", PROD_ADDR, FIRST_ISSUE),
                        ("addresses->copy 1", PROD_ADDR, first_copy), ("copy 1->copy 8", first_copy, eighth_copy),
                        ("copy 8->issue", eighth_copy, FIRST_ISSUE),
                        ("fill (issue->full)", FIRST_ISSUE, FIRST_FULL)]:
        s = stats([(r[b] - r[a]) / rate / 1e3 for r in working if r[a] and r[b]])
        if s:
            print(f"  d {label:20s} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    tails = []
    for r in working:
        n = min(r[PIECES], max_pieces)
        d = dur(r, ps(n - 1, LCONSUMED), ps(n - 1, WRITTEN))
        if d is not None:
            tails.append(d)
    if tails:
        s = stats(tails)
        print(f"  d {'last piece epilogue':20s} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    if per_piece > CLUSTER:  # the cluster form: its merge's two halves
        for label, a, b in [("consumed->cluster bar", LCONSUMED, CLUSTER), ("cluster bar->written", CLUSTER, WRITTEN)]:
            s = stats([d for d in (dur(r, ps(0, a), ps(0, b)) for r in working) if d is not None])
            if s:
                print(f"  d {label:20s} {s[0]:7.2f} {s[1]:7.2f} {s[2]:7.2f}")
    if max(r[PIECES] for r in working) < 2:
        return
    # Piece switches (pieces after a CTA's first, while stamped): us, min / median / p90 / max.
    parts = {"epilogue (last consumed -> written)": [], "install (begin -> q loaded)": [],
             "  keys (begin -> keys known)": [], "  checks (keys -> checked)": [],
             "  q rows (checked -> q rows landed)": [], "  barrier (q rows -> q loaded)": [],
             "first wait (q loaded -> first full)": [], "gap (last consumed -> next first full)": [],
             "ring lead (last issued -> last consumed)": []}
    gaps_of = {}
    for r in working:
        n = min(r[PIECES], max_pieces)
        total = 0.0
        for p in range(n):
            for label, a, b in [("epilogue (last consumed -> written)", LCONSUMED, WRITTEN),
                                ("ring lead (last issued -> last consumed)", LISSUED, LCONSUMED)]:
                d = dur(r, ps(p, a), ps(p, b))
                if d is not None:
                    parts[label].append(d)
            if p == 0:
                continue
            install = [("install (begin -> q loaded)", BEGIN, QLOADED),
                       ("first wait (q loaded -> first full)", QLOADED, PFULL)]
            if per_piece > QROWS:  # the install's parts
                install += [("  keys (begin -> keys known)", BEGIN, KEYS), ("  checks (keys -> checked)", KEYS, CHECKED),
                            ("  q rows (checked -> q rows landed)", CHECKED, QROWS),
                            ("  barrier (q rows -> q loaded)", QROWS, QLOADED)]
            for label, a, b in install:
                d = dur(r, ps(p, a), ps(p, b))
                if d is not None:
                    parts[label].append(d)
            d = dur(r, ps(p - 1, LCONSUMED), ps(p, PFULL))
            if d is not None:
                parts["gap (last consumed -> next first full)"].append(d)
                total += d
        gaps_of[id(r)] = total
    print(f"  piece switches (pieces 1.. of each CTA), us: {'n':>6s} {'min':>7s} {'median':>7s} {'p90':>7s} "
          f"{'max':>7s}")
    for label, xs in parts.items():
        if xs:
            print(f"  {label:42s} {len(xs):6d} {min(xs):7.2f} {pct(xs, 0.5):7.2f} {pct(xs, 0.9):7.2f} {max(xs):7.2f}")
    # CTAs by piece count: do the CTAs with many pieces end late?
    by = {}
    for r in working:
        by.setdefault(r[PIECES], []).append(r)
    print(f"  {'pieces':>6s} {'CTAs':>5s} {'exit median':>11s} {'exit max':>8s} {'gaps median':>11s}")
    for n in sorted(by):
        ex = [at(r, EXIT_NS) for r in by[n]]
        print(f"  {n:6d} {len(by[n]):5d} {pct(ex, 0.5):11.1f} {max(ex):8.1f} "
              f"{pct([gaps_of[id(r)] for r in by[n]], 0.5):11.1f}")
    last = sorted(working, key=lambda r: -at(r, EXIT_NS))[:5]
    print("  last 5 CTAs to exit: " + ", ".join(
        f"{at(r, EXIT_NS):.1f} us ({r[PIECES]} pieces, gaps {gaps_of[id(r)]:.1f})" for r in last))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", default="", help="comma list: cases whose name contains any of them")
    ap.add_argument("--warm", action="store_true",
                    help="one input set, called again and again: code, data and translations warm in the L2")
    ap.add_argument("--spread", type=int, default=1, help="pages in a pool this many times larger")
    ap.add_argument("--contig", action="store_true", help="contiguous caches (no page table) instead of page 16")
    ap.add_argument("--heads", default=None, help="HQ/HK instead of 32/8 (e.g. 4/1: a tensor-parallel shard)")
    args = ap.parse_args()
    if args.heads:
        global HQ, HK
        HQ, HK = (int(x) for x in args.heads.split("/"))
    lib = ctypes.CDLL(os.environ["KVATTN_LIBRARY"])
    lib.kvattn_debug_decode_timeline.argtypes = [ctypes.c_void_p, ctypes.c_int]
    slots, max_pieces, per_piece = layout(lib)
    for name, lengths in CASES:
        wanted = [f for f in args.filter.split(",") if f]
        if wanted and not any(f in name for f in wanted):
            continue
        lens = lengths()
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1)
        kv_bytes = 2 * sum(lens) * HK * D * kv_elem_bytes(name)
        n_sets = 1 if args.warm else max(2, -(-(3 * 60 << 20) // kv_bytes))
        sets = [make_inputs(lens, gen, args.spread, fp8=kv_elem_bytes(name) == 1, contig=args.contig)
                for _ in range(n_sets)]
        for rep in range(8):
            s = sets[rep % len(sets)]
            kvattn.flash_attn_with_kvcache(s[0], s[1], s[2], **s[3])
        torch.cuda.synchronize()
        label = ((name.replace(" p16", " contig") if args.contig else name) + (" (warm: one set)" if args.warm else "")
                 + (f" {HQ}/{HK}" if args.heads else "")
                 + (f" (pool x{args.spread})" if args.spread > 1 else ""))
        report(label, kv_bytes, read_timeline(lib, slots), max_pieces, per_piece)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
