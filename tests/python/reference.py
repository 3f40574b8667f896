"""Independent float64 reference ("oracle") of CONTRACT.md, numpy only.

Written from the contract's numbered steps; shares no code with either backend. Inputs are numpy arrays in
their storage dtype; everything is computed in float64 from the stored (already rounded) values.
"""
import ml_dtypes
import numpy as np

FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
FP8_MAX = 448.0


def _f64(x):
    return None if x is None else np.asarray(x, dtype=np.float64)


def _per_seq(x, b, default):
    """An int, a (b,) array or None (-> default) as an int64 (b,) array."""
    if x is None:
        x = default
    a = np.asarray(x).astype(np.int64)
    return np.full(b, int(a), np.int64) if a.ndim == 0 else a.reshape(b).copy()


def _cu(x):
    cu = np.asarray(x).astype(np.int64)
    if np.any(np.diff(cu) < 0):
        raise ValueError("cu_seqlens must be non-decreasing")
    return cu


def _to_fp8(x):
    """float64 -> e4m3 (fn), rounded once to nearest, ties to even, saturating to +-448 (inf too); NaN stays.

    ml_dtypes alone would round through float32 (twice) and turn out-of-range values into NaN, so the value is
    first snapped to the e4m3 grid here (np.round is ties-to-even; the scaling by 2^(e-3) is exact)."""
    x = np.asarray(x, np.float64)
    mag = np.abs(x)
    finite = np.isfinite(x)
    e = np.frexp(np.where(finite, mag, 1.0))[1] - 1  # |x| in [2^e, 2^(e+1)) (exact)
    step = np.exp2(np.maximum(e, -6) - 3.0)  # spacing of e4m3 values in the binade of |x| (subnormals: 2^-9)
    snapped = np.where(finite, np.round(np.where(finite, x, 0.0) / step) * step, x)
    return np.clip(snapped, -FP8_MAX, FP8_MAX).astype(FP8)  # clip keeps NaN, saturates +-inf


def _round_to(x, dtype):
    """float64 values stored in `dtype` (the cache's)."""
    return _to_fp8(x) if np.dtype(dtype) == FP8 else np.asarray(x).astype(dtype)


def _descale(x, b, hk):
    """A (b, hk) descale (any strides) as float64, or ones when absent."""
    return np.ones((b, hk)) if x is None else np.broadcast_to(_f64(x), (b, hk))


def _rotate(x, pos, cos, sin, interleaved):
    """Step 2: rotate rows x (n, h, d) float64 at positions pos (n,)."""
    if np.any(pos < 0) or np.any(pos >= cos.shape[0]):
        raise ValueError(f"rotary position out of range [0, {cos.shape[0]}): {pos}")
    half = cos.shape[1]
    rd = 2 * half
    if rd > x.shape[-1]:
        raise ValueError("rotary_dim > head dim")
    if interleaved:  # GPT-J: pairs (2m, 2m+1)
        i0 = np.arange(0, rd, 2)
        i1 = i0 + 1
    else:  # GPT-NeoX: pairs (m, m + rotary_dim/2)
        i0 = np.arange(half)
        i1 = i0 + half
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    x0, x1 = x[..., i0], x[..., i1]
    out = x.copy()  # dims >= rotary_dim untouched
    out[..., i0] = x0 * c - x1 * s
    out[..., i1] = x0 * s + x1 * c
    return out


def _softmax_with_sink(x, visible, v, sink):
    """Steps 7-8. x (h, t, s) scores, visible (h or 1, t, s), v (s, h, dv), sink (h,) or None.

    Returns out (t, h, dv) and lse (h, t)."""
    x = np.where(visible, x, -np.inf)
    m = x.max(axis=-1) if x.shape[-1] else np.full(x.shape[:-1], -np.inf)
    if sink is not None:
        m = np.maximum(m, sink[:, None])
    m_safe = np.where(np.isfinite(m), m, 0.0)  # rows with nothing at all: m = -inf
    p = np.exp(x - m_safe[..., None])  # invisible keys: exp(-inf) = 0
    denom = p.sum(axis=-1)
    if sink is not None:
        denom = denom + np.exp(sink[:, None] - m_safe)
    empty = denom == 0
    out = np.einsum("hts,shd->thd", p, v) / np.where(empty, 1.0, denom).T[..., None]
    lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, 1.0, denom)))
    return out, lse


