"""kvattn.flash_attn_with_kvcache against the float64 oracle: named edge cases and a seeded random sweep
over the feature cross product (TESTING.md). Parametrized by device: 'cuda' runs the same cases on torch
CUDA tensors where available.

KVATTN_SWEEP_CASES sets the size of the random sweep (default 600); KVATTN_SWEEP_SEED its first seed.
"""
import dataclasses
import os

import numpy as np
import pytest

import harness as H
from cases import Case, build, run_and_compare

C = Case

# (name, case); the seed is part of every case id.
EDGE_CASES = [
    # sequence lengths 0 and 1
    ("seqlen0", C(seqlens=(0, 0), sq=2)),
    ("seqlen0-sinks", C(seqlens=(0, 3), sq=2, sinks="fp32")),
    ("seqlen0-causal", C(seqlens=(0, 4), sq=3, causal=True)),
    ("seqlen1", C(seqlens=(1, 1), sq=1)),
    ("seqlen1-append1", C(seqlens=(0, 1), new=(1, 1), causal=True)),
    ("append-into-empty", C(seqlens=(0, 0), new=(3, 3), sq=3, causal=True)),
    ("empty-batch", C(seqlens=(), sq=1)),
    ("varlen-q-empty-seq", C(seqlens=(4, 6, 2), q_lens=(0, 3, 1))),
    ("varlen-q-all-empty", C(seqlens=(4, 6), q_lens=(0, 0))),
    # pages
    ("page-not-multiple", C(layout="paged", page_size=3, seqlens=(7, 10), sq=2)),
    ("page-exact-fill", C(layout="paged", page_size=4, seqlens=(8, 4), extra_slots=0)),
    ("page-append-crosses-page", C(layout="paged", page_size=3, seqlens=(2, 5), new=(4, 4), sq=4, causal=True)),
    ("page-scrambled-scattered", C(layout="paged", page_size=2, seqlens=(5, 3, 6), batch_idx="scattered")),
    *[(f"page{ps}", C(layout="paged", page_size=ps, seqlens=(ps + 2, 2 * ps - 1), new=(2, 2), sq=2,
                      causal=True)) for ps in (1, 3, 16, 64)],
    ("page1-hnd", C(layout="paged", page_size=1, seqlens=(5, 2), hnd=True)),
    ("page16-hnd-append", C(layout="paged", page_size=16, seqlens=(17, 3), new=(3, 3), hnd=True)),
    ("contiguous-hnd-append", C(seqlens=(6, 2), new=(2, 2), hnd=True, rotary="neox")),
    ("packed-hnd", C(layout="packed", seqlens=(6, 0, 4), hnd=True)),
    # batch indices
    ("scattered", C(seqlens=(5, 9, 2), batch_idx="scattered", new=(1, 1, 1))),
    ("scattered-varlen-append", C(seqlens=(5, 9, 2), batch_idx="scattered", new=(0, 3, 1), varlen_new=True)),
    ("duplicate-rows-no-append", C(seqlens=(5, 3, 7), batch_idx="duplicate")),
    # causal, window, chunk boundaries
    ("causal-sq-gt-seqlen", C(seqlens=(2, 0), sq=5, causal=True)),
    ("causal-sq-gt-seqlen-append", C(seqlens=(0, 1), new=(2, 2), sq=5, causal=True)),
    ("window-0-0", C(seqlens=(6, 3), sq=3, window=(0, 0))),
    ("window-1-0", C(seqlens=(6, 3), sq=3, window=(1, 0))),
    ("window-left-only", C(seqlens=(9, 3), sq=4, window=(2, -1))),
    ("window-right-only", C(seqlens=(9, 3), sq=4, window=(-1, 1))),
    ("window-eq-seqlen", C(seqlens=(5, 5), sq=2, window=(5, 5))),
    ("window-causal", C(seqlens=(9, 4), sq=3, window=(3, 0), causal=True)),
    ("window-causal-right-unbounded", C(seqlens=(9, 4), sq=3, window=(3, -1), causal=True)),
    ("window-causal-right-overridden", C(seqlens=(9, 4), sq=3, window=(3, 7), causal=True)),  # FA3: causal wins
    ("window-sq-gt-seqlen", C(seqlens=(2, 3), sq=6, window=(1, 1))),
    *[(f"chunk{c}", C(seqlens=(9, 7), sq=4, chunk=c)) for c in (1, 2, 3, 4, 8)],
    ("chunk-causal", C(seqlens=(8, 5), sq=5, chunk=4, causal=True)),
    ("chunk-window", C(seqlens=(11, 6), sq=3, chunk=4, window=(2, 0))),
    ("chunk-leftpad", C(seqlens=(9, 7), leftpad=(3, 1), sq=3, chunk=4, causal=True)),
    # GQA
    *[(f"gqa{g}", C(hq=2 * g, hk=2, seqlens=(5, 8), sq=2, causal=True)) for g in (1, 2, 4, 8)],
    ("mqa", C(hq=8, hk=1, seqlens=(5, 8), sq=3, new=(1, 1))),
    # left padding
    ("leftpad", C(seqlens=(6, 9), leftpad=(2, 9), sq=2)),
    ("leftpad-append-rotary", C(seqlens=(6, 4), leftpad=(2, 4), new=(2, 2), sq=2, rotary="interleaved", causal=True)),
    ("leftpad-paged", C(layout="paged", page_size=3, seqlens=(7, 5), leftpad=(4, 0), new=(2, 2))),
    # lengths given as an int, or not at all (full capacity)
    ("seqlens-int", C(seqlens=(6, 6), seqlens_as="int", new=(2, 2))),
    ("seqlens-none", C(seqlens=(6, 4), seqlens_as="none", sq=2)),
    ("seqlens-none-paged", C(layout="paged", page_size=3, seqlens=(6, 4), seqlens_as="none")),
    ("seqlens-none-packed", C(layout="packed", seqlens=(6, 4), seqlens_as="none", causal=True, sq=2)),
    # varlen
    ("varlen-q-varlen-append", C(seqlens=(3, 0, 7), q_lens=(2, 3, 1), new=(2, 3, 1), varlen_new=True, causal=True)),
    ("varlen-append-zero", C(seqlens=(3, 4), new=(0, 2), varlen_new=True, sq=2, causal=True)),
    ("varlen-q-paged-rotary", C(layout="paged", page_size=3, seqlens=(4, 6), q_lens=(3, 1), new=(3, 1),
                                varlen_new=True, rotary="neox", causal=True)),
    ("packed", C(layout="packed", seqlens=(5, 0, 8), q_lens=(2, 1, 4), causal=True)),
    ("packed-append", C(layout="packed", seqlens=(5, 1), new=(2, 2), sq=2, causal=True)),
    ("packed-leftpad", C(layout="packed", seqlens=(5, 4), leftpad=(2, 0), sq=2)),
    ("seqused-q", C(seqlens=(5, 9), sq=4, seqused_q=True, seed=1)),
    ("seqused-q-varlen-sinks", C(seqlens=(5, 9), q_lens=(3, 2), seqused_q=True, sinks="fp32", seed=2)),
    # rotary
    ("rotary-interleaved", C(seqlens=(4, 6), new=(2, 2), sq=2, rotary="interleaved")),
    ("rotary-neox-causal", C(seqlens=(4, 6), new=(2, 2), sq=2, rotary="neox", causal=True)),
    ("rotary-partial-dim", C(seqlens=(4, 6), new=(1, 1), rotary="neox", rotary_dim=16, d=32)),
    ("rotary-seqlens", C(seqlens=(4, 6), new=(2, 2), sq=2, rotary="interleaved", rotary_seqlens=True, causal=True)),
    ("rotary-q-only", C(seqlens=(4, 6), sq=2, rotary="interleaved", causal=True)),
    ("rotary-q-dtype-tables", C(seqlens=(4, 6), new=(1, 1), rotary="neox", rotary_in_q_dtype=True, dtype="bf16")),
    ("rotary-unaligned-views", C(seqlens=(5, 9), new=(3, 3), sq=2, rotary="neox", unaligned_new=True, causal=True)),
    ("rotary-unaligned-varlen-paged", C(layout="paged", page_size=2, seqlens=(4, 7), new=(5, 2), varlen_new=True,
                                        rotary="interleaved", unaligned_new=True)),
    ("rotary-window", C(seqlens=(8, 6), new=(2, 2), sq=2, rotary="neox", window=(3, 0))),
    # scores
    ("softcap", C(seqlens=(7, 3), sq=2, softcap=1.5)),
    ("alibi-h", C(seqlens=(7, 3), sq=2, alibi="h", causal=True)),
    ("alibi-bh", C(seqlens=(7, 3), sq=2, alibi="bh")),
    ("sinks", C(seqlens=(7, 3), sq=2, sinks="fp32")),
    ("sinks-bf16-widened", C(seqlens=(7, 3), sq=2, sinks="bf16", dtype="bf16")),
    ("scale", C(seqlens=(7, 3), scale=0.21)),
    ("qv-d64-dv512", C(hq=2, hk=1, d=64, dv=512, seqlens=(20,), sq=2, qv=True, layout="paged", page_size=16)),
    ("qv-append", C(hq=4, hk=1, d=16, dv=48, seqlens=(5, 2), new=(1, 1), qv=True, causal=True)),
    ("dv-ne-d", C(d=16, dv=64, seqlens=(5, 7), sq=2)),
    ("everything", C(layout="paged", page_size=3, seqlens=(5, 8, 2), batch_idx="scattered", leftpad=(1, 0, 2),
                     new=(2, 1, 3), varlen_new=True, q_lens=(2, 1, 3), rotary="neox", rotary_seqlens=True,
                     causal=True, window=(4, 0), softcap=3.0, alibi="bh", sinks="fp32", seqused_q=True,
                     hnd=True, strided_q=True, out_given=True)),
    # layouts of q and out
    ("strided-q", C(seqlens=(5, 9), sq=3, strided_q=True)),
    ("strided-q-varlen", C(seqlens=(5, 9), q_lens=(3, 2), strided_q=True, qv=True)),
    ("out-given", C(seqlens=(5, 9), sq=2, out_given=True)),
    ("deterministic", C(seqlens=(50, 9), sq=2, deterministic=True, num_splits=0)),
    ("pack-gqa", C(hq=8, hk=2, seqlens=(5, 9), sq=2, pack_gqa=True)),
]


