"""The ragged page index (kv_indptr, kv_indices: FlashInfer's form) and the slot pool (its page size 1
case: a (num_slots, hk, d) cache with per-token slot ids) against the float64 oracle, on every device.

cases.py builds the index over scrambled pages with rows of their own lengths (spare pages, and trailing
kv_indices entries that no row owns and that hold -7: read one and the answer or the error shows it); the
oracle reads the same pages through a dense page table. The CUDA cases with d = 128 bf16 run the sm_90a
decode and prefill kernels (TMA for page sizes that are multiples of 8) where the device has them.
"""
import dataclasses

import numpy as np
import pytest

import harness as H
from cases import Case, build, run_and_compare

C = Case
R = dict(layout="ragged")
S = dict(layout="slots")

CASES = {
    "decode": C(**R, seqlens=(5, 9, 0), page_size=4),
    "decode page 1": C(**R, seqlens=(5, 9), page_size=1),
    "page 3 not a multiple": C(**R, seqlens=(7, 10), sq=2, page_size=3),
    "page 16 append crosses pages": C(**R, seqlens=(15, 2), new=(3, 3), sq=3, causal=True, page_size=16),
    "append varlen rotary": C(**R, seqlens=(6, 0, 11), new=(2, 5, 1), varlen_new=True, q_lens=(2, 5, 1),
                              causal=True, rotary="neox"),
    "append rotary interleaved leftpad": C(**R, seqlens=(7, 9), new=(2, 2), sq=2, leftpad=(3, 0),
                                           rotary="interleaved", causal=True),
    "cache_batch_idx scattered": C(**R, seqlens=(5, 9, 2), batch_idx="scattered", new=(1, 1, 1)),
    "cache_batch_idx duplicate": C(**R, seqlens=(5, 3, 7), batch_idx="duplicate"),
    "full capacity (no cache_seqlens)": C(**R, seqlens=(5, 9), seqlens_as="none", extra_slots=0),
    "seqlens int": C(**R, seqlens=(6, 6), seqlens_as="int", new=(1, 1)),
    "window sinks softcap": C(**R, seqlens=(12, 7), sq=3, window=(4, 0), sinks="fp32", softcap=10.0),
    "alibi chunk": C(**R, seqlens=(12, 7), sq=3, alibi="bh", chunk=4, causal=True),
    "varlen q seqused_q": C(**R, seqlens=(8, 4, 6), q_lens=(3, 0, 2), seqused_q=True, causal=True),
    "splits": C(**R, seqlens=(70, 3), page_size=8, num_splits=4),
    "gqa 8 hnd": C(**R, hq=8, hk=1, seqlens=(9, 4), hnd=True, page_size=4),
    "fp8 cache append": C(**R, dtype="bf16", kv_fp8=True, seqlens=(6, 3), new=(2, 2), sq=2, causal=True),
    "slots decode": C(**S, seqlens=(5, 9, 0)),
    "slots append varlen rotary": C(**S, seqlens=(3, 0, 8), new=(4, 2, 1), varlen_new=True, q_lens=(4, 2, 1),
                                    causal=True, rotary="neox"),
    "slots batch idx leftpad": C(**S, seqlens=(6, 9), leftpad=(2, 1), batch_idx="scattered", sq=2),
    "slots hnd window": C(**S, seqlens=(11, 4), sq=2, hnd=True, window=(3, 0), causal=True),
    "slots fp32": C(**S, dtype="fp32", seqlens=(5, 2)),
}

# d = 128 bf16: the shapes of the sm_90a kernels (decode; prefill with KVATTN_FORCE_SM90_PREFILL=1).
SM90 = dict(dtype="bf16", d=128, hq=8, hk=2, num_splits=1)
CUDA_CASES = {
    "sm90 decode page 64": C(**R, **SM90, seqlens=(300, 70, 513), page_size=64),
    "sm90 decode page 16 append": C(**R, **SM90, seqlens=(300, 70), new=(1, 1), page_size=16, rotary="neox",
                                    causal=True),
    "sm90 decode slots": C(**S, **SM90, seqlens=(200, 1, 77)),
    "sm90 decode splits": C(**R, **dict(SM90, num_splits=0), seqlens=(2000, 5), page_size=32),
    "sm90 prefill page 64 (TMA)": C(**R, **SM90, seqlens=(450, 201), sq=200, causal=True, page_size=64),
    "sm90 prefill page 16 leftpad": C(**R, **SM90, seqlens=(300, 150), sq=150, causal=True, page_size=16,
                                      leftpad=(33, 7)),
    "sm90 prefill slots append": C(**S, **SM90, seqlens=(130, 60), new=(128, 128), sq=128, causal=True,
                                   rotary="neox"),
}


def on_device(case, device):
    """On CUDA the cases run at d = 128 in bf16: what a developer build compiles, and the sm_90a kernels'
    shape (fp32 is CPU-only)."""
    if device != "cuda":
        return case
    if case.dtype == "fp32":
        pytest.skip("fp32 runs on the CPU backend only")
    return dataclasses.replace(case, d=128, dv=None, dtype="bf16")


@H.on_devices
@pytest.mark.parametrize("name", list(CASES))
def test_ragged(name, device):
    run_and_compare(on_device(CASES[name], device), device)


@pytest.mark.parametrize("name", list(CUDA_CASES))
@pytest.mark.parametrize("prefill", [False, True])
def test_ragged_cuda_kernels(name, prefill, monkeypatch):
    if not H._cuda_ready():
        pytest.skip("needs torch, a GPU and a CUDA build")
    if prefill:
        monkeypatch.setenv("KVATTN_FORCE_SM90_PREFILL", "1")
    run_and_compare(CUDA_CASES[name], "cuda")


