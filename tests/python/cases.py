"""One attention case of the contract, built from a few named features, run on kvattn and on the oracle.

`Case` holds the features (everything small: the bugs live at the edges). `build` turns it into numpy
inputs rounded to the storage dtype, with every cache slot outside the valid range set to NaN, and
`run_and_compare` runs both sides and checks out, lse and the updated caches (harness.py tolerances).
"""
import dataclasses
from typing import Optional, Sequence

import numpy as np

import harness as H
from inputs import DTYPES, cu_from_lengths, randn, rotary_tables, scrambled_page_table
from reference import reference_attention


@dataclasses.dataclass
class Case:
    seed: int = 0
    dtype: str = "fp16"  # of q (and qv, k, v); "fp8" (e4m3) needs kv_fp8 and gives a bf16 out
    kv_fp8: bool = False  # fp8 e4m3 caches (appended fp16/bf16 k, v are quantized on write)
    descales: str = "full"  # with fp8: full (b, hk) | broadcast (a stride-0 view of one row) | none (all 1)
    seqlens: Sequence[int] = (5, 9)  # tokens already in the cache (absolute slot index), per sequence
    sq: int = 1  # query tokens per sequence (fixed q)
    q_lens: Optional[Sequence[int]] = None  # varlen q (cu_seqlens_q) instead of sq
    hq: int = 4
    hk: int = 2
    d: int = 32
    dv: Optional[int] = None  # None: d
    layout: str = "contiguous"  # contiguous | paged | packed (cu_seqlens_k) | ragged (kv_indptr) | slots (pool)
    page_size: int = 4
    hnd: bool = False  # cache storage (pages, hk, page_size, d), passed as an NHD view through strides
    extra_slots: int = 3  # capacity beyond the longest sequence
    batch_idx: Optional[str] = None  # None | scattered | duplicate (duplicate: no append)
    leftpad: Optional[Sequence[int]] = None
    seqlens_as: str = "array"  # array | int (all equal) | none (full capacity, no append)
    new: Optional[Sequence[int]] = None  # tokens appended per sequence
    varlen_new: bool = False  # cu_seqlens_k_new instead of (b, s_new, ...)
    rotary: Optional[str] = None  # None | interleaved | neox
    rotary_dim: Optional[int] = None  # None: d
    rotary_seqlens: bool = False
    rotary_in_q_dtype: bool = False  # cos/sin in q's dtype instead of fp32
    causal: bool = False
    window: tuple = (-1, -1)
    chunk: int = 0
    softcap: float = 0.0
    alibi: Optional[str] = None  # None | h | bh
    sinks: Optional[str] = None  # None | fp32 | bf16
    qv: bool = False
    seqused_q: bool = False
    scale: Optional[float] = None
    num_splits: int = 0
    pack_gqa: Optional[bool] = None
    deterministic: bool = False
    strided_q: bool = False  # q (and qv) as non-contiguous views
    unaligned_new: bool = False  # k, v, cos and sin as views at an odd element offset with odd strides
    out_given: bool = False  # pass a NaN-filled `out`

    @property
    def b(self):
        return len(self.seqlens)


def _lengths(case):
    b = case.b
    new = np.zeros(b, np.int64) if case.new is None else np.asarray(case.new, np.int64)
    seqlens = np.asarray(case.seqlens, np.int64)
    leftpad = np.zeros(b, np.int64) if case.leftpad is None else np.asarray(case.leftpad, np.int64)
    q_lens = np.full(b, case.sq, np.int64) if case.q_lens is None else np.asarray(case.q_lens, np.int64)
    return seqlens, new, leftpad, q_lens


def _strided(x, heads_axis):
    """The same values as `x`, as a non-contiguous view (heads-major storage, last dim contiguous)."""
    perm = list(range(x.ndim))
    perm[heads_axis], perm[0] = perm[0], perm[heads_axis]
    store = np.ascontiguousarray(np.transpose(x, perm))
    return np.transpose(store, perm)


def _unaligned(x):
    """The same values as `x`, as a view one element into NaN-padded rows of last dim + 3: no row starts
    16-byte aligned (16-bit dtypes) and none is a whole number of 16-byte chunks from the next."""
    store = np.full(x.shape[:-1] + (x.shape[-1] + 3,), np.nan, x.dtype)
    view = store[..., 1:x.shape[-1] + 1]
    view[...] = x
    return view


def _cache_storage(shape, dtype, hnd):
    """A NaN cache of NHD `shape` (n, s, hk, d) or packed (n, hk, d); with `hnd`, an NHD view of HND storage."""
    if not hnd:
        return np.full(shape, np.nan, dtype)
    if len(shape) == 4:
        n, s, h, d = shape
        return np.full((n, h, s, d), np.nan, dtype).transpose(0, 2, 1, 3)
    n, h, d = shape
    return np.full((h, n, d), np.nan, dtype).transpose(1, 0, 2)


