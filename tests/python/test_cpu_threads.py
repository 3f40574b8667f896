"""The CPU backend's threads and interrupts: the pool size from KVATTN_NUM_THREADS / OMP_NUM_THREADS (and a
clear error for a bad value), the same answer on 1 and several threads, kvattn_interrupt() stopping a
running call (and only calls running then), Ctrl-C reaching Python during a long call, and the split of
a long sequence across threads against the oracle."""
import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import harness as H
from inputs import randn
from reference import reference_attention

kvattn = H.kvattn
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def run_python(code, env_extra, timeout=300):
    """Runs `code` in a fresh interpreter with the package and this session's library and sanitizer."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), os.path.dirname(__file__),
                                         env.get("PYTHONPATH", "")])
    for name in ("KVATTN_NUM_THREADS", "OMP_NUM_THREADS"):
        env.pop(name, None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout)


POOL_SIZE = """
    from kvattn import _lib
    print(_lib.load().kvattn_cpu_num_threads())
"""


@pytest.mark.parametrize("env, expected", [({"KVATTN_NUM_THREADS": "3"}, "3"), ({"OMP_NUM_THREADS": "2,1"}, "2"),
                                           ({"KVATTN_NUM_THREADS": "5", "OMP_NUM_THREADS": "2"}, "5")])
def test_pool_size_from_the_environment(env, expected):
    proc = run_python(POOL_SIZE, env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected


def test_pool_size_defaults_to_the_cpus():
    proc = run_python(POOL_SIZE, {})
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) == len(os.sched_getaffinity(0))


def test_bad_thread_count_is_a_clear_error():
    code = """
        import numpy as np, kvattn
        q = np.ones((1, 1, 1, 8), np.float32); k = np.ones((1, 4, 1, 8), np.float32)
        try:
            kvattn.flash_attn_with_kvcache(q, k, k)
        except kvattn.KvattnError as e:
            print("ERROR", e)
    """
    proc = run_python(code, {"KVATTN_NUM_THREADS": "lots"})
    assert proc.returncode == 0, proc.stderr
    assert "ERROR KVATTN_NUM_THREADS: expected a whole number in [1, 1024], got 'lots'" in proc.stdout, proc.stdout


def _long_case(rng, s=8192, sq=8):
    """Several query tokens per sequence over a long cache: enough work for key splits across threads."""
    q = randn(rng, (2, sq, 8, 64), np.float32)
    k = randn(rng, (2, s, 2, 64), np.float32)
    v = randn(rng, (2, s, 2, 64), np.float32)
    return q, k, v, np.array([s, s - 1000], np.int32)


def test_threads_and_key_splits_match_the_oracle():
    """A long decode batch runs split across threads (the pool of this process) and matches the oracle."""
    q, k, v, seqlens = _long_case(np.random.default_rng(7))
    out, lse = kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlens, causal=True, return_softmax_lse=True,
                                              sinks=np.linspace(-1, 1, 8).astype(np.float32))
    ref = reference_attention(q, k, v, cache_seqlens=seqlens, causal=True, sinks=np.linspace(-1, 1, 8))
    H.assert_close("out", out, ref["out"], H.TOL_OUT["fp32"])
    H.assert_close("lse", lse, ref["lse"], H.TOL_LSE["fp32"])


def test_one_thread_and_many_agree():
    """The answer on 1 thread and on 4 (deterministic mode: bit for bit)."""
    code = """
        import numpy as np, kvattn, sys
        from inputs import randn
        rng = np.random.default_rng(3)
        q = randn(rng, (1, 2, 8, 64), np.float32); k = randn(rng, (1, 6000, 2, 64), np.float32)
        v = randn(rng, (1, 6000, 2, 64), np.float32)
        out = kvattn.flash_attn_with_kvcache(q, k, v, causal=True, deterministic=True)
        print(out.tobytes().hex())
    """
    outs = []
    for threads in ("1", "4"):
        proc = run_python(code, {"KVATTN_NUM_THREADS": threads})
        assert proc.returncode == 0, proc.stderr
        outs.append(np.frombuffer(bytes.fromhex(proc.stdout.strip()), np.float32))
    assert outs[0].size == 1 * 2 * 8 * 64 and np.isfinite(outs[0]).all()
    np.testing.assert_array_equal(outs[0], outs[1])


def test_interrupt_stops_a_running_call_only():
    """kvattn_interrupt() from another thread stops a long call with KVATTN_ERROR_INTERRUPTED and a message;
    the next call runs normally."""
    lib = kvattn._lib.load()
    rng = np.random.default_rng(11)
    q = randn(rng, (1, 256, 4, 64), np.float32)  # ~64M (row, key) pairs: long enough to be caught running
    k = randn(rng, (1, 65536, 4, 64), np.float32)
    params = {}
    done = threading.Event()
    result = {}

    def call():  # the C ABI directly, on this helper thread: kvattn.fwd would move a long call off main
        p = kvattn._lib.new_fwd_params()
        call_ = kvattn.tensors.Call()
        out = np.full(q.shape, np.nan, np.float32)
        for name, x in (("q", q), ("k_cache", k), ("v_cache", k), ("out", out)):
            call_.set(p, name, x, written=name == "out")
        call_.header(p)
        params["p"] = p
        t0 = time.perf_counter()
        result["status"] = lib.kvattn_fwd(ctypes.byref(p))
        result["seconds"] = time.perf_counter() - t0
        result["message"] = lib.kvattn_last_error().decode()
        done.set()

    worker = threading.Thread(target=call)
    worker.start()
    while not done.wait(0.005):
        lib.kvattn_interrupt()
    worker.join()
    assert result["status"] == kvattn._lib.ERROR_INTERRUPTED, result
    assert "interrupted by kvattn_interrupt()" in result["message"]
    # Interrupts raised before a call started do not reach it.
    out = kvattn.flash_attn_with_kvcache(q[:, :1], k[:, :64], k[:, :64])
    assert np.isfinite(out).all()


def test_ctrl_c_interrupts_a_long_call():
    """SIGINT during a long CPU call: KeyboardInterrupt in Python within about a second, not at the end."""
    code = """
        import signal, time, numpy as np, kvattn, sys
        # Python installs no KeyboardInterrupt handler when it starts with SIGINT ignored (a shell's
        # background job, e.g. CI started with `&`): install it, as an interactive session has it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        rng = np.random.default_rng(0)
        k = rng.standard_normal((1, 32768, 4, 64), dtype=np.float32)
        q = rng.standard_normal((1, 64, 4, 64), dtype=np.float32)
        kvattn.flash_attn_with_kvcache(q, k, k)  # first-call costs (the pool's start) out of the timing
        t0 = time.perf_counter(); kvattn.flash_attn_with_kvcache(q, k, k); small = time.perf_counter() - t0
        rows = max(64, int(64 * 20.0 / max(small, 1e-3)))  # a call of about 20 s
        q = rng.standard_normal((1, rows, 4, 64), dtype=np.float32)
        print(f"START {small:.3f} {rows}", flush=True)
        t0 = time.perf_counter()
        try:
            kvattn.flash_attn_with_kvcache(q, k, k)
            print("FINISHED", flush=True)
        except KeyboardInterrupt:
            print(f"INTERRUPTED after {time.perf_counter() - t0:.2f} s", flush=True)
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert first.startswith("START"), first + proc.stderr.read()
    time.sleep(1.0)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    waited = time.perf_counter() - sent
    assert "INTERRUPTED" in rest, rest + err
    assert waited < 5.0, f"the call took {waited:.1f} s to stop"


def test_concurrent_callers_share_the_pool():
    """Calls from several threads at once (one holds the pool, the others run on their own thread) all
    give the answer of a call made alone, repeatedly (the pool's hand-off between jobs)."""
    rng = np.random.default_rng(5)
    q = randn(rng, (2, 1, 8, 64), np.float32)
    k = randn(rng, (2, 3000, 2, 64), np.float32)
    v = randn(rng, (2, 3000, 2, 64), np.float32)
    alone = kvattn.flash_attn_with_kvcache(q, k, v, deterministic=True)
    ref = reference_attention(q, k, v)
    H.assert_close("out", alone, ref["out"], H.TOL_OUT["fp32"])
    failures = []

    def caller():
        for _ in range(20):
            out = kvattn.flash_attn_with_kvcache(q, k, v, deterministic=True)
            if not np.array_equal(out, alone):
                failures.append(float(np.nanmax(np.abs(out - alone))))

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
