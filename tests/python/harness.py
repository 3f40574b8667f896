"""What the kvattn Python suites share: the device parametrization, moving numpy inputs to the device,
poisoned outputs, and comparison with the float64 oracle under TESTING.md's tolerances.

A test builds numpy inputs (rounded to the storage dtype), gives them to the oracle (reference.py) and,
through `to_device`, to kvattn. On 'cpu' the numpy arrays are passed as they are; on 'cuda' they become
torch CUDA tensors (skipped without torch, a GPU or a CUDA build).
"""
import contextlib
import os
import sys

import ml_dtypes
import numpy as np
import pytest

try:
    import kvattn
except ImportError:  # a source checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "python"))
    import kvattn
from kvattn import tensors as kv_tensors

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)

# TESTING.md: max abs error relative to max |reference| (at least 1)
# fp8 q computes (and writes out) in bf16: the bf16 tolerance. fp8 caches are compared with the oracle on
# the dequantized stored values, under the tolerance of q's dtype.
TOL_OUT = {"fp32": 2e-5, "fp16": 4e-3, "bf16": 3e-2, "fp8": 3e-2}
TOL_LSE = {"fp32": 1e-5, "fp16": 1e-3, "bf16": 1e-2, "fp8": 1e-2}
DTYPE_NAME = {np.dtype(np.float32): "fp32", np.dtype(np.float16): "fp16", BF16: "bf16", FP8: "fp8"}
MANTISSA_BITS = {np.dtype(np.float16): 10, BF16: 7, FP8: 3}
MIN_NORMAL_EXP = {np.dtype(np.float16): -14, BF16: -126, FP8: -6}


def _torch_ready():
    try:
        import torch  # noqa: F401  (imported here so that the suites can use sys.modules["torch"])
    except ImportError:
        return False
    return True


def _cuda_ready():
    if not _torch_ready():
        return False
    torch = sys.modules["torch"]
    return torch.cuda.is_available() and kvattn.has_backend("cuda")


# 'cpu': numpy arrays; 'torch-cpu': torch CPU tensors (the torch path of the binding, on the CPU backend);
# 'cuda': torch CUDA tensors.
DEVICES = [
    "cpu",
    pytest.param("torch-cpu", marks=pytest.mark.skipif(not _torch_ready(), reason="needs torch")),
    pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_ready(), reason="needs torch, a GPU and a CUDA build")),
]


# A test taking `device` runs once per device: @on_devices.
on_devices = pytest.mark.parametrize("device", DEVICES)


def cpu_backend(device):
    return device != "cuda"


def skip_unsupported_on(device, dtype):
    """fp32 runs on the CPU backend only (CONTRACT.md); a CUDA developer build of one dtype
    (KVATTN_DEV_DTYPE, named to the tests by KVATTN_TEST_DTYPES, e.g. "bf16") has no kernel of the other
    (fp8 q computes in bf16)."""
    if device == "cuda" and np.dtype(dtype) == np.float32:
        pytest.skip("fp32 is a CPU-backend dtype")
    built = os.environ.get("KVATTN_TEST_DTYPES")
    compute = {"fp8": "bf16"}.get(DTYPE_NAME.get(np.dtype(dtype)), DTYPE_NAME.get(np.dtype(dtype)))
    if device == "cuda" and built and compute not in built.split():
        pytest.skip(f"a developer build without {compute} kernels (KVATTN_TEST_DTYPES={built})")


# ---- moving arrays between numpy and the device


