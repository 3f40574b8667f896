"""CUDA backend at kernel-sized shapes: every compiled (head_dim, head_dim_v) pair, multi-tile and split-KV
paths, the NaN-outside-valid-slots invariance, and device-side index errors (NaN output + a message from
kvattn.device_errors naming the argument). The feature cross product at small shapes is test_cpu_sweep.py
(parametrized by device); these cases add what only large shapes reach: several key tiles, several row
blocks, splits, wide heads.
"""

import numpy as np
import pytest

import harness as H
from cases import Case, build, run_and_compare
from inputs import randn
from reference import reference_attention

pytestmark = pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICE = "cuda"

HEAD_DIMS = [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128), (64, 512), (512, 512)]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d,dv", HEAD_DIMS)
def test_head_dims_decode_paged(d, dv, dtype):
    """GQA decode over several tiles, scattered pages of 16, with append + rotary; splits chosen."""
    qv = d < dv  # the MLA shape (64, 512)
    case = Case(dtype=dtype, d=d, dv=dv, hq=8, hk=2, seqlens=(300, 77, 1), new=(1, 1, 1), sq=1, causal=True,
                layout="paged", page_size=16, rotary=None if qv else "neox", qv=qv, num_splits=0, seed=d + dv)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d,dv", HEAD_DIMS)
def test_head_dims_prefill_causal(d, dv, dtype):
    """Chunked prefill: 70 new tokens (several row blocks of packed GQA rows) over a prefix, causal."""
    case = Case(dtype=dtype, d=d, dv=dv, hq=4, hk=2, seqlens=(130, 5), new=(70, 70), sq=70, causal=True,
                rotary=None if d < dv else "interleaved", qv=d < dv, num_splits=1, seed=3)
    run_and_compare(case, DEVICE)


# ---- fp8 e4m3 caches: (f16 q, fp8), (bf16 q, fp8) and (fp8 q, fp8) -> the bf16 kernel with q converted


FP8_QS = ["fp16", "bf16", "fp8"]


@pytest.mark.parametrize("dtype", FP8_QS)
@pytest.mark.parametrize("d,dv", HEAD_DIMS)
def test_fp8_head_dims_decode_paged(d, dv, dtype):
    """fp8 caches, GQA decode (the key-split variant where it exists) over several tiles and scattered pages,
    with append (quantized on write) + rotary; splits chosen."""
    qv = d < dv  # the MLA shape (64, 512)
    case = Case(dtype=dtype, kv_fp8=True, d=d, dv=dv, hq=8, hk=2, seqlens=(300, 77, 1), new=(1, 1, 1), sq=1,
                causal=True, layout="paged", page_size=16, rotary=None if qv else "neox", qv=qv, num_splits=0,
                seed=d + dv)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", FP8_QS)
@pytest.mark.parametrize("d,dv", HEAD_DIMS)
def test_fp8_head_dims_prefill_causal(d, dv, dtype):
    """fp8 caches, chunked prefill: several row blocks, append + rotary (qv for the MLA shape), no split."""
    case = Case(dtype=dtype, kv_fp8=True, d=d, dv=dv, hq=4, hk=2, seqlens=(130, 5), new=(70, 70), sq=70,
                causal=True, rotary=None if d < dv else "interleaved", qv=d < dv, num_splits=1, seed=3)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", FP8_QS)
@pytest.mark.parametrize("num_splits", [1, 3, 0])
@pytest.mark.parametrize("layout", ["contiguous", "paged", "packed"])
def test_fp8_splits_long_sequences(layout, num_splits, dtype):
    """Split-KV with fp8: v_descale scales every partial before the combine; sinks, ALiBi, broadcast descales."""
    case = Case(dtype=dtype, kv_fp8=True, d=128, hq=16, hk=2, seqlens=(1500, 640, 33, 0), sq=2, causal=True,
                layout=layout, page_size=1 if layout == "paged" else 4, leftpad=(7, 0, 3, 0), sinks="fp32",
                alibi="h", num_splits=num_splits, descales="broadcast" if layout == "packed" else "full",
                seed=num_splits)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", FP8_QS)
@pytest.mark.parametrize("features", [
    dict(window=(40, 3), softcap=2.0), dict(chunk=48, causal=True, sinks="fp32"), dict(seqused_q=True),
    dict(hnd=True, strided_q=True, out_given=True), dict(descales="none", alibi="bh"),
])
def test_fp8_features_multi_tile(features, dtype):
    case = Case(dtype=dtype, kv_fp8=True, d=128, hq=6, hk=2, seqlens=(400, 260), sq=33, layout="paged",
                page_size=3, batch_idx="scattered", **features)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", FP8_QS)
