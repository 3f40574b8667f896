"""The sm_90a prefill kernel (src/cuda/prefill_sm90) against the float64 oracle.

KVATTN_FORCE_SM90_PREFILL=1 drops the kernel's shape rule (>= 128 packed rows a kv head, >= half a wave of
CTAs), so these small shapes (several 128-row blocks, several 128-key tiles, lengths that are not multiples
of either) run on it wherever it covers the problem (d = dv in 64, 128, 256 and (d, dv) = (192, 128): every
case runs at each of them, dv_of; fp16/bf16 caches (fp8 caches: test_cuda_prefill_sm90_fp8.py), no qv;
(192, 128) first passed on a GPU in session 34). Paged cases whose page size (a multiple of 8) divides the key tile or
is a multiple of it take its TMA producer (tiles of 128 keys at d 64, 128 and (192, 128), 80 at d 256), at d 256 also
those sharing 16 slots or more with the tile, in boxes of gcd(page, 80) slots (pages 32-256, 48, 96, 160; not 24),
and so do contiguous caches whose rows hold a tile and packed caches of a tile of tokens
(CONTIGUOUS_TMA_CASES, written without a GPU); page 1 and the rest take its cp.async one. On a device
that is not sm_90, or a build without 90a, the same cases run on the portable kernel and still must pass.
One case checks with the profiler that the kernel really ran on Hopper.
"""

import dataclasses
import os
import re

import numpy as np
import pytest

import harness as H
from cases import Case, run_and_compare

pytestmark = pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICE = "cuda"


@pytest.fixture(autouse=True)
def _force_sm90(monkeypatch):
    monkeypatch.setenv("KVATTN_FORCE_SM90_PREFILL", "1")
    monkeypatch.delenv("KVATTN_FORCE_PORTABLE", raising=False)


def prefill(**kw):
    base = dict(dtype="bf16", d=128, hq=4, hk=2, seqlens=(450, 201), sq=200, causal=True, num_splits=1, seed=7)
    base.update(kw)
    return Case(**base)


CASES = {
    # masks and lengths
    "causal contiguous": prefill(),
    "non-causal contiguous": prefill(causal=False, seed=1),
    "causal sq = sk": prefill(seqlens=(383, 257), q_lens=(383, 257), sq=0, seed=2),
    "uneven, not tile multiples": prefill(seqlens=(129, 1000, 77), q_lens=(129, 5, 77), sq=0, seed=3),
    "window": prefill(window=(100, 0), causal=False, seed=4),
    "window both sides": prefill(window=(37, 61), causal=False, seed=5),
    "chunk": prefill(chunk=96, seed=6),
    "softcap": prefill(softcap=20.0, seed=8),
    "alibi per batch": prefill(alibi="bh", seed=9),
    "sinks": prefill(sinks="fp32", window=(64, 0), seed=10),
    "seqused_q": prefill(seqused_q=True, seed=11),
    # layouts
    "paged 16": prefill(layout="paged", page_size=16, seed=12),
    "paged 1": prefill(layout="paged", page_size=1, seqlens=(300, 150), sq=150, seed=13),
    "paged 64 hnd": prefill(layout="paged", page_size=64, hnd=True, causal=False, seed=14),
    "paged 128": prefill(layout="paged", page_size=128, seqlens=(450, 300), leftpad=(0, 130), seed=28),
    "packed varlen": prefill(layout="packed", q_lens=(250, 3, 180), sq=0, seqlens=(260, 40, 181), seed=15),
    # varlen batches on the m-block line (CTAs only for the m-blocks a sequence has), sequences without rows
    # among them; GQA 8 makes 1 token 8 rows, 8 tokens 64, 9 tokens 72
    "mixed chunk + decodes": prefill(layout="paged", page_size=16, q_lens=(300, 1, 1, 0, 2, 1), sq=0,
                                     seqlens=(500, 200, 33, 90, 130, 257), seed=60),
    "mixed GQA 8, 64 / 72 rows": prefill(layout="paged", page_size=16, hq=16, hk=2, q_lens=(8, 1, 9, 40, 0),
                                         sq=0, seqlens=(300, 129, 200, 90, 10), seed=61),
    # GQA 8 rows 64, 72, 128, 136, 192, 200: the last consumer with rows is each of a 192-row CTA's three
    # (d 64) and of a 128-row CTA's two, and a second m-block of 8 rows
    "mixed GQA 8, a CTA's last consumer": prefill(layout="paged", page_size=16, hq=16, hk=2,
                                                  q_lens=(8, 9, 16, 17, 24, 25), sq=0,
                                                  seqlens=(300, 129, 200, 90, 64, 260), seed=65),
    "mixed append rotary": prefill(layout="paged", page_size=16, seqlens=(300, 90, 50, 70), new=(200, 1, 0, 1),
                                   varlen_new=True, q_lens=(200, 1, 0, 1), sq=0, rotary="neox", seed=64),
    "mixed seqused_q, window": prefill(q_lens=(200, 1, 33, 64), sq=0, seqlens=(450, 201, 90, 64),
                                       seqused_q=True, window=(70, 0), seed=62),
    "batch idx + leftpad": prefill(batch_idx="scattered", leftpad=(50, 0), seed=16),
    "leftpad paged": prefill(layout="paged", page_size=16, leftpad=(33, 7), seed=17),
    "paged 8 window": prefill(layout="paged", page_size=8, window=(150, 0), causal=False, seed=26),
    "paged 256 leftpad": prefill(layout="paged", page_size=256, seqlens=(700, 300), leftpad=(200, 0), seed=27),
    # pages whose size neither divides the key tile nor is a multiple of it: by cp.async at 128-key tiles; at
    # d 256's 80 keys 24 by cp.async (gcd 8), 48 by TMA boxes of 16 (since session 54); lengths around
    # multiples of 176 (branch kv176's d 128 tile)
    "paged 24, lengths around 176": prefill(layout="paged", page_size=24, seqlens=(353, 176, 177), sq=175,
                                            causal=False, seed=29),
    "paged 48 leftpad, 352 keys": prefill(layout="paged", page_size=48, seqlens=(352, 530), leftpad=(16, 48),
                                          sq=176, seed=30),
    # (192, 128)'s 80-key tiles (sessions 38-49): TMA boxes of 40 / 80 slots (pages of 40 divide the tile, 160
    # is two), lengths around multiples of 80; since its 128-key tiles (session 50) pages of 40 / 160 go by
    # cp.async and 32 by TMA there: both producers over the split K / V stages
    "paged 40, lengths around 80": prefill(layout="paged", page_size=40, seqlens=(241, 80, 79), sq=81,
                                           causal=False, seed=31),
    "paged 160 leftpad, 400 keys": prefill(layout="paged", page_size=160, seqlens=(400, 161), leftpad=(80, 1),
                                           sq=160, seed=32),
    "paged 32, 80-key tiles": prefill(layout="paged", page_size=32, seqlens=(330, 161), sq=120, seed=33),
    # d 256's gcd boxes (session 54), tiles starting inside a page: page 48 (boxes of 16) under leftpads
    # that are not multiples of 16 and a window; page 96 (boxes of 16); cp.async at 128-key tiles
    "paged 48, leftpads 5 / 21, window": prefill(layout="paged", page_size=48, seqlens=(500, 283),
                                                 leftpad=(5, 21), window=(130, 0), causal=False, sq=140, seed=34),
    "paged 96 leftpad, lengths around 80": prefill(layout="paged", page_size=96, seqlens=(611, 241),
                                                   leftpad=(0, 17), sq=150, seed=35),
    # GQA widths and dtypes
    "MHA": prefill(hq=4, hk=4, seed=18),
    "GQA 8": prefill(hq=16, hk=2, seqlens=(300, 100), sq=100, seed=19),
    "fp16": prefill(dtype="fp16", layout="paged", page_size=16, seed=20),
    # append + rotary ahead of the attention
    "append rotary": prefill(seqlens=(300, 100), new=(130, 130), sq=130, rotary="neox", seed=21),
    "append varlen rotary paged": prefill(layout="paged", page_size=16, seqlens=(300, 90), new=(200, 150),
                                          varlen_new=True, q_lens=(200, 150), sq=0, rotary="interleaved", seed=22),
    "strided q, given out": prefill(strided_q=True, out_given=True, seed=23),
}


