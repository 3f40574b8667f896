"""CPU decode against torch's SDPA on the CPU (or numpy when torch is absent), same tensors, same run.

    python3 -m bench.cpu_suite                  # decode 32/8 heads, d 128, b 1 and 8 x 4k and 32k, fp32 + bf16
    python3 -m bench.cpu_suite --quick          # b 1 x 4k only
    python3 -m bench.cpu_suite --batch 1,4 --seqlen 4096 --dtype bf16 --reps 7
    python3 -m bench.cpu_suite --tiny           # the latency of a tiny call (b 1, 1 head, d 64, 16 keys)

One decode step (one query token per sequence) over a contiguous cache of `seqlen` tokens per sequence.
kvattn gets its own layout (b, s, hk, d); the peer gets the same values in the layout it prefers
((b, h, s, d) contiguous for SDPA, with enable_gqa; no copy is timed). Each is checked against the other
before timing (max |difference| relative to max |out|). Times are medians of --reps calls, interleaved
(kvattn, peer, kvattn, ...) so that a machine busy with other work slows both alike.
Threads: kvattn's pool (KVATTN_NUM_THREADS, else OMP_NUM_THREADS, else the cores), torch's own
(torch.get_num_threads()); both printed.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def _torch():
    try:
        import torch
        return torch, None
    except Exception as exc:  # noqa: BLE001 - any import failure means "no torch peer"
        return None, f"torch not importable ({exc.__class__.__name__})"


def _round(a, dtype):
    """fp32 array a as stored in `dtype` ("fp32" or "bf16"), as a numpy array (bf16 through ml_dtypes)."""
    if dtype == "fp32":
        return a.astype(np.float32)
    import ml_dtypes
    return a.astype(ml_dtypes.bfloat16)


def make_case(b, s, hq, hk, d, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = _round(rng.standard_normal((b, 1, hq, d), np.float32), dtype)
    k = _round(rng.standard_normal((b, s, hk, d), np.float32), dtype)
    v = _round(rng.standard_normal((b, s, hk, d), np.float32), dtype)
    return q, k, v


def kvattn_fn(q, k, v, torch):
    """A decode call of kvattn on these arrays: on torch CPU tensors when torch is there, else numpy."""
    import kvattn
    if torch is not None:
        q, k, v = (torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16) if x.dtype != np.float32
                   else torch.from_numpy(x) for x in (q, k, v))
    return lambda: kvattn.flash_attn_with_kvcache(q, k, v, causal=True)


def sdpa_fn(q, k, v, torch):
    """torch SDPA on the CPU over (b, h, s, d) copies of the same values (made before timing)."""
    import torch.nn.functional as F

    def conv(x):
        t = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16) if x.dtype != np.float32 else torch.from_numpy(x)
        return t.transpose(1, 2).contiguous()

    tq, tk, tv = conv(q), conv(k), conv(v)
    return lambda: F.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True).transpose(1, 2)


def numpy_fn(q, k, v):
    """A numpy decode step in fp32 (BLAS matmuls), the baseline when torch is absent."""
    qf, kf, vf = (np.ascontiguousarray(x.astype(np.float32).transpose(0, 2, 1, 3)) for x in (q, k, v))
    b, hq, _, d = qf.shape
    hk = kf.shape[1]
    qg = qf.reshape(b, hk, hq // hk, d)

    def fn():
        s = np.matmul(qg, kf.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(d))  # (b, hk, g, s)
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        return np.matmul(s, vf).reshape(b, hq, 1, -1).transpose(0, 2, 1, 3)
    return fn


def as_numpy(x):
    if hasattr(x, "float"):  # torch
        return x.float().numpy()
    return np.asarray(x, np.float32)


def time_pair(fns, reps):
    """Medians (ms) of `reps` interleaved calls of each fn, after one warm-up call each."""
    for fn in fns:
        fn()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for j, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            samples[j].append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(s) for s in samples]


def run(batches, seqlens, dtypes, reps, hq=32, hk=8, d=128):
    import kvattn
    from kvattn import _lib
    torch, why = _torch()
    peer = "torch SDPA (CPU)" if torch else "numpy fp32 (BLAS)"
    try:
        threads = _lib.load().kvattn_cpu_num_threads()
    except AttributeError:  # a library from before the thread pool: a thread per core per call
        threads = f"{os.cpu_count()} (per call)"
    log(f"cpu_suite: kvattn {threads} threads; peer {peer}"
        + (f", {torch.get_num_threads()} threads, torch {torch.__version__}" if torch else f" ({why})"))
    rows = []
    for dtype in dtypes:
        for b in batches:
            for s in seqlens:
                q, k, v = make_case(b, s, hq, hk, d, dtype)
                ours = kvattn_fn(q, k, v, torch)
                other = sdpa_fn(q, k, v, torch) if torch else numpy_fn(q, k, v)
                a, o = as_numpy(ours()), as_numpy(other())
                diff = float(np.max(np.abs(a - o)) / max(1.0, float(np.max(np.abs(o)))))
                t_ours, t_peer = time_pair([ours, other], reps)
                gbps = (k.nbytes + v.nbytes) / (t_ours * 1e-3) / 1e9
                rows.append(dict(dtype=dtype, b=b, s=s, kvattn_ms=t_ours, peer_ms=t_peer, speedup=t_peer / t_ours,
                                 kv_gbps=gbps, max_rel_diff=diff))
                log(f"  {dtype} b{b} s{s}: kvattn {t_ours:.2f} ms, {peer} {t_peer:.2f} ms, "
                    f"{t_peer / t_ours:.2f}x, diff {diff:.1e}")
                del q, k, v, ours, other
    print(f"\nCPU decode, hq {hq} / hk {hk}, d {d}, one query token; kvattn {threads} threads; peer: {peer}")
    print("| dtype | batch | seqlen | kvattn ms | peer ms | peer / kvattn | K+V GB/s | max rel diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['b']} | {r['s']} | {r['kvattn_ms']:.2f} | {r['peer_ms']:.2f} | "
              f"{r['speedup']:.2f}x | {r['kv_gbps']:.1f} | {r['max_rel_diff']:.1e} |")
    return rows


def main_job_peer(case, plan, dtype_name, kvattn_us, reps=5):
    """The MAIN JOB's CPU peer: torch SDPA over a contiguous cache of the same sizes (batch, the longest
    sequence, heads, head dim, dtype), one query token, no append; or why there is none."""
    torch, why = _torch()
    if torch is None:
        return {"na": f"{why}: torch SDPA is the CPU peer where torch is installed"}
    dtype = "bf16" if dtype_name == "bf16" else "fp32"
    b, s = int(plan.b), int(max(plan.seqlen_k))
    q, k, v = make_case(b, s, case.hq, case.hk, case.d, dtype, seed=1)
    fn = sdpa_fn(q, k, v, torch)
    fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return dict(median_us=statistics.median(samples), p10_us=samples[0], p90_us=samples[-1], ratio=kvattn_us
                / statistics.median(samples), note=f"contiguous cache of the same sizes (b {b} x {s}), no append, "
                f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def tiny(reps=2000):
    """Median latency (us) of a tiny CPU call through the Python package and through the C ABI."""
    import ctypes

    import kvattn
    from kvattn import _lib
    q, k, v = make_case(1, 16, 1, 1, 64, "fp32")
    out = np.empty_like(q)
    fn = lambda: kvattn.flash_attn_with_kvcache(q, k, v, out=out)  # noqa: E731
    py = time_pair([fn], reps)[0] * 1e3
    # The C ABI alone: the params the package built, re-run in a ctypes loop (timed per batch of 100).
    lib = _lib.load()
    p = _lib.new_fwd_params()
    for name, x in (("q", q), ("k_cache", k), ("v_cache", v), ("out", out)):
        t = getattr(p, name)
        t.data = x.ctypes.data
        t.dtype = _lib.DTYPE_F32
        t.ndim = 4
        for i in range(4):
            t.shape[i] = x.shape[i]
            t.strides[i] = x.strides[i] // 4
    p.softmax_scale = 0.0
    call = lib.kvattn_fwd
    ref = ctypes.byref(p)
    assert call(ref) == 0, lib.kvattn_last_error()
    per = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(100):
            call(ref)
        per.append((time.perf_counter() - t0) * 1e4)  # us per call
    c = statistics.median(per)
    print(f"tiny CPU call (b 1, 1 head, d 64, 16 keys): {py:.1f} us through kvattn.flash_attn_with_kvcache, "
          f"{c:.1f} us through the C ABI (ctypes loop)")
    return py, c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--seqlen", default="4096,32768")
    ap.add_argument("--dtype", default="fp32,bf16")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="b 1 x 4k, both dtypes, 3 reps")
    ap.add_argument("--tiny", action="store_true", help="only the latency of a tiny call")
    args = ap.parse_args(argv)
    if args.tiny:
        tiny()
        return 0
    if args.quick:
        args.batch, args.seqlen, args.reps = "1", "4096", 3
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    run(ints(args.batch), ints(args.seqlen), args.dtype.split(","), args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