def test_fp8_odd_head_dims_element_path(dtype):
    """fp8 rows that are not whole 16-byte chunks (d % 16 != 0) take the element-by-element gather; dims
    between the compiled ones run on the next kernel up."""
    for d, dv in [(40, 40), (72, 88), (136, 136), (24, 200)]:
        case = Case(dtype=dtype, kv_fp8=True, d=d, dv=dv, hq=4, hk=2, seqlens=(90, 17), new=(2, 2), sq=2,
                    causal=True, layout="paged", page_size=5, seed=d)
        run_and_compare(case, DEVICE)


@pytest.mark.parametrize("num_splits", [1, 2, 5, 0])
@pytest.mark.parametrize("layout", ["contiguous", "paged", "packed"])
def test_splits_long_sequences(layout, num_splits):
    case = Case(dtype="bf16", d=128, hq=16, hk=2, seqlens=(1500, 640, 33, 0), sq=2, causal=True, layout=layout,
                page_size=1 if layout == "paged" else 4, leftpad=(7, 0, 3, 0), sinks="fp32", alibi="h",
                num_splits=num_splits, seed=num_splits)
    run_and_compare(case, DEVICE)


# The balanced schedule (decode, num_splits=0): skewed lengths and many sequences, so that units of every
# size straddle CTA boundaries (pieces in 2..many CTAs, empty and one-tile units, a CTA holding both
# slots); window, sinks and leftpad cut the key ranges; the page checks of the pieces must cover the slots.
_SKEWED = (9000, 1, 0, 64, 65, 300) + tuple(int(x) for x in np.random.default_rng(5).integers(1, 700, 34))


@pytest.mark.parametrize("features", [
    dict(),
    dict(sinks="fp32", leftpad=tuple(int(x) % 7 for x in range(len(_SKEWED)))),
    dict(window=(700, 0), causal=True, batch_idx="scattered"),
    dict(sq=4, causal=True, softcap=20.0),
])
@pytest.mark.parametrize("layout,page", [("paged", 1), ("paged", 16), ("contiguous", 0)])
def test_balanced_schedule_skewed(layout, page, features):
    leftpad = features.get("leftpad")
    seqlens = tuple(n + (leftpad[j] if leftpad else 0) for j, n in enumerate(_SKEWED))
    kw = dict(dtype="bf16", d=128, hq=8, hk=2, seqlens=seqlens, sq=1, layout=layout, page_size=max(page, 1),
              num_splits=0, seed=len(features) + page)
    kw.update(features)
    run_and_compare(Case(**kw), DEVICE)


def test_deterministic_long():
    case = Case(dtype="fp16", d=64, hq=4, hk=1, seqlens=(9000, 4100), sq=3, causal=True, deterministic=True,
                num_splits=0, seed=9)
    a = run_and_compare(case, DEVICE)
    b = run_and_compare(case, DEVICE)
    np.testing.assert_array_equal(H.f64(a[0]), H.f64(b[0]))


@pytest.mark.parametrize("features", [
    dict(window=(40, 3), chunk=0), dict(chunk=48, causal=True), dict(softcap=2.0, sinks="fp32"),
    dict(alibi="bh", window=(100, -1)), dict(seqused_q=True, sinks="fp32"),
])
def test_features_multi_tile(features):
    case = Case(dtype="bf16", d=128, hq=6, hk=2, seqlens=(400, 260), sq=33, layout="paged", page_size=3,
                batch_idx="scattered", **features)
    run_and_compare(case, DEVICE)


def test_odd_head_dims_padded():
    """Dims between the compiled ones run on the next kernel up (zero channels)."""
    for d, dv in [(40, 40), (80, 112), (136, 136), (24, 200), (64, 320)]:
        case = Case(dtype="fp16", d=d, dv=dv, hq=4, hk=2, seqlens=(90, 17), new=(2, 2), sq=2, causal=True,
                    layout="paged", page_size=5, seed=d)
        run_and_compare(case, DEVICE)


# ---- the append kernel: fp16/bf16 into a same-dtype cache by 16-byte chunks (head dims % 8, rotary_dim % 16),
# else (fp8, other dims) element by element. Token groups of 4 partly filled (13 new tokens), rows of more
# chunks than threads (hk * d / 8 > 128), k and v rows of different widths.


