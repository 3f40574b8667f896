"""The sm_90a prefill kernel over fp8 e4m3 caches under fp16 / bf16 / fp8 q (cta.cuh KvFp8) against the
float64 oracle: the cp.async producer converts each tile's fp8 rows to f16 in its stage, bf16 Q (and fp8 q,
read to bf16 as the portable kernel reads it) is rescaled to f16 by a power of two a warp (consumer.cuh
q_to_f16), the descales ride in the scores' factor and the epilogue's 1 / l. Session 30 wrote it without a
GPU; session 31 ran these tests at d 128 on an H200, session 35 at d 64 / 192 / 256 on an H100 (the default at
every head dim since). Every prefill case of test_cuda_prefill_sm90 runs again with fp8 caches, at every
compiled head dim (KVATTN_FORCE_SM90_PREFILL=1: small shapes), on the one-pass, persistent and split kernels
(the profiler names the kernel that ran); fp8 q; q far outside f16's range and far below it, rows of
different magnitudes and an inf check the rescaling; descales broadcast or absent.
"""
import dataclasses
import re

import numpy as np
import pytest

import harness as H
import test_cuda_prefill_sm90 as P
from cases import build, run_and_compare
from reference import reference_attention

pytestmark = pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICE = "cuda"
HEAD_DIMS, dv_of = P.HEAD_DIMS, P.dv_of


@pytest.fixture(autouse=True)
def _force_sm90(monkeypatch):
    monkeypatch.setenv("KVATTN_FORCE_SM90_PREFILL", "1")
    monkeypatch.delenv("KVATTN_FORCE_PORTABLE", raising=False)


def fp8(case, d, **kw):
    return dataclasses.replace(case, kv_fp8=True, d=d, dv=dv_of(d), **kw)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(P.CASES))
def test_prefill_sm90_fp8(name, d):
    run_and_compare(fp8(P.CASES[name], d), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_fp8_default_head_dims(monkeypatch, d):
    """Without the test switch, fp8 caches and 16-bit ones take the sm_90a kernel at every head dim (their
    GPU checks passed: d 128 on an H200 in session 31, d 64 / 192 / 256 and (192, 128) on an H100 in
    session 35 on the landed producer)."""
    monkeypatch.delenv("KVATTN_FORCE_SM90_PREFILL")
    case = P.prefill(layout="paged", page_size=16, sq=300, seqlens=(700, 500), seed=143)
    names = P._kernel_names(fp8(case, d))
    assert any("KvFp8<" in n for n in names), names
    names = P._kernel_names(dataclasses.replace(case, d=d, dv=dv_of(d)))
    assert any("prefill_kernel<" in n for n in names), names


# fp8 q over fp8 caches: the bf16 kernel reading q as fp8 (load_q_fp8), out bf16.
FP8_Q_CASES = ["causal contiguous", "paged 16", "paged 1", "packed varlen", "mixed chunk + decodes", "softcap",
               "alibi per batch", "sinks", "GQA 8", "append rotary", "append varlen rotary paged",
               "batch idx + leftpad", "strided q, given out"]


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", FP8_Q_CASES)
@pytest.mark.parametrize("mma", ["1", "0"], ids=["e4m3 wgmma", "f16"])
def test_prefill_sm90_fp8_q(monkeypatch, name, d, mma):
    """fp8 q: at d 128 on e4m3 wgmma (KvFp8Mma; with rotary the f16 kernel) and, with KVATTN_SM90_FP8_MMA=0,
    on the f16 kernel; other head dims take the f16 kernel either way."""
    if mma == "0" and d != 128:
        pytest.skip("the e4m3 kernel is d 128 only")
    monkeypatch.setenv("KVATTN_SM90_FP8_MMA", mma)
    run_and_compare(fp8(P.CASES[name], d, dtype="fp8"), DEVICE)


@pytest.mark.skipif(128 not in HEAD_DIMS, reason="the e4m3 kernel is d 128 only")
@pytest.mark.parametrize("mma", ["1", "0"])
def test_prefill_sm90_fp8_q_mma_rule(monkeypatch, mma):
    """fp8 q at d 128 runs the e4m3 kernel unless KVATTN_SM90_FP8_MMA=0; bf16 q over fp8 never does."""
    monkeypatch.setenv("KVATTN_SM90_FP8_MMA", mma)
    names = P._kernel_names(fp8(P.prefill(layout="paged", page_size=16, dtype="fp8"), 128))
    assert any("KvFp8Mma<" in n for n in names) == (mma == "1"), names
    assert any(re.search(r"KvFp8(Mma)?<[^<]*PrefillConfig<[^,]*, 128,", n) for n in names), names
    names = P._kernel_names(fp8(P.prefill(layout="paged", page_size=16), 128))
    assert not any("KvFp8Mma<" in n for n in names), names
    # fp8 q with rotary takes the f16 kernel (launch.cuh: its q rotated and rounded to e4m3 again was off by
    # 0.05-0.06 of the scale on the H200)
    names = P._kernel_names(fp8(P.CASES["append rotary"], 128, dtype="fp8"))
    assert not any("KvFp8Mma<" in n for n in names), names


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("variant", ["persistent", "split"])
def test_prefill_sm90_fp8_q_variants(monkeypatch, d, variant):
    """fp8 q on the persistent kernel (the next unit's Q through load_q_async's fp8 path) and the split one."""
    if variant == "persistent":
        monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
        # (264-384 units: more than the SMs, so CTAs load their next unit's Q by load_q_async's fp8 path)
        case, pattern = fp8(P.MANY_UNITS["causal, 384 units of 1-12 tiles"], d, dtype="fp8"), PERSISTENT_FP8
    else:
        case, pattern = fp8(P.SPLIT_CASES["append + rotary"], d, dtype="fp8"), SPLIT_FP8
    _ran(case, pattern)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", ["causal contiguous", "paged 16", "packed varlen", "fp16", "append rotary"])
@pytest.mark.parametrize("descales", ["broadcast", "none"])
def test_prefill_sm90_fp8_descales(name, d, descales):
    run_and_compare(fp8(P.CASES[name], d, descales=descales), DEVICE)


# The fp8 kernel of a variant: PrefillConfig's flags (ping-pong, varlen, persistent, split) after the head dim.
# (KvFp8Mma: fp8 q at d 128, e4m3 wgmma)
PERSISTENT_FP8 = r"KvFp8(Mma)?<[^<]*PrefillConfig<[^,]*, \d+, false, false, true, false>"
SPLIT_FP8 = r"KvFp8(Mma)?<[^<]*PrefillConfig<[^,]*, \d+, (true|false), false, false, true>"


def _ran(case, pattern):
    names = P._kernel_names(case)
    assert any(re.search(pattern, n) for n in names), names


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(P.MANY_UNITS))
def test_prefill_sm90_fp8_persistent_many_units(monkeypatch, name, d):
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
    case = fp8(P.MANY_UNITS[name], d)
    _ran(case, PERSISTENT_FP8)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(P.SPLIT_CASES))