# Contiguous and packed caches on the TMA producer. WRITTEN WITHOUT A GPU (session 4, branch tmacontig): not
# yet run on a device when committed; the cases were checked against the oracle on the CPU backend only.
# The TMA producer takes a contiguous cache whose rows hold at least a key tile (128 slots at d 64 / 128,
# 48 at d 256) as pages of one row each, and a packed cache of at least a tile of tokens as one page; its
# tiles start at any slot (leftpad + the first key a CTA sees). A sequence's last tile goes by TMA when the
# sequence fills its row (the last packed sequence: the cache), the slots past the row being the TMA
# unit's zeros; else by cp.async with zero fill (the unused slots are NaN here). Rows shorter than a tile
# go by cp.async (d 64 / 128) or TMA (d 256, 48-key tiles). extra_slots=0: the longest sequence fills the
# capacity (s_cache = the longest end + extra_slots).
def contiguous(**kw):
    base = dict(sq=130, extra_slots=0)
    base.update(kw)
    return prefill(**base)


CONTIGUOUS_TMA_CASES = {
    "full rows 1024, no cache_seqlens": contiguous(seqlens=(1024, 1024), seqlens_as="none", causal=False, seed=40),
    "capacity 1024, one short row": contiguous(seqlens=(1024, 700), seed=41),
    "capacity 1000 (not a tile multiple)": contiguous(seqlens=(1000, 613), seed=42),
    "capacity 4097": contiguous(seqlens=(4097, 1500), sq=64, hq=2, hk=1, causal=False, seed=43),
    "capacity 1000, NaN slots past every end": contiguous(seqlens=(997, 613), extra_slots=3, seed=44),
    "leftpad": contiguous(seqlens=(1000, 613), leftpad=(37, 300), seed=45),
    "scattered rows + leftpad": contiguous(batch_idx="scattered", seqlens=(900, 1000), leftpad=(0, 129), seed=46),
    "window": contiguous(window=(150, 0), causal=False, seqlens=(1000, 777), seed=47),
    "window both sides": contiguous(window=(70, 40), causal=False, seqlens=(1000, 613), seed=48),
    "append rotary": contiguous(seqlens=(300, 170), new=(130, 130), rotary="neox", seed=49),
    "append varlen rotary": contiguous(seqlens=(300, 90), new=(200, 150), varlen_new=True, q_lens=(200, 150),
                                       sq=0, rotary="interleaved", seed=50),
    "seqlen_k < 128": contiguous(seqlens=(100, 60), sq=100, seed=51),
    "hnd storage": contiguous(hnd=True, seqlens=(1000, 613), causal=False, seed=52),
    "MHA fp16": contiguous(dtype="fp16", hq=4, hk=4, seqlens=(1000, 613), seed=53),
    "fp16 leftpad window": contiguous(dtype="fp16", seqlens=(1000, 900), leftpad=(5, 0), window=(200, 0), seed=54),
    "packed, last sequence ends the cache": contiguous(layout="packed", q_lens=(250, 3, 180), sq=0,
                                                       seqlens=(260, 40, 181), seed=55),
    "packed spare slots + leftpad": contiguous(layout="packed", q_lens=(200, 130), sq=0, seqlens=(300, 200),
                                               leftpad=(17, 0), extra_slots=5, seed=56),
    "packed fp16 < 128 tokens": contiguous(dtype="fp16", layout="packed", q_lens=(50, 40), sq=0, seqlens=(50, 40),
                                           seed=57),
}


# The head dims the kernel is compiled for (src/cuda/prefill_sm90/config.hpp): each has its own tile shape.
# KVATTN_TEST_HEAD_DIMS="128": the head dims of a developer build (tools/prefill_ab.sh).
HEAD_DIMS = tuple(int(d) for d in os.environ.get("KVATTN_TEST_HEAD_DIMS", "64 128 192 256").split())


def dv_of(d):
    """The kernels' value head dim at head dim d: d, but 128 at d 192 (DeepSeek's (192, 128))."""
    return 128 if d == 192 else d
