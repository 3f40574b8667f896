"""Pins the float64 oracle (reference.py): hand-checkable cases and identities (TESTING.md, "The oracle")."""
import math

import numpy as np
import pytest

from inputs import (DTYPES, cu_from_lengths, nan_fill_invalid, pack_varlen, paged_from_contiguous, randn,
                    rotary_tables)
from reference import reference_attention, reference_combine

SEEDS = [0, 1, 2]


def f64(x):
    return np.asarray(x, np.float64)


def assert_same(r1, r2, keys=("out", "lse")):
    """Identities hold up to float64 summation order; NaN never passes; something must be non-trivial."""
    for key in keys:
        a, b = r1[key], r2[key]
        assert not np.isnan(f64(a)).any() and not np.isnan(f64(b)).any(), key
        np.testing.assert_allclose(f64(a), f64(b), rtol=1e-12, atol=1e-12, err_msg=key)
    assert np.isfinite(r1["lse"]).any(), "degenerate case: no visible key anywhere"


def make_case(seed, dtype=np.float16, b=3, sq=3, hq=4, hk=2, d=8, dv=8, s_cache=12, n_new=0, rotary=False,
              leftpad=False, nan=True):
    """Random case: returns (rng, kwargs for reference_attention); invalid cache slots are NaN."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, s_cache - n_new + 1, b)
    lens[0] = s_cache - n_new  # at least one full sequence
    lp = rng.integers(0, lens + 1) if leftpad else np.zeros(b, np.int64)
    kc, vc = randn(rng, (b, s_cache, hk, d), dtype), randn(rng, (b, s_cache, hk, dv), dtype)
    if nan:
        kc, vc = nan_fill_invalid(kc, lens, lp), nan_fill_invalid(vc, lens, lp)
    kw = dict(q=randn(rng, (b, sq, hq, d), dtype), k_cache=kc, v_cache=vc, cache_seqlens=lens.astype(np.int32))
    if leftpad:
        kw["cache_leftpad"] = lp.astype(np.int32)
    if n_new:
        kw["k"], kw["v"] = randn(rng, (b, n_new, hk, d), dtype), randn(rng, (b, n_new, hk, dv), dtype)
    if rotary:
        kw["rotary_cos"], kw["rotary_sin"] = rotary_tables(rng, s_cache + max(sq, n_new) + 1, d - 2)
    return rng, kw


# ---------------------------------------------------------------- hand-checkable cases

@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("seed", SEEDS)
def test_one_key_gives_v(dtype, seed):
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    q, kc, vc = randn(rng, (2, 2, 4, 8), dt), randn(rng, (2, 5, 2, 8), dt), randn(rng, (2, 5, 2, 6), dt)
    lens, lp, slot = np.array([1, 4]), np.array([0, 3]), [0, 3]  # one valid key per sequence
    r = reference_attention(q, nan_fill_invalid(kc, lens, lp), nan_fill_invalid(vc, lens, lp),
                            cache_seqlens=lens.astype(np.int32), cache_leftpad=lp.astype(np.int32))
    for i in range(2):
        for t in range(2):
            for h in range(4):
                assert np.array_equal(r["out"][i, t, h], f64(vc[i, slot[i], h // 2]))
                x = sum(float(q[i, t, h, e]) * float(kc[i, slot[i], h // 2, e]) for e in range(8)) / math.sqrt(8)
                assert r["lse"][i, h, t] == pytest.approx(x, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_equal_scores_give_mean_of_v(seed):
    rng = np.random.default_rng(seed)
    q = randn(rng, (1, 2, 2, 4), np.float32)
    kc = np.broadcast_to(randn(rng, (1, 1, 1, 4), np.float32), (1, 7, 1, 4)).copy()  # every key identical
    vc = randn(rng, (1, 7, 1, 3), np.float32)
    r = reference_attention(q, kc, vc, cache_seqlens=5, softmax_scale=0.7)
    for t in range(2):
        for h in range(2):
            np.testing.assert_allclose(r["out"][0, t, h], f64(vc[0, :5, 0]).mean(axis=0), rtol=1e-12)
            x = 0.7 * float(f64(q[0, t, h]) @ f64(kc[0, 0, 0]))
            assert r["lse"][0, h, t] == pytest.approx(x + math.log(5), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", ["causal", "window", "chunk", "no_keys", "seqused_q"])
@pytest.mark.parametrize("with_sink", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_empty_rows(case, with_sink, seed):
    rng = np.random.default_rng(seed)
    q, kc, vc = randn(rng, (1, 4, 2, 8)), randn(rng, (1, 6, 1, 8)), randn(rng, (1, 6, 1, 8))
    kw = dict(cache_seqlens=2)  # seqlen_k = 2 < sq = 4: qp = t - 2, rows 0 and 1 precede every key
    empty = [0, 1]
    if case == "causal":
        kw["causal"] = True
    elif case == "window":
        kw["window_size"] = (1, 0)
    elif case == "chunk":
        kw["attention_chunk"] = 2
    elif case == "no_keys":
        kw["cache_seqlens"], empty = 0, [0, 1, 2, 3]
    else:
        kw["seqused_q"], empty = np.array([1], np.int32), [1, 2, 3]
    sinks = randn(rng, (2,)) if with_sink else None
    r = reference_attention(q, nan_fill_invalid(kc, [kw["cache_seqlens"]]), nan_fill_invalid(vc, [kw["cache_seqlens"]]),
                            sinks=sinks, **kw)
    for t in range(4):
        if t in empty:
            assert np.array_equal(r["out"][0, t], np.zeros((2, 8)))
            want = f64(sinks) if with_sink and case != "seqused_q" else np.full(2, -np.inf)
            assert np.array_equal(r["lse"][0, :, t], want)
        else:
            assert np.all(np.isfinite(r["lse"][0, :, t])) and np.abs(r["out"][0, t]).max() > 0


@pytest.mark.parametrize("seed", SEEDS)
def test_sink_identity(seed):
    _, kw = make_case(seed, sq=5)
    kw.update(causal=True, cache_seqlens=np.array([12, 2, 0], np.int32))  # seqlen_k < sq: some empty rows
    sinks = randn(np.random.default_rng(seed + 100), (4,), scale=2.0)
    r0 = reference_attention(**kw)
    r1 = reference_attention(**kw, sinks=sinks)
    s = f64(sinks)[None, :, None]
    np.testing.assert_allclose(r1["lse"], np.logaddexp(r0["lse"], s), rtol=1e-12, atol=1e-12)
    scale = np.exp(r0["lse"] - r1["lse"]).transpose(0, 2, 1)[..., None]  # (b, sq, hq, 1)
    np.testing.assert_allclose(r1["out"], r0["out"] * scale, rtol=1e-12, atol=1e-12)
    assert np.isinf(r0["lse"]).any() and np.isfinite(r0["lse"]).any()


def _two_key_case():
    q = np.array([[[[1.0, 0.5], [-0.5, 1.0]]]], np.float32)  # (1, 1, 2, 2): two query heads
    kc = np.array([[[[2.0, 0.0]], [[-1.0, 2.0]]]], np.float32)  # (1, 2, 1, 2)
    vc = np.array([[[[1.0, -2.0, 0.5]], [[3.0, 1.0, -1.0]]]], np.float32)
    return q, kc, vc


@pytest.mark.parametrize("case", ["softcap", "alibi", "alibi_2d", "softcap_alibi"])
def test_two_keys_by_hand(case):
    q, kc, vc = _two_key_case()
    kw = dict(softmax_scale=0.5)
    cap = 0.8 if "softcap" in case else 0.0
    slopes = [0.25, 1.0] if "alibi" in case else [0.0, 0.0]
    if cap:
        kw["softcap"] = cap
    if "alibi" in case:
        kw["alibi_slopes"] = np.array([slopes] if case == "alibi_2d" else slopes, np.float32)
    r = reference_attention(q, kc, vc, **kw)
    # qp = 0 + 2 - 1 = 1; kp = 0, 1 -> distances 1, 0. Raw scores: head 0: 0.5*(2, 0) = (1, 0); head 1: 0.5*(-1, 2.5).
    raw = [(1.0, 0.0), (-0.5, 1.25)]
    for h in range(2):
        x = [cap * math.tanh(s / cap) if cap else s for s in raw[h]]
        x = [x[0] - slopes[h] * 1, x[1] - slopes[h] * 0]
        e = [math.exp(x[0]), math.exp(x[1])]
        p = [e[0] / sum(e), e[1] / sum(e)]
        want = [p[0] * float(vc[0, 0, 0, c]) + p[1] * float(vc[0, 1, 0, c]) for c in range(3)]
        np.testing.assert_allclose(r["out"][0, 0, h], want, rtol=1e-12)
        assert r["lse"][0, h, 0] == pytest.approx(math.log(sum(e)), rel=1e-12)


def test_qv_default_scale_by_hand():
    q, kc, vc = _two_key_case()
    qv = np.array([[[[0.5, 1.0, -1.0], [1.0, 0.0, 2.0]]]], np.float32)
    r = reference_attention(q, kc, vc, qv=qv)
    for h in range(2):
        x = [(float(f64(q[0, 0, h]) @ f64(kc[0, s, 0])) + float(f64(qv[0, 0, h]) @ f64(vc[0, s, 0]))) / math.sqrt(5)
             for s in range(2)]
        e = [math.exp(v) for v in x]
        want = (e[0] * f64(vc[0, 0, 0]) + e[1] * f64(vc[0, 1, 0])) / sum(e)
        np.testing.assert_allclose(r["out"][0, 0, h], want, rtol=1e-12)
        assert r["lse"][0, h, 0] == pytest.approx(math.log(sum(e)), rel=1e-12)


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotary_quarter_turn_by_hand(interleaved):
    rng = np.random.default_rng(7)
    cos, sin = rotary_tables(rng, 8, 4)
    cos[3], sin[3] = 0.0, 1.0  # position 3: a quarter turn
    kc, vc = randn(rng, (1, 5, 1, 6)), randn(rng, (1, 5, 1, 6))
    k, v, q = randn(rng, (1, 1, 1, 6)), randn(rng, (1, 1, 1, 6)), randn(rng, (1, 1, 1, 6))
    r = reference_attention(q, kc, vc, k=k, v=v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=3,
                            rotary_interleaved=interleaved)
    x = k[0, 0, 0]
    want = [-x[1], x[0], -x[3], x[2], x[4], x[5]] if interleaved else [-x[2], -x[3], x[0], x[1], x[4], x[5]]
    assert np.array_equal(r["k_cache"][0, 3, 0], np.array(want, np.float32))
    assert np.array_equal(r["v_cache"][0, 3], v[0, 0])
    assert np.array_equal(np.delete(r["k_cache"], 3, axis=1), np.delete(kc, 3, axis=1))


def _naive(q_rows, K, V, scale, visible):
    """Plain loops: for query rows (t, h, d), keys (s, hk, d), the visible key list per row."""
    g = q_rows.shape[1] // K.shape[1]
    out = np.zeros(q_rows.shape[:2] + (V.shape[-1],))
    for t, keys in enumerate(visible):
        for h in range(q_rows.shape[1]):
            x = [scale * float(f64(q_rows[t, h]) @ f64(K[s, h // g])) for s in keys]
            w = np.exp(np.array(x) - max(x))
            out[t, h] = sum(w[j] * f64(V[s, h // g]) for j, s in enumerate(keys)) / w.sum()
    return out


@pytest.mark.parametrize("case,kw,visible", [
    ("causal", dict(causal=True), [range(0, 6), range(0, 7)]),
    ("window", dict(window_size=(2, 1)), [range(3, 7), range(4, 7)]),
    ("window_causal", dict(window_size=(1, -1), causal=True), [range(4, 6), range(5, 7)]),
    ("causal_overrides_right", dict(window_size=(1, 2), causal=True), [range(4, 6), range(5, 7)]),
    ("chunk", dict(attention_chunk=3), [range(3, 6), range(6, 7)]),
    ("chunk_window", dict(attention_chunk=4, window_size=(0, 1)), [range(5, 7), range(6, 7)]),
])
@pytest.mark.parametrize("pad", [0, 2])
def test_mask_visible_sets_by_hand(case, kw, visible, pad):
    rng = np.random.default_rng(pad)
    q, kc, vc = randn(rng, (1, 2, 2, 4)), randn(rng, (1, 9, 1, 4)), randn(rng, (1, 9, 1, 4))
    # seqlen_k = 7, sq = 2: qp = 5, 6; logical position kp is slot - pad.
    r = reference_attention(q, nan_fill_invalid(kc, [7 + pad], [pad]), nan_fill_invalid(vc, [7 + pad], [pad]),
                            cache_seqlens=7 + pad, cache_leftpad=np.array([pad], np.int32), **kw)
    want = _naive(q[0], kc[0, pad:], vc[0, pad:], 0.5, visible)
    np.testing.assert_allclose(r["out"][0], want, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- identities

@pytest.mark.parametrize("page_size", [1, 3, 4])
@pytest.mark.parametrize("seed", SEEDS)
def test_paged_equals_contiguous(page_size, seed):
    rng, kw = make_case(seed, s_cache=10, n_new=2, rotary=True, leftpad=True)
    kw["causal"] = True
    r_c = reference_attention(**kw)
    (kp, vp), table = paged_from_contiguous(rng, [kw["k_cache"], kw["v_cache"]], page_size)
    r_p = reference_attention(**{**kw, "k_cache": kp, "v_cache": vp, "page_table": table})
    assert_same(r_c, r_p)
    for i, L in enumerate(kw["cache_seqlens"] + 2):  # appended tokens landed in the right pages
        for s in range(kw["cache_leftpad"][i], L):
            pg, off = table[i, s // page_size], s % page_size
            assert np.array_equal(r_p["k_cache"][pg, off], r_c["k_cache"][i, s])
            assert np.array_equal(r_p["v_cache"][pg, off], r_c["v_cache"][i, s])


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_cache_batch_idx_permutation(paged, seed):
    rng, kw = make_case(seed, n_new=1, rotary=True)
    r0 = reference_attention(**kw)
    perm = rng.permutation(5)[:3].astype(np.int32)  # 3 sequences scattered over 5 rows, others NaN
    kw2 = dict(kw, cache_batch_idx=perm)
    for name in ("k_cache", "v_cache"):
        big = np.full((5,) + kw[name].shape[1:], np.nan, kw[name].dtype)
        big[perm] = kw[name]
        kw2[name] = big
    if paged:
        (kw2["k_cache"], kw2["v_cache"]), kw2["page_table"] = paged_from_contiguous(
            rng, [kw2["k_cache"], kw2["v_cache"]], 5)
    r1 = reference_attention(**kw2)
    assert_same(r0, r1)
    if not paged:
        assert np.array_equal(r1["k_cache"][perm], r0["k_cache"], equal_nan=True)
        assert np.array_equal(r1["v_cache"][perm], r0["v_cache"], equal_nan=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_leftpad_equals_shifted_cache(seed):
    rng, kw = make_case(seed, s_cache=8, n_new=2, rotary=True)
    kw.update(causal=True, window_size=(3, -1), alibi_slopes=randn(rng, (4,), scale=0.3) ** 2)
    r0 = reference_attention(**kw)
    pad = rng.integers(0, 5, 3)
    lens = kw["cache_seqlens"]
    kw2 = dict(kw, cache_leftpad=pad.astype(np.int32), cache_seqlens=(lens + pad).astype(np.int32),
               rotary_seqlens=lens)  # rotary defaults to cache_seqlens, which now includes the padding
    for name in ("k_cache", "v_cache"):
        sh = np.full((3, 13) + kw[name].shape[2:], np.nan, kw[name].dtype)
        for i in range(3):
            sh[i, pad[i]:pad[i] + 8] = kw[name][i]
        kw2[name] = sh
    r1 = reference_attention(**kw2)
    assert_same(r0, r1)
    for i in range(3):
        assert np.array_equal(r1["k_cache"][i, pad[i]:pad[i] + lens[i] + 2], r0["k_cache"][i, :lens[i] + 2])


@pytest.mark.parametrize("seed", SEEDS)
def test_varlen_q_equals_fixed(seed):
    rng, kw = make_case(seed, sq=4, n_new=1, rotary=True)
    kw.update(causal=True, qv=randn(rng, (3, 4, 4, 8), np.float16))
    r0 = reference_attention(**kw)
    q, cu = pack_varlen(kw["q"], [4, 4, 4])
    qv, _ = pack_varlen(kw["qv"], [4, 4, 4])
    r1 = reference_attention(**dict(kw, q=q, qv=qv, cu_seqlens_q=cu, max_seqlen_q=4))
    assert_same({"out": r0["out"].reshape(12, 4, 8), "lse": r0["lse"].transpose(1, 0, 2).reshape(4, 12)}, r1)
    assert np.array_equal(r0["k_cache"], r1["k_cache"], equal_nan=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_varlen_q_and_new_kv_equal_per_sequence(seed):
    rng, kw = make_case(seed, sq=3, s_cache=12, rotary=True)
    qlens, nlens = [3, 0, 2], [2, 1, 0]
    kw["cache_seqlens"] = np.minimum(kw["cache_seqlens"], 12 - 2).astype(np.int32)
    knew, vnew = randn(rng, (3, 2, 2, 8), np.float16), randn(rng, (3, 2, 2, 8), np.float16)
    q, cuq = pack_varlen(kw["q"], qlens)
    k, cun = pack_varlen(knew, nlens)
    v, _ = pack_varlen(vnew, nlens)
    r = reference_attention(**dict(kw, q=q, k=k, v=v, cu_seqlens_q=cuq, cu_seqlens_k_new=cun, causal=True))
    for i in range(3):
        one = reference_attention(**dict(kw, q=kw["q"][i:i + 1, :qlens[i]], k=knew[i:i + 1, :nlens[i]],
                                         v=vnew[i:i + 1, :nlens[i]], cache_batch_idx=np.array([i], np.int32),
                                         cache_seqlens=kw["cache_seqlens"][i:i + 1], causal=True))
        np.testing.assert_allclose(r["out"][cuq[i]:cuq[i + 1]], one["out"][0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(r["lse"][:, cuq[i]:cuq[i + 1]], one["lse"][0], rtol=1e-12, atol=1e-12)
        assert np.array_equal(r["k_cache"][i], one["k_cache"][i], equal_nan=True)
    assert np.isfinite(r["lse"]).any() and not np.isnan(r["out"]).any()


@pytest.mark.parametrize("seed", SEEDS)
def test_packed_kv_equals_contiguous(seed):
    rng, kw = make_case(seed, s_cache=10, n_new=2, rotary=True, leftpad=True)
    kw["causal"] = True
    r0 = reference_attention(**kw)
    caps = kw["cache_seqlens"] + 2 + rng.integers(0, 3, 3)  # rows owned by each sequence
    caps = np.minimum(caps, 10)
    kp, cuk = pack_varlen(kw["k_cache"], caps)
    vp, _ = pack_varlen(kw["v_cache"], caps)
    r1 = reference_attention(**dict(kw, k_cache=kp, v_cache=vp, cu_seqlens_k=cuk))
    assert_same(r0, r1)
    for i in range(3):
        assert np.array_equal(r1["k_cache"][cuk[i]:cuk[i + 1]], r0["k_cache"][i, :caps[i]], equal_nan=True)


def _rotate_by_hand(x, pos, cos, sin, interleaved):
    """Rotate x (n, h, d) at positions pos with explicit pair loops."""
    x, half = f64(x).copy(), cos.shape[1]
    for n, p in enumerate(pos):
        for m in range(half):
            a, b = (2 * m, 2 * m + 1) if interleaved else (m, m + half)
            c, s = float(cos[p, m]), float(sin[p, m])
            x0, x1 = x[n, :, a].copy(), x[n, :, b].copy()
            x[n, :, a], x[n, :, b] = x0 * c - x1 * s, x0 * s + x1 * c
    return x


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("mode", ["causal", "window", "none"])
@pytest.mark.parametrize("seed", SEEDS)
def test_append_rotary_equals_prerotated(interleaved, mode, seed):
    rng, kw = make_case(seed, n_new=3, rotary=True)
    kw["rotary_interleaved"] = interleaved
    kw.update({"causal": dict(causal=True), "window": dict(window_size=(2, -1)), "none": {}}[mode])
    kw["rotary_seqlens"] = kw["cache_seqlens"] - rng.integers(0, 2, 3) * (kw["cache_seqlens"] > 0)
    r0 = reference_attention(**kw)
    cos, sin = kw.pop("rotary_cos"), kw.pop("rotary_sin")
    kc, vc, q = kw["k_cache"].copy(), kw["v_cache"].copy(), np.zeros(kw["q"].shape)
    for i in range(3):
        p, L = kw["rotary_seqlens"][i], kw["cache_seqlens"][i]
        kc[i, L:L + 3] = _rotate_by_hand(kw["k"][i], p + np.arange(3), cos, sin, interleaved).astype(kc.dtype)
        vc[i, L:L + 3] = kw["v"][i]
        qpos = p + np.arange(3) if mode != "none" else np.full(3, p)
        q[i] = _rotate_by_hand(kw["q"][i], qpos, cos, sin, interleaved)  # q stays float64
    r1 = reference_attention(**dict(kw, q=q, k_cache=kc, v_cache=vc, k=None, v=None,
                                    cache_seqlens=kw["cache_seqlens"] + 3))
    assert_same(r0, r1)
    assert np.array_equal(r0["k_cache"], kc, equal_nan=True) and np.array_equal(r0["v_cache"], vc, equal_nan=True)


@pytest.mark.parametrize("with_sink", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_combine_halves_equals_whole(with_sink, seed):
    rng, kw = make_case(seed, b=4, s_cache=9, leftpad=False)
    kw["softcap"] = 3.0  # position-independent features only: halves shift logical positions
    lens = kw["cache_seqlens"]
    mid = np.array([0, lens[1], *rng.integers(0, lens[2:] + 1)])  # first half empty / second half empty / random
    sinks = randn(rng, (4,)) if with_sink else None
    whole = reference_attention(**kw, sinks=sinks)
    a = reference_attention(**dict(kw, cache_seqlens=mid.astype(np.int32)))
    b = reference_attention(**dict(kw, cache_leftpad=mid.astype(np.int32)))
    outs = np.stack([a["out"], b["out"]])  # (2, b, sq, hq, dv)
    lses = np.stack([a["lse"], b["lse"]]).transpose(0, 1, 3, 2)  # (2, b, sq, hq): heads last
    out, lse = reference_combine(outs, lses, sinks=sinks)
    assert np.isinf(lses).any()
    assert_same(whole, {"out": out, "lse": lse.transpose(0, 2, 1)})


def test_combine_by_hand():
    outs = np.array([[[1.0, 2.0], [5.0, 5.0], [np.nan, np.nan]],
                     [[3.0, -2.0], [np.nan, np.nan], [np.nan, np.nan]]])  # (2 partials, 3 rows, dv 2)
    lses = np.array([[0.0, 1.5, -np.inf], [math.log(3), -np.inf, -np.inf]])
    out, lse = reference_combine(outs, lses)
    np.testing.assert_allclose(out[:2], [[0.25 * 1 + 0.75 * 3, 0.25 * 2 - 0.75 * 2], [5.0, 5.0]], rtol=1e-14)
    np.testing.assert_allclose(lse[:2], [math.log(4), 1.5], rtol=1e-14)
    assert np.array_equal(out[2], [0.0, 0.0]) and lse[2] == -np.inf
    # With sinks (0, 0.5, -1) along the last axis (the 3 rows stand for heads); the sink counts once.
    out, lse = reference_combine(outs, lses, sinks=np.array([0.0, 0.5, -1.0], np.float32))
    d1 = math.exp(1.5) + math.exp(0.5)
    np.testing.assert_allclose(out[:2], [[(1 + 9) / 5, (2 - 6) / 5], [5 * math.exp(1.5) / d1] * 2], rtol=1e-14)
    np.testing.assert_allclose(lse, [math.log(5), math.log(d1), -1.0], rtol=1e-14)
    assert np.array_equal(out[2], [0.0, 0.0])


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_nan_in_unused_slots_changes_nothing(paged, seed):
    _, kw = make_case(seed, s_cache=10, n_new=2, rotary=True, leftpad=True, nan=False)
    kw["causal"] = True
    lens, lp = kw["cache_seqlens"], kw["cache_leftpad"]
    kn = dict(kw, k_cache=nan_fill_invalid(kw["k_cache"], lens, lp), v_cache=nan_fill_invalid(kw["v_cache"], lens, lp))
    assert np.isnan(f64(kn["k_cache"])).any()
    if paged:
        for d in (kw, kn):
            (d["k_cache"], d["v_cache"]), d["page_table"] = paged_from_contiguous(
                np.random.default_rng(seed), [d["k_cache"], d["v_cache"]], 3)
    assert_same(reference_attention(**kw), reference_attention(**kn))


@pytest.mark.parametrize("seed", SEEDS)
def test_gqa_head_mapping(seed):
    rng, kw = make_case(seed, hq=6, hk=2, n_new=1, rotary=True)
    sinks, slopes = randn(rng, (6,)), randn(rng, (3, 6), scale=0.3) ** 2
    kw.update(causal=True, sinks=sinks, alibi_slopes=slopes)
    r = reference_attention(**kw)
    for j in range(2):  # KV head j serves query heads 3j .. 3j+2
        hs = slice(3 * j, 3 * j + 3)
        one = reference_attention(**dict(kw, q=kw["q"][:, :, hs], k_cache=kw["k_cache"][:, :, j:j + 1],
                                         v_cache=kw["v_cache"][:, :, j:j + 1], k=kw["k"][:, :, j:j + 1],
                                         v=kw["v"][:, :, j:j + 1], sinks=sinks[hs], alibi_slopes=slopes[:, hs]))
        assert_same({"out": r["out"][:, :, hs], "lse": r["lse"][:, hs]}, one)


@pytest.mark.parametrize("seed", SEEDS)
def test_alibi_per_sequence_slopes(seed):
    rng, kw = make_case(seed, n_new=1)
    slopes = randn(rng, (3, 4), scale=0.5) ** 2  # (b, hq): row i for sequence i
    r = reference_attention(**kw, alibi_slopes=slopes, causal=True)
    for i in range(3):
        one = reference_attention(**dict(kw, q=kw["q"][i:i + 1], k=kw["k"][i:i + 1], v=kw["v"][i:i + 1],
                                         cache_batch_idx=np.array([i], np.int32),
                                         cache_seqlens=kw["cache_seqlens"][i:i + 1]),
                                  alibi_slopes=slopes[i], causal=True)
        assert_same({"out": r["out"][i:i + 1], "lse": r["lse"][i:i + 1]}, one)


@pytest.mark.parametrize("seed", SEEDS)
def test_seqused_q_equals_truncated_q(seed):
    _, kw = make_case(seed, sq=4, rotary=True)
    kw["causal"] = True
    used = np.array([2, 0, 4], np.int32)
    r = reference_attention(**kw, seqused_q=used)
    for i in range(3):
        one = reference_attention(**dict(kw, q=kw["q"][i:i + 1, :used[i]], cache_batch_idx=np.array([i], np.int32),
                                         cache_seqlens=kw["cache_seqlens"][i:i + 1]))
        np.testing.assert_allclose(r["out"][i, :used[i]], one["out"][0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(r["lse"][i, :, :used[i]], one["lse"][0], rtol=1e-12, atol=1e-12)
        assert not r["out"][i, used[i]:].any() and np.all(r["lse"][i, :, used[i]:] == -np.inf)


def test_inputs_not_mutated():
    _, kw = make_case(5, n_new=2, rotary=True, leftpad=True)
    before = {k: np.copy(v) for k, v in kw.items() if isinstance(v, np.ndarray)}
    r = reference_attention(**kw)
    assert not np.array_equal(r["k_cache"], kw["k_cache"], equal_nan=True)
    for k, v in before.items():
        assert np.array_equal(kw[k], v, equal_nan=True), k


@pytest.mark.parametrize("bad", ["rotary_position", "capacity", "leftpad", "duplicate_idx", "packed_with_table"])
def test_errors(bad):
    _, kw = make_case(3, n_new=1, rotary=True)
    if bad == "rotary_position":
        kw["rotary_seqlens"] = np.array([0, 0, kw["rotary_cos"].shape[0]], np.int32)
    elif bad == "capacity":
        kw["cache_seqlens"] = np.array([12, 0, 0], np.int32)
    elif bad == "leftpad":
        kw["cache_leftpad"] = kw["cache_seqlens"] + 1
    elif bad == "duplicate_idx":
        kw["cache_batch_idx"] = np.array([0, 1, 1], np.int32)
    else:
        kw["cu_seqlens_k"], kw["page_table"] = cu_from_lengths([12, 12, 12]), np.zeros((3, 1), np.int32)
    with pytest.raises(ValueError):
        reference_attention(**kw)


# ---- fp8 e4m3 caches


def test_fp8_rounding_by_hand():
    from reference import FP8, _to_fp8

    x = np.array([1.0625, 1.1875, 0.3, 2.0**-10, 3 * 2.0**-10, 449.0, 500.0, np.inf, -np.inf, -1e9, np.nan])
    want = [1.0, 1.25, 0.3125, 0.0, 2.0**-8, 448.0, 448.0, 448.0, -448.0, -448.0, np.nan]  # ties to even; saturate
    got = _to_fp8(x)
    assert got.dtype == FP8
    np.testing.assert_array_equal(f64(got), want)


@pytest.mark.parametrize("seed", SEEDS)
def test_fp8_descales_equal_dequantized(seed):
    """fp8 q / caches with (b, hk) descales == the same attention over the dequantized float64 values (qv
    shares q_descale); descales are indexed by sequence, also through cache_batch_idx."""
    from reference import FP8

    rng = np.random.default_rng(seed)
    b, sq, hq, hk, d, dv, s = 2, 3, 4, 2, 8, 16, 10
    q, qv = randn(rng, (b, sq, hq, d), FP8), randn(rng, (b, sq, hq, dv), FP8)
    kc, vc = randn(rng, (b + 1, s, hk, d), FP8), randn(rng, (b + 1, s, hk, dv), FP8)
    qd, kd, vd = (rng.uniform(0.5, 2.0, (b, hk)) for _ in range(3))
    rows = np.array([2, 0], np.int32)
    kw = dict(cache_seqlens=np.array([7, 10], np.int32), cache_batch_idx=rows, qv=qv, causal=True)
    got = reference_attention(q, kc, vc, q_descale=qd, k_descale=kd, v_descale=vd, **kw)
    rep = lambda x: np.repeat(x, hq // hk, axis=1)[:, None, :, None]  # noqa: E731  (b, 1, hq, 1)
    kd_rows, vd_rows = np.ones((b + 1, hk)), np.ones((b + 1, hk))
    kd_rows[rows], vd_rows[rows] = kd, vd
    want = reference_attention(f64(q) * rep(qd), f64(kc) * kd_rows[:, None, :, None],
                               f64(vc) * vd_rows[:, None, :, None], **dict(kw, qv=f64(qv) * rep(qd)))
    assert_same(got, want)


def test_fp8_append_quantizes_with_the_descale():
    """bf16 k, v into an fp8 cache: e4m3(x / descale), saturating; fp8 k, v are written as they are."""
    from reference import FP8

    rng = np.random.default_rng(5)
    kc, vc = np.full((1, 4, 1, 8), np.nan, FP8), np.full((1, 4, 1, 8), np.nan, FP8)
    q = randn(rng, (1, 1, 1, 8), DTYPES["bf16"])
    k = (randn(rng, (1, 2, 1, 8)) * np.float32(100)).astype(DTYPES["bf16"])
    v = randn(rng, (1, 2, 1, 8), DTYPES["bf16"])
    kd, vd = np.array([[0.25]]), np.array([[2.0]])
    r = reference_attention(q, kc, vc, k=k, v=v, cache_seqlens=1, k_descale=kd, v_descale=vd)
    want_k = np.clip(f64(k[0]) * 4, -448, 448).astype(FP8)  # exact in float32: ml_dtypes rounds it once
    np.testing.assert_array_equal(f64(r["k_cache"][0, 1:3]), f64(want_k))
    assert np.abs(f64(r["k_cache"][0, 1:3])).max() == 448.0
    np.testing.assert_array_equal(f64(r["v_cache"][0, 1:3]), f64((f64(v[0]) / 2).astype(FP8)))
    k8, v8 = randn(rng, (1, 2, 1, 8), FP8), randn(rng, (1, 2, 1, 8), FP8)
    r8 = reference_attention(q.astype(FP8), kc, vc, k=k8, v=v8, cache_seqlens=1, k_descale=kd, v_descale=vd)
    np.testing.assert_array_equal(f64(r8["k_cache"][0, 1:3]), f64(k8[0]))
    np.testing.assert_array_equal(f64(r8["v_cache"][0, 1:3]), f64(v8[0]))