@H.on_devices
def test_ragged_matches_page_table_exactly(device):
    """The same pages through kv_indptr/kv_indices and through a dense page_table: on the CPU the same bits;
    on CUDA the static bound of a row's keys differs (nnz * page_size against pages_per_row * page_size), so
    the launch may differ: within the oracle tolerance."""
    case = on_device(C(**R, dtype="bf16", seqlens=(37, 5, 20), sq=2, page_size=8, causal=True, seed=3), device)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    dense = {k: v for k, v in ref_kw.items() if k != "sinks"}
    dense.update(num_splits=1)
    ragged = dict(kw, num_splits=1)
    args = [H.to_device(x, device) for x in (q, k_cache, v_cache)]
    got = H.kvattn.flash_attn_with_kvcache(*args, **{k: H.to_device(v, device) for k, v in ragged.items()})
    want = H.kvattn.flash_attn_with_kvcache(*args, **{k: H.to_device(v, device) for k, v in dense.items()})
    H.sync_device_errors(device)
    got, want = H.to_numpy(got), H.to_numpy(want)
    assert not np.isnan(got).any()
    if device == "cuda":
        H.assert_close("out", got, want, H.TOL_OUT["bf16"])
    else:
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _call(device, case, **changes):
    q, k_cache, v_cache, kw, _, _ = build(on_device(case, device))
    kw = dict(kw)
    for name, value in changes.items():
        if value is None:
            kw.pop(name, None)
        else:
            kw[name] = value
    dev = {k: H.to_device(v, device) for k, v in kw.items()}
    out = H.kvattn.flash_attn_with_kvcache(H.to_device(q, device), H.to_device(k_cache, device),
                                           H.to_device(v_cache, device), **dev)
    H.sync_device_errors(device)
    return H.to_numpy(out)


ERR_CASE = C(**R, seqlens=(5, 9), page_size=4, new=(1, 1))


@H.on_devices
@pytest.mark.parametrize("changes, pattern", [
    (dict(kv_indices=None), r"kv_indices.*kv_indptr|kv_indptr.*kv_indices"),
    (dict(kv_indptr=None), r"kv_indices.*kv_indptr|kv_indptr.*kv_indices"),
    (dict(page_table=np.zeros((2, 4), np.int32)), r"page_table.*kv_indptr"),
    (dict(cu_seqlens_k=np.array([0, 8, 16], np.int32)), r"cu_seqlens_k.*kv_indptr"),
    (dict(kv_indptr=np.array([0, 5], np.int32)), r"kv_indptr: has 1 rows, fewer than the batch size b = 2"),
    (dict(kv_indptr=np.zeros((3, 1), np.int32)), r"kv_indptr.*\(b_pt \+ 1,\)"),
    (dict(kv_indptr=np.array([0, 1, 2], np.int64)), r"kv_indptr.*int32"),
])
def test_ragged_static_errors(device, changes, pattern):
    """Combinations the contract rejects, found from shapes alone: the same message on every backend."""
    with pytest.raises(H.kvattn.KvattnError, match=pattern):
        _call(device, ERR_CASE, **changes)


@H.on_devices
@pytest.mark.parametrize("what", ["indptr decreasing", "indptr past nnz", "indptr negative", "page id",
                                  "too short for the append"])
def test_ragged_value_errors(device, what):
    """Index values outside the cache: an error naming kv_indptr / kv_indices (on CUDA from the kernels,
    with the offending sequence NaN and nothing written out of bounds)."""
    q, k_cache, v_cache, kw, _, _ = build(on_device(ERR_CASE, device))
    indptr, indices = kw["kv_indptr"].copy(), kw["kv_indices"].copy()
    n_rows = len(indptr) - 1
    if what == "indptr decreasing":
        indptr[1], pattern = indptr[2] + 1, r"kv_indptr\[(1|2)\]"
    elif what == "indptr past nnz":
        indptr[n_rows], pattern = len(indices) + 1, rf"kv_indptr\[{n_rows}\]"
    elif what == "indptr negative":
        indptr[0], pattern = -1, r"kv_indptr\[0\]"
    elif what == "page id":
        indices[indptr[1]] = 1 << 20  # row 1's first page, under sequence 1's valid slots
        pattern = rf"kv_indices\[{indptr[1]}\].* {1 << 20}"
    else:
        indptr[1] = indptr[0] + 1  # row 0 keeps one page of 4 slots: 5 + 1 do not fit
        pattern = r"cache_seqlens\[0\]"
    kw.update(kv_indptr=indptr, kv_indices=indices)
    dev = {k: H.to_device(v, device) for k, v in kw.items()}
    with pytest.raises(H.kvattn.KvattnError, match=pattern):
        H.kvattn.flash_attn_with_kvcache(H.to_device(q, device), H.to_device(k_cache, device),
                                         H.to_device(v_cache, device), **dev)
        H.sync_device_errors(device)


def test_ragged_in_signature():
    """kvattn extensions, keyword-only, documented."""
    import inspect

    params = inspect.signature(H.kvattn.flash_attn_with_kvcache).parameters
    for name in ("kv_indptr", "kv_indices"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is None
        assert "kvattn extension" in H.kvattn._signature.argument_doc(H.kvattn.flash_attn_with_kvcache, "kv_indptr")