def build(case):
    """Inputs of `case`: (kwargs for kvattn.flash_attn_with_kvcache, kwargs for reference_attention, info)."""
    rng = np.random.default_rng(case.seed)
    dt = DTYPES[case.dtype]
    assert case.kv_fp8 or case.dtype != "fp8", "fp8 q needs fp8 caches"
    cache_dt = H.FP8 if case.kv_fp8 else dt
    b, hq, hk, d = case.b, case.hq, case.hk, case.d
    dv = case.dv or d
    seqlens, new, leftpad, q_lens = _lengths(case)
    ends = seqlens + new
    appends = case.new is not None

    # ---- rows of the cache each sequence reads (contiguous row or page-table row)
    extra_rows = 2 if case.batch_idx else 0
    n_rows = max(1, b + extra_rows)
    if case.batch_idx == "scattered":
        rows = rng.permutation(n_rows)[:b]
    elif case.batch_idx == "duplicate":
        assert not appends, "duplicate cache_batch_idx with append is an error"
        rows = rng.integers(0, max(1, b // 2), b)
    else:
        rows = np.arange(b)

    # ---- cache storage and the slot -> index rule
    kw, ref = {}, {}
    if case.layout == "packed":
        caps = ends + rng.integers(0, case.extra_slots + 1, b)
        cuk = cu_from_lengths(caps)
        shape_k, shape_v = (int(cuk[-1]), hk, d), (int(cuk[-1]), hk, dv)
        locate = lambda i, s: (cuk[i] + s,)  # noqa: E731
        kw["cu_seqlens_k"] = cuk
        caps_of = caps
    elif case.layout in ("ragged", "slots"):
        kw_index, table, num_pages, caps_of = _ragged_index(rng, case, rows, ends, n_rows)
        ps = 1 if case.layout == "slots" else case.page_size
        if case.layout == "slots":
            shape_k, shape_v = (num_pages, hk, d), (num_pages, hk, dv)
            locate = lambda i, s: (table[rows[i], s],)  # noqa: E731
        else:
            shape_k, shape_v = (num_pages, ps, hk, d), (num_pages, ps, hk, dv)
            locate = lambda i, s: (table[rows[i], s // ps], s % ps)  # noqa: E731
        kw.update(kw_index)
        ref_table = table
    elif case.layout == "paged":
        ps = case.page_size
        capacity = int(ends.max(initial=0)) + case.extra_slots
        ppr = max(1, -(-capacity // ps))
        table, num_pages = scrambled_page_table(rng, n_rows, ppr)
        shape_k, shape_v = (num_pages, ps, hk, d), (num_pages, ps, hk, dv)
        locate = lambda i, s: (table[rows[i], s // ps], s % ps)  # noqa: E731
        kw["page_table"] = table
        caps_of = np.full(b, ppr * ps)
    else:
        s_cache = int(ends.max(initial=0)) + case.extra_slots
        shape_k, shape_v = (n_rows, s_cache, hk, d), (n_rows, s_cache, hk, dv)
        locate = lambda i, s: (np.full(len(s), rows[i]), s)  # noqa: E731
        caps_of = np.full(b, s_cache)
    if case.seqlens_as == "none":  # no cache_seqlens: every slot up to the capacity is valid
        seqlens = caps_of.astype(np.int64)
    if case.batch_idx:
        kw["cache_batch_idx"] = rows.astype(np.int32)
    k_cache = _cache_storage(shape_k, cache_dt, case.hnd)
    v_cache = _cache_storage(shape_v, cache_dt, case.hnd)
    for i in range(b):  # valid slots [leftpad, seqlens); the rest stays NaN (appended slots are written by the call)
        slots = np.arange(leftpad[i], seqlens[i])
        k_cache[locate(i, slots)] = randn(rng, (len(slots), hk, d), cache_dt)
        v_cache[locate(i, slots)] = randn(rng, (len(slots), hk, dv), cache_dt)

    # ---- queries
    if case.q_lens is not None:
        q = randn(rng, (int(q_lens.sum()), hq, d), dt)
        qv = randn(rng, (int(q_lens.sum()), hq, dv), dt) if case.qv else None
        cuq = cu_from_lengths(q_lens)
        kw["cu_seqlens_q"] = cuq
        kw["max_seqlen_q"] = int(q_lens.max(initial=0)) + 1  # an upper bound, not the exact max
        q_rows = lambda i: slice(cuq[i], cuq[i + 1])  # noqa: E731
    else:
        q = randn(rng, (b, case.sq, hq, d), dt)
        qv = randn(rng, (b, case.sq, hq, dv), dt) if case.qv else None
        q_rows = lambda i: i  # noqa: E731
    if case.seqused_q:
        used = np.array([rng.integers(0, n + 1) for n in q_lens], np.int32)
        kw["seqused_q"] = used
        for i in range(b):  # rows past seqused_q must not matter
            q[q_rows(i)][used[i]:] = np.nan
            if qv is not None:
                qv[q_rows(i)][used[i]:] = np.nan
    if case.strided_q:
        q = _strided(q, q.ndim - 2)
        qv = None if qv is None else _strided(qv, qv.ndim - 2)

    # ---- cache lengths
    if case.seqlens_as == "int":
        assert len(set(seqlens.tolist())) == 1
        kw["cache_seqlens"] = int(seqlens[0])
    elif case.seqlens_as == "array":
        kw["cache_seqlens"] = seqlens.astype(np.int32)
    else:
        assert case.seqlens_as == "none" and not appends
    if case.leftpad is not None:
        kw["cache_leftpad"] = leftpad.astype(np.int32)

    # ---- new tokens
    if appends:
        if case.varlen_new:
            kw["k"] = randn(rng, (int(new.sum()), hk, d), dt)
            kw["v"] = randn(rng, (int(new.sum()), hk, dv), dt)
            kw["cu_seqlens_k_new"] = cu_from_lengths(new)
        else:
            assert len(set(new.tolist())) == 1, "fixed-length append needs equal lengths"
            kw["k"] = randn(rng, (b, int(new[0]), hk, d), dt)
            kw["v"] = randn(rng, (b, int(new[0]), hk, dv), dt)
        if case.unaligned_new:
            kw["k"], kw["v"] = _unaligned(kw["k"]), _unaligned(kw["v"])

    # ---- rotary
    if case.rotary:
        rd = case.rotary_dim or d
        pos0 = seqlens.copy()
        if case.rotary_seqlens:
            pos0 = rng.integers(0, 12, b)
            kw["rotary_seqlens"] = pos0.astype(np.int32)
        per_token = case.causal or case.window != (-1, -1)
        span = np.maximum(new, q_lens if per_token else 1)
        seqlen_ro = int((pos0 + span).max(initial=0)) + int(rng.integers(1, 4))
        cos, sin = rotary_tables(rng, seqlen_ro, rd, dt if case.rotary_in_q_dtype else np.float32)
        kw["rotary_cos"], kw["rotary_sin"] = (_unaligned(cos), _unaligned(sin)) if case.unaligned_new else (cos, sin)
        kw["rotary_interleaved"] = case.rotary == "interleaved"

    # ---- scores, mask, softmax
    if case.alibi:
        kw["alibi_slopes"] = rng.uniform(0.05, 1.0, (hq,) if case.alibi == "h" else (b, hq)).astype(np.float32)
    if case.sinks:
        kw["sinks"] = randn(rng, (hq,), np.float32 if case.sinks == "fp32" else H.BF16)
    if qv is not None:
        kw["qv"] = qv
    kw.update(causal=case.causal, window_size=case.window, attention_chunk=case.chunk, softcap=case.softcap,
              softmax_scale=case.scale)

    # ---- fp8 descales (b, hk): q's with fp8 q, k's and v's with fp8 caches
    if case.descales != "none":
        names = (["q_descale"] if case.dtype == "fp8" else []) + (["k_descale", "v_descale"] if case.kv_fp8 else [])
        for name in names:
            if case.descales == "broadcast":
                kw[name] = np.broadcast_to(rng.uniform(0.5, 2.0, (1, hk)).astype(np.float32), (b, hk))
            else:
                kw[name] = rng.uniform(0.5, 2.0, (b, hk)).astype(np.float32)

    ref = dict(kw)
    if case.layout in ("ragged", "slots"):  # the oracle reads the same pages through a dense page table
        del ref["kv_indptr"], ref["kv_indices"]
        ref["page_table"] = ref_table
        ref["cache_seqlens"] = seqlens.astype(np.int32)  # a ragged row's capacity is its own
    ref["sinks"] = None if case.sinks is None else H.f64(kw["sinks"])
    kw.update(num_splits=case.num_splits, pack_gqa=case.pack_gqa, deterministic=case.deterministic)
    info = dict(rotary=case.rotary is not None and appends, dtype=dt, dv=dv, appends=appends,
                seqlens=seqlens, pos0=kw.get("rotary_seqlens", seqlens.astype(np.int32)))
    return q, k_cache, v_cache, kw, ref, info


def _ragged_index(rng, case, rows, ends, n_rows):
    """A ragged page index over scrambled pages: each table row gets as many pages as its sequences need
    plus 0..2 spare, kv_indices has 3 trailing entries no row owns (-7: never read). Returns
    (kwargs, the same index as a dense table padded with -9, num_pages, capacity of each sequence)."""
    ps = 1 if case.layout == "slots" else case.page_size
    need = np.zeros(n_rows, np.int64)
    for i, r in enumerate(rows):
        need[r] = max(need[r], -(-int(ends[i]) // ps))
    counts = need + rng.integers(0, 3, n_rows) + (-(-case.extra_slots // ps) if case.extra_slots else 0)
    num_pages = int(counts.sum()) + 2
    pages = rng.permutation(num_pages)[: int(counts.sum())].astype(np.int32)
    indptr = cu_from_lengths(counts)
    indices = np.concatenate([pages, np.full(3, -7, np.int32)])
    table = np.full((n_rows, max(1, int(counts.max(initial=0)))), -9, np.int32)
    for r in range(n_rows):
        table[r, : counts[r]] = pages[indptr[r]: indptr[r + 1]]
    caps = np.array([counts[r] * ps for r in rows], np.int64)
    return dict(kv_indptr=indptr, kv_indices=indices), table, num_pages, caps


def _oracle(case, q, k_cache, v_cache, ref_kw):
    """reference_attention (it never mutates its inputs); it sees a slot pool as pages of one slot."""
    if case.layout != "slots":
        return reference_attention(q, k_cache, v_cache, **ref_kw)
    ref = reference_attention(q, k_cache[:, None], v_cache[:, None], **ref_kw)
    ref["k_cache"], ref["v_cache"] = ref["k_cache"][:, 0], ref["v_cache"][:, 0]
    return ref


def run_and_compare(case, device):
    """Run `case` on kvattn (on `device`) and on the oracle; check out, lse and both caches."""
    H.skip_unsupported_on(device, DTYPES[case.dtype])
    q, k_cache, v_cache, kw, ref_kw, info = build(case)
    ref = _oracle(case, q, k_cache, v_cache, ref_kw)

    dev = {k: H.to_device(v, device) for k, v in kw.items()}
    kc, vc = H.to_device(k_cache, device), H.to_device(v_cache, device)
    out_dtype = H.BF16 if case.dtype == "fp8" else q.dtype
    if case.out_given:
        dev["out"] = H.to_device(np.full(q.shape[:-1] + (info["dv"],), np.nan, out_dtype), device)
    with H.poisoned_outputs():
        out, lse = H.kvattn.flash_attn_with_kvcache(H.to_device(q, device), kc, vc, return_softmax_lse=True, **dev)
    H.sync_device_errors(device)
    if case.out_given:
        assert out is dev["out"]
    name = H.DTYPE_NAME[np.dtype(q.dtype)]
    out, lse = H.to_numpy(out), H.to_numpy(lse)
    kc_got, vc_got = H.to_numpy(kc), H.to_numpy(vc)
    assert out.dtype == out_dtype and lse.dtype == np.float32
    # fp8 appends quantize x / descale: the CPU backend rounds the float64 quotient once (exact, as the
    # oracle), CUDA divides in fp32 first (one fp8 ulp); rotary re-rounds (one ulp) everywhere.
    requantized = case.kv_fp8 and case.dtype != "fp8" and not H.cpu_backend(device)
    H.assert_cache_equal("k_cache", kc_got, ref["k_cache"], info["rotary"] or requantized, name)
    H.assert_cache_equal("v_cache", vc_got, ref["v_cache"], requantized, name)
    if case.kv_fp8 and info["appends"]:
        # Attention is checked on the values the call stored (an appended key one fp8 ulp off is a different
        # key): the oracle without the append, over kvattn's caches, at the same rotary positions.
        ref_kw = {k: v for k, v in ref_kw.items() if k not in ("k", "v", "cu_seqlens_k_new")}
        new = np.zeros(case.b, np.int64) if case.new is None else np.asarray(case.new, np.int64)
        ref_kw["cache_seqlens"] = (info["seqlens"] + new).astype(np.int32)
        if case.rotary:
            ref_kw["rotary_seqlens"] = info["pos0"]
        ref = _oracle(case, q, kc_got, vc_got, ref_kw)
    H.assert_close("out", out, ref["out"], H.TOL_OUT[name])
    H.assert_close("lse", lse, ref["lse"], H.TOL_LSE[name])
    H.assert_empty_rows_exact(out, lse, ref["out"], ref["lse"])
    return out, lse
