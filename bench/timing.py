"""Timing: CUDA-graph replays timed with CUDA events (GPU), wall clock (CPU), and host time per call
without graphs, through the Python package and through the C ABI (a ctypes loop over prebuilt params)."""
import ctypes
import math
import os
import time

import numpy as np

from bench.gpu_clock import ClockSampler

L2_BYTES = 60 << 20  # H200
ROTATE_BYTES = 3 * L2_BYTES  # input sets rotated in one graph must together exceed this


def stats(samples_us, series=False):
    """Median, p10, p90 and count; with `series` also the samples in the order they were taken, where there
    are at most 64 (the long calls' 30 replays: a slow start or a drift, e.g. the clock falling under a long
    load, shows there and not in the percentiles)."""
    a = np.asarray(samples_us, np.float64)
    r = dict(median_us=float(np.median(a)), p10_us=float(np.percentile(a, 10)),
             p90_us=float(np.percentile(a, 90)), samples=int(a.size))
    if series and a.size <= 64:
        r["series_us"] = [round(float(x), 1) for x in a]
    return r


def n_sets_for(set_bytes, budget_bytes, max_sets=32):
    """Input sets to rotate: together > 3x the L2, at least 2 where they fit, as many as fit in the budget."""
    want = max(2, math.ceil((ROTATE_BYTES + 1) / max(set_bytes, 1)))
    fit = int(budget_bytes // max(set_bytes, 1))
    return max(1, min(want, fit, max_sets))


def time_cpu(fns, min_reps=5, target_s=0.5, max_reps=200):
    """Wall time per call on the CPU backend (synchronous), rotating among the input sets."""
    fns[0]()  # warm up
    samples = []
    t_end = time.perf_counter() + target_s
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() < t_end):
        fn = fns[len(samples) % len(fns)]
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    r = stats(samples)
    r.update(calls_per_graph=1, timed_via="wall clock (CPU, synchronous calls)")
    return r


