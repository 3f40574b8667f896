"""One rank's part of context-parallel attention, and the merge of all ranks' parts (no transport here).

`attend_shard` takes flash_attn_with_kvcache's arguments as one process would give them for the whole
cache (global lengths, positions, new tokens), plus a ShardLayout and a rank whose page pool and page
table hold only that rank's pages. It appends the new tokens the rank owns, then runs kvattn over the
rank's part of every sequence, without sinks, and returns the partial (out, lse) as rows. `merge_partials`
combines the partials of all ranks with kvattn's combine, which counts the sinks once: partial lse are
log-sum-exps of disjoint key sets, so the combine's rule (CONTRACT.md step 7) gives the whole softmax.

Positions. A shard does not know its keys' global positions (kvattn's positions are relative to a
sequence's valid range), so nothing that depends on them is left to the kernel:
- rotary: the global positions go in `rotary_seqlens` (q, and each run of appended keys);
- masks (causal with more than one query token, window_size, attention_chunk): every query token becomes
  its own one-token sequence whose visible global keys [lo, hi] are a range, hence a range of local slots
  (ShardLayout's invariant), given to kvattn as (cache_leftpad, cache_seqlens) with no mask of its own.
  Decode (one query token, causal or not) needs none of this and runs as one call over the shard as given.
- ALiBi: kvattn measures a one-token sequence's distances from its last key, so each sequence must hold
  consecutive global slots (a run of the rank's pages inside the token's range); the true distances are
  longer by one constant per sequence, which shifts its lse; the runs of a token are merged by the
  combine. Keys after the query (non-causal, several query tokens) have no such form: an error.

Works with numpy arrays (the CPU backend) and torch tensors (CPU or CUDA); index metadata is computed on
the host (a device-to-host copy of the index tensors on CUDA).
"""
import numpy as np

from . import interface
from .errors import KvattnError
from .tensors import is_torch


class ShardPartial:
    """A rank's partial result: out (rows, hq, dv) fp32, lse (rows, hq) fp32, with what merge needs.

    Rows are q's tokens in order ((b * sq) for fixed-length q, total_q for varlen q)."""

    def __init__(self, out, lse, used, q_shape, varlen, out_dtype):
        self.out, self.lse = out, lse
        self.used = used  # (rows,) bool numpy: rows that a sequence's used query tokens own
        self.q_shape, self.varlen, self.out_dtype = q_shape, varlen, out_dtype


# ---- arrays of either kind (numpy, torch), built like a reference array


def _host(x):
    if x is None:
        return None
    if is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _like(ref, a, dtype=np.int32):
    a = np.ascontiguousarray(a, dtype)
    if is_torch(ref):
        import torch

        return torch.from_numpy(a).to(ref.device)
    return a


def _take(x, index):
    """x[index] along axis 0 (index: host int64 array); None stays None."""
    if x is None:
        return None
    return x[_like(x, index, np.int64)] if is_torch(x) else x[index]


def _rows_of(x, lead):
    """x (lead..., *tail) as (prod(lead), *tail)."""
    return x.reshape((-1,) + tuple(x.shape[lead:]))


def _f32(x):
    return x.float() if is_torch(x) else x.astype(np.float32)


def _full(ref, shape, value):
    if is_torch(ref):
        import torch

        return torch.full(shape, value, dtype=torch.float32, device=ref.device)
    return np.full(shape, value, np.float32)


def _empty_like_dtype(ref, shape):
    if is_torch(ref):
        return ref.new_empty(shape)
    return np.empty(shape, ref.dtype)


# ---- the global metadata of a call, checked


def _per_seq(name, x, b, default):
    if x is None:
        return np.full(b, default, np.int64)
    a = _host(x)
    if a.ndim == 0:
        return np.full(b, int(a), np.int64)
    if a.shape != (b,):
        raise KvattnError(f"{name}: expected shape ({b},), got {tuple(a.shape)}")
    return a.astype(np.int64)