def _with_dtypes(cases, dtypes=("fp32", "fp16", "bf16")):
    """Each named case in each dtype (a case that fixes its dtype keeps it)."""
    out = []
    for name, case in cases:
        fixed = case.dtype != Case.dtype
        for dt in [case.dtype] if fixed else dtypes:
            c = dataclasses.replace(case, dtype=dt)
            out.append(pytest.param(c, id=f"{name}-{dt}-seed{c.seed}"))
    return out


@H.on_devices
@pytest.mark.parametrize("case", _with_dtypes(EDGE_CASES))
def test_edge_case(case, device):
    run_and_compare(case, device)


@H.on_devices
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_split_equals_no_split(dtype, layout, device):
    """num_splits 1/3/7 change speed only: the same result within rounding, and each matches the oracle."""
    case = Case(dtype=dtype, layout=layout, page_size=16, seqlens=(300, 97, 1), sq=2, new=(2, 2, 2), causal=True,
                hq=8, hk=2, d=64, seed=11)
    outs = {n: run_and_compare(dataclasses.replace(case, num_splits=n), device) for n in (1, 3, 7, 0)}
    for n in (3, 7, 0):
        H.assert_close(f"out num_splits={n} vs 1", outs[n][0], outs[1][0], H.TOL_OUT[dtype])
        H.assert_close(f"lse num_splits={n} vs 1", outs[n][1], outs[1][1], H.TOL_LSE[dtype])


