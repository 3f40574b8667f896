"""A model of the Hopper decode kernel (src/cuda/decode_sm90) on the balanced schedule, for W1 / W2 shapes
(32/8 heads, d 128, bf16, page 16): how many pieces and stages each CTA gets (schedule.cuh's arithmetic),
and an event model of one CTA's ring to see what a piece switch costs. CPU only (numpy).

    PYTHONPATH=. python3 -m bench.decode_model [--fit] [--unit-cost 2]

Event model, per CTA: an 8-slot ring; stage g is issued by producer warp g % 8 once slot g % 8 is free
(stage g - 8 consumed) and, at a piece's start, after `pp` us of its prologue; it lands `lam` us after its
issue, and at most one stage every `t_s` us (16 KB at the CTA's share of the bandwidth, 34.6 GB/s); consumer
warp g % 4 computes it in `c` us; after a piece's last stage the consumers merge (`e` us), then load the
next piece's sequence and Q (`q` us) before its first stage -- unless `q_hidden` of it overlaps (the fix of
branch w2: the loads go out before the merge, Q prefetched into the L2). The kernel: F + the slowest CTA.
--fit fits (lam, c, e, q, pp) on the measured times below (F from W1 b4 32k) and prints the predictions.
"""
import argparse
import itertools

import numpy as np

HK, BLOCK_N, STAGE_KEYS, CTAS = 8, 64, 32, 132
# Measured on the H200 (us): decode_ab (equal lengths) and bench.run (W2 uniform; 2026-12-01 evening run).
MEASURED = {"W1 b4 32k": 155.0, "W2 b128 2k": 292.0, "W2 b64 uniform p16": 189.3, "W2 b128 uniform p16": 385.1,
            "W2 b256 uniform p16": 646.5}


def cases():
    from bench import layouts, suites
    out = {"W1 b4 32k": np.full(4, 32768), "W2 b128 2k": np.full(128, 2048)}
    for c in suites.w2():
        if c.page == 16 and not c.deterministic:
            out[c.name.replace("32/8 ", "")] = layouts.cached_lengths(c, np.random.default_rng(layouts.seed_of(c.name)))
    return out


def schedule(lens, unit_cost=2, ctas=CTAS):
    """Per CTA, the keys of each of its pieces (schedule.cuh: units of tiles + unit_cost end to end)."""
    tiles = -(-np.asarray(lens, np.int64) // BLOCK_N)
    units = [(int(t), int(L)) for t, L in zip(tiles, lens) for _ in range(HK)]
    total = sum(t + unit_cost for t, _ in units)
    if len(units) < ctas:
        ctas = len(units) * (ctas // len(units))
    per, j, u_start = [], 0, 0
    for k in range(ctas):
        a, b = k * total // ctas, (k + 1) * total // ctas
        pieces = []
        while j < len(units):
            t, L = units[j]
            u_end = u_start + t + unit_cost
            tb, te = max(0, max(a, u_start) - u_start - unit_cost), max(0, min(b, u_end) - u_start - unit_cost)
            pieces.append(max(0, min(L, te * BLOCK_N) - tb * BLOCK_N))
            if u_end > b:
                break  # continues into the next CTA
            j, u_start = j + 1, u_end
        per.append(pieces)
    return per


def cta_time(stages, t_s=16384 / 34.6e3, lam=3.0, c=0.45, e=1.5, q=4.0, pp=1.5, q_hidden=0.0):
    ring, producers, warps = 8, 8, 4
    cons, last_land, g = {}, -1e9, 0
    warp_free, prod_ready = [0.0] * warps, [0.0] * producers
    piece_start = t_end = 0.0
    for n in stages:
        if n == 0:
            continue
        for s in range(n):
            gg = g + s
            ready = prod_ready[gg % producers] + (pp if s < producers else 0.0)
            if gg >= ring:
                ready = max(ready, cons[gg - ring])
            prod_ready[gg % producers] = ready
            last_land = max(ready + lam, last_land + t_s)
            w = gg % warps
            cons[gg] = max(last_land, warp_free[w], piece_start) + c
            warp_free[w] = cons[gg]
        end = max(cons[x] for x in range(g, g + n))
        g += n
        t_end = end + e
        piece_start = t_end + max(0.0, q - q_hidden)
    return t_end


def kernel_time(lens, F, unit_cost=2, **kw):
    return F + max(cta_time([-(-k // STAGE_KEYS) for k in p], **kw) for p in schedule(lens, unit_cost))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--unit-cost", type=int, default=2)
    args = ap.parse_args()
    cs = cases()
    for name, lens in cs.items():
        per = schedule(lens, args.unit_cost)
        P = [sum(1 for k in p if k) for p in per]
        S = [sum(-(-k // STAGE_KEYS) for k in p) for p in per]
        print(f"{name:22s} {len(lens) * HK:5d} units, {len(per)} CTAs: pieces a CTA {min(P)}-{int(np.median(P))}-"
              f"{max(P)} (mean {np.mean(P):.2f}), stages {min(S)}-{int(np.median(S))}-{max(S)}")
    kw = dict(lam=3.0, c=0.45, e=1.5, q=4.0, pp=1.5)
    if args.fit:
        best = None
        for lam, c, e, q, pp in itertools.product((2.0, 3.0), (0.45, 0.6), (0.8, 1.5, 2.2), (2.0, 3.0, 4.0, 5.0),
                                                  (0.5, 1.5)):
            k = dict(lam=lam, c=c, e=e, q=q, pp=pp)
            F = MEASURED["W1 b4 32k"] - kernel_time(cs["W1 b4 32k"], 0, **k)
            err = [kernel_time(cs[n], F, **k) / m - 1 for n, m in MEASURED.items() if n != "W1 b4 32k"]
            rms = float(np.sqrt(np.mean(np.square(err))))
            if best is None or rms < best[0]:
                best = (rms, k)
        kw = best[1]
        print(f"fit: {kw}, rms error {best[0]:.3f}")
    F = MEASURED["W1 b4 32k"] - kernel_time(cs["W1 b4 32k"], 0, unit_cost=args.unit_cost, **kw)
    print(f"F {F:.1f} us; us: measured | model | next piece's loads hidden | and a 0.3 us epilogue")
    for name, lens in cs.items():
        t = [kernel_time(lens, F, args.unit_cost, **kw), kernel_time(lens, F, args.unit_cost, q_hidden=99, **kw),
             kernel_time(lens, F, args.unit_cost, q_hidden=99, **{**kw, "e": 0.3})]
        print(f"  {name:22s} {MEASURED.get(name, float('nan')):6.1f} | {t[0]:6.1f} | {t[1]:6.1f} | {t[2]:6.1f}")


if __name__ == "__main__":
    main()