def time_cuda(fns, torch, min_replays=30, target_s=0.12, min_calls=10, max_replays=200, settle=False):
    """Median over >= 30 replays of a CUDA graph of several calls that rotate among the input sets.

    Falls back to events around eager calls (said in `timed_via`) if the capture fails. `settle`: a
    compute-bound case (its metric FLOP/s): calls of >= HEAT_MIN_US replay until their time settles
    (settle_replays) instead of the fixed heat, and the record says how long (`settled_s`, `settle_replays`)."""
    cuda = torch.cuda
    # Warm up on a side stream (module load, handles, lazy allocations), as torch's graph docs ask.
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        for fn in fns:
            fn()
    cuda.current_stream().wait_stream(side)
    cuda.synchronize()
    # Estimate one call with events around an eager pass over all sets.
    e0, e1 = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    e0.record()
    for fn in fns:
        fn()
    e1.record()
    e1.synchronize()
    est_us = max(e0.elapsed_time(e1) * 1e3 / len(fns), 1.0)
    reps = max(1, math.ceil(min_calls / len(fns))) if est_us < 200 else 1
    calls = len(fns) * reps
    graph = None
    via = f"CUDA graph of {calls} calls over {len(fns)} input sets, CUDA events"
    try:
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            for j in range(calls):
                fns[j % len(fns)]()
        graph.replay()
        cuda.synchronize()
        run = graph.replay
    except Exception as exc:  # noqa: BLE001 - reported, then timed eagerly
        graph = None
        cuda.synchronize()
        via = f"eager calls, CUDA events (graph capture failed: {str(exc).splitlines()[0][:120]})"

        def run():
            for j in range(calls):
                fns[j % len(fns)]()
    replays = int(min(max_replays, max(min_replays, math.ceil(target_s * 1e6 / (est_us * calls)))))
    settled = None
    if settle and est_us >= HEAT_MIN_US:
        settled = settle_replays(run, cuda.synchronize)
    else:
        heat(run, est_us, cuda)
    starts = [cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [cuda.Event(enable_timing=True) for _ in range(replays)]
    if est_us * calls < 200 and hasattr(cuda, "_sleep"):
        # Keep the GPU busy while the host queues the replays, so host gaps do not enter the events.
        cuda._sleep(int(min(replays * 30, 20000) * 2000))  # ~30 us of host time per replay, at ~2 GHz
    with ClockSampler(cuda.current_device()) as clock:  # the SM clock the replays saw (NVML)
        for s, e in zip(starts, ends):
            s.record()
            run()
            e.record()
        ends[-1].synchronize()
    r = stats([s.elapsed_time(e) * 1e3 / calls for s, e in zip(starts, ends)], series=True)
    r.update(calls_per_graph=calls, timed_via=via, **clock.summary())
    if settled is not None:
        r.update(settled_s=round(settled[0], 2), settle_replays=settled[1])
    del graph
    return r, est_us


# Calls of >= HEAT_MIN_US are replayed for HEAT_S seconds before their samples (KVATTN_BENCH_HEAT_S; 0: off),
# so that every library is timed in the power state a sustained load settles to. Without it the order
# decided the clock: session 36's run timed kvattn's W6 cases right after the previous case's peers
# (power-capped, 1,575-1,875 MHz) and FA4's right after its compile pause (uncapped, 1,980 MHz).
HEAT_S = float(os.environ.get("KVATTN_BENCH_HEAT_S", "0.3"))
HEAT_MIN_US = 1000.0


def heat(run, est_us, cuda):
    """Replay `run` for HEAT_S seconds where one call takes >= HEAT_MIN_US (the tensor-bound and long cases,
    whose clock the power cap decides); short calls are left alone (their time is the budget's)."""
    if HEAT_S <= 0 or est_us < HEAT_MIN_US:
        return
    t_end = time.perf_counter() + HEAT_S
    while time.perf_counter() < t_end:
        run()
        cuda.synchronize()


# Compute-bound calls run under the board's power cap, whose clock follows the power averaged over about a
# second: a library timed right after a heavier load starts at a lower clock and one timed after an idle
# pause (FA4 after compiling its kernel) at a higher one, and either drifts for seconds (session 56, H100:
# kvattn's W6 d 128 causal samples fell 2,191 -> 1,945 us within one 0.3-s-heated timing; FA4's still moved
# 5% after 3 s). So they replay until two consecutive SETTLE_WINDOW_S windows of replays agree within
# SETTLE_TOL (median against median), at least SETTLE_MIN_S and at most SETTLE_MAX_S
# (KVATTN_BENCH_SETTLE_MIN_S / _MAX_S; a maximum of 0: the fixed heat above instead).
SETTLE_MIN_S = float(os.environ.get("KVATTN_BENCH_SETTLE_MIN_S", "1.0"))
SETTLE_MAX_S = float(os.environ.get("KVATTN_BENCH_SETTLE_MAX_S", "5.0"))
SETTLE_WINDOW_S = 0.5
SETTLE_TOL = 0.005


def is_settled(times_s, window_s=SETTLE_WINDOW_S, tol=SETTLE_TOL):
    """Whether the last two windows of `window_s` seconds of replay times (in order) have medians within `tol`
    of each other (a window is at least 3 replays)."""
    if not times_s:
        return False
    n = max(3, int(window_s / max(float(np.median(times_s[-5:])), 1e-9)))
    if len(times_s) < 2 * n:
        return False
    before, last = float(np.median(times_s[-2 * n:-n])), float(np.median(times_s[-n:]))
    return abs(last - before) <= tol * before


def settle_replays(run, sync, now=time.perf_counter, min_s=None, max_s=None):
    """Replay `run` (each waited for) until its time settles (is_settled) after min_s, or max_s has passed.
    Returns (seconds spent, replays). max_s <= 0: the fixed heat's HEAT_S instead, unconditionally."""
    min_s = SETTLE_MIN_S if min_s is None else min_s
    max_s = SETTLE_MAX_S if max_s is None else max_s
    if max_s <= 0:
        min_s = max_s = HEAT_S
    t0 = now()
    times = []
    elapsed = 0.0
    while elapsed < max_s:
        t = now()
        run()
        sync()
        end = now()
        times.append(end - t)
        elapsed = end - t0
        if elapsed >= min_s and is_settled(times):
            break
    return elapsed, len(times)


def host_time(fn, sync, est_us, batches=3):
    """Host time per call without graphs: calls are queued back to back (the device is not waited for)."""
    n = int(min(100, max(5, 0.02e6 / max(est_us, 1.0))))
    per = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) * 1e6 / n)
        sync()
    return float(np.median(per))