# The tests whose cases are d 128 only (a developer build of another head dim lacks its kernels).
ONLY_D128 = pytest.mark.skipif(128 not in HEAD_DIMS, reason="d 128 is not among KVATTN_TEST_HEAD_DIMS")


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(CASES))
def test_prefill_sm90(name, d):
    run_and_compare(dataclasses.replace(CASES[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(CONTIGUOUS_TMA_CASES))
def test_prefill_sm90_contiguous_tma(name, d):
    """Written without a GPU (see CONTIGUOUS_TMA_CASES)."""
    run_and_compare(dataclasses.replace(CONTIGUOUS_TMA_CASES[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", ["capacity 1000 (not a tile multiple)", "leftpad", "window", "append rotary",
                                  "packed, last sequence ends the cache"])
def test_prefill_sm90_contiguous_producers_agree(monkeypatch, name, d):
    """Written without a GPU. On contiguous and packed caches both producers start the tiles at the same slots
    and zero the same slots past the end, so the TMA producer (checked against the oracle above) and the
    cp.async one (KVATTN_SM90_TMA=0) must give the same bits."""
    from cases import build

    q, k_cache, v_cache, kw, _, _ = build(dataclasses.replace(CONTIGUOUS_TMA_CASES[name], d=d, dv=dv_of(d)))
    results = []
    for tma in ("1", "0"):
        monkeypatch.setenv("KVATTN_SM90_TMA", tma)
        dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}  # fresh caches: the call appends
        with H.poisoned_outputs():
            out, lse = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                                        H.to_device(v_cache, DEVICE), return_softmax_lse=True,
                                                        **dev)
        H.sync_device_errors(DEVICE)
        results.append((H.to_numpy(out), H.to_numpy(lse)))
    (out_tma, lse_tma), (out_cp, lse_cp) = results
    assert np.isfinite(out_tma).all()
    np.testing.assert_array_equal(out_tma.view(np.uint16), out_cp.view(np.uint16))
    np.testing.assert_array_equal(lse_tma, lse_cp)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_cp_async_producer(monkeypatch, d):
    """The cp.async producer where the TMA one would run (KVATTN_SM90_TMA=0): page 16, leftpads."""
    monkeypatch.setenv("KVATTN_SM90_TMA", "0")
    run_and_compare(prefill(layout="paged", page_size=16, leftpad=(33, 7), d=d, dv=dv_of(d), seed=25), DEVICE)


# A long append right ahead of the kernel, which is launched early behind it (programmatic dependent
# launch, kernels without a unit counter: fewer than two units an SM) and sets up while the append still
# writes: its producers must wait for the append before the first K/V copy. The appended slots start as NaN
# (the harness fills unused cache slots), so a copy that lands too early shows in the output; on the H200 a
# build without the wait passed it too (session 23: the early read is not provoked here), so it checks the
# results behind a long append, not the wait itself. 3,000 new tokens a sequence, 4 kv heads: 2 x 4 x 24
# units of 128 rows.
@ONLY_D128
@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_prefill_sm90_long_append_launched_early(layout):
    case = prefill(layout=layout, page_size=16, hq=4, hk=4, seqlens=(40, 300), new=(3000, 3000), sq=3000,
                   rotary="neox", seed=90)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_nan_page_is_contained(d):
    """An out-of-range page id makes its sequence NaN (recorded as an error); the other stays right."""
    H.assert_bad_page_contained(prefill(layout="paged", page_size=16, d=d, dv=dv_of(d), seed=24), 3, DEVICE)


_kernel_names = H.kernel_names


@pytest.mark.skipif(192 not in HEAD_DIMS, reason="d 192 is not among KVATTN_TEST_HEAD_DIMS")
def test_prefill_sm90_d192_default_takes_sm90(monkeypatch):
    """Without the force switch, (192, 128) runs the sm_90a kernel (its GPU checks passed in session 34)."""
    monkeypatch.delenv("KVATTN_FORCE_SM90_PREFILL", raising=False)
    case = prefill(layout="paged", page_size=16, d=192, dv=128, sq=300, seqlens=(700, 500), seed=144)
    names = _kernel_names(case)
    assert any(re.search(r"PrefillConfig<[^,]*, 192,", n) for n in names), names
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_runs_on_hopper(d):
    """The kernel, not the fallback, ran (sm_90 devices with a 90a build only)."""
    names = _kernel_names(prefill(layout="paged", page_size=16, d=d, dv=dv_of(d)))
    assert any("prefill_kernel" in n for n in names), names
    # The kernel of the head dim's own row (the d 256 row would take (192, 128) too, but for the dispatch's
    # smallest-row rule).
    assert any(re.search(rf"PrefillConfig<[^,]*, {d},", n) for n in names), names


def _overlapping_cu_seqlens_q_is_an_error(case):
    """The case (q_lens 300, 1, 300) called with cu_seqlens_q [0, 300, 50, 350]: sequence 1 goes back, 0
    and 2 overlap on rows 50-299; the call returns and the error is recorded for the next sync."""
    from cases import build

    q, k_cache, v_cache, kw, _, _ = build(case)
    kw = dict(kw)
    cuq = kw["cu_seqlens_q"].copy()  # [0, 300, 301, 601]
    q = q[:350]
    cuq[:] = [0, 300, 50, 350]  # sequence 1 goes back; 0 and 2 overlap on rows 50-299
    kw["cu_seqlens_q"] = cuq
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    with H.poisoned_outputs():
        H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                         H.to_device(v_cache, DEVICE), **dev)
    with pytest.raises(H.kvattn.KvattnError, match="cu_seqlens_q"):
        H.sync_device_errors(DEVICE)


# The split kernel (PrefillConfig::kSplit): decode-like fixed-q shapes whose CTAs would leave SMs idle get
# static key splits (the plan's, num_splits = 0 here; an explicit count caps them), each CTA a split's share
# of its unit's tiles into partials that the split combine merges; a unit of <= 64 rows leaves consumer 1
# idle. WRITTEN WITHOUT A GPU (session 29, branch psplit); the cases were checked against the oracle on the
# CPU backend only. GQA 8 makes 8 tokens 64 packed rows (W4's 64/8 q 8), 12 tokens 96.
def split(**kw):
    base = dict(layout="paged", page_size=16, hq=16, hk=2, sq=8, seqlens=(3000, 1700), num_splits=0)
    base.update(kw)
    return prefill(**base)


