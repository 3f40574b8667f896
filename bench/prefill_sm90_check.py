"""The sm_90a prefill kernel in one device call: correctness on fresh random inputs against torch fp32, and
the timing of b4 x 8192 page 16 d128 bf16 (causal and not) next to the portable kernel, same run, and of
W6's dense prefill (b1 x 16k MHA, contiguous cache, d 64 / 128 / 256) with the TMA producer and the cp.async
one (KVATTN_SM90_TMA=0).

    PYTHONPATH=python KVATTN_LIBRARY=build/libkvattn.so python3 bench/prefill_sm90_check.py [--small]

--small: the correctness part only, at small shapes (for compute-sanitizer; a paged and a contiguous case).
--time-only: the timing only.
--short: the timing of the main variants only (sm90, its cp.async producer, no reader fence, portable,
sm90 again, the no-load and no-softmax diagnostics), for a short device call. --prev: the sm90 kernel of
the library loaded (the previous one, for an A/B in the same device call) twice. Prints a table last.
"""
import math
import os
import sys
import time

import torch

import kvattn


KNOBS = ("KVATTN_SM90_ORDER", "KVATTN_SM90_NOFENCE", "KVATTN_SM90_PINGPONG", "KVATTN_SM90_DIAG", "KVATTN_SM90_TMA")
# tools/prefill_sm90_device.sh starts this with KVATTN_SM90_TMA=0 when its smoke failed with the TMA producer:
# then every variant keeps the cp.async producer (a TMA bug must not hang the rest of the call).
TMA_DEFAULT = "0" if os.environ.get("KVATTN_SM90_TMA") == "0" else ""


def set_knobs(env):
    """The A/B knobs of a variant; the ones it does not name back to their defaults."""
    for key in KNOBS:
        os.environ[key] = env.get(key, TMA_DEFAULT if key == "KVATTN_SM90_TMA" else "")


def paged_cache(b, sk, hk, d, page, dtype, gen):
    """K/V of b sequences of sk tokens in shuffled pages; the unused slots of the pool are NaN."""
    pages_per_seq = (sk + page - 1) // page
    n_pages = b * pages_per_seq + 3
    k = torch.randn(n_pages, page, hk, d, generator=gen, device="cuda").to(dtype)
    v = torch.randn(n_pages, page, hk, d, generator=gen, device="cuda").to(dtype)
    perm = torch.randperm(n_pages, generator=gen, device="cuda")[: b * pages_per_seq]
    table = perm.view(b, pages_per_seq).to(torch.int32)
    # slots past sk in each sequence's last page: NaN (must never reach the output)
    tail = pages_per_seq * page - sk
    if tail:
        last = table[:, -1].long()
        k[last, page - tail:] = float("nan")
        v[last, page - tail:] = float("nan")
    return k, v, table


def gather(cache, table, sk):
    b = table.shape[0]
    x = cache[table.long()]  # (b, pages, page, hk, d)
    return x.reshape(b, -1, *cache.shape[2:])[:, :sk]


