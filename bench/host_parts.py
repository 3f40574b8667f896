"""Where the host time of one eager flash_attn_with_kvcache call goes (torch): the whole call and its parts,
each timed as the bench's host/call column is (calls queued back to back, the device not waited for;
median of batches). On the GPU machine the shape is W1's b4 32k page 16 decode (32/8 heads, d 128, bf16);
with --device cpu (any machine, the CPU backend, the op run on CPU tensors) a trivial decode (b 1, 1/1
heads, d 64, 16 keys in one page, bf16) whose kernel is ~nothing, so the rows are the host layers' cost.

    PYTHONPATH=python:. KVATTN_LIBRARY=build-cuda/libkvattn.so python3 -m bench.host_parts
    KVATTN_NUM_THREADS=1 PYTHONPATH=python:. KVATTN_LIBRARY=build/libkvattn.so \
        KVATTN_TORCH_OP=build/_kvattn_stable.so python3 -m bench.host_parts --device cpu

Rows: the whole eager call; its two halves (_fwd.normalize, _fwd.run); the C ABI through ctypes with
prebuilt params (what the bench's "C ABI" column times: it includes the ctypes call, ~0.3-1 us); a ctypes
call of a trivial function; torch's per-tensor attribute reads, allocation and stream lookup; and, where
the stable-ABI op is built (python/kvattn/_stable.py), the call through it, its parts and the ctypes path.
"""
import ctypes
import time

import numpy as np


# The clock of per_call_us: wall time (the GPU machine's host is not shared); --device cpu uses this thread's
# CPU time instead, since on a shared CPU the wall clock also counts the time other processes held the core
# (every part runs on this thread with KVATTN_NUM_THREADS=1).
CLOCK = [time.perf_counter]


def per_call_us(fn, n=100, batches=20, sync=None):
    per = []
    clock = CLOCK[0]
    for _ in range(batches):
        if sync:
            sync()
        t0 = clock()
        for _ in range(n):
            fn()
        per.append((clock() - t0) * 1e6 / n)
    if sync:
        sync()
    return float(np.median(per))


def w1_inputs(torch, b=4, hq=32, hk=8, d=128, keys=32768, page=16, dev="cuda"):
    pages = keys // page
    q = torch.randn(b, 1, hq, d, device=dev, dtype=torch.bfloat16)
    k_cache = torch.randn(b * pages, page, hk, d, device=dev, dtype=torch.bfloat16)
    v_cache = torch.randn(b * pages, page, hk, d, device=dev, dtype=torch.bfloat16)
    table = torch.randperm(b * pages, device=dev, dtype=torch.int32).reshape(b, pages)
    seqlens = torch.full((b,), keys, device=dev, dtype=torch.int32)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, cache_seqlens=seqlens, page_table=table)


def main(argv=None):
    import argparse

    import torch

    import kvattn
    from kvattn import _fwd, _lib, torch_ops
    from kvattn import _signature as S

    from . import timing as T

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    cpu = parser.parse_args(argv).device == "cpu"
    if cpu:
        from kvattn import _stable
        _stable.CPU_CALLS = True  # the op on CPU tensors (by default they take the ctypes path)
        CLOCK[0] = time.thread_time
        kw = w1_inputs(torch, b=1, hq=1, hk=1, d=64, keys=16, dev="cpu")
        sync = None
    else:
        kw = w1_inputs(torch)
        sync = torch.cuda.synchronize
    fa = kvattn.flash_attn_with_kvcache
    out_ref = fa(**kw)
    if sync:
        sync()
    rows = []

    def row(name, fn, **a):
        try:
            rows.append((name, per_call_us(fn, sync=sync, **a)))
        except Exception as exc:  # noqa: BLE001
            rows.append((name + f" [error: {str(exc)[:80]}]", float("nan")))

    try:
        from kvattn import _stable
        op = _stable.load()
    except ImportError:  # a package from before the op
        op = None
    row("eager flash_attn_with_kvcache" + (" (stable op)" if op else " (ctypes path)"), lambda: fa(**kw))
    row("eager, return_softmax_lse=True", lambda: fa(**kw, return_softmax_lse=True))
    values = [kw.get(a.name, a.default) for a in S.FWD]
    op_args, out, lse_flag = _fwd.normalize(values)
    row("  _fwd.normalize", lambda: _fwd.normalize(values))
    row("  torch_ops._eager", torch_ops._eager)
    row("  torch_ops._eager + _plain", lambda: torch_ops._eager() and torch_ops._plain(op_args, None))
    row("  _fwd.run (ctypes path)", lambda: _fwd.run(op_args, None, False))
    if op:
        row("  _stable.run (the op)", lambda: _stable.run(op_args, None, False))
        present, ints = _stable._lists(op_args, None)
        row("  the op alone", lambda: op(present, ints))
        tensor_type, _stable.TENSOR = _stable.TENSOR, None  # the generated fast path declines
        row("eager, general path (normalize, torch_ops.fwd)", lambda: fa(**kw))
        _stable.TENSOR = tensor_type
        _stable._op = False
        row("eager, ctypes path (op disabled)", lambda: fa(**kw))
        _stable._op = op
    cp = T.CParams(dict(kw, out=torch.empty_like(kw["q"])))
    cp()
    lib = _lib.load()
    fwd, ref = lib.kvattn_fwd, cp.ref
    row("C ABI via ctypes (bench column: kvattn_fwd)", lambda: fwd(ref))
    need = ctypes.c_size_t(0)
    sized = lib.kvattn_fwd_sized
    row("C ABI via ctypes (kvattn_fwd_sized)", lambda: sized(ref, ctypes.byref(need)))
    row("ctypes call of kvattn_abi_version", lambda: lib.kvattn_abi_version(), n=1000)
    q = kw["q"]
    row("torch: data_ptr", lambda: q.data_ptr(), n=1000)
    row("torch: tuple(shape) + stride()", lambda: (tuple(q.shape), q.stride()), n=1000)
    row("torch: dtype + is_cuda + get_device", lambda: (q.dtype, q.is_cuda, q.get_device()), n=1000)
    row("torch: new_empty (out)", lambda: q.new_empty(q.shape), n=1000)
    if not cpu:
        row("torch: _cuda_getCurrentRawStream", lambda: torch._C._cuda_getCurrentRawStream(0), n=1000)
    got = fa(**kw)
    if sync:
        sync()
    diff = (got.float() - out_ref.float()).abs().max().item()
    where = ("CPU backend, b1 1/1 heads d64 16 keys p16 (bf16), " + _lib.load()._name.rsplit("/", 1)[-1]
             + f", {_lib.load().kvattn_cpu_num_threads()} thread(s), thread CPU time") if cpu else \
        f"W1 b4 32k p16 (bf16), {torch.cuda.get_device_name()}"
    print(f"host parts, {where}; max |out - first out| = {diff}")
    for name, us in rows:
        print(f"{name:48s} {us:8.2f} us")


if __name__ == "__main__":
    main()
