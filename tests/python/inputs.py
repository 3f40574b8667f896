"""Small reusable input builders for kvattn tests (numpy only; backend tests convert to their tensors)."""
import ml_dtypes
import numpy as np

DTYPES = {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16, "fp8": ml_dtypes.float8_e4m3fn}


def randn(rng, shape, dtype=np.float32, scale=1.0):
    """Random normal values generated in fp32 and rounded to `dtype` (give these same values to both sides)."""
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(dtype)


def cu_from_lengths(lengths):
    """int32 cumulative offsets (len+1,) starting at 0 from per-sequence lengths."""
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, np.int64))]).astype(np.int32)


def pack_varlen(x, lengths):
    """Pack rows [0, lengths[i]) of each x[i] ((b, s, ...)) into (sum(lengths), ...); returns (packed, cu int32)."""
    packed = np.concatenate([x[i, :n] for i, n in enumerate(lengths)], axis=0)
    return packed, cu_from_lengths(lengths)


def nan_fill_invalid(cache, ends, starts=None, rows=None):
    """Copy of a contiguous cache (b_cache, s, h, d), NaN except slots [starts[i], ends[i]) of row rows[i]."""
    rows = np.arange(np.size(ends)) if rows is None else np.asarray(rows)
    ends = np.broadcast_to(np.asarray(ends), rows.shape)
    starts = np.broadcast_to(np.asarray(0 if starts is None else starts), rows.shape)
    out = np.full_like(cache, np.nan)
    for r, s0, s1 in zip(rows, starts, ends):
        out[r, s0:s1] = cache[r, s0:s1]
    return out


def scrambled_page_table(rng, n_rows, pages_per_row, extra_pages=2):
    """Random distinct pages as int32 (n_rows, pages_per_row), plus `extra_pages` unused; returns (table, num_pages)."""
    num_pages = n_rows * pages_per_row + extra_pages
    perm = rng.permutation(num_pages)[: n_rows * pages_per_row]
    return perm.reshape(n_rows, pages_per_row).astype(np.int32), num_pages


def to_paged(cache, page_table, num_pages, page_size):
    """Scatter a contiguous cache (rows, s, h, d) into (num_pages, page_size, h, d); every other slot is NaN."""
    rows, s = cache.shape[:2]
    paged = np.full((num_pages, page_size) + cache.shape[2:], np.nan, cache.dtype)
    for r in range(rows):
        for slot in range(s):
            paged[page_table[r, slot // page_size], slot % page_size] = cache[r, slot]
    return paged


def paged_from_contiguous(rng, caches, page_size, extra_pages=2):
    """Page several same-shape contiguous caches with one scrambled table; returns ([paged...], page_table)."""
    rows, s = caches[0].shape[:2]
    table, num_pages = scrambled_page_table(rng, rows, -(-s // page_size), extra_pages)
    return [to_paged(c, table, num_pages, page_size) for c in caches], table


def rotary_tables(rng, seqlen_ro, rotary_dim, dtype=np.float32):
    """cos, sin tables (seqlen_ro, rotary_dim/2) of random angles in [0, 2pi), rounded to `dtype`."""
    ang = rng.uniform(0, 2 * np.pi, (seqlen_ro, rotary_dim // 2))
    return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