def to_device(x, device):
    """numpy -> the array kvattn gets on `device` (None and non-arrays pass through)."""
    if device == "cpu" or not isinstance(x, np.ndarray):
        return x
    import torch

    if not x.flags.c_contiguous:
        # Keep the caller's strides (HND caches, strided q): the same view over a device copy of its base.
        base = _base_of(x)
        tb = to_device(np.ascontiguousarray(base), device)
        offset = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // x.itemsize
        return tb.as_strided(x.shape, [s // x.itemsize for s in x.strides], offset)
    if x.dtype == BF16:
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    elif x.dtype == FP8:
        t = torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn)
    else:
        t = torch.from_numpy(x)
    return t.to("cuda") if device == "cuda" else t.clone()


def _base_of(x):
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


def to_numpy(x):
    """A device result as numpy (same dtype)."""
    if isinstance(x, np.ndarray) or x is None:
        return x
    import torch

    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        return x.contiguous().view(torch.int16).numpy().view(BF16)
    if x.dtype == torch.float8_e4m3fn:
        return x.contiguous().view(torch.uint8).numpy().view(FP8)
    return x.numpy()


def sync_device_errors(device):
    """On CUDA, raise the errors that kernels recorded (the CPU backend raises at once)."""
    if device == "cuda":
        kvattn.device_errors("cuda")


@contextlib.contextmanager
def poisoned_outputs():
    """Outputs that kvattn allocates itself start as NaN, so an unwritten element fails."""
    original = kv_tensors.empty

    def empty_nan(like, shape, code):
        x = original(like, shape, code)
        if code in (1, 2, 3):  # f32, f16, bf16
            x[...] = float("nan")
        return x

    kv_tensors.empty = empty_nan
    try:
        yield
    finally:
        kv_tensors.empty = original


def nan_like(x):
    return np.full(x.shape, np.nan, x.dtype)


# ---- deterministic mode

def deterministic_rows(q, k_cache, v_cache, lengths, device):
    """run(rows): (out, lse) on the host of the causal deterministic call over sequences `rows` (q[rows], the
    cache rows picked by cache_batch_idx), so that a sequence's bits can be compared across batches."""
    kc, vc = to_device(k_cache, device), to_device(v_cache, device)

    def run(rows):
        rows = np.asarray(rows, np.int32)
        out, lse = kvattn.flash_attn_with_kvcache(
            to_device(np.ascontiguousarray(q[rows]), device), kc, vc,
            cache_seqlens=to_device(lengths[rows], device), cache_batch_idx=to_device(rows, device),
            causal=True, deterministic=True, return_softmax_lse=True)
        sync_device_errors(device)
        return to_numpy(out), to_numpy(lse)
    return run


def assert_rows_bitwise(out, lse, rows, full_out, full_lse, known):
    """Each sequence i < known of `rows` has the bits it had in the full batch (full_out[i], full_lse[i])."""
    for j, i in enumerate(rows):
        if i < known:
            np.testing.assert_array_equal(f64(out[j]), f64(full_out[i]), err_msg=f"out of sequence {i} in {rows}")
            np.testing.assert_array_equal(lse[j], full_lse[i], err_msg=f"lse of sequence {i} in {rows}")


# ---- comparison


def f64(x):
    return np.asarray(x).astype(np.float64)


def assert_close(name, got, ref, tol):
    """max |got - ref| <= tol * max(1, max |ref|) over finite ref; +-inf and exact zeros of the oracle
    (empty rows) must match exactly; NaN never passes."""
    got, ref = f64(got), f64(ref)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != {ref.shape}"
    assert not np.isnan(got).any(), f"{name}: NaN at {np.argwhere(np.isnan(got))[:5].tolist()}"
    inf = ~np.isfinite(ref)
    bad_inf = inf & (got != ref)
    assert not bad_inf.any(), f"{name}: expected {ref[bad_inf][:3]} at {np.argwhere(bad_inf)[:3].tolist()}, got {got[bad_inf][:3]}"
    fin = ~inf
    if not fin.any():
        return
    scale = max(1.0, np.abs(ref[fin]).max())
    err = np.abs(got[fin] - ref[fin])
    worst = int(err.argmax())
    assert err[worst] <= tol * scale, (f"{name}: max abs error {err[worst]:.3g} > {tol:g} * {scale:.3g} at flat "
                                       f"index {np.flatnonzero(fin)[worst]} (got {got[fin][worst]!r}, ref {ref[fin][worst]!r})")


def _lse_as_rows(lse):
    """lse (b, hq, sq) -> (b, sq, hq), or (hq, total_q) -> (total_q, hq): indexed like out's rows."""
    return np.swapaxes(lse, -1, -2)


def assert_empty_rows_exact(out, lse, ref_out, ref_lse):
    """Rows with no visible key (the oracle's exact zeros) must be exactly 0 with lse exactly -inf or the sink."""
    empty = np.all(f64(ref_out) == 0.0, axis=-1)
    got_rows = f64(out)[empty]
    assert np.all(got_rows == 0.0), f"out: empty rows must be exactly 0, got max |x| {np.abs(got_rows).max()}"
    got, want = f64(_lse_as_rows(lse))[empty], f64(_lse_as_rows(ref_lse))[empty]
    assert np.array_equal(got, want), f"lse of empty rows must be exactly -inf or the sink: {got[:4]} != {want[:4]}"


def ulp(x, dtype):
    """One unit in the last place of `dtype` at float64 values x."""
    dtype = np.dtype(dtype)
    mag = np.abs(f64(x))
    exp = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    exp = np.maximum(exp, MIN_NORMAL_EXP[dtype])
    return np.exp2(exp - MANTISSA_BITS[dtype])


def assert_cache_equal(name, got, ref, rotary, dtype_name):
    """Appended caches: exact (NaN where the oracle has NaN), or within one ulp (fp32: 2e-5) with rotary.

    Pass rotary=True for any append that rounds a computed value (an fp8 cache quantizing x / descale on a
    backend that divides in fp32 first: one fp8 ulp)."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, f"{name}: {got.shape} {got.dtype} != {ref.shape} {ref.dtype}"
    g, r = f64(got), f64(ref)
    nan_ref = np.isnan(r)
    assert np.array_equal(np.isnan(g), nan_ref), (f"{name}: NaN pattern differs (slots written that should not "
                                                  f"be, or not written): {np.argwhere(np.isnan(g) != nan_ref)[:5].tolist()}")
    g, r = g[~nan_ref], r[~nan_ref]
    if not rotary:
        bad = g != r
        assert not bad.any(), f"{name}: {bad.sum()} elements differ, e.g. got {g[bad][:3]} ref {r[bad][:3]}"
    elif ref.dtype == np.float32:
        err = np.abs(g - r).max(initial=0.0)
        assert err <= 2e-5 * max(1.0, np.abs(r).max(initial=0.0)), f"{name}: max abs error {err}"
    else:
        # One ulp, or the fp32 rounding of the rotation where it cancels to near 0: x cos - y sin of inputs
        # as large as the tensor's values is rounded at ~2^-24 of them (2^-20 here), far more than one ulp
        # of a result near 0 (seen at d 256: 1.9e-9 off a 1.2e-7 value) and far less than one of a wrong
        # rotation (a bf16 ulp at 1 is 2^-7).
        floor = 2.0 ** -20 * np.abs(r).max(initial=0.0)
        lim = np.maximum(np.maximum(ulp(r, ref.dtype), ulp(g, ref.dtype)), floor)
        bad = np.abs(g - r) > lim
        assert not bad.any(), f"{name}: {bad.sum()} elements beyond one ulp, e.g. got {g[bad][:3]} ref {r[bad][:3]}"


def kernel_names(case, device="cuda"):
    """The names of the CUDA kernels one eager call of the case (cases.Case) ran, for the tests that check
    which sm_90a kernel took a problem (profiled_kernel_names)."""
    from cases import build
    from inputs import DTYPES

    skip_unsupported_on(device, DTYPES[case.dtype])  # (a developer build's missing dtype)
    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: to_device(v, device) for k, v in kw.items()}
    args = (to_device(q, device), to_device(k_cache, device), to_device(v_cache, device))
    return profiled_kernel_names(lambda: kvattn.flash_attn_with_kvcache(*args, **dev))


def profiled_kernel_names(fn):
    """The names of the CUDA kernels that fn() ran, for the tests that check which sm_90a kernel took a
    problem (sm_90 devices only: elsewhere those kernels do not run; skips where the profiler sees no kernel,
    e.g. under compute-sanitizer)."""
    import torch

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("not an sm_90 device")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    if not names:
        pytest.skip("the profiler saw no kernels here")
    return names


def call_poisoned(q, k_cache, v_cache, kw, device):
    """One flash_attn_with_kvcache call (return_softmax_lse) on host arrays a test built or changed, its
    outputs NaN-poisoned: (out, lse) on the device, not synchronized (the caller checks the device errors)."""
    dev = {k: to_device(v, device) for k, v in kw.items()}
    with poisoned_outputs():
        return kvattn.flash_attn_with_kvcache(to_device(q, device), to_device(k_cache, device),
                                             to_device(v_cache, device), return_softmax_lse=True, **dev)


def assert_bad_page_contained(case, page, device, lse_nan=False):
    """The paged case (cases.Case) called with page_table[0, page] out of range: a page_table error is
    recorded, sequence 0's out is NaN (its lse too with lse_nan), the other sequences match the oracle at
    bf16 tolerances."""
    from cases import build
    from reference import reference_attention

    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    kw = dict(kw)
    table = kw["page_table"].copy()
    table[0, page] = 1 << 20
    kw["page_table"] = table
    out, lse = call_poisoned(q, k_cache, v_cache, kw, device)
    with pytest.raises(kvattn.KvattnError, match="page_table"):
        sync_device_errors(device)
    out, lse = to_numpy(out), to_numpy(lse)
    assert np.isnan(out[0]).all()
    if lse_nan:
        assert np.isnan(lse[0]).all()
    assert_close("out", out[1:], ref["out"][1:], TOL_OUT["bf16"])