_WIDE = [(d, dv, hk, rotary) for d, dv, hk in [(128, 128, 8), (256, 256, 8), (192, 128, 8), (128, 128, 1)]
         for rotary in (None, "neox", "interleaved")] + [(64, 512, 4, None)]  # the MLA shape: v wider than k


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d,dv,hk,rotary", _WIDE)
def test_append_chunked_wide_rows(d, dv, hk, rotary, dtype):
    case = Case(dtype=dtype, d=d, dv=dv, hq=2 * hk, hk=hk, seqlens=(37, 0, 16), new=(13, 13, 13), sq=2,
                causal=True, layout="paged", page_size=16, rotary=rotary, qv=d < dv, seed=d + hk)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("rotary", ["neox", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, 32, 64, 112, 8, 24, 40, 120])  # the last four: not % 16, elementwise
@pytest.mark.parametrize("tables", ["fp32", "q"])
def test_append_rotary_dims(rotary_dim, rotary, tables, dtype):
    case = Case(dtype=dtype, d=128, hq=4, hk=2, seqlens=(5, 30), new=(9, 9), sq=3, causal=True, layout="paged",
                page_size=16, rotary=rotary, rotary_dim=rotary_dim, rotary_in_q_dtype=tables == "q",
                rotary_seqlens=True, seed=rotary_dim)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("rotary", [None, "neox", "interleaved"])
@pytest.mark.parametrize("layout,page", [("paged", 1), ("paged", 16), ("contiguous", 0), ("packed", 0)])
@pytest.mark.parametrize("features", [
    dict(), dict(unaligned_new=True), dict(leftpad=(3, 0, 9), batch_idx="scattered"),
    dict(new=(0, 7, 21), varlen_new=True, batch_idx="scattered", unaligned_new=True), dict(hnd=True),
])
def test_append_layouts(layout, page, rotary, features, dtype):
    """Every cache layout (page 1: each token its own page), leftpad and cache_batch_idx, varlen new tokens,
    k / v / cos / sin at unaligned addresses and strides (the element loads and stores of load8 / store8)."""
    kw = dict(dtype=dtype, d=128, hq=8, hk=4, seqlens=(21, 9, 40), new=(6, 6, 6), sq=2, causal=True,
              layout=layout, page_size=max(page, 1), rotary=rotary, seed=page + len(features))
    kw.update(features)
    if layout == "packed":  # rows are cu_seqlens_k's, no cache_batch_idx
        kw.pop("batch_idx", None)
    run_and_compare(Case(**kw), DEVICE)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_append_fp8_cache_element_path(dtype):
    """fp8 caches keep the element path (quantize on write; fp8 tokens as they are), rotary on, unaligned k / v."""
    case = Case(dtype=dtype, kv_fp8=True, d=128, hq=8, hk=4, seqlens=(21, 9, 40), new=(0, 7, 21), varlen_new=True,
                sq=2, causal=True, layout="paged", page_size=16, rotary="neox", rotary_dim=64, unaligned_new=True,
                batch_idx="scattered", seed=7)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("varlen", [False, True])
def test_append_bad_page_mid_group(varlen, dtype):
    """A bad page-table entry under new tokens 2 and 3 of sequence 0 (page 2: inside its first group of 4):
    the error names the entry, sequence 0's out is NaN, those two tokens are not written, and every other
    new token (the rest of the group, the next groups, sequence 1) is, as the oracle writes them."""
    case = Case(dtype=dtype, d=128, hq=4, hk=2, seqlens=(40, 50), new=(9, 9), varlen_new=varlen, sq=2,
                causal=True, layout="paged", page_size=2, rotary="neox", seed=2)
    q, k_cache, v_cache, kw, ref_kw, info = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)  # the good table's caches
    table = kw["page_table"].copy()
    column = (40 + 2) // 2  # slots 42, 43: new tokens 2, 3 of sequence 0 (row 0)
    page = table[0, column]
    table[0, column] = k_cache.shape[0] + 5
    kw = dict(kw, page_table=table)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    kc, vc = H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE)
    out = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), kc, vc, **dev)
    with pytest.raises(H.kvattn.KvattnError) as e:
        H.sync_device_errors(DEVICE)
    assert f"page_table[0, {column}]" in str(e.value), str(e.value)
    out = H.f64(H.to_numpy(out))
    assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()
    for name, got, want, before in (("k_cache", kc, ref["k_cache"], k_cache), ("v_cache", vc, ref["v_cache"], v_cache)):
        want = want.copy()
        want[page] = before[page]  # the skipped tokens' page keeps what it held
        H.assert_cache_equal(name, H.to_numpy(got), want, name == "k_cache", H.DTYPE_NAME[np.dtype(q.dtype)])