def _cu(name, x, b, total):
    cu = _host(x).astype(np.int64)
    if cu.shape != (b + 1,) or cu[0] < 0 or np.any(np.diff(cu) < 0) or cu[-1] > total:
        raise KvattnError(f"{name}: expected ({b + 1},) non-decreasing offsets in [0, {total}], got {cu.tolist()}")
    return cu


def _runs(mask):
    """Maximal runs of True in a 1-D bool array as (start, length) pairs."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2], edges[1::2] - edges[::2]))


def attend_shard(layout, rank, q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                 cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None, cu_seqlens_q=None,
                 cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None, q_descale=None, k_descale=None,
                 v_descale=None, softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=0,
                 softcap=0.0, rotary_interleaved=True, num_splits=0, pack_gqa=None, deterministic=False,
                 seqused_q=None, alibi_slopes=None):
    """Append the new tokens `rank` owns, attend over its shard; returns a ShardPartial.

    k_cache, v_cache: the rank's page pool (num_pages, page_size, hk, d / dv); page_table: the rank's table
    (layout.rows, >= layout.local_width(rank)) of its pages in logical order (ShardLayout). Every other
    argument is flash_attn_with_kvcache's, global: cache_seqlens and cache_leftpad are slots of the whole
    sequence, cache_batch_idx picks layout rows, k/v are all of a step's new tokens (each rank writes its own).
    """
    if page_table is None:
        raise KvattnError("page_table: required (this rank's table of its pages, in logical order)")
    if len(k_cache.shape) != 4:
        raise KvattnError(f"k_cache: expected a paged cache (num_pages, page_size, hk, d), got shape "
                          f"{tuple(k_cache.shape)}")
    page_size = int(k_cache.shape[1])
    capacity = layout.pages_per_row * page_size
    varlen = cu_seqlens_q is not None
    q_shape = tuple(q.shape)
    if varlen:
        b = int(_host(cu_seqlens_q).shape[0]) - 1
        cu_q = _cu("cu_seqlens_q", cu_seqlens_q, b, q_shape[0])
        first_row, sq = cu_q[:-1], np.diff(cu_q)
        n_rows = q_shape[0]
    else:
        b = q_shape[0]
        first_row, sq = np.arange(b) * q_shape[1], np.full(b, q_shape[1], np.int64)
        n_rows = b * q_shape[1]
    used_q = _per_seq("seqused_q", seqused_q, b, 0) if seqused_q is not None else sq
    if np.any((used_q < 0) | (used_q > sq)):
        raise KvattnError(f"seqused_q: expected values in [0, query length {sq.tolist()}], got {used_q.tolist()}")

    rows = _per_seq("cache_batch_idx", cache_batch_idx, b, 0) if cache_batch_idx is not None else np.arange(b)
    if np.any((rows < 0) | (rows >= layout.rows)):
        raise KvattnError(f"cache_batch_idx: expected rows of the layout in [0, {layout.rows}), got {rows.tolist()}")
    pt_shape = tuple(page_table.shape)
    if len(pt_shape) != 2 or pt_shape[0] != layout.rows:
        raise KvattnError(f"page_table: expected this rank's table ({layout.rows}, >= {layout.local_width(rank)}), "
                          f"got shape {pt_shape}")

    if k is None:
        n_new = np.zeros(b, np.int64)
    elif cu_seqlens_k_new is not None:
        cu_k = _cu("cu_seqlens_k_new", cu_seqlens_k_new, b, int(k.shape[0]))
        n_new = np.diff(cu_k)
        new_row0 = cu_k[:-1]
    else:
        n_new = np.full(b, int(k.shape[1]), np.int64)
        new_row0 = np.arange(b) * int(k.shape[1])
    if k is not None and cache_batch_idx is not None and len(np.unique(rows)) < b:
        raise KvattnError(f"cache_batch_idx: duplicate rows with k, v given (each sequence appends to its own "
                          f"row), got {rows.tolist()}")
    seqlens = _per_seq("cache_seqlens", cache_seqlens, b, capacity)
    leftpad = _per_seq("cache_leftpad", cache_leftpad, b, 0)
    ends = seqlens + n_new  # valid global slots [leftpad, ends)
    if np.any(seqlens < 0) or np.any(ends > capacity):
        i = int(np.argmax((seqlens < 0) | (ends > capacity)))
        raise KvattnError(f"cache_seqlens: sequence {i} holds {seqlens[i]} + {n_new[i]} new tokens, outside the "
                          f"sharded capacity [0, {capacity}] (layout pages_per_row {layout.pages_per_row} x "
                          f"page_size {page_size})")
    if np.any((leftpad < 0) | (leftpad > seqlens)):
        raise KvattnError(f"cache_leftpad: expected 0 <= cache_leftpad <= cache_seqlens, got {leftpad.tolist()} "
                          f"with {seqlens.tolist()}")
    local_end = layout.local_slots(rank, rows, ends, page_size)
    if np.any(local_end > pt_shape[1] * page_size):
        i = int(np.argmax(local_end > pt_shape[1] * page_size))
        raise KvattnError(f"page_table: rank {rank}'s table has {pt_shape[1]} columns, sequence {i} needs "
                          f"{-(-local_end[i] // page_size)} local pages")
    pos0 = _per_seq("rotary_seqlens", rotary_seqlens, b, 0) if rotary_seqlens is not None else seqlens
    rotary = rotary_cos is not None
    common = dict(rotary_cos=rotary_cos, rotary_sin=rotary_sin, page_table=page_table,
                  rotary_interleaved=rotary_interleaved)

    # Appends: each run of consecutive new tokens this rank owns is written by one kvattn "sequence"
    # (rotated at its global position); a sequence with several runs needs one call per run.
    runs = [[] for _ in range(b)]
    for i in np.flatnonzero(n_new):
        slots = seqlens[i] + np.arange(n_new[i])
        runs[i] = _runs(layout.owner[rows[i], slots // page_size] == rank)
    for n in range(max((len(r) for r in runs), default=0)):
        seqs = np.array([i for i in range(b) if len(runs[i]) > n], np.int64)
        j0 = np.array([runs[i][n][0] for i in seqs], np.int64)
        count = np.array([runs[i][n][1] for i in seqs], np.int64)
        tokens = np.concatenate([new_row0[i] + j + np.arange(c) for i, j, c in zip(seqs, j0, count)])
        k_rows, v_rows = _rows_of(k, len(k.shape) - 2), _rows_of(v, len(v.shape) - 2)
        interface.flash_attn_with_kvcache(
            _empty_like_dtype(q, (len(seqs), 0) + q_shape[-2:]), k_cache, v_cache, k=_take(k_rows, tokens),
            v=_take(v_rows, tokens), cache_seqlens=_like(q, layout.local_slots(rank, rows[seqs], seqlens[seqs] + j0,
                                                                               page_size)),
            cache_batch_idx=_like(q, rows[seqs]), cu_seqlens_k_new=_like(q, np.concatenate([[0], np.cumsum(count)])),
            rotary_seqlens=_like(q, pos0[seqs] + j0) if rotary else None, q_descale=_take(q_descale, seqs),
            k_descale=_take(k_descale, seqs), v_descale=_take(v_descale, seqs), **common)

    # Attention over the shard, without sinks (merge_partials counts them once).
    wl, wr = (-1 if x is None else int(x) for x in window_size)
    if causal:
        wr = 0
    chunk = int(attention_chunk)
    positional = wl >= 0 or wr >= 0 or chunk > 0 or alibi_slopes is not None
    if causal and used_q.max(initial=0) <= 1 and wl < 0 and chunk <= 0 and alibi_slopes is None:
        positional = False  # one query token sits after every key: causal masks nothing
    scores = dict(softmax_scale=softmax_scale, softcap=softcap, num_splits=num_splits, pack_gqa=pack_gqa,
                  deterministic=deterministic, return_softmax_lse=True, **common)
    used = np.zeros(n_rows, bool)
    for i in range(b):
        used[first_row[i]: first_row[i] + used_q[i]] = True
    if not positional:
        out, lse = interface.flash_attn_with_kvcache(
            q, k_cache, v_cache, qv=qv, cache_seqlens=_like(q, local_end),
            cache_leftpad=_like(q, layout.local_slots(rank, rows, leftpad, page_size)),
            cache_batch_idx=_like(q, rows), cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
            rotary_seqlens=_like(q, pos0) if rotary else None, q_descale=q_descale, k_descale=k_descale,
            v_descale=v_descale, seqused_q=seqused_q, **scores)
        out_rows = _f32(_rows_of(out, len(out.shape) - 2))
        lse_rows = _f32(lse.transpose(-1, -2) if is_torch(lse) else np.swapaxes(lse, -1, -2))
        lse_rows = lse_rows.reshape(n_rows, lse_rows.shape[-1])
        return ShardPartial(out_rows, lse_rows, used, q_shape, varlen, out.dtype)

    # One one-token sequence per used query token, over its visible keys' local range.
    seq = np.repeat(np.arange(b), used_q)
    t = np.arange(len(seq)) - np.repeat(np.cumsum(used_q) - used_q, used_q)  # token index in its sequence
    seqlen_k = (ends - leftpad)[seq]
    qp = t + seqlen_k - used_q[seq]  # CONTRACT.md step 4: bottom-right aligned
    lo, hi = np.zeros_like(qp), seqlen_k - 1  # visible logical key positions [lo, hi]
    if wl >= 0:
        lo = np.maximum(lo, qp - wl)
    if wr >= 0:
        hi = np.minimum(hi, qp + wr)
    if chunk > 0:
        lo = np.maximum(lo, qp // chunk * chunk)  # floor division: a negative qp sees no key
        hi = np.minimum(hi, qp // chunk * chunk + chunk - 1)
    hi = np.maximum(hi, lo - 1)  # an empty range stays empty
    first_slot, end_slot = leftpad[seq] + lo, leftpad[seq] + hi + 1  # the visible global slots
    if alibi_slopes is None:
        item = np.arange(len(seq))  # one kvattn sequence per token
    else:
        item, first_slot, end_slot = _alibi_items(layout, rank, rows[seq], first_slot, end_slot, qp > hi - 1,
                                                  page_size)
    tok_rows = first_row[seq] + t
    hd = q_shape[-2:]
    q_rows = _rows_of(q, len(q_shape) - 2)
    per_token = (causal or wl >= 0 or wr >= 0) and rotary  # CONTRACT.md step 2: q rotated at p_i + t
    item_seq = seq[item]
    slopes = alibi_slopes
    if slopes is not None and len(slopes.shape) == 2:
        slopes = _take(slopes, item_seq)
    out, lse = interface.flash_attn_with_kvcache(
        _take(q_rows, tok_rows[item]).reshape((len(item), 1) + hd), k_cache, v_cache,
        qv=None if qv is None else _take(_rows_of(qv, len(qv.shape) - 2), tok_rows[item]).reshape(
            (len(item), 1) + tuple(qv.shape[-2:])),
        cache_seqlens=_like(q, layout.local_slots(rank, rows[item_seq], end_slot, page_size)),
        cache_leftpad=_like(q, layout.local_slots(rank, rows[item_seq], first_slot, page_size)),
        cache_batch_idx=_like(q, rows[item_seq]),
        rotary_seqlens=_like(q, pos0[item_seq] + t[item] * per_token) if rotary else None,
        q_descale=_take(q_descale, item_seq), k_descale=_take(k_descale, item_seq),
        v_descale=_take(v_descale, item_seq), alibi_slopes=slopes, **scores)
    dv = int(out.shape[-1])
    out_items, lse_items = _f32(out[:, 0]), _f32(lse[:, :, 0])  # (items, hq, dv), (items, hq)
    if alibi_slopes is not None:
        # kvattn biased each key of an item by its distance to the item's last key; the true distance is
        # longer by the gap from that key to the query, the same for every key of the item: a shift of lse.
        gap = _like(q, qp[item] + leftpad[item_seq] - (end_slot - 1), np.float32)
        lse_items = lse_items - _f32(slopes).reshape(-1, hd[0]) * gap[:, None]
        out_items, lse_items = _merge_items(out_items, lse_items, item, len(seq))
    out_rows = _full(q, (n_rows,) + (hd[0], dv), 0.0)
    lse_rows = _full(q, (n_rows, hd[0]), float("-inf"))
    index = _like(q, tok_rows, np.int64)
    out_rows[index] = out_items
    lse_rows[index] = lse_items
    return ShardPartial(out_rows, lse_rows, used, q_shape, varlen, out.dtype)


def _alibi_items(layout, rank, rows, first_slot, end_slot, keys_before_query, page_size):
    """ALiBi needs each kvattn sequence's keys to be consecutive global slots (so that its distances are
    those of kvattn's local positions plus one constant): the runs of `rank`'s pages inside each token's
    visible range. Returns (token of each item, its first slot, its end slot)."""
    if not np.all(keys_before_query | (end_slot <= first_slot)):
        raise KvattnError("alibi_slopes: across shards only where every visible key is at or before its query "
                          "(causal, window_size[1] == 0, or one query token per sequence); a shard's local "
                          "positions cannot express the distance to keys after the query")
    items, firsts, ends = [], [], []
    for n, (row, a, e) in enumerate(zip(rows, first_slot, end_slot)):
        if e <= a:
            continue
        page0 = a // page_size
        for run_start, run_len in _runs(layout.owner[row, page0: (e - 1) // page_size + 1] == rank):
            items.append(n)
            firsts.append(max(a, (page0 + run_start) * page_size))
            ends.append(min(e, (page0 + run_start + run_len) * page_size))
    return np.array(items, np.int64), np.array(firsts, np.int64), np.array(ends, np.int64)


def _merge_items(out_items, lse_items, item, n_tokens):
    """Each token's items merged by kvattn's combine: (n_tokens, hq, dv), (n_tokens, hq); no item: 0, -inf."""
    hq, dv = int(out_items.shape[1]), int(out_items.shape[2])
    slot = np.arange(len(item)) - np.searchsorted(item, item)  # the item's place among its token's items
    depth = max(int(slot.max(initial=-1)) + 1, 1)
    out_parts = _full(out_items, (depth, n_tokens, hq, dv), 0.0)
    lse_parts = _full(out_items, (depth, n_tokens, hq), float("-inf"))
    if len(item):
        where = (_like(out_items, slot, np.int64), _like(out_items, item, np.int64))
        out_parts[where] = out_items
        lse_parts[where] = lse_items
    return interface.flash_attn_combine(out_parts, lse_parts)


def merge_partials(out_partials, lse_partials, like, sinks=None):
    """Combine the ranks' partials (n, rows, hq, dv) and (n, rows, hq) into flash_attn_with_kvcache's
    (out, lse): out as q with dv in `like.out_dtype`, lse (b, hq, sq) or (hq, total_q) fp32.

    `like`: this rank's ShardPartial (the rows and shapes, the same on every rank). The sinks count once."""
    out, lse = interface.flash_attn_combine(out_partials, lse_partials, out_dtype=like.out_dtype, sinks=sinks)
    unused = np.flatnonzero(~like.used)
    if len(unused):  # rows no used query token owns: 0 and -inf (CONTRACT.md), not the sink
        index = _like(out, unused, np.int64)
        out[index] = 0
        lse[index] = float("-inf")
    hq, dv = int(out.shape[1]), int(out.shape[2])
    if like.varlen:
        return out, lse.transpose(0, 1).contiguous() if is_torch(lse) else np.ascontiguousarray(lse.T)
    b, sq = like.q_shape[:2]
    out = out.reshape(b, sq, hq, dv)
    lse = lse.reshape(b, sq, hq)
    return out, lse.permute(0, 2, 1).contiguous() if is_torch(lse) else np.ascontiguousarray(lse.transpose(0, 2, 1))
