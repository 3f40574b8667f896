"""kvattn.append_kv (vLLM reshape_and_cache_flash) against hand-written scatters, and kvattn.flash_attn_combine
against the oracle's combine, on each device."""
import numpy as np
import pytest

import harness as H
from inputs import DTYPES, randn
from reference import _to_fp8, reference_combine

kvattn = H.kvattn


def _paged_nan(shape, dtype, hnd):
    """A NaN cache (num_pages, page_size, hk, d), optionally an NHD view of HND storage."""
    n, ps, h, d = shape
    if hnd:
        return np.full((n, h, ps, d), np.nan, dtype).transpose(0, 2, 1, 3)
    return np.full(shape, np.nan, dtype)


@H.on_devices
@pytest.mark.parametrize("hnd", [False, True], ids=["nhd", "hnd"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_append_kv(page_size, dtype, hnd, device):
    H.skip_unsupported_on(device, DTYPES[dtype])
    seed = 100 + page_size
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    hk, d, dv, tokens = 2, 16, 24, 9
    num_pages = max(5, -(-2 * tokens // page_size))
    key, value = randn(rng, (tokens, hk, d), dt), randn(rng, (tokens, hk, dv), dt)
    slots = rng.permutation(num_pages * page_size)[:tokens].astype(np.int64)
    slots[rng.random(tokens) < 0.3] = -1  # negative: skipped
    kc = _paged_nan((num_pages, page_size, hk, d), dt, hnd)
    vc = _paged_nan((num_pages, page_size, hk, dv), dt, hnd)
    want_k, want_v = kc.copy(), vc.copy()
    for t, s in enumerate(slots):
        if s >= 0:
            want_k[s // page_size, s % page_size] = key[t]
            want_v[s // page_size, s % page_size] = value[t]
    kc_dev, vc_dev = H.to_device(kc, device), H.to_device(vc, device)
    assert kvattn.append_kv(H.to_device(key, device), H.to_device(value, device), kc_dev, vc_dev,
                            H.to_device(slots, device)) is None
    H.sync_device_errors(device)
    H.assert_cache_equal(f"key_cache seed{seed}", H.to_numpy(kc_dev), want_k, False, dtype)
    H.assert_cache_equal(f"value_cache seed{seed}", H.to_numpy(vc_dev), want_v, False, dtype)


@H.on_devices
@pytest.mark.parametrize("scale_form", ["float", "0d", "per-head"])
@pytest.mark.parametrize("src", ["fp16", "bf16"])
def test_append_kv_fp8(src, scale_form, device):
    """An fp8 cache stores key / k_scale (vLLM's convention), rounded to e4m3: within one fp8 ulp (exact on the
    CPU backend, which rounds the float64 quotient once; CUDA divides in fp32 first)."""
    rng = np.random.default_rng(7)
    num_pages, ps, hk, d, tokens = 3, 4, 2, 16, 6
    key, value = randn(rng, (tokens, hk, d), DTYPES[src]), randn(rng, (tokens, hk, d), DTYPES[src])
    slots = rng.permutation(num_pages * ps)[:tokens].astype(np.int64)
    k_scale = np.array([0.5, 2.0], np.float32) if scale_form == "per-head" else np.float32(0.25)
    v_scale = np.array([1.5, 0.75], np.float32) if scale_form == "per-head" else np.float32(1.25)
    kc = np.full((num_pages, ps, hk, d), np.nan, H.FP8)
    vc = kc.copy()
    want_k, want_v = H.f64(kc), H.f64(vc)
    for t, s in enumerate(slots):
        want_k[s // ps, s % ps] = H.f64(key[t]) / H.f64(k_scale).reshape(-1, 1)
        want_v[s // ps, s % ps] = H.f64(value[t]) / H.f64(v_scale).reshape(-1, 1)
    if scale_form == "float":
        ks, vs = float(k_scale), float(v_scale)
    else:
        ks, vs = H.to_device(np.asarray(k_scale), device), H.to_device(np.asarray(v_scale), device)
    kc_dev, vc_dev = H.to_device(kc, device), H.to_device(vc, device)
    args = (H.to_device(key, device), H.to_device(value, device), kc_dev, vc_dev, H.to_device(slots, device))
    kvattn.append_kv(*args, k_scale=ks, v_scale=vs)
    H.sync_device_errors(device)
    for name, got, want in (("key_cache", kc_dev, want_k), ("value_cache", vc_dev, want_v)):
        got = H.f64(H.to_numpy(got))
        assert np.array_equal(np.isnan(got), np.isnan(want)), f"{name}: written slots differ"
        ok = ~np.isnan(want)
        lim = H.ulp(want[ok], H.FP8)
        assert np.all(np.abs(got[ok] - want[ok]) <= lim), f"{name}: beyond one fp8 ulp of x / scale"
        if H.cpu_backend(device):  # the float64 quotient rounded once: exactly the oracle's e4m3
            np.testing.assert_array_equal(got[ok], H.f64(_to_fp8(want[ok])))


@H.on_devices
@pytest.mark.parametrize("src", ["fp16", "bf16"])
def test_append_kv_fp8_every_value(src, device):
    """Every finite fp16/bf16 value into an fp8 cache with scale 1 (no division to round): round to nearest
    even on the e4m3 grid, saturating to +-448 (inf too); NaN stays NaN. Exact on every backend."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = bits.view(DTYPES[src])
    with np.errstate(invalid="ignore"):  # NaN payloads widen with a warning
        values = values[~np.isnan(values.astype(np.float32))]
    d = 16
    values = np.concatenate([values, np.full(-len(values) % d, np.nan, values.dtype)])  # NaN kept too
    key = values.reshape(-1, 1, d)
    tokens = key.shape[0]
    kc = np.zeros((tokens, 1, 1, d), H.FP8)
    vc = kc.copy()
    slots = np.arange(tokens, dtype=np.int64)
    kc_dev, vc_dev = H.to_device(kc, device), H.to_device(vc, device)
    kvattn.append_kv(H.to_device(key, device), H.to_device(key, device), kc_dev, vc_dev, H.to_device(slots, device),
                     k_scale=1.0)
    H.sync_device_errors(device)
    want = H.f64(_to_fp8(H.f64(key)))
    for name, got in (("key_cache", kc_dev), ("value_cache", vc_dev)):  # v_scale absent: 1
        got = H.f64(H.to_numpy(got)).reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=name)


# ---- combine


def _partials(rng, n, rows, dv, empty_splits=()):
    """out (n, *rows, dv) fp32 and lse (n, *rows) fp32; splits in `empty_splits` have lse -inf and NaN out."""
    out = randn(rng, (n,) + rows + (dv,))
    lse = randn(rng, (n,) + rows, scale=3.0)
    for s in empty_splits:
        lse[s] = -np.inf
        out[s] = np.nan
    return out, lse


@H.on_devices
@pytest.mark.parametrize("n", [1, 2, 5])
def test_combine_fa3_layout(n, device):
    """FlashAttention-3's form: out_partial (n, b, s, h, dv), lse_partial (n, b, s, h) over (n, b, h, s) storage;
    returns out (b, s, h, dv) and lse (b, s, h) over (b, h, s) storage."""
    rng = np.random.default_rng(20 + n)
    b, s, h, dv = 2, 3, 4, 40
    out_p = randn(rng, (n, b, s, h, dv))
    lse_p = np.swapaxes(randn(rng, (n, b, h, s), scale=3.0), -1, -2)  # seqlen contiguous, as FlashAttention-3
    with H.poisoned_outputs():
        out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device))
    want_out, want_lse = reference_combine(out_p, lse_p)
    out, lse = H.to_numpy(out), H.to_numpy(lse)
    assert out.shape == (b, s, h, dv) and out.dtype == np.float32
    assert lse.shape == (b, s, h) and lse.strides[-2] == 4, "lse is a (b, s, h) view of (b, h, s) storage"
    H.assert_close("out", out, want_out, H.TOL_OUT["fp32"])
    H.assert_close("lse", lse, want_lse, H.TOL_LSE["fp32"])


@H.on_devices
@pytest.mark.parametrize("rows", [(6,), (2, 5), (2, 3, 4)], ids=lambda r: "x".join(map(str, r)))
@pytest.mark.parametrize("out_dtype", ["fp32", "fp16", "bf16"])
def test_combine_any_rows(rows, out_dtype, device):
    """Any "..." dims; a split with lse = -inf (and a NaN out) weighs nothing; out_dtype picks the output."""
    rng = np.random.default_rng(30 + len(rows))
    out_p, lse_p = _partials(rng, 4, rows, 16, empty_splits=(1,))
    out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device),
                                         out_dtype=DTYPES[out_dtype] if device == "cpu" else _torch_dtype(out_dtype))
    want_out, want_lse = reference_combine(out_p, lse_p)
    out = H.to_numpy(out)
    assert out.dtype == DTYPES[out_dtype]
    H.assert_close("out", out, want_out, H.TOL_OUT[out_dtype])
    H.assert_close("lse", H.to_numpy(lse), want_lse, H.TOL_LSE["fp32"])


def _torch_dtype(name):
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


@H.on_devices
def test_combine_all_empty(device):
    """Every split empty: out exactly 0, lse exactly -inf; with sinks, lse exactly the sink."""
    rng = np.random.default_rng(40)
    out_p, lse_p = _partials(rng, 3, (2, 4), 8, empty_splits=(0, 1, 2))
    out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device))
    assert np.all(H.to_numpy(out) == 0) and np.all(H.to_numpy(lse) == -np.inf)
    sinks = randn(rng, (4,))
    out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device),
                                         sinks=H.to_device(sinks, device))
    assert np.all(H.to_numpy(out) == 0)
    np.testing.assert_array_equal(H.to_numpy(lse), np.broadcast_to(sinks, (2, 4)))


@H.on_devices
@pytest.mark.parametrize("sink_dtype", ["fp32", "bf16"])
def test_combine_sinks(sink_dtype, device):
    """The sink (one per head, the last "..." axis) counts once, whatever the number of splits."""
    rng = np.random.default_rng(50)
    b, s, h, dv = 2, 2, 4, 8
    out_p, lse_p = _partials(rng, 3, (b, s, h), dv)
    sinks = randn(rng, (h,), DTYPES[sink_dtype], scale=2.0)
    given = np.zeros((b, s, h, dv), np.float32) + np.nan
    out_dev = H.to_device(given, device)
    out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device), out=out_dev,
                                         sinks=H.to_device(sinks, device))
    assert out is out_dev
    want_out, want_lse = reference_combine(out_p, lse_p, sinks=H.f64(sinks))
    H.assert_close("out", H.to_numpy(out), want_out, H.TOL_OUT["fp32"])
    H.assert_close("lse", H.to_numpy(lse), want_lse, H.TOL_LSE["fp32"])


@H.on_devices
def test_combine_fa3_layout_with_sinks(device):
    """Sinks with FlashAttention-3's transposed lse_partial: the head axis is the last "..." axis."""
    rng = np.random.default_rng(60)
    n, b, s, h, dv = 3, 2, 3, 4, 8
    out_p = randn(rng, (n, b, s, h, dv))
    lse_p = np.swapaxes(randn(rng, (n, b, h, s), scale=3.0), -1, -2)
    sinks = randn(rng, (h,))
    out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device),
                                         sinks=H.to_device(sinks, device))
    want_out, want_lse = reference_combine(out_p, lse_p, sinks=H.f64(sinks))
    H.assert_close("out", H.to_numpy(out), want_out, H.TOL_OUT["fp32"])
    H.assert_close("lse", H.to_numpy(lse), want_lse, H.TOL_LSE["fp32"])


@H.on_devices
def test_combine_non_finite_partials(device):
    """docs/DESIGN.md, non-finite scores: +inf partials share the weight equally (lse +inf), a NaN partial
    makes its row NaN, all -inf is an empty row; finite partials next to +inf ones weigh nothing."""
    rng = np.random.default_rng(70)
    out_p = randn(rng, (3, 3, 4))
    lse_p = np.array([[np.inf, np.nan, -np.inf], [3.0, 1.0, -np.inf], [np.inf, 2.0, -np.inf]], np.float32)
    with H.poisoned_outputs():
        out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device))
    out, lse = H.to_numpy(out), H.to_numpy(lse)
    np.testing.assert_allclose(out[0], (H.f64(out_p[0, 0]) + H.f64(out_p[2, 0])) / 2, rtol=1e-6, atol=1e-6)
    assert lse[0] == np.inf
    assert np.isnan(out[1]).all() and np.isnan(lse[1])
    assert np.all(out[2] == 0) and lse[2] == -np.inf


@H.on_devices
@pytest.mark.parametrize("n", [17, 33, 132, 256, 257])
@pytest.mark.parametrize("dv", [128, 64])
def test_combine_many_splits(n, dv, device):
    """Past 16 splits (the CUDA merge's LSEs in registers and O loaded 16 at a time, up to 256; past that the
    loop form): empty splits (lse -inf, NaN out) at block edges weigh nothing, the sink counts once; a row
    with one NaN lse is NaN, a row of +inf partials shares the weight."""
    rng = np.random.default_rng(80 + n + dv)
    b, h = 3, 4
    empty = tuple(s for s in (0, 15, 16, 31, 32, n - 1) if s < n)
    out_p, lse_p = _partials(rng, n, (b, h), dv, empty_splits=empty)
    lse_p[:, 1, 2] = randn(rng, (n,), scale=3.0)
    lse_p[n // 2, 1, 2] = np.nan  # row (1, 2): NaN
    lse_p[:, 2, 1] = -np.inf
    lse_p[[3, n - 2], 2, 1] = np.inf  # row (2, 1): the two +inf partials' mean
    sinks = randn(rng, (h,))
    with H.poisoned_outputs():
        out, lse = kvattn.flash_attn_combine(H.to_device(out_p, device), H.to_device(lse_p, device),
                                             sinks=H.to_device(sinks, device))
    out, lse = H.to_numpy(out), H.to_numpy(lse)
    assert np.isnan(out[1, 2]).all() and np.isnan(lse[1, 2])
    np.testing.assert_allclose(out[2, 1], (H.f64(out_p[3, 2, 1]) + H.f64(out_p[n - 2, 2, 1])) / 2, rtol=1e-6,
                               atol=1e-6)
    finite = np.ones((b, h), bool)
    finite[1, 2] = finite[2, 1] = False
    lse_ok = lse_p.copy()
    lse_ok[:, ~finite] = 0.0  # (rows checked above; the oracle sees finite values there)
    want_out, want_lse = reference_combine(out_p, lse_ok, sinks=H.f64(sinks))
    H.assert_close("out", out[finite], want_out[finite], H.TOL_OUT["fp32"])
    H.assert_close("lse", lse[finite], want_lse[finite], H.TOL_LSE["fp32"])