def reference(q, k, v, causal, window=(-1, -1), softcap=0.0):
    """fp32 attention, q (b, sq, hq, d), k/v (b, sk, hk, d); query t at position sk - sq + t."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = hq // hk
    qf = q.float().permute(0, 2, 1, 3)
    kf = k.float().repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
    vf = v.float().repeat_interleave(g, dim=2).permute(0, 2, 1, 3)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(d)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qp = torch.arange(sq, device="cuda")[:, None] + sk - sq
    kp = torch.arange(sk, device="cuda")[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool, device="cuda")
    if causal:
        visible &= kp <= qp
    if window[0] >= 0:
        visible &= kp >= qp - window[0]
    if window[1] >= 0:
        visible &= kp <= qp + window[1]
    s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)
    return (p @ vf).permute(0, 2, 1, 3)


def run(q, k, v, table, sk, causal, portable, **kw):
    os.environ["KVATTN_FORCE_PORTABLE"] = "1" if portable else "0"
    return kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=sk, page_table=table, causal=causal, **kw)


def correctness(rows, small):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int(time.time()) % 100000)  # fresh inputs every run
    os.environ["KVATTN_FORCE_SM90_PREFILL"] = "1"
    shapes = [(2, 300, 700, 8, 2, 16)] if small else [(2, 1000, 1500, 8, 2, 16), (1, 333, 333, 4, 4, 1),
                                                      (3, 257, 900, 16, 2, 64),
                                                      (2, 200, 700, 8, 2, 256), (2, 300, 555, 8, 1, 8)]
    ok = True
    for (b, sq, sk, hq, hk, page) in shapes:
        for causal, window, softcap in [(True, (-1, -1), 0.0), (False, (-1, -1), 0.0), (False, (100, 20), 0.0),
                                        (True, (-1, -1), 15.0)]:
            if small and (window != (-1, -1) or softcap):
                continue
            q = torch.randn(b, sq, hq, 128, generator=gen, device="cuda").to(torch.bfloat16)
            k, v, table = paged_cache(b, sk, hk, 128, page, torch.bfloat16, gen)
            # the A/B variants on some of the cases
            os.environ["KVATTN_SM90_PINGPONG"] = "0" if (sq + int(causal)) % 2 else "1"
            os.environ["KVATTN_SM90_ORDER"] = "0" if sk % 2 else "1"
            os.environ["KVATTN_SM90_TMA"] = "0" if softcap else TMA_DEFAULT  # the cp.async producer on some
            out = run(q, k, v, table, sk, causal, False, window_size=window, softcap=softcap)
            set_knobs({})
            torch.cuda.synchronize()
            kvattn.device_errors("cuda")
            ref = reference(q, gather(k, table, sk), gather(v, table, sk), causal, window, softcap)
            err = ((out.float() - ref).norm() / ref.norm()).item()
            finite = bool(torch.isfinite(out).all())
            good = finite and err < 1e-2
            ok &= good
            rows.append(f"check b{b} sq{sq} sk{sk} {hq}/{hk} p{page} causal={causal} win={window} cap={softcap}: "
                        f"rel err {err:.2e} finite={finite} {'OK' if good else 'FAIL'}")
    ok &= correctness_contiguous(rows, small, gen)
    os.environ["KVATTN_FORCE_SM90_PREFILL"] = "0"
    return ok


def correctness_contiguous(rows, small, gen):
    """Contiguous caches (the TMA producer over cache rows, and the cp.async one): the first sequence fills its
    row (its last tile reaches past the row: the TMA unit's zeros), the second ends 223 slots short, NaN past
    its end; capacities 1000 and 4097 are not tile multiples; both producers on each case."""
    shapes = [(2, 300, 1000, 8, 2, 128)] if small else [(2, 300, 1000, 8, 2, 64), (2, 300, 1000, 8, 2, 128),
                                                         (2, 300, 1000, 8, 2, 256), (2, 257, 4097, 8, 8, 128)]
    ok = True
    for (b, sq, cap, hq, hk, d) in shapes:
        for causal in (True, False):
            q = torch.randn(b, sq, hq, d, generator=gen, device="cuda").to(torch.bfloat16)
            k = torch.randn(b, cap, hk, d, generator=gen, device="cuda").to(torch.bfloat16)
            v = torch.randn(b, cap, hk, d, generator=gen, device="cuda").to(torch.bfloat16)
            lens = [cap, cap - 223]
            k[1, lens[1]:] = float("nan")
            v[1, lens[1]:] = float("nan")
            seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
            ref = torch.cat([reference(q[i:i + 1], k[i:i + 1, :lens[i]], v[i:i + 1, :lens[i]], causal)
                             for i in range(b)])
            for tma in (TMA_DEFAULT, "0"):
                os.environ["KVATTN_SM90_TMA"] = tma
                out = run(q, k, v, None, seqlens, causal, False)
                torch.cuda.synchronize()
                kvattn.device_errors("cuda")
                err = ((out.float() - ref).norm() / ref.norm()).item()
                finite = bool(torch.isfinite(out).all())
                good = finite and err < 1e-2
                ok &= good
                rows.append(f"check contiguous b{b} sq{sq} cap{cap} lens {lens} {hq}/{hk} d{d} causal={causal} "
                            f"{'cp.async' if tma else 'TMA'}: rel err {err:.2e} finite={finite} "
                            f"{'OK' if good else 'FAIL'}")
    set_knobs({})
    return ok


def median_time(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2], times[len(times) // 10], times[(9 * len(times)) // 10]


def timing(rows, short=False, prev=False):
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    b, s, hq, hk, d, page = 4, 8192, 32, 8, 128, 16
    q = torch.randn(b, s, hq, d, generator=gen, device="cuda").to(torch.bfloat16)
    k, v, table = paged_cache(b, s, hk, d, page, torch.bfloat16, gen)
    for causal in (True, False):
        flops = 4 * b * hq * d * (s * (s + 1) // 2 if causal else s * s)
        outs = {}
        # (name, portable, ping-pong); sm90 twice: the spread of one version
        variants = [("sm90", False, {}), ("sm90 m-block order", False, {"KVATTN_SM90_ORDER": "0"}),
                    ("sm90 no reader fence", False, {"KVATTN_SM90_NOFENCE": "1"}),
                    ("sm90 no ping-pong", False, {"KVATTN_SM90_PINGPONG": "0"}),
                    ("portable", True, {}), ("sm90 again", False, {}),
                    # diagnostics, wrong output: what the consumers alone / the GEMMs alone reach
                    ("diag: no K/V loads", False, {"KVATTN_SM90_DIAG": "4"}),
                    ("diag: no softmax", False, {"KVATTN_SM90_DIAG": "8"}),
                    ("diag: neither", False, {"KVATTN_SM90_DIAG": "12"}),
                    ("sm90 cp.async producer", False, {"KVATTN_SM90_TMA": "0"})]
        if short:
            keep = ("sm90", "sm90 cp.async producer", "sm90 no reader fence", "portable", "sm90 again",
                    "diag: no K/V loads", "diag: no softmax")
            variants = [v for v in variants if v[0] in keep]
        if prev:  # the previous library (its own process): its sm90 kernel twice
            variants = [("prev lib sm90", False, {}), ("prev lib sm90 again", False, {})]
        for name, portable, env in variants:
            set_knobs(env)
            fn = lambda: run(q, k, v, table, s, causal, portable)  # noqa: E731
            outs[name] = fn()
            ms, p10, p90 = median_time(fn)
            rows.append(f"time b{b} x {s} {hq}/{hk} d{d} p{page} causal={causal} {name:21s}: "
                        f"{ms * 1e3:8.1f} us [{p10 * 1e3:.1f}-{p90 * 1e3:.1f}] {flops / ms / 1e9:6.1f} TFLOP/s")
        for name in [v[0] for v in variants if not v[1] and not v[0].startswith("diag") and "portable" in outs]:
            diff = ((outs[name].float() - outs["portable"].float()).norm() / outs["portable"].float().norm()).item()
            rows.append(f"  {name} vs portable rel diff {diff:.2e}")
    # A chunked prefill (W3-like): a 4096-token chunk over 32768 keys of context, causal.
    b, sq, sk = 2, 4096, 32768
    q = torch.randn(b, sq, hq, d, generator=gen, device="cuda").to(torch.bfloat16)
    k, v, table = paged_cache(b, sk, hk, d, page, torch.bfloat16, gen)
    flops = 4 * b * hq * d * sum(sk - sq + t + 1 for t in range(sq))
    variants = [("prev lib sm90", {})] if prev else [("sm90", {}), ("sm90 cp.async producer", {"KVATTN_SM90_TMA": "0"})]
    for name, env in variants:
        set_knobs(env)
        ms, p10, p90 = median_time(lambda: run(q, k, v, table, sk, True, False))
        rows.append(f"time b{b} sq{sq} sk{sk} {hq}/{hk} d{d} p{page} causal=True {name:21s}: "
                    f"{ms * 1e3:8.1f} us [{p10 * 1e3:.1f}-{p90 * 1e3:.1f}] {flops / ms / 1e9:6.1f} TFLOP/s")
    os.environ["KVATTN_FORCE_PORTABLE"] = "0"
    set_knobs({})


def timing_w6(rows, prev=False):
    """W6 (bench/suites.py): b1 x 16k MHA, contiguous cache filled to its capacity, full and causal, d 64 / 128 /
    256 at 32 / 16 / 8 heads: the TMA producer (default) and the cp.async one, same run."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(4321)
    s = 16384
    variants = [("sm90", {}), ("sm90 cp.async producer", {"KVATTN_SM90_TMA": "0"}), ("sm90 again", {})]
    if prev:  # the previous library (its own process)
        variants = [("prev lib sm90", {})]
    for d, h in ((64, 32), (128, 16), (256, 8)):
        q, k, v = (torch.randn(1, s, h, d, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            flops = 4 * h * d * (s * (s + 1) // 2 if causal else s * s)
            for name, env in variants:
                set_knobs(env)
                ms, p10, p90 = median_time(lambda: run(q, k, v, None, None, causal, False))
                rows.append(f"time W6 b1 x {s} {h}x{d} contiguous causal={causal} {name:21s}: "
                            f"{ms * 1e3:8.1f} us [{p10 * 1e3:.1f}-{p90 * 1e3:.1f}] {flops / ms / 1e9:6.1f} TFLOP/s")
        del q, k, v
    os.environ["KVATTN_FORCE_PORTABLE"] = "0"
    set_knobs({})


def profile_once():
    """One non-causal b4 x 8192 call (after a warm-up), for ncu --launch-skip 1 --launch-count 1."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    q = torch.randn(4, 8192, 32, 128, generator=gen, device="cuda").to(torch.bfloat16)
    k, v, table = paged_cache(4, 8192, 8, 128, 16, torch.bfloat16, gen)
    for _ in range(2):
        run(q, k, v, table, 8192, False, False)
    torch.cuda.synchronize()


def main():
    if "--profile" in sys.argv:
        profile_once()
        return
    small = "--small" in sys.argv
    prev = "--prev" in sys.argv
    rows = [f"device {torch.cuda.get_device_name()}"]
    ok = True if "--time-only" in sys.argv or prev else correctness(rows, small)
    if not small:
        timing(rows, "--short" in sys.argv, prev)
        timing_w6(rows, prev)
    print("\n".join(rows))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