def _bad_page_inputs():
    case = Case(dtype="fp16", d=64, hq=4, hk=2, seqlens=(40, 50), sq=2, layout="paged", page_size=4, seed=1)
    q, k_cache, v_cache, kw, _, _ = build(case)
    kw = dict(kw)
    table = kw["page_table"].copy()
    table[0, 3] = k_cache.shape[0] + 17  # sequence 0 (row 0), slots 12..15: a page that does not exist
    kw["page_table"] = table
    return q, k_cache, v_cache, kw


def test_device_error_bad_page_is_nan_and_reported():
    q, k_cache, v_cache, kw = _bad_page_inputs()
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    out = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                           H.to_device(v_cache, DEVICE), **dev)
    with pytest.raises(H.kvattn.KvattnError) as e:
        H.sync_device_errors(DEVICE)
    assert "page_table[0, 3]" in str(e.value), str(e.value)
    out = H.f64(H.to_numpy(out))
    assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()
    H.sync_device_errors(DEVICE)  # the record was cleared


def test_device_error_capacity():
    case = Case(dtype="bf16", d=64, seqlens=(5, 9), new=(2, 2), sq=2)
    q, k_cache, v_cache, kw, _, _ = build(case)
    kw = dict(kw)
    kw["cache_seqlens"] = np.array([5, k_cache.shape[1] - 1], np.int32)  # 1 + 2 new > capacity
    kc, vc = H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE)
    out = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), kc, vc,
                                           **{k: H.to_device(v, DEVICE) for k, v in kw.items()})
    with pytest.raises(H.kvattn.KvattnError) as e:
        H.sync_device_errors(DEVICE)
    assert str(e.value).startswith("cache_seqlens[1]"), str(e.value)
    out = H.f64(H.to_numpy(out))
    assert np.isnan(out[1]).all() and not np.isnan(out[0]).any()
    # nothing of sequence 1 was written: its row keeps its NaN slots
    assert np.isnan(H.f64(H.to_numpy(kc))[1, k_cache.shape[1] - 1:]).all()


def test_device_error_longest_sequence():
    """A sequence holds at most 2^31 - 2^16 keys (kvattn.h: the kernels' key positions are int32), whatever the
    capacity: a page table of 65537 pages of 32768 slots a row (all page 0: 16 MiB of cache) admits more, and
    a device-side cache_seqlens past the bound is the kernels' error (the host reads no index tensor on CUDA),
    its sequence NaN, the other one's the oracle's."""
    H.skip_unsupported_on(DEVICE, H.BF16)
    rng = np.random.default_rng(83)
    d, hq, hk, ps = 128, 8, 2, 32768
    k_cache = randn(rng, (1, ps, hk, d), H.BF16)
    v_cache = randn(rng, (1, ps, hk, d), H.BF16)
    q = randn(rng, (2, 1, hq, d), H.BF16)
    table = np.zeros((2, 65537), np.int32)
    limit = 2**31 - 2**16
    out = H.kvattn.flash_attn_with_kvcache(
        H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE),
        page_table=H.to_device(table, DEVICE), cache_seqlens=H.to_device(np.array([100, limit + 1], np.int32), DEVICE))
    with pytest.raises(H.kvattn.KvattnError) as e:
        H.sync_device_errors(DEVICE)
    assert f"cache_seqlens[1] = {limit + 1} plus 0 new tokens" in str(e.value), str(e.value)
    assert f"exceeds the most keys a sequence may hold, {limit}" in str(e.value), str(e.value)
    got = H.f64(H.to_numpy(out))
    assert np.isnan(got[1]).all()
    ref = reference_attention(q[:1], k_cache, v_cache, cache_seqlens=np.array([100], np.int32))
    H.assert_close("out of sequence 0", got[:1], ref["out"], H.TOL_OUT["bf16"])