def test_prefill_sm90_fp8_splits(name, d):
    case = fp8(P.SPLIT_CASES[name], d)
    _ran(case, SPLIT_FP8)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8"])
def test_prefill_sm90_fp8_runs_on_hopper(d, dtype):
    """The fp8 kernel of the head dim's own row ran (sm_90 devices with a 90a build only)."""
    names = P._kernel_names(fp8(P.prefill(layout="paged", page_size=16, dtype=dtype), d))
    assert any(re.search(rf"KvFp8(Mma)?<[^<]*PrefillConfig<[^,]*, {d},", n) for n in names), names


def _run_scaled(case, q_scale, softmax_scale):
    """kvattn on q * q_scale (exact: a power of two) with softmax_scale, against the oracle on q with the
    case's own scale: the same logits."""
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    q_big = (H.f64(q) * q_scale).astype(q.dtype)
    assert np.array_equal(H.f64(q_big) / q_scale, H.f64(q)), "q_scale must be exact in q's dtype"
    out, lse = H.call_poisoned(q_big, k_cache, v_cache, dict(kw, softmax_scale=softmax_scale), DEVICE)
    H.sync_device_errors(DEVICE)
    name = H.DTYPE_NAME[np.dtype(q.dtype)]
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT[name])
    H.assert_close("lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE[name])


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("q_scale", [2.0 ** 24, 2.0 ** -40], ids=["2^24 (past f16's max)", "2^-40 (below f16's)"])
@pytest.mark.parametrize("persistent", ["0", "1"])
def test_prefill_sm90_fp8_bf16_q_beyond_f16(monkeypatch, d, q_scale, persistent):
    """bf16 q whose magnitudes f16 cannot hold (2^24 times N(0, 1): up to ~2^26, over 65504; 2^-40 times:
    under f16's smallest subnormal): q_to_f16's power of two brings each warp's rows into range, and the
    scores take it back."""
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", persistent)
    case = fp8(P.prefill(layout="paged", page_size=16, seqlens=(450, 300), seed=140), d)
    if persistent == "1":
        _ran(case, PERSISTENT_FP8)
    _run_scaled(case, q_scale, 1.0 / np.sqrt(d) / q_scale)


def _run_q(case, q):
    """kvattn on the case with q replaced, and the oracle on the same q: (out, lse, ref)."""
    _, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    out, lse = H.call_poisoned(q, k_cache, v_cache, kw, DEVICE)
    H.sync_device_errors(DEVICE)
    return H.to_numpy(out), H.to_numpy(lse), ref


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_fp8_bf16_q_rows_of_different_magnitudes(d):
    """Rows 2^12 times larger than the others (tokens 0-4 of 200, GQA 2: the first 10 packed rows, inside
    warp 0's 16 of the first consumer): a scale taken from another warp's rows (max ~4: x 2^12) would
    overflow them (~2^26), so this catches a warp reading other rows than its own S rows."""
    case = fp8(P.prefill(seqlens=(450, 201), seed=141), d)
    q = H.f64(build(case)[0])
    q[:, :5] *= 2.0 ** 12
    out, lse, ref = _run_q(case, q.astype(H.BF16))
    H.assert_close("out", out, ref["out"], H.TOL_OUT["bf16"])
    H.assert_close("lse", lse, ref["lse"], H.TOL_LSE["bf16"])


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_fp8_bf16_q_inf_stays_in_its_row(d):
    """An inf in one q row (token 3, head 0 of sequence 0: packed row 6, warp 0's) does not touch the other
    rows of its warp: their outputs match the oracle (the inf row's own output is not checked)."""
    case = fp8(P.prefill(seqlens=(450, 201), seed=143), d)
    q = H.f64(build(case)[0])
    q[0, 3, 0, 5] = np.inf
    out, lse, ref = _run_q(case, q.astype(H.BF16))
    keep = np.ones(out.shape[:-1], bool)
    keep[0, 3, 0] = False
    H.assert_close("out", out[keep], ref["out"][keep], H.TOL_OUT["bf16"])
    # (lse is (b, hq, sq))
    H.assert_close("lse", lse.transpose(0, 2, 1)[keep], ref["lse"].transpose(0, 2, 1)[keep], H.TOL_LSE["bf16"])


@pytest.mark.parametrize("mma", ["1", "0"], ids=["e4m3 wgmma", "f16"])
def test_prefill_sm90_fp8_q_rotated_near_448(monkeypatch, mma):
    """fp8 q at e4m3's largest values with rotary: a rotated pair reaches 448 sqrt 2, past e4m3's 448 (the f16
    kernel rounds it to bf16; rotary calls no longer take the e4m3 kernel, launch.cuh). Against the
    oracle on the same q, with the softmax scale shrunk by as much as q grew (logits of the usual size: with
    q's own size the softmax is one-hot and a rounding of the rotated q, which the oracle keeps in float64,
    could pick another key)."""
    if 128 not in HEAD_DIMS:
        pytest.skip("the e4m3 kernel is d 128 only")
    monkeypatch.setenv("KVATTN_SM90_FP8_MMA", mma)
    case = fp8(P.CASES["append rotary"], 128, dtype="fp8", seed=144)
    q = H.f64(build(case)[0])
    grow = 440.0 / np.abs(q).max()
    case = dataclasses.replace(case, scale=128 ** -0.5 / grow)
    q = np.clip(q * grow, -448, 448).astype(H.FP8)
    out, lse, ref = _run_q(case, q)
    H.assert_close("out", out, ref["out"], H.TOL_OUT["fp8"])
    H.assert_close("lse", lse, ref["lse"], H.TOL_LSE["fp8"])


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_fp8_nan_page_is_contained(d):
    """An out-of-range page id makes its sequence NaN (recorded as an error); the other stays right."""
    H.assert_bad_page_contained(fp8(P.prefill(layout="paged", page_size=16, seed=142), d), 3, DEVICE)


# K / V of fp8 caches by TMA (the default at d 128 and 256: the WithFp8Tma kernels; other head dims have the
# cp.async producer only) and by cp.async in the same kernels (KVATTN_SM90_TMA=0, as for layouts TMA declines).
TMA_CASES = ["paged 16", "paged 64 hnd", "paged 128", "leftpad paged", "paged 256 leftpad", "causal contiguous",
             "packed varlen", "paged 1", "append varlen rotary paged"]


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", TMA_CASES)
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
@pytest.mark.parametrize("tma", ["1", "0"])
def test_prefill_sm90_fp8_producers(monkeypatch, name, d, dtype, tma):
    monkeypatch.setenv("KVATTN_SM90_TMA", tma)
    run_and_compare(fp8(P.CASES[name], d, dtype=dtype), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("kind", ["persistent", "split"])
def test_prefill_sm90_fp8_tma_variants(monkeypatch, d, kind):
    if kind == "persistent":
        monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
        case = fp8(P.MANY_UNITS["causal paged 16"], d)
    else:
        case = fp8(P.SPLIT_CASES["64 rows, paged 16 (TMA)"], d)
    names = P._kernel_names(case)
    assert any("WithFp8Tma<" in n for n in names) == (d in (128, 256)), names
    run_and_compare(case, DEVICE)