# ---- the C ABI loop

_TENSORS = ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin", "rotary_seqlens", "cache_seqlens",
            "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q", "seqused_q", "cu_seqlens_k_new",
            "cu_seqlens_k", "alibi_slopes", "sinks", "q_descale", "k_descale", "v_descale", "out"]


class CParams:
    """kvattn_fwd_params built once from the kwargs of a flash_attn_with_kvcache call (stream: the current one
    at build time), with its workspace; `loop(n)` calls kvattn_fwd n times from a tight ctypes loop."""

    def __init__(self, kw):
        from kvattn import _lib
        from kvattn import tensors as T
        self.lib = lib = _lib.load()
        self.call = call = T.Call()
        self.kw = dict(kw)  # the descriptors hold raw pointers: keep every tensor (out too) alive with them
        self.p = p = _lib.FwdParams()
        lib.kvattn_fwd_params_init(ctypes.byref(p))
        for name in _TENSORS:
            if kw.get(name) is not None:
                setattr(p, name, call.tensor(kw[name], name))
        p.cache_seqlens_value = -1
        if kw.get("max_seqlen_q") is not None:
            p.max_seqlen_q = int(kw["max_seqlen_q"])
        p.softmax_scale = 0.0
        p.causal = int(bool(kw.get("causal", False)))
        p.window_left, p.window_right = kw.get("window_size", (-1, -1))
        p.rotary_interleaved = int(bool(kw.get("rotary_interleaved", True)))
        p.num_splits = 0
        p.pack_gqa = -1
        call.header(p)
        nbytes = ctypes.c_size_t(0)
        self._check(lib.kvattn_fwd_workspace_size(ctypes.byref(p), ctypes.byref(nbytes)))
        p.workspace = T.workspace(call, kw["q"], nbytes.value)
        p.workspace_bytes = nbytes.value
        self.ref = ctypes.byref(p)

    def _check(self, status):
        if status != 0:
            msg = self.lib.kvattn_last_error()
            raise RuntimeError(f"kvattn status {status}: {msg.decode(errors='replace') if msg else ''}")

    def __call__(self):
        self._check(self.lib.kvattn_fwd(self.ref))

    def loop(self, n):
        fwd, ref = self.lib.kvattn_fwd, self.ref
        for _ in range(n):
            fwd(ref)


def host_time_c(kw, sync, est_us, batches=3):
    """Host time per call of kvattn_fwd through ctypes with prebuilt params."""
    cp = CParams(kw)
    cp()  # checks the status once
    sync()
    n = int(min(100, max(5, 0.02e6 / max(est_us, 1.0))))
    per = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        cp.loop(n)
        per.append((time.perf_counter() - t0) * 1e6 / n)
        sync()
    return float(np.median(per))


def warm_up_gpu(torch, seconds):
    """Busy the GPU for `seconds` (bf16 matmuls) so the first case is timed at the clock the sustained run
    settles to, not at the idle GPU's boost clock: latency-bound cases follow the SM clock, and the run's
    repeat check re-times its first case at the end (bench/RESULTS.md, 2026-12-02: 2% apart without it)."""
    if seconds <= 0:
        return 0
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t_end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < t_end:
        for _ in range(20):
            a = a @ b * 0.01
        torch.cuda.synchronize()
        n += 20
    del a, b
    return n