def test_workspace_overlapping_an_argument_is_an_error(monkeypatch):
    """The workspace is written by the call: one that overlaps an argument (here cache_seqlens, which the decode
    kernel's producer and consumers both read) is validation's error naming both, and nothing runs. The Python
    layer makes its own workspace; the C ABI takes any address, which tensors.workspace stands in for here
    (the ctypes path: the built torch op, if any, makes its workspace in C++)."""
    H.skip_unsupported_on(DEVICE, H.BF16)
    import torch

    from kvattn import _fwd, _stable
    from kvattn import tensors as T

    rng = np.random.default_rng(84)
    d, hq, hk, s = 128, 8, 2, 8192  # the balanced decode schedule: partials in a workspace
    # (batch 1 past the capacity bound takes the cluster form on cards whose bandwidth rule allows it, the
    # H100: one cluster a unit, no partials, no workspace, so nothing to overlap; off here)
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER", "0")
    k_cache = H.to_device(randn(rng, (1, s, hk, d), H.BF16), DEVICE)
    v_cache = H.to_device(randn(rng, (1, s, hk, d), H.BF16), DEVICE)
    q = H.to_device(randn(rng, (1, 1, hq, d), H.BF16), DEVICE)
    # cache_seqlens at the start of an 8 MiB arena that the workspace then takes from there: no other
    # argument can lie in it, so cache_seqlens is the one the error names
    arena = torch.zeros(8 << 20, dtype=torch.uint8, device=DEVICE)
    seqlens = arena[:4].view(torch.int32)
    seqlens.fill_(s)
    assert arena.data_ptr() % 256 == 0  # (so that only the overlap can be the error)
    monkeypatch.setattr(_stable, "_op", False)
    monkeypatch.setattr(_fwd, "_workspace_hint", {})
    asked = []  # the sizes the call asked for: the plan must want a workspace, or the test proves nothing

    def workspace(call, like, nbytes, alignment=256):
        asked.append(nbytes)
        return arena.data_ptr() if nbytes else None

    monkeypatch.setattr(T, "workspace", workspace)
    error = None
    try:
        H.kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens)
    except H.kvattn.KvattnError as err:
        error = err
    assert asked and max(asked) > 0, f"the call planned no workspace (asked {asked}): nothing to overlap"
    assert error is not None, "a workspace over cache_seqlens was accepted"
    assert "which the call writes, overlap cache_seqlens" in str(error), str(error)
    H.sync_device_errors(DEVICE)
    assert int(H.to_numpy(seqlens)[0]) == s  # nothing wrote it


def test_device_error_offending_sequence_with_rotary_reads_no_table():
    """A decode whose second sequence is offending (cache_seqlens past the capacity) with rotary on: that
    sequence's rotary position (its cache_seqlens, 2e9) is unchecked: the sm_90a decode kernel rotated its Q
    with it, reading the cos / sin tables ~0.5 TB out of bounds (now clamped into the table). Sequence 0 is
    the oracle's."""
    case = Case(dtype="bf16", d=128, hq=8, hk=2, seqlens=(100, 200), new=(1, 1), sq=1, causal=True,
                layout="paged", page_size=16, rotary="neox", seed=82)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    kw = dict(kw, cache_seqlens=np.array([kw["cache_seqlens"][0], 2_000_000_000], np.int32))
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    with H.poisoned_outputs():
        out = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                               H.to_device(v_cache, DEVICE), **dev)
    with pytest.raises(H.kvattn.KvattnError) as e:
        H.sync_device_errors(DEVICE)  # an illegal address would surface here as a CUDA error instead
    assert str(e.value).startswith("cache_seqlens[1]"), str(e.value)
    got = H.f64(H.to_numpy(out))
    assert np.isnan(got[1]).all()
    H.assert_close("out of sequence 0", got[0], ref["out"][0], H.TOL_OUT["bf16"])


@pytest.mark.parametrize("kv_fp8", [False, True])
def test_nan_outside_valid_slots_bit_identical(kv_fp8):
    """NaN garbage in every unused slot and page gives the same bits as finite garbage there."""
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=8, hk=2, seqlens=(200, 150), sq=4, layout="paged",
                page_size=3, leftpad=(5, 0), causal=True, num_splits=3, seed=4)
    q, k_cache, v_cache, kw, _, _ = build(case)
    rng = np.random.default_rng(0)
    filled = [np.where(np.isnan(H.f64(c)), rng.standard_normal(c.shape), H.f64(c)).astype(c.dtype)
              for c in (k_cache, v_cache)]
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    a = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                         H.to_device(v_cache, DEVICE), **dev)
    b = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), *(H.to_device(c, DEVICE) for c in filled), **dev)
    a, b = H.to_numpy(a), H.to_numpy(b)
    assert not np.isnan(H.f64(a)).any()
    np.testing.assert_array_equal(a.view(np.int16), b.view(np.int16))
