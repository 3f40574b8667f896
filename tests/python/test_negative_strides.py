"""Caches with negative strides (a C-ABI caller's reversed views: pages, kv heads or cache rows in reverse
memory order) against the float64 oracle, on every device. numpy expresses such views; torch cannot, so on
the torch devices each cache is given in its memory's order and its descriptor rewritten to the reversed
view (tensors._describe_torch), as an engine's C call would pass it. The sm_90a kernels leave such caches
to the portable kernels (src/cuda/common/cache_rows.hpp): the prefill and MLA kernels address cache rows as
unsigned 32-bit offsets (a regression reads out of bounds), the decode kernel takes a negative row offset
for "no row" (a regression reads valid rows as zeros). The sq = 80 cases have a shape the sm_90a prefill
kernel takes with positive strides (the test switch on), the sq = 1 cases one the sm_90a decode kernel
takes."""
import os

import numpy as np
import pytest

import harness as H
from inputs import DTYPES, paged_from_contiguous, nan_fill_invalid, randn
from reference import reference_attention

kvattn = H.kvattn
from kvattn import _stable  # noqa: E402
from kvattn import tensors as kv_tensors  # noqa: E402  (the binding's descriptor, patched on torch devices)


def cases(rng, dtype, kind, sq):
    """(q, k_view, v_view, kw): caches whose `kind` axis runs backwards in memory, with the arguments that
    address the same logical keys through them."""
    b, s, hk, hq, d = 2, 150, 2, 8, 128  # (d 128: the head dim of the developer builds)
    dt = DTYPES[dtype]
    seqlens = np.array([150, 97], np.int32)
    k = nan_fill_invalid(randn(rng, (b, s, hk, d), dt), seqlens)
    v = nan_fill_invalid(randn(rng, (b, s, hk, d), dt), seqlens)
    q = randn(rng, (b, sq, hq, d), dt)
    kw = dict(cache_seqlens=seqlens, causal=True)
    if kind == "pages":  # page p of the view is page P - 1 - p of memory: the table maps to the view's ids
        (kp, vp), table = paged_from_contiguous(rng, [k, v], 16)
        kw["page_table"] = (kp.shape[0] - 1 - table).astype(np.int32)
        return q, np.flip(kp, 0), np.flip(vp, 0), kw
    if kind == "rows":  # cache row r of the view is row R - 1 - r of memory, chosen by cache_batch_idx
        kw["cache_batch_idx"] = np.array([1, 0], np.int32)
        return q, np.flip(k, 0), np.flip(v, 0), kw
    assert kind == "heads"  # kv head h of the view is memory's hk - 1 - h
    return q, np.flip(k, 2), np.flip(v, 2), kw


def device_cache(view, device, patches):
    """The cache `view` (numpy, negative strides) on `device`: the array itself on the CPU; on a torch device
    its memory in increasing order, whose descriptor `patches` rewrites to the view's."""
    if device == "cpu":
        return view
    base = H._base_of(view)
    memory = H.to_device(np.ascontiguousarray(base), device)
    itemsize = view.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // itemsize
    patches[id(memory)] = (offset * itemsize, view.shape, tuple(s // itemsize for s in view.strides))
    return memory


@pytest.fixture
def described_as(monkeypatch):
    """id(torch tensor) -> (byte offset, shape, element strides) its descriptor takes instead of its own."""
    patches = {}
    original = kv_tensors._describe_torch

    def describe(x, name):
        ptr, code, shape, strides, device = original(x, name)
        if id(x) in patches:
            offset, shape, strides = patches[id(x)]
            ptr += offset
        return ptr, code, shape, strides, device

    monkeypatch.setattr(kv_tensors, "_describe_torch", describe)
    # the stable-ABI op (if built) reads tensors in C++ and would bypass the rewritten descriptors
    monkeypatch.setattr(_stable, "_op", False)
    monkeypatch.setenv("KVATTN_FORCE_SM90_PREFILL", "1")  # the shape rule off: the prefill case would take it
    return patches


@H.on_devices
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("sq", [1, 80])
@pytest.mark.parametrize("kind", ["pages", "rows", "heads"])
def test_negative_strides(device, dtype, sq, kind, described_as):
    H.skip_unsupported_on(device, DTYPES[dtype])
    # (a developer build of another head dim: KVATTN_TEST_HEAD_DIMS names it, as the device calls set it)
    if device == "cuda" and "128" not in os.environ.get("KVATTN_TEST_HEAD_DIMS", "128").split():
        pytest.skip("d 128 is not among KVATTN_TEST_HEAD_DIMS (a developer build of another head dim)")
    rng = np.random.default_rng(4100 + 10 * sq + ["pages", "rows", "heads"].index(kind))
    q, k_view, v_view, kw = cases(rng, dtype, kind, sq)
    assert any(s < 0 for s in k_view.strides), k_view.strides
    ref = reference_attention(q, k_view, v_view, **kw)
    kc, vc = device_cache(k_view, device, described_as), device_cache(v_view, device, described_as)
    dev = {name: H.to_device(x, device) for name, x in kw.items()}
    with H.poisoned_outputs():
        out, lse = kvattn.flash_attn_with_kvcache(H.to_device(q, device), kc, vc, return_softmax_lse=True, **dev)
    H.sync_device_errors(device)
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT[dtype])
    H.assert_close("lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE[dtype])
    # The caches were only read (bytes: NaN slots included).
    if device != "cpu":
        for view, memory in ((k_view, kc), (v_view, vc)):
            assert H.to_numpy(memory).tobytes() == np.ascontiguousarray(H._base_of(view)).tobytes()