def reference_attention(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                        cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                        cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                        softmax_scale=None, causal=False, window_size=(-1, -1), attention_chunk=0,
                        softcap=0.0, rotary_interleaved=True, alibi_slopes=None, sinks=None, seqused_q=None,
                        cu_seqlens_k=None, q_descale=None, k_descale=None, v_descale=None):
    """float64 attention over a KV cache per CONTRACT.md. Returns dict(out, lse, k_cache, v_cache).

    fp8 (e4m3fn) tensors with (b, hk) descales (None = 1), indexed by sequence i and kv head: the values are
    q * q_descale (qv too: it is in q's dtype and shares q_descale), k_cache * k_descale, v_cache * v_descale.
    New k, v appended into an fp8 cache are stored as e4m3(value / descale) (saturating), where the value of
    an fp8 k is k * k_descale (so an fp8 k is written as it is)."""
    hq, d = q.shape[-2:]
    hk, dv = v_cache.shape[-2:]
    if hq % hk:
        raise ValueError(f"hq={hq} not a multiple of hk={hk}")
    g = hq // hk
    # Query layout: fixed (b, sq, hq, d) or varlen (total_q, hq, d) with cu_seqlens_q.
    if cu_seqlens_q is not None:
        cuq = _cu(cu_seqlens_q)
        b = len(cuq) - 1
        q_rows = [np.arange(cuq[i], cuq[i + 1]) for i in range(b)]
        if max_seqlen_q is not None and b and np.diff(cuq).max(initial=0) > max_seqlen_q:
            raise ValueError("max_seqlen_q smaller than a query length")
        get_q = lambda t, i: t[q_rows[i]]  # noqa: E731
    else:
        b = q.shape[0]
        get_q = lambda t, i: t[i]  # noqa: E731
    kc, vc = k_cache.copy(), v_cache.copy()  # never mutate inputs

    # Slot addressing: packed varlen rows, pages, or contiguous rows (through cache_batch_idx).
    if cu_seqlens_k is not None:
        if page_table is not None or cache_batch_idx is not None:
            raise ValueError("cu_seqlens_k with page_table / cache_batch_idx")
        cuk = _cu(cu_seqlens_k)
        cap = np.diff(cuk)
        locate = lambda i, s: (cuk[i] + s,)  # noqa: E731
    else:
        rows = _per_seq(cache_batch_idx, b, np.arange(b))
        if page_table is not None:
            pt = np.asarray(page_table).astype(np.int64)
            ps = kc.shape[1]
            cap = np.full(b, pt.shape[1] * ps)
            locate = lambda i, s: (pt[rows[i], s // ps], s % ps)  # noqa: E731
        else:
            cap = np.full(b, kc.shape[1])
            locate = lambda i, s: (np.full(s.shape, rows[i]), s)  # noqa: E731
    seqlens = _per_seq(cache_seqlens, b, cap)
    leftpad = _per_seq(cache_leftpad, b, 0)

    # New tokens: fixed (b, s_new, hk, .) or varlen (total_new, hk, .) with cu_seqlens_k_new.
    if k is not None:
        if cu_seqlens_k_new is not None:
            cun = _cu(cu_seqlens_k_new)
            new_k = [k[cun[i]:cun[i + 1]] for i in range(b)]
            new_v = [v[cun[i]:cun[i + 1]] for i in range(b)]
        else:
            new_k, new_v = list(k), list(v)
        n_new = np.array([len(x) for x in new_k], np.int64)
        if cache_batch_idx is not None and len(np.unique(rows)) < b:
            raise ValueError("duplicate cache_batch_idx with append")
    else:
        n_new = np.zeros(b, np.int64)
    L = seqlens + n_new  # step 3: valid slots [leftpad_i, L_i)
    if np.any(L > cap) or np.any(seqlens < 0):
        raise ValueError(f"cache_seqlens + n_new beyond capacity: {L} > {cap}")
    if np.any(leftpad < 0) or np.any(leftpad > seqlens):
        raise ValueError("cache_leftpad > cache_seqlens")

    cos, sin = _f64(rotary_cos), _f64(rotary_sin)
    pos0 = _per_seq(rotary_seqlens, b, seqlens)  # step 2: p_i
    qd, kd, vd = (_descale(x, b, hk) for x in (q_descale, k_descale, v_descale))
    fp8_cache = kc.dtype == FP8

    # Steps 1-2: rotate new keys at p_i + j, write at slot cache_seqlens[i] + j, rounding to the cache dtype.
    for i in range(b):
        if n_new[i] == 0:
            continue
        kn, vn = _f64(new_k[i]), _f64(new_v[i])
        if k.dtype == FP8:  # fp8 k, v carry the cache's descales
            kn, vn = kn * kd[i][:, None], vn * vd[i][:, None]
        if cos is not None:
            kn = _rotate(kn, pos0[i] + np.arange(n_new[i]), cos, sin, rotary_interleaved)
        if fp8_cache:  # quantize on write with the same scales
            kn, vn = kn / kd[i][:, None], vn / vd[i][:, None]
        where = locate(i, seqlens[i] + np.arange(n_new[i]))
        kc[where] = _round_to(kn, kc.dtype)
        vc[where] = _round_to(vn, vc.dtype)

    wl, wr = window_size
    q_pos_per_token = causal or wl >= 0 or wr >= 0
    if causal:
        wr = 0  # step 6: causal is wr = 0
    scale = softmax_scale
    if scale is None:
        scale = 1.0 / np.sqrt(d + dv) if qv is not None else 1.0 / np.sqrt(d)
    sink = _f64(sinks)
    slopes = _f64(alibi_slopes)

    out = np.zeros(q.shape[:-1] + (dv,), np.float64)
    lse = np.full((hq, q.shape[0]) if cu_seqlens_q is not None else (b, hq, q.shape[1]), -np.inf)
    for i in range(b):
        qi = get_q(q, i)
        sq_i = len(qi) if seqused_q is None else int(seqused_q[i])  # step 4
        if sq_i > len(qi) or sq_i < 0:
            raise ValueError("seqused_q beyond the query length")
        if sq_i == 0:
            continue
        q_scale = np.repeat(qd[i], g)[None, :, None]  # (1, hq, 1): query head h has kv head h // g
        qi = _f64(qi[:sq_i]) * q_scale
        if cos is not None:  # step 2 for q (kept in float64)
            qpos = pos0[i] + (np.arange(sq_i) if q_pos_per_token else np.zeros(sq_i, np.int64))
            qi = _rotate(qi, qpos, cos, sin, rotary_interleaved)
        # Step 3: gather ONLY the valid slots, from the cache copy with the appended tokens.
        slots = np.arange(leftpad[i], L[i])
        where = locate(i, slots)
        K = np.repeat(_f64(kc[where]) * kd[i][:, None], g, axis=1)  # (s, hq, d): query head h reads KV head h // g
        V = np.repeat(_f64(vc[where]) * vd[i][:, None], g, axis=1)
        kp = slots - leftpad[i]
        seqlen_k = L[i] - leftpad[i]
        qp = np.arange(sq_i) + seqlen_k - sq_i  # step 4: bottom-right aligned
        # Step 5: scores.
        x = np.einsum("thd,shd->hts", qi, K)
        if qv is not None:
            x = x + np.einsum("thd,shd->hts", _f64(get_q(qv, i)[:sq_i]) * q_scale, V)
        x = x * scale
        if softcap > 0:
            x = softcap * np.tanh(x / softcap)
        dist = np.abs(qp[:, None] - kp[None, :]).astype(np.float64)
        if slopes is not None:
            sl = slopes if slopes.ndim == 1 else slopes[i]
            x = x - sl[:, None, None] * dist[None]
        # Step 6: mask.
        vis = np.ones((sq_i, len(slots)), bool)
        if wl >= 0:
            vis &= kp[None, :] >= qp[:, None] - wl
        if wr >= 0:
            vis &= kp[None, :] <= qp[:, None] + wr
        if attention_chunk > 0:
            vis &= (kp[None, :] // attention_chunk) == (qp[:, None] // attention_chunk)
        # Steps 7-8.
        o, l_ = _softmax_with_sink(x, vis[None], V, sink)
        if cu_seqlens_q is not None:
            out[q_rows[i][:sq_i]] = o
            lse[:, q_rows[i][:sq_i]] = l_
        else:
            out[i, :sq_i] = o
            lse[i, :, :sq_i] = l_
    return {"out": out, "lse": lse, "k_cache": kc, "v_cache": vc}


def reference_combine(out_partials, lse_partials, sinks=None):
    """Split-KV combine by the step-7 rule: out (..., dv), lse (...) in float64; the sink counts once.

    sinks (hq,) broadcasts along the last axis of "..." (the head axis)."""
    o = _f64(out_partials)
    lp = _f64(lse_partials)
    m = lp.max(axis=0)
    sink = None
    if sinks is not None:
        sink = np.broadcast_to(_f64(sinks), m.shape)
        m = np.maximum(m, sink)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(lp - m_safe)  # a partial with lse = -inf has weight 0
    denom = w.sum(axis=0)
    if sink is not None:
        denom = denom + np.exp(sink - m_safe)
    # Skip zero-weight partials explicitly: their out may be anything (even NaN).
    num = (np.where(w[..., None] > 0, o, 0.0) * w[..., None]).sum(axis=0)
    empty = denom == 0
    out = num / np.where(empty, 1.0, denom)[..., None]
    lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, 1.0, denom)))
    return out, lse