def test_nan_in_unused_slots_changes_nothing():
    """The same case with the unused slots filled with random values instead of NaN gives the same output."""
    case = Case(layout="paged", page_size=3, seqlens=(5, 8), leftpad=(2, 0), new=(1, 1), dtype="fp32", seed=5)
    q, k_cache, v_cache, kw, _, _ = build(case)
    rng = np.random.default_rng(0)
    filled = [np.where(np.isnan(c), rng.standard_normal(c.shape).astype(c.dtype), c) for c in (k_cache, v_cache)]
    out_nan = H.kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, **kw)
    out_filled = H.kvattn.flash_attn_with_kvcache(q, *filled, **kw)
    assert not np.isnan(out_nan).any()
    np.testing.assert_array_equal(out_nan, out_filled)


# ---- seeded random sweep over the feature product


def random_case(seed):
    """A small random case; every feature is on or off independently (within the contract's rules)."""
    r = np.random.default_rng([seed, 7])
    pick = lambda xs: xs[int(r.integers(len(xs)))]  # noqa: E731
    p = lambda prob: bool(r.random() < prob)  # noqa: E731
    b = int(r.integers(1, 4))
    hk = pick([1, 2])
    d = pick([16, 32, 64])
    layout = pick(["contiguous", "paged", "packed"])
    appends = p(0.5)
    new = tuple(int(x) for x in r.integers(0, 5, b)) if appends else None
    varlen_new = appends and (len(set(new)) > 1 or p(0.5))
    seqlens = tuple(int(x) for x in r.integers(0, 200 if p(0.1) else 21, b))  # now and then a longer one
    seqlens_as = "array"
    if not appends and p(0.15):
        seqlens_as = "none"
    elif len(set(seqlens)) == 1 or p(0.1):
        seqlens = (seqlens[0],) * b
        seqlens_as = pick(["int", "array"])
    leftpad = tuple(int(r.integers(0, s + 1)) for s in seqlens) if seqlens_as != "none" and p(0.3) else None
    batch_idx = None
    if layout != "packed" and p(0.4):
        batch_idx = "duplicate" if not appends and p(0.3) else "scattered"
    varlen_q = p(0.3)
    rotary = pick(["interleaved", "neox"]) if p(0.3) else None
    qv = p(0.15)
    causal = p(0.4)
    window = (pick([-1, 0, 1, 2, 5]), pick([-1, 0, 1, 3])) if p(0.25) else (-1, -1)
    case = Case(
        seed=seed, dtype=pick(["fp32", "fp16", "bf16"]), seqlens=seqlens, sq=pick([1, 2, 3, 5]),
        q_lens=tuple(int(x) for x in r.integers(0, 6, b)) if varlen_q else None,
        hq=hk * pick([1, 2, 4]), hk=hk, d=d, dv=pick([d, 16, 48]) if p(0.3) or qv else None,
        layout=layout, page_size=pick([1, 2, 3, 4, 16]), hnd=p(0.25), extra_slots=int(r.integers(0, 4)),
        batch_idx=batch_idx, leftpad=leftpad, seqlens_as=seqlens_as, new=new, varlen_new=varlen_new,
        rotary=rotary, rotary_dim=pick([None, d // 2]), rotary_seqlens=p(0.3), rotary_in_q_dtype=p(0.3),
        causal=causal, window=window,
        chunk=pick([1, 2, 3, 5]) if p(0.2) else 0, softcap=pick([1.5, 5.0]) if p(0.2) else 0.0,
        alibi=pick(["h", "bh"]) if p(0.2) else None, sinks=pick(["fp32", "bf16"]) if p(0.25) else None,
        qv=qv, seqused_q=p(0.15), scale=float(r.uniform(0.05, 0.5)) if p(0.15) else None,
        num_splits=pick([0, 1, 2, 3, 7]), pack_gqa=pick([None, True, False]), deterministic=p(0.2),
        strided_q=p(0.2), out_given=p(0.2))
    # Drawn last, so that the features above stay those of the same seed without fp8: fp8 caches under
    # fp16/bf16 q, or fp8 q as well.
    if case.dtype != "fp32" and p(0.2):
        case = dataclasses.replace(case, kv_fp8=True, dtype="fp8" if p(0.3) else case.dtype,
                                   descales=pick(["full", "full", "broadcast", "none"]))
    return case


_FIRST = int(os.environ.get("KVATTN_SWEEP_SEED", "1000"))
_COUNT = int(os.environ.get("KVATTN_SWEEP_CASES", "600"))


@H.on_devices
@pytest.mark.parametrize("seed", range(_FIRST, _FIRST + _COUNT), ids=lambda s: f"seed{s}")
def test_random_sweep(seed, device):
    case = random_case(seed)
    try:
        run_and_compare(case, device)
    except AssertionError as e:
        raise AssertionError(f"{case}\n{e}") from None


# ---- other entry points and return forms


def test_return_out_only_and_in_place_append():
    """Without return_softmax_lse only `out` comes back; the append lands in the caller's own arrays."""
    from reference import reference_attention

    case = Case(seqlens=(3, 5), new=(2, 2), sq=2, causal=True, dtype="fp32", seed=21)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    out = H.kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, **kw)
    assert isinstance(out, np.ndarray)
    H.assert_close("out", out, ref["out"], H.TOL_OUT["fp32"])
    H.assert_cache_equal("k_cache", k_cache, ref["k_cache"], False, "fp32")
    H.assert_cache_equal("v_cache", v_cache, ref["v_cache"], False, "fp32")


@H.on_devices
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_func(dtype, causal, device):
    """flash_attn_varlen_func == the oracle on the packed form (k_cache=k with cu_seqlens_k, seqused_k)."""
    from inputs import DTYPES, cu_from_lengths, randn
    from reference import reference_attention

    H.skip_unsupported_on(device, DTYPES[dtype])
    rng = np.random.default_rng(31)
    dt = DTYPES[dtype]
    q_lens, k_lens, used_k = [3, 0, 5, 1], [6, 2, 4, 7], [6, 1, 4, 3]
    hq, hk, d, dv = 4, 2, 32, 16
    q = randn(rng, (sum(q_lens), hq, d), dt)
    k, v = randn(rng, (sum(k_lens), hk, d), dt), randn(rng, (sum(k_lens), hk, dv), dt)
    cuq, cuk = cu_from_lengths(q_lens), cu_from_lengths(k_lens)
    seqused_k = np.array(used_k, np.int32)
    for i in range(len(k_lens)):  # keys past seqused_k must not matter
        k[cuk[i] + used_k[i]:cuk[i + 1]] = np.nan
        v[cuk[i] + used_k[i]:cuk[i + 1]] = np.nan
    dev = lambda x: H.to_device(x, device)  # noqa: E731
    with H.poisoned_outputs():
        out, lse = H.kvattn.flash_attn_varlen_func(dev(q), dev(k), dev(v), dev(cuq), dev(cuk), max(q_lens),
                                                   max(k_lens), seqused_k=dev(seqused_k), causal=causal,
                                                   return_attn_probs=True)
    ref = reference_attention(q, k, v, cache_seqlens=seqused_k, cu_seqlens_q=cuq, max_seqlen_q=max(q_lens),
                              cu_seqlens_k=cuk, causal=causal)
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT[dtype])
    H.assert_close("lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE[dtype])
    only_out = H.kvattn.flash_attn_varlen_func(dev(q), dev(k), dev(v), dev(cuq), dev(cuk), max(q_lens), max(k_lens),
                                               seqused_k=dev(seqused_k), causal=causal)
    np.testing.assert_array_equal(H.f64(H.to_numpy(only_out)), H.f64(H.to_numpy(out)))


# fp8 e4m3 caches, each case with fp16 q, bf16 q and fp8 q (which writes a bf16 out). Appended fp16/bf16 k, v
# are quantized on write (e4m3(x / descale), saturating); fp8 k, v (under fp8 q) are written as they are.
FP8_CASES = [
    ("fp8-decode-append", C(seqlens=(5, 9), new=(2, 2), sq=2, causal=True)),
    ("fp8-no-append", C(seqlens=(7, 3), sq=3, hq=8, hk=2)),
    ("fp8-paged-rotary", C(layout="paged", page_size=3, seqlens=(7, 4), new=(2, 2), sq=2, rotary="neox",
                           causal=True)),
    ("fp8-rotary-q-only", C(seqlens=(4, 6), sq=2, rotary="interleaved", causal=True)),
    ("fp8-qv", C(hq=4, hk=1, d=16, dv=48, seqlens=(5, 2), new=(1, 1), qv=True, causal=True)),
    ("fp8-qv-d64-dv512", C(hq=2, hk=1, d=64, dv=512, seqlens=(20,), sq=2, qv=True, layout="paged", page_size=16)),
    ("fp8-broadcast-descales", C(descales="broadcast", seqlens=(6, 3), sq=3, batch_idx="scattered")),
    ("fp8-no-descales", C(descales="none", seqlens=(6, 3), new=(1, 1))),
    ("fp8-packed-varlen", C(layout="packed", seqlens=(5, 0, 8), q_lens=(2, 1, 4), causal=True)),
    ("fp8-hnd-leftpad", C(layout="paged", page_size=4, hnd=True, seqlens=(9, 6), leftpad=(2, 0), new=(3, 3),
                          sq=3, causal=True)),
    ("fp8-splits-sinks-softcap", C(seqlens=(60, 17), sq=2, num_splits=3, sinks="fp32", softcap=2.0, alibi="h")),
    ("fp8-window-chunk", C(seqlens=(12, 9), sq=4, window=(3, 1), chunk=4)),
    ("fp8-everything", C(layout="paged", page_size=3, seqlens=(5, 8, 2), batch_idx="scattered", leftpad=(1, 0, 2),
                         new=(2, 1, 3), varlen_new=True, q_lens=(2, 1, 3), rotary="neox", rotary_seqlens=True,
                         causal=True, window=(4, 0), softcap=3.0, alibi="bh", sinks="fp32", seqused_q=True,
                         hnd=True, strided_q=True, out_given=True)),
]


def _fp8_params(cases):
    out = []
    for name, case in cases:
        for dt in ("fp16", "bf16", "fp8"):
            c = dataclasses.replace(case, dtype=dt, kv_fp8=True)
            out.append(pytest.param(c, id=f"{name}-q{dt}-seed{c.seed}"))
    return out


@H.on_devices
@pytest.mark.parametrize("case", _fp8_params(FP8_CASES))
def test_fp8_cache(case, device):
    run_and_compare(case, device)


@H.on_devices
@pytest.mark.parametrize("q_dtype", ["bf16", "fp8"])
def test_fp8_append_saturates(q_dtype, device):
    """New keys beyond 448 * descale are stored as +-448 (not NaN); fp8 new keys are written bit for bit."""
    case = Case(dtype=q_dtype, kv_fp8=True, seqlens=(3, 5), new=(2, 2), sq=2, causal=True, seed=43)
    q, k_cache, v_cache, kw, _, _ = build(case)
    kw = dict(kw)
    k_new = H.f64(kw["k"]) * 300.0  # descales are in [0.5, 2): most of these overflow e4m3 / descale
    k_new[0, 0, 0, :4] = [np.inf, -np.inf, 1e4, -1e4]
    # (fp8 new keys: saturated here, as ml_dtypes would turn the overflow into NaN)
    kw["k"] = np.clip(k_new, -448, 448).astype(H.FP8) if q_dtype == "fp8" else k_new.astype(H.BF16)
    kc = H.to_device(k_cache, device)
    H.kvattn.flash_attn_with_kvcache(H.to_device(q, device), kc, H.to_device(v_cache, device),
                                     **{k: H.to_device(v, device) for k, v in kw.items()})
    H.sync_device_errors(device)
    got = H.f64(H.to_numpy(kc))
    for i, s in enumerate((3, 5)):
        stored = got[i, s:s + 2]
        assert not np.isnan(stored).any() and np.abs(stored).max() == 448.0
        if q_dtype == "fp8":  # in the cache's scaled domain already
            np.testing.assert_array_equal(stored, H.f64(kw["k"][i]))
        else:
            want = H.f64(kw["k"][i]) / H.f64(kw["k_descale"][i])[None, :, None]
            sat = np.abs(want) >= 448
            assert np.array_equal(stored[sat], np.sign(want[sat]) * 448.0)