SPLIT_CASES = {
    "64 rows, paged 16 (TMA)": split(seed=100),
    "64 rows, paged 1 (cp.async)": split(page_size=1, seqlens=(2000, 900), seed=101),
    "64 rows, contiguous full rows (TMA)": split(layout="contiguous", seqlens=(2048, 2048), seqlens_as="none",
                                                 causal=False, extra_slots=0, seed=102),
    "64 rows, contiguous, leftpad + batch idx": split(layout="contiguous", seqlens=(2500, 1000), leftpad=(37, 300),
                                                      batch_idx="scattered", seed=103),
    "96 rows (consumer 1 in part), paged 64 hnd, window": split(page_size=64, hnd=True, sq=12, window=(700, 0),
                                                                seqlens=(3000, 1500), seed=104),
    "320 rows (12 CTAs; 8 at d 64), causal": split(sq=40, seqlens=(4000, 2500), seed=105),
    "leftpad, paged 16 (split 0's first tile below leftpad)": split(leftpad=(37, 5), seqlens=(3000, 1700), seed=116),
    "paged 256 (a box a tile), leftpad": split(page_size=256, leftpad=(300, 0), seqlens=(3500, 1700), seed=117),
    "paged 48 (TMA boxes at d 256), leftpad": split(page_size=48, leftpad=(16, 48), seqlens=(3000, 1700), seed=118),
    "128 rows (d 64: consumer 2 idle)": split(sq=16, seqlens=(3000, 1700), seed=119),
    "32 rows (consumer 1 idle)": split(hq=8, seed=106),
    "explicit num_splits 3": split(layout="contiguous", num_splits=3, seqlens=(1000, 300, 129), extra_slots=1200,
                                   seed=107),
    "more splits than a short sequence's tiles": split(seqlens=(200, 4000), seed=108),
    "sinks + alibi": split(sinks="fp32", alibi="bh", seed=109),
    "softcap + chunk": split(softcap=20.0, chunk=1000, seed=110),
    "seqused_q": split(seqused_q=True, seed=111),
    "an empty sequence": split(seqlens=(0, 3000), seed=112),
    "append + rotary": split(new=(8, 8), rotary="neox", seqlens=(2000, 900), seed=113),
    "fp16": split(dtype="fp16", seed=114),
    "packed (cu_seqlens_k)": split(layout="packed", seqlens=(2000, 700, 9), seed=115),
}


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_prefill_sm90_splits(name, d):
    run_and_compare(dataclasses.replace(SPLIT_CASES[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_split_rule(monkeypatch, d):
    """Without the force switch: 64 packed rows over 2 sequences take the split kernel and the combine; 64
    rows over 64 sequences x 4 kv heads (256 CTAs) the split kernel in one pass (consumer 1 idle); so does
    deterministic mode (a 3008-key capacity: one chunk); with varlen q the 64-row shapes keep the portable
    kernel. All right against the oracle."""
    monkeypatch.delenv("KVATTN_FORCE_SM90_PREFILL", raising=False)
    few = split(d=d, dv=dv_of(d), seed=120)
    names = _kernel_names(few)
    assert any("prefill_kernel" in n for n in names) and any("split_combine" in n for n in names), names
    run_and_compare(few, DEVICE)
    many = split(d=d, dv=dv_of(d), hq=32, hk=4, seqlens=tuple(300 + 7 * i for i in range(64)), seed=121)
    names = _kernel_names(many)
    # (the split kernel: the only PrefillConfig whose last flag, kSplit, is true)
    assert any(re.search(r"PrefillConfig<[^>]*, true>", n) for n in names), names
    assert not any("combine" in n for n in names), names
    run_and_compare(many, DEVICE)
    det = split(d=d, dv=dv_of(d), deterministic=True, seed=122)
    names = _kernel_names(det)
    assert any(re.search(r"PrefillConfig<[^>]*, true>", n) for n in names), names
    run_and_compare(det, DEVICE)
    varlen = split(d=d, dv=dv_of(d), q_lens=(8, 8), sq=0, seed=123)
    names = _kernel_names(varlen)
    assert not any("prefill_kernel" in n for n in names), names
    run_and_compare(varlen, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_split_rule_32_rows(monkeypatch, d):
    """Without the force switch: 32 packed rows (4 query heads a kv head x 8 tokens) take the split kernel
    at d 128 over a 16-bit cache (measured 4-9% faster there than the decode kernel, session 34); 16 rows
    do not (the decode kernel at d 128), nor do 32 rows at the other head dims (unmeasured at 32: the
    portable kernel). Right against the oracle either way."""
    monkeypatch.delenv("KVATTN_FORCE_SM90_PREFILL", raising=False)
    rows32 = split(d=d, dv=dv_of(d), hq=8, seed=124)
    names = _kernel_names(rows32)
    takes_split = any(re.search(r"PrefillConfig<[^>]*, true>", n) for n in names)
    assert takes_split == (d == 128), names
    run_and_compare(rows32, DEVICE)
    rows16 = split(d=d, dv=dv_of(d), hq=4, seed=125)
    names = _kernel_names(rows16)
    assert not any("prefill_kernel" in n for n in names), names
    run_and_compare(rows16, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("hq, sq", [(16, 8), (8, 200), (8, 300)], ids=["64 rows", "800 rows", "1200 rows"])
def test_prefill_sm90_deterministic_is_independent_of_the_batch(monkeypatch, d, hq, sq):
    """deterministic=True (test_deterministic's check on prefill-like shapes, without the force switch): the
    kernel rule and the splits depend on the sequence's rows and the capacity only, so a sequence has the
    same bits in every batch: 64 and 800 rows in the capacity's chunks (the split kernel and the combine),
    1200 rows in one pass; and the sm_90a kernel ran."""
    from inputs import DTYPES, randn
    from reference import reference_attention

    monkeypatch.delenv("KVATTN_FORCE_SM90_PREFILL", raising=False)
    lengths = np.array([9000, 300 + sq, 4097, 5000], np.int32)
    rng = np.random.default_rng(130 + sq)
    dt = DTYPES["bf16"]
    k_cache = randn(rng, (len(lengths), 9100, 2, d), dt)
    v_cache = randn(rng, (len(lengths), 9100, 2, dv_of(d)), dt)
    q = randn(rng, (len(lengths), sq, hq, d), dt)
    run = H.deterministic_rows(q, k_cache, v_cache, lengths, DEVICE)
    names = H.profiled_kernel_names(lambda: run([0, 1, 2, 3]))
    assert any("prefill_kernel" in n for n in names), names
    assert any("split_combine" in n for n in names) == (sq * hq // 2 <= 1024), names
    full_out, full_lse = run([0, 1, 2, 3])
    ref = reference_attention(q, k_cache, v_cache, cache_seqlens=lengths, causal=True)
    H.assert_close("out", full_out, ref["out"], H.TOL_OUT["bf16"])
    H.assert_close("lse", full_lse, ref["lse"], H.TOL_LSE["bf16"])
    for rows in ([0], [2, 0], [3, 1, 0], [1, 1, 2]):
        out, lse = run(rows)
        H.assert_rows_bitwise(out, lse, rows, full_out, full_lse, len(lengths))


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_splits_twice_same_bits(d):
    """Two calls give the same bits (the splits' partials merged in split order)."""
    from cases import build

    case = split(d=d, dv=dv_of(d), seed=124)
    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    args = (H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE))
    outs = [H.to_numpy(H.kvattn.flash_attn_with_kvcache(*args, **dev, return_softmax_lse=True)[0])
            for _ in range(2)]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_splits_nan_page_is_contained(d):
    """An out-of-range page id (in a middle split's share; every split checks the whole sequence): recorded,
    every split's partials of that sequence NaN, so its out and lse NaN through the combine; the other
    right."""
    # keys 1440-1455 of sequence 0's 3000
    H.assert_bad_page_contained(split(d=d, dv=dv_of(d), seed=125), 90, DEVICE, lse_nan=True)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("env", [{"KVATTN_SM90_TMA": "0"}, {"KVATTN_SM90_QROT": "1"}], ids=["cp_async", "qrot"])
def test_prefill_sm90_splits_same_bits(monkeypatch, d, env):
    """A split case through the cp.async producer instead of TMA, and with q rotated ahead: the same bits.
    Through cp.async the left paddings are whole pages: below an unaligned one TMA's first tile starts at the
    page boundary (kernel.cuh), cp.async's at the padding, so their tiles, and sums, differ (H200: 1 ulp)."""
    leftpad = (32, 16) if "KVATTN_SM90_TMA" in env else (37, 5)
    case = split(d=d, dv=dv_of(d), new=(8, 8), rotary="neox", leftpad=leftpad, seed=126)
    _same_bits(monkeypatch, case, {}, env)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_splits_cuda_graph(d):
    """The split kernel and the combine captured in a CUDA graph, replayed into poisoned outputs: the eager
    call's bits."""
    _graph_replays_give_eager_bits(split(d=d, dv=dv_of(d), seed=127))


@pytest.mark.parametrize("varlen_kernel", ["0", "1"])
@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_overlapping_cu_seqlens_q_is_an_error(monkeypatch, d, varlen_kernel):
    """A cu_seqlens_q that goes back (overlapping sequences) makes the varlen m-block line longer than the
    grid the launcher sized from total_q: the error is still recorded (by the grid's last CTA)."""
    monkeypatch.setenv("KVATTN_SM90_VARLEN", varlen_kernel)
    case = prefill(q_lens=(300, 1, 300), sq=0, seqlens=(400, 20, 400), d=d, dv=dv_of(d), seed=63)
    _overlapping_cu_seqlens_q_is_an_error(case)


MIXED = [name for name in CASES if name.startswith("mixed")]


@ONLY_D128
@pytest.mark.parametrize("name", MIXED)
def test_mixed_batches_on_the_portable_kernel(monkeypatch, name):
    """Mixed batches on the portable kernel too (its static grid: max m-blocks x batch), with splits."""
    monkeypatch.setenv("KVATTN_FORCE_PORTABLE", "1")
    run_and_compare(CASES[name], DEVICE)
    run_and_compare(dataclasses.replace(CASES[name], num_splits=3), DEVICE)


VARLEN_CASES = [name for name in CASES if name.startswith("mixed") or "varlen" in name]


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", VARLEN_CASES)
def test_prefill_sm90_varlen_kernel(monkeypatch, name, d):
    """The varlen instantiation (the m-block line; the default for varlen q, KVATTN_SM90_VARLEN=0 turns it off)."""
    monkeypatch.setenv("KVATTN_SM90_VARLEN", "1")
    run_and_compare(dataclasses.replace(CASES[name], d=d, dv=dv_of(d)), DEVICE)


@ONLY_D128
@pytest.mark.parametrize("name", list(CASES))
def test_prefill_sm90_pingpong_kernel(monkeypatch, name):
    """d 128's ping-pong kernel (KVATTN_SM90_PINGPONG=1; by default its consumers issue independently)."""
    monkeypatch.setenv("KVATTN_SM90_PINGPONG", "1")
    run_and_compare(dataclasses.replace(CASES[name], d=128), DEVICE)


# The persistent instantiation (KVATTN_SM90_PERSISTENT=1, q without cu_seqlens_q only): at most a CTA an SM,
# each taking units (128 packed rows of a (sequence, kv head)) blockIdx.x, + gridDim.x, ... with the stage
# ring running on across them. WRITTEN WITHOUT A GPU (session 6, branch persist). The cases above with a
# fixed q length are fewer units than SMs (a unit a CTA); MANY_UNITS are more units than the 114-132 SMs of
# sm_90 parts (several a CTA, of different tile counts: causal m-blocks, sequences of different lengths).
PERSISTENT_CASES = [name for name in CASES if CASES[name].q_lens is None]
PERSISTENT_CONTIGUOUS = [name for name in CONTIGUOUS_TMA_CASES if CONTIGUOUS_TMA_CASES[name].q_lens is None]
MANY_UNITS = {
    # 4 sequences x 10 kv heads x 4 m-blocks of 128 rows (200 tokens x GQA 2) = 160 units
    "causal paged 16": prefill(layout="paged", page_size=16, hq=20, hk=10, seqlens=(500, 210, 330, 205), sq=200,
                               seed=70),
    "non-causal paged 1": prefill(layout="paged", page_size=1, hq=20, hk=10, seqlens=(400, 210, 330, 205),
                                  sq=200, causal=False, seed=71),
    "causal paged 64, leftpad": prefill(layout="paged", page_size=64, hq=20, hk=10, seqlens=(450, 210, 330, 300),
                                        leftpad=(0, 5, 64, 100), sq=200, seed=72),
    "causal contiguous, window": prefill(hq=20, hk=10, seqlens=(500, 210, 330, 205), sq=200, window=(150, 0),
                                         seed=73),
    # 8 x 16 x 3 = 384 units (about 3 a CTA), q shorter than the last block (4 rows), fp16
    "MHA fp16 seqused_q": prefill(dtype="fp16", layout="paged", page_size=16, hq=16, hk=16,
                                  seqlens=(500, 260, 300, 700, 270, 350, 280, 290), sq=260, seqused_q=True,
                                  seed=74),
    # 3 x 4 x (9 m-blocks of 128 rows, 6 of 192 at d 64: 1100 tokens x GQA 1) = 108 / 72 units; the last
    # m-block's rows end in its last consumer (76 of 128: 12 in the second; 140 of 192: 12 in the third)
    "MHA, last m-block ends in its last consumer": prefill(layout="paged", page_size=16, hq=4, hk=4,
                                                          seqlens=(1200, 1300, 1100), sq=1100, seed=77),
    # v2's counter and order (session 6, persist2): 3 x 8 x 16 = 384 causal units of very different lengths
    # (1000 tokens x GQA 2 = 16 m-blocks of 128 rows over 1000-1500 keys: 1-12 tiles of 128 keys)
    "causal, 384 units of 1-12 tiles": prefill(layout="paged", page_size=16, hq=16, hk=8, seqlens=(1000, 1500, 1100),
                                               sq=1000, seed=76),
}


@pytest.fixture
def persistent(monkeypatch):
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", PERSISTENT_CASES)
def test_prefill_sm90_persistent(persistent, name, d):
    run_and_compare(dataclasses.replace(CASES[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", PERSISTENT_CONTIGUOUS)
def test_prefill_sm90_persistent_contiguous_tma(persistent, name, d):
    run_and_compare(dataclasses.replace(CONTIGUOUS_TMA_CASES[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(MANY_UNITS))
def test_prefill_sm90_persistent_many_units(persistent, name, d):
    run_and_compare(dataclasses.replace(MANY_UNITS[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("tma", ["1", "0"])
def test_prefill_sm90_persistent_cp_async_producer(monkeypatch, persistent, d, tma):
    """Both producers run the unit loop (KVATTN_SM90_TMA=0: the cp.async one, 128 arrivals a stage)."""
    monkeypatch.setenv("KVATTN_SM90_TMA", tma)
    run_and_compare(dataclasses.replace(MANY_UNITS["causal paged 16"], leftpad=(33, 7, 0, 16), d=d, dv=dv_of(d), seed=75), DEVICE)


def _call(case, monkeypatch, env, edit=None):
    from cases import DTYPES, build

    H.skip_unsupported_on(DEVICE, DTYPES[case.dtype])  # (a developer build's missing dtype)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    kw = dict(kw)
    if edit is not None:
        edit(kw)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    with H.poisoned_outputs():
        out, lse = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                                    H.to_device(v_cache, DEVICE), return_softmax_lse=True, **dev)
    return out, lse, (q, k_cache, v_cache, ref_kw)


def _same_bits(monkeypatch, case, env0, env1):
    """The call under env0, then under env1: the same bits of out and lse (and finite)."""
    results = []
    for env in (env0, env1):
        out, lse, _ = _call(case, monkeypatch, env)
        H.sync_device_errors(DEVICE)
        results.append((H.to_numpy(out), H.to_numpy(lse)))
    (out0, lse0), (out1, lse1) = results
    assert np.isfinite(out1).all()
    np.testing.assert_array_equal(out0.view(np.uint16), out1.view(np.uint16))
    np.testing.assert_array_equal(lse0, lse1)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", ["causal paged 16", "non-causal paged 1", "causal contiguous, window"])
def test_prefill_sm90_persistent_same_bits(monkeypatch, name, d):
    """A unit computes what the CTA of the other kernel computes, in the same order: the same bits."""
    case = dataclasses.replace(MANY_UNITS[name], d=d, dv=dv_of(d))
    _same_bits(monkeypatch, case, {"KVATTN_SM90_PERSISTENT": "0"}, {"KVATTN_SM90_PERSISTENT": "1"})


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("persistent", ["0", "1"])
def test_prefill_sm90_out_rows_at_odd_elements(monkeypatch, d, persistent):
    """out as a view whose rows start at every other element (head stride dv + 1, offset 1): rows that are
    not 4-byte aligned take the epilogue's element-wise stores, the others its 32-bit ones; both must write
    the bits a contiguous out gets, and nothing in between. (Written without a GPU, session 17.)"""
    import torch

    case = dataclasses.replace(MANY_UNITS["causal paged 16"], d=d, dv=dv_of(d))
    env = {"KVATTN_SM90_PERSISTENT": persistent}
    base, _, _ = _call(case, monkeypatch, env)
    H.sync_device_errors(DEVICE)
    b, sq, hq, dv = base.shape
    buf = torch.full((b, sq, hq, dv + 1), float("nan"), dtype=base.dtype, device=base.device)
    view = buf[..., 1:]
    out, _, _ = _call(case, monkeypatch, env, lambda kw: kw.update(out=view))
    H.sync_device_errors(DEVICE)
    assert out.data_ptr() == view.data_ptr()
    np.testing.assert_array_equal(H.to_numpy(base).view(np.uint16), H.to_numpy(view).view(np.uint16))
    assert torch.isnan(buf[..., 0]).all(), "an element between two rows was written"


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_persistent_q_at_odd_elements(monkeypatch, d):
    """q as a view one element into rows of d + 1 (q.ptr 2 bytes past a 16-byte boundary) on the persistent
    kernel: a CTA's later units load Q by cp.async under the previous unit's last P V, and zero-fill the rows
    past seqused_q with a cp.async whose source must be 16-byte aligned even for no bytes (it was q.ptr: an
    address the PTX ISA leaves undefined; session 33's audit; such a copy need not fault, so memcheck is
    this test's other half). At d 128, 160 units on <= 132 CTAs: 28 or more CTAs have a second unit. The bits of a
    contiguous q, and no device error."""
    import torch
    from cases import DTYPES, build

    case = dataclasses.replace(MANY_UNITS["causal paged 16"], d=d, dv=dv_of(d), seqused_q=True)
    H.skip_unsupported_on(DEVICE, DTYPES[case.dtype])
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    kc, vc = H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE)
    q_dev = H.to_device(q, DEVICE)
    results = []
    for odd in (False, True):
        if odd:
            buf = torch.full(q.shape[:-1] + (q.shape[-1] + 1,), float("nan"), dtype=q_dev.dtype, device=q_dev.device)
            buf[..., 1:] = q_dev
            q_in = buf[..., 1:]
            assert q_in.data_ptr() % 16 != 0
        else:
            q_in = q_dev
        with H.poisoned_outputs():
            out, lse = H.kvattn.flash_attn_with_kvcache(q_in, kc, vc, return_softmax_lse=True, **dev)
        H.sync_device_errors(DEVICE)
        results.append((H.to_numpy(out), H.to_numpy(lse)))
    (out0, lse0), (out1, lse1) = results
    assert np.isfinite(out0).all()  # (rows past seqused_q: 0)
    np.testing.assert_array_equal(out0.view(np.uint16), out1.view(np.uint16))
    np.testing.assert_array_equal(lse0, lse1)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("tma", ["1", "0"])
def test_prefill_sm90_persistent_nan_page_is_contained(monkeypatch, d, tma):
    """An out-of-range page id makes its sequence's units NaN rows (both consumers' halves, no tiles), and
    the units after them on the same CTAs still right (sequence 0's units come first in the unit order: a
    CTA's first unit or an early claim, the other sequences' after them)."""
    from reference import reference_attention

    case = dataclasses.replace(MANY_UNITS["causal paged 16"], d=d, dv=dv_of(d))

    def bad_page(kw):
        table = kw["page_table"].copy()
        table[0, 5] = 1 << 20
        kw["page_table"] = table

    out, lse, (q, k_cache, v_cache, ref_kw) = _call(case, monkeypatch,
                                                   {"KVATTN_SM90_PERSISTENT": "1", "KVATTN_SM90_TMA": tma},
                                                   bad_page)
    with pytest.raises(H.kvattn.KvattnError, match="page_table"):
        H.sync_device_errors(DEVICE)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    out, lse = H.to_numpy(out), H.to_numpy(lse)
    assert np.isnan(out[0]).all() and np.isnan(lse[0]).all()
    keep = [1, 2, 3]
    H.assert_close("out", out[keep], ref["out"][keep], H.TOL_OUT["bf16"])


# v2 (session 6, branch persist2, WRITTEN WITHOUT A GPU): units claimed from a counter in the workspace that
# the launcher zeroes on the stream, in sections (KVATTN_SM90_SECTIONS: 1 = longest first over the grid, as
# many as (sequence, kv head) pairs = v1's unit-major order); the next unit's Q loaded under the last P V.
LENGTHS = "causal, 384 units of 1-12 tiles"


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_persistent_sections_same_bits(monkeypatch, d):
    """Whatever the unit order (sections), a unit computes what the other kernel's CTA computes."""
    case = dataclasses.replace(MANY_UNITS[LENGTHS], d=d, dv=dv_of(d))
    base, _, _ = _call(case, monkeypatch, {"KVATTN_SM90_PERSISTENT": "0"})
    H.sync_device_errors(DEVICE)
    base = H.to_numpy(base)
    for sections in ("1", "5", "24", "0"):  # 24 = 3 x 8 pairs; 0 = the launcher's choice
        out, _, _ = _call(case, monkeypatch, {"KVATTN_SM90_PERSISTENT": "1", "KVATTN_SM90_SECTIONS": sections})
        H.sync_device_errors(DEVICE)
        out = H.to_numpy(out)
        assert np.isfinite(out).all(), f"sections {sections}: a unit left unwritten"
        np.testing.assert_array_equal(base.view(np.uint16), out.view(np.uint16), err_msg=f"sections {sections}")


# The persistent kernel's counter: zeroed by a memset node ("memset"), or, behind an append, by the append
# kernel with the prefill kernel launched early behind it ("by append": the default behind an append since
# session 24; KVATTN_SM90_COUNTER_BY_APPEND=0 takes the memset there). "memset" with an append too: the
# case's q tokens appended first (rotary).
COUNTERS = ["memset", "memset, append", "by append"]


def _counter_case(monkeypatch, case, counter):
    monkeypatch.setenv("KVATTN_SM90_COUNTER_BY_APPEND", "1" if counter == "by append" else "0")
    if counter == "memset":
        return case
    return dataclasses.replace(case, new=(case.sq,) * len(case.seqlens), rotary="neox")


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("counter", COUNTERS)
def test_prefill_sm90_persistent_twice_in_a_row(monkeypatch, d, counter):
    """The second call starts from a zeroed counter again (else its CTAs would find every unit claimed and
    leave the poisoned rows): both calls give the same bits, and the oracle's values."""
    case = _counter_case(monkeypatch, dataclasses.replace(MANY_UNITS[LENGTHS], d=d, dv=dv_of(d)), counter)
    results = []
    for _ in range(2):
        out, lse, _ = _call(case, monkeypatch, {"KVATTN_SM90_PERSISTENT": "1"})
        H.sync_device_errors(DEVICE)
        results.append((H.to_numpy(out), H.to_numpy(lse)))
    (out0, lse0), (out1, lse1) = results
    assert np.isfinite(out0).all() and np.isfinite(out1).all()
    np.testing.assert_array_equal(out0.view(np.uint16), out1.view(np.uint16))
    np.testing.assert_array_equal(lse0, lse1)
    run_and_compare(case, DEVICE)


def _graph_replays_give_eager_bits(case):
    """The case captured in a CUDA graph, replayed twice into poisoned outputs: the eager call's bits."""
    import torch
    from cases import build

    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    qd, kc, vc = (H.to_device(x, DEVICE) for x in (q, k_cache, v_cache))

    def call():
        return H.kvattn.flash_attn_with_kvcache(qd, kc, vc, return_softmax_lse=True, **dev)

    eager_out, eager_lse = call()
    H.sync_device_errors(DEVICE)
    side = torch.cuda.Stream()  # warm up off the capture stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    H.sync_device_errors(DEVICE)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = call()
    for replay in range(2):
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        H.sync_device_errors(DEVICE)
        assert torch.equal(out.view(torch.int16), eager_out.view(torch.int16)), f"replay {replay}: out"
        assert torch.equal(lse, eager_lse), f"replay {replay}: lse"


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("counter", COUNTERS)
def test_prefill_sm90_persistent_cuda_graph(monkeypatch, d, counter):
    """Captured in a CUDA graph (the counter's memset, or the append that zeroes it, is a node of it),
    replayed twice into poisoned outputs: the eager call's bits each time."""
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
    case = _counter_case(monkeypatch, dataclasses.replace(MANY_UNITS[LENGTHS], d=d, dv=dv_of(d)), counter)
    _graph_replays_give_eager_bits(case)


# q rotated once ahead of the kernel (src/cuda/append/rotate_q.cu; KVATTN_SM90_QROT=1, not the default since
# session 18; written in session 7, checked on the H200 in session 8): a kernel
# pass writes the rotated q into the workspace and the prefill kernel loads it as a q without rotary, so
# with the switch on every rotary case must give the bits of the switch off (the same fp32 arithmetic,
# rounded to q's dtype once). The rotary cases above, and q-only rotary with rotary_dim < d (the chunk path:
# rotary_dim % 16 == 0; the element path: 40), every token at p_i (non-causal), cos/sin in q's dtype,
# rotary_seqlens, seqused_q, GQA 8, leftpad + scattered batch rows, strided q, varlen q on the m-block line.
ROTARY_CASES = {
    **{name: CASES[name] for name in CASES if CASES[name].rotary},
    **{"tma " + name: CONTIGUOUS_TMA_CASES[name] for name in CONTIGUOUS_TMA_CASES if CONTIGUOUS_TMA_CASES[name].rotary},
    "q only, interleaved, rotary_dim 32": prefill(rotary="interleaved", rotary_dim=32, seed=80),
    "q only, neox, rotary_dim 40 (element path), non-causal": prefill(rotary="neox", rotary_dim=40, causal=False,
                                                                      seed=81),
    "GQA 8 seqused_q, neox, cos/sin in q dtype": prefill(hq=16, hk=2, seqlens=(300, 100), sq=100, seqused_q=True,
                                                         rotary="neox", rotary_in_q_dtype=True, seed=82),
    "batch idx + leftpad, rotary_seqlens": prefill(batch_idx="scattered", leftpad=(50, 0), rotary="interleaved",
                                                   rotary_seqlens=True, new=(20, 20), seed=83),
    "strided q, neox": prefill(strided_q=True, rotary="neox", seed=84),
    "mixed varlen q, interleaved rotary_dim 32": prefill(layout="paged", page_size=16, q_lens=(300, 1, 1, 0, 2, 1),
                                                         sq=0, seqlens=(500, 200, 33, 90, 130, 257),
                                                         rotary="interleaved", rotary_dim=32, seed=85),
    "fp16 varlen q append, neox": prefill(dtype="fp16", layout="paged", page_size=16, seqlens=(300, 90),
                                          new=(200, 150), varlen_new=True, q_lens=(200, 150), sq=0, rotary="neox",
                                          seed=86),
}
QROT_PERSISTENT = {
    # MANY_UNITS' 160 causal units, q-only rotary (the persistent kernel's next-unit Q load is a plain copy)
    "causal paged 16, neox": dataclasses.replace(MANY_UNITS["causal paged 16"], rotary="neox", seed=87),
    "non-causal paged 1, interleaved rotary_dim 32": dataclasses.replace(MANY_UNITS["non-causal paged 1"],
                                                                         rotary="interleaved", rotary_dim=32, seed=88),
    "MHA fp16 seqused_q, neox rotary_dim 40, append": dataclasses.replace(MANY_UNITS["MHA fp16 seqused_q"],
                                                                          rotary="neox", rotary_dim=40,
                                                                          new=(20,) * 8, seed=89),
    # leftpad, scattered batch rows and per-sequence rotary positions under the next-unit Q load (written
    # without a GPU, session 18: the persistent kernel now rotates q itself by default)
    "causal paged 64, leftpad, batch idx, rotary_seqlens": dataclasses.replace(
        MANY_UNITS["causal paged 64, leftpad"], batch_idx="scattered", rotary="interleaved",
        rotary_seqlens=True, seed=93),
}


@pytest.mark.parametrize("qrot", ["0", "1"], ids=["qrot_off", "qrot_on"])
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(ROTARY_CASES))
def test_prefill_sm90_rotary(monkeypatch, name, d, qrot):
    monkeypatch.setenv("KVATTN_SM90_QROT", qrot)
    run_and_compare(dataclasses.replace(ROTARY_CASES[name], d=d, dv=dv_of(d)), DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(ROTARY_CASES))
def test_prefill_sm90_qrot_same_bits(monkeypatch, name, d):
    """q rotated ahead gives the bits of the kernel's own rotation."""
    case = dataclasses.replace(ROTARY_CASES[name], d=d, dv=dv_of(d))
    _same_bits(monkeypatch, case, {"KVATTN_SM90_QROT": "0"}, {"KVATTN_SM90_QROT": "1"})


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(QROT_PERSISTENT))
def test_prefill_sm90_qrot_persistent_same_bits(monkeypatch, name, d):
    """The persistent kernel on a q rotated ahead (what W3's fixed-q cases take with the switch on) gives
    the bits of today's default (the max-grid kernel rotating q in its Q load), and the oracle's values."""
    case = dataclasses.replace(QROT_PERSISTENT[name], d=d, dv=dv_of(d))
    _same_bits(monkeypatch, case, {"KVATTN_SM90_PERSISTENT": "0", "KVATTN_SM90_QROT": "0"},
               {"KVATTN_SM90_PERSISTENT": "1", "KVATTN_SM90_QROT": "1"})
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("name", list(QROT_PERSISTENT))
def test_prefill_sm90_persistent_rotates_q(monkeypatch, name, d):
    """The persistent kernel rotating q itself, several units a CTA (the next unit's Q by load_q_async under
    the last P V: whole rotated chunks by RotaryChunk, rotary_dim 40 channel by channel, plain chunks by
    cp.async): the bits of the max-grid kernel's own rotation and of q rotated ahead, and the oracle's
    values. (Session 18.)"""
    case = dataclasses.replace(QROT_PERSISTENT[name], d=d, dv=dv_of(d))
    _same_bits(monkeypatch, case, {"KVATTN_SM90_PERSISTENT": "0", "KVATTN_SM90_QROT": "0"},
               {"KVATTN_SM90_PERSISTENT": "1", "KVATTN_SM90_QROT": "0"})
    _same_bits(monkeypatch, case, {"KVATTN_SM90_PERSISTENT": "1", "KVATTN_SM90_QROT": "1"},
               {"KVATTN_SM90_PERSISTENT": "1", "KVATTN_SM90_QROT": "0"})
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
    monkeypatch.setenv("KVATTN_SM90_QROT", "0")
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_qrot_runs(monkeypatch, d):
    """With the switch the rotation kernel runs (sm_90 devices with a 90a build only), and without it not."""
    case = dataclasses.replace(ROTARY_CASES["q only, interleaved, rotary_dim 32"], d=d, dv=dv_of(d))
    for qrot in ("0", "1"):
        monkeypatch.setenv("KVATTN_SM90_QROT", qrot)
        names = _kernel_names(case)
        assert any("prefill_kernel" in n for n in names), names
        assert any("rotate_q_kernel" in n for n in names) == (qrot == "1"), names


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_qrot_default_rule(monkeypatch, d):
    """Without the switches q is not rotated ahead (session 18: the persistent kernel rotating its next unit's
    Q under the last P V beat the extra pass on W3): no rotation kernel at 384 units (the persistent kernel,
    >= 2 units an SM of the H200's 132) nor at 160; both the oracle's values, the 384-unit case the bits of
    the max-grid kernel's own rotation (both switches 0)."""
    many = dataclasses.replace(MANY_UNITS["MHA fp16 seqused_q"], rotary="neox", d=d, dv=dv_of(d), seed=92)  # 384 units
    few = dataclasses.replace(QROT_PERSISTENT["causal paged 16, neox"], d=d, dv=dv_of(d))  # 160 units
    for case in (many, few):  # leaves both switches unset
        monkeypatch.delenv("KVATTN_SM90_QROT", raising=False)
        monkeypatch.delenv("KVATTN_SM90_PERSISTENT", raising=False)
        names = _kernel_names(case)
        assert any("prefill_kernel" in n for n in names), names
        assert not any("rotate_q_kernel" in n for n in names), names
        run_and_compare(case, DEVICE)
    _same_bits(monkeypatch, many, {}, {"KVATTN_SM90_PERSISTENT": "0", "KVATTN_SM90_QROT": "0"})


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_qrot_overlapping_cu_seqlens_q_is_an_error(monkeypatch, d):
    """A broken cu_seqlens_q (the line longer than the rotation kernel's grid too): the error is recorded
    and nothing is read or written out of bounds (compute-sanitizer in tools/qrot_check.sh)."""
    monkeypatch.setenv("KVATTN_SM90_QROT", "1")
    case = prefill(q_lens=(300, 1, 300), sq=0, seqlens=(400, 20, 400), d=d, dv=dv_of(d), rotary="neox", seed=90)
    _overlapping_cu_seqlens_q_is_an_error(case)


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_prefill_sm90_qrot_cuda_graph(monkeypatch, d):
    """Captured in a CUDA graph with the switch on and the persistent kernel (the rotation kernel and the
    counter's memset are nodes of it), replayed twice into poisoned outputs: the eager call's bits."""
    monkeypatch.setenv("KVATTN_SM90_QROT", "1")
    monkeypatch.setenv("KVATTN_SM90_PERSISTENT", "1")
    _graph_replays_give_eager_bits(dataclasses.replace(QROT_PERSISTENT["causal paged 16, neox"], d=d, dv=dv_of(d)))


def _unlike_caches(rng, kind, d, dv, page_size):
    """(k, v, page_table, seqlens): caches the producer must not read as one another's rows. 'v padded': V's
    slot and page strides unlike K's (its second row walk); 'interleaved': K and V views of one buffer, V at
    the lower address (equal strides: V's rows as K's plus a negative distance)."""
    from inputs import nan_fill_invalid, paged_from_contiguous, randn

    seqlens = np.array([300, 77], np.int32)
    k = nan_fill_invalid(randn(rng, (2, 300, 2, d), H.BF16), seqlens)
    v = nan_fill_invalid(randn(rng, (2, 300, 2, dv), H.BF16), seqlens)
    (kp, vp), table = paged_from_contiguous(rng, [k, v], page_size)
    if kind == "v padded":
        wide = np.full(vp.shape[:-1] + (dv + 32,), np.nan, vp.dtype)
        wide[..., :dv] = vp
        return kp, wide[..., :dv], table, seqlens
    both = np.empty(kp.shape[:2] + (2,) + kp.shape[2:], kp.dtype)
    both[:, :, 0], both[:, :, 1] = vp, kp
    return both, None, table, seqlens


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("page_size", [1, 7, 16])
@pytest.mark.parametrize("kind", ["v padded", "interleaved"])
@pytest.mark.parametrize("tma", ["1", "0"])
def test_prefill_sm90_v_laid_out_unlike_k(monkeypatch, d, page_size, kind, tma):
    """V's rows are not K's rows plus a constant where their strides differ, and are where they are equal
    even below K in one buffer: through the cp.async producer (page 1, 7; every page size under
    KVATTN_SM90_TMA=0) and TMA (page 16), on the sm_90a kernel."""
    from inputs import randn
    from reference import reference_attention

    dv = dv_of(d)
    if kind == "interleaved" and dv != d:
        pytest.skip("one buffer holds K and V rows of one width")
    monkeypatch.setenv("KVATTN_SM90_TMA", tma)
    rng = np.random.default_rng(5100 + d + page_size)
    k, v, table, seqlens = _unlike_caches(rng, kind, d, dv, page_size)
    q = randn(rng, (2, 80, 8, d), H.BF16)
    if kind == "interleaved":  # one device buffer, two views of it
        both = H.to_device(k, DEVICE)
        k, v, kc, vc = k[:, :, 1], k[:, :, 0], both[:, :, 1], both[:, :, 0]
    else:
        kc, vc = H.to_device(k, DEVICE), H.to_device(v, DEVICE)
    kw = dict(cache_seqlens=seqlens, page_table=table.astype(np.int32), causal=True)
    ref = reference_attention(q, k, v, **kw)
    dev = {name: H.to_device(x, DEVICE) for name, x in kw.items()}
    qd = H.to_device(q, DEVICE)
    with H.poisoned_outputs():
        out, lse = H.kvattn.flash_attn_with_kvcache(qd, kc, vc, return_softmax_lse=True, **dev)
    H.sync_device_errors(DEVICE)
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT["bf16"])
    H.assert_close("lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE["bf16"])
    names = H.profiled_kernel_names(lambda: H.kvattn.flash_attn_with_kvcache(qd, kc, vc, **dev))
    assert any("prefill_kernel" in n for n in names), names  # (not the portable kernel's)
