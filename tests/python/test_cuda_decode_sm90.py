"""The Hopper decode kernel (src/cuda/decode_sm90): the decode shapes it takes (d = dv = 128, <= 32 packed
rows in 16-row groups, the balanced schedule) across layouts, page sizes, fp8 caches and the contract's
features, at lengths that end mid-stage (0, 1, 31-33, 63-65, ...) and with skewed batches, so that pieces
straddle CTAs and stages. The kernel is on by default with 8 producer warps (KVATTN_DECODE_SM90 = 0 turns it off, 2 or 4 picks
the producer count; see decode_sm90.hpp): these tests pick KVATTN_TEST_DECODE_SM90 (default 8). On other GPUs
the same cases run on the portable kernels (and still check the oracle). On sm_90 the dispatch is checked
too: the kernel runs by default and when asked for, unless KVATTN_FORCE_PORTABLE=1 or KVATTN_DECODE_SM90=0.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import harness as H
from cases import Case, build, run_and_compare
from reference import reference_attention

pytestmark = pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICE = "cuda"

# Lengths around the 32/64-key stage and tile edges, an empty and a one-key sequence, one long one.
_EDGES = (0, 1, 31, 32, 33, 63, 64, 65, 127, 129, 1500)
_SKEW = (2500,) + tuple(int(x) for x in np.random.default_rng(11).integers(1, 600, 10)) + (0, 1)


@pytest.fixture(autouse=True)
def _decode_sm90_on(monkeypatch):
    """The library reads the switch at every call: on for each test of this file only. And 32 packed rows
    stay on this kernel (bf16 / fp16 caches at d 128 take the prefill split kernel by default since session
    34; varlen q and fp8 caches still reach this kernel's two row groups, which these tests keep covering)."""
    monkeypatch.setenv("KVATTN_DECODE_SM90", os.environ.get("KVATTN_TEST_DECODE_SM90", "8"))
    monkeypatch.setenv("KVATTN_SM90_SPLIT_ROWS", "64")
    # Few units (batch x kv heads <= 16) take the cluster form by default; these tests keep the persistent
    # kernel, the cluster tests below unset it.
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER", "0")


def _sm90():
    torch = sys.modules["torch"]
    return torch.cuda.get_device_capability()[0] == 9


@pytest.mark.parametrize("kv_fp8", [False, True])
@pytest.mark.parametrize("layout,page", [("contiguous", 0), ("paged", 1), ("paged", 16), ("paged", 64),
                                         ("packed", 0)])
def test_layouts_edges(layout, page, kv_fp8):
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=8, hk=2, seqlens=_EDGES, sq=1, layout=layout,
                page_size=max(page, 1), num_splits=0, seed=page + 7 * kv_fp8)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("fp8_math", ["f16", "bf16"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize("page", [1, 16])
def test_fp8_cache_skewed(dtype, page, fp8_math, monkeypatch):
    """fp8 e4m3 caches with f16 / bf16 / fp8 q: K and V converted in registers; descales per (b, kv head).
    bf16 / fp8 q compute in f16 (q scaled into its range) or, KVATTN_DECODE_SM90_FP8_BF16=1, in bf16."""
    monkeypatch.setenv("KVATTN_DECODE_SM90_FP8_BF16", "1" if fp8_math == "bf16" else "0")
    case = Case(dtype=dtype, kv_fp8=True, d=128, hq=8, hk=2, seqlens=_SKEW, sq=1, layout="paged",
                page_size=page, batch_idx="scattered", num_splits=0, seed=page)
    run_and_compare(case, DEVICE)


# Feature sets both forms of the kernel are checked with (the cluster form adds its own).
_FEATURES = [
    dict(sinks="fp32", leftpad=(3, 0, 17, 1, 40)),
    dict(new=(1, 1, 1, 1, 1), rotary="neox", batch_idx="scattered"),
    dict(window=(100, 0), causal=True, softcap=15.0),
    dict(alibi="bh", chunk=96, causal=True),
    dict(seqused_q=True, sq=3, causal=True, sinks="bf16"),
]


@pytest.mark.parametrize("features", _FEATURES)
@pytest.mark.parametrize("kv_fp8", [False, True])
def test_features(features, kv_fp8):
    kw = dict(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=8, hk=2, seqlens=(700, 1, 0, 333, 1300), sq=1,
              layout="paged", page_size=16, num_splits=0, seed=len(features))
    kw.update(features)
    if kw.get("leftpad"):
        kw["seqlens"] = tuple(n + lp for n, lp in zip(kw["seqlens"], kw["leftpad"]))
    run_and_compare(Case(**kw), DEVICE)


# fp8 caches on 8 consumer warps and 4 producer warps (the default for <= 16 packed rows since session 26)
# and on the 4-consumer kernel (KVATTN_DECODE_SM90_FP8_CONSUMERS=4): the merge over 8 warps' states, 16
# threads a row at the piece's end, Q rows 8 channels a thread; layouts, features, skewed pages, speculative
# rows (<= 16: one group).
_EIGHT = [
    dict(seqlens=_EDGES, layout="contiguous"),
    dict(seqlens=_EDGES, layout="paged", page_size=1),
    dict(seqlens=_SKEW, layout="paged", page_size=16, batch_idx="scattered", dtype="fp16"),
    dict(seqlens=(700, 1, 0, 333, 1300), layout="paged", page_size=16, sinks="fp32", leftpad=(3, 0, 17, 1, 40)),
    dict(seqlens=(700, 1, 0, 333, 1300), layout="paged", page_size=64, window=(100, 0), causal=True,
         softcap=15.0, alibi="bh"),
    dict(seqlens=(1500, 65, 9, 2000), layout="paged", page_size=16, sq=4, new=(4,) * 4, causal=True,
         rotary="neox"),
    dict(seqlens=_SKEW, layout="paged", page_size=16, dtype="fp8"),
]


# (environment, case): fp8 in bf16 math; deterministic mode with 128-key chunks (pieces of 2 stages on the
# 4-consumer kernel, 4 on the 8-consumer one: shorter than the warps' phases, so some warps' states are empty
# in the merge). q far from f16's range: test_fp8_cache_q_magnitude.
_EIGHT_MORE = [
    (dict(KVATTN_DECODE_SM90_FP8_BF16="1"), dict(seqlens=_SKEW, layout="paged", page_size=16)),
    (dict(KVATTN_DECODE_SM90_DET_CHUNK="128"), dict(seqlens=_EDGES, layout="paged", page_size=16,
                                                    deterministic=True)),
]


@pytest.mark.parametrize("consumers", ["8", "4"])
@pytest.mark.parametrize("k", range(len(_EIGHT) + len(_EIGHT_MORE)))
def test_fp8_consumer_warps(k, consumers, monkeypatch):
    monkeypatch.setenv("KVATTN_DECODE_SM90_FP8_CONSUMERS", consumers)
    kw = dict(dtype="bf16", kv_fp8=True, d=128, hq=8, hk=2, sq=1, page_size=1, num_splits=0, seed=300 + k)
    if k < len(_EIGHT):
        kw.update(_EIGHT[k])
    else:
        env, case = _EIGHT_MORE[k - len(_EIGHT)]
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        kw.update(case)
    if kw.get("leftpad"):
        kw["seqlens"] = tuple(n + lp for n, lp in zip(kw["seqlens"], kw["leftpad"]))
    run_and_compare(Case(**kw), DEVICE)


@pytest.mark.parametrize("sq,hq,hk", [(2, 8, 2), (4, 8, 2), (8, 4, 2)])
@pytest.mark.parametrize("kv_fp8", [False, True])
def test_speculative(sq, hq, hk, kv_fp8):
    """2-8 query tokens, GQA rows packed (g x q <= 16), causal among the new tokens."""
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=hq, hk=hk, seqlens=(1500, 65, 9, 2000), sq=sq,
                new=(sq,) * 4, causal=True, layout="paged", page_size=16, num_splits=0, seed=sq * hq)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("sq,hq,hk", [(3, 8, 1), (4, 8, 1), (8, 16, 4), (2, 16, 1), (4, 16, 2), (9, 8, 4)])
@pytest.mark.parametrize("kv_fp8", [False, True])
def test_speculative_row_groups(sq, hq, hk, kv_fp8):
    """17-32 packed rows (g x q): two 16-row groups, each stage read by one warp of each group;
    lengths at the stage and tile edges, causal among the new tokens."""
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=hq, hk=hk, seqlens=_EDGES, sq=sq,
                new=(sq,) * len(_EDGES), causal=True, layout="paged", page_size=16, num_splits=0,
                seed=sq * hq + hk)
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("features", [
    dict(sinks="fp32", leftpad=(3, 0, 17, 1, 40), layout="contiguous"),
    dict(rotary="neox", batch_idx="scattered", page_size=1),
    dict(window=(100, 0), softcap=15.0, alibi="bh"),
    dict(seqused_q=True, sinks="bf16", chunk=96),
    dict(dtype="fp16", batch_idx="scattered", leftpad=(0, 9, 2, 0, 5), page_size=64),
])
@pytest.mark.parametrize("kv_fp8", [False, True])
def test_row_groups_features(features, kv_fp8):
    """The contract's features on 2 row groups (sq = 5 under groups of 6: 30 rows, the second group partly
    padding), appended and causal."""
    kw = dict(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=12, hk=2, seqlens=(700, 1, 0, 333, 1300), sq=5,
              new=(5,) * 5, causal=True, layout="paged", page_size=16, num_splits=0, seed=len(features) + 40)
    kw.update(features)
    if kw.get("leftpad"):
        kw["seqlens"] = tuple(n + lp for n, lp in zip(kw["seqlens"], kw["leftpad"]))
    run_and_compare(Case(**kw), DEVICE)


def test_row_groups_skewed_page1():
    """Many units of 32 rows over the balanced schedule: pieces straddle CTAs, the row groups' stages
    interleave with the producers' ring."""
    lens = tuple(int(x) for x in np.random.default_rng(5).integers(0, 900, 40)) + (3000,)
    case = Case(dtype="bf16", d=128, hq=32, hk=8, seqlens=lens, sq=8, new=(8,) * len(lens), causal=True,
                layout="paged", page_size=1, num_splits=0, seed=5)
    run_and_compare(case, DEVICE)


def _compare_bf16(q, k_cache, v_cache, kw, ref_kw):
    """One call on arrays a test changed after build(): against the oracle at bf16 tolerances."""
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    out, lse = H.call_poisoned(q, k_cache, v_cache, kw, DEVICE)
    H.sync_device_errors(DEVICE)
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT["bf16"])
    H.assert_close("lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE["bf16"])


@pytest.mark.parametrize("consumers", ["4", "8"])  # KVATTN_DECODE_SM90_FP8_CONSUMERS (8: max |q| over 8 warps)
@pytest.mark.parametrize("q_mult", [2.0 ** 17, 2.0 ** -20])
def test_fp8_cache_q_magnitude(q_mult, consumers, monkeypatch):
    """bf16 q far outside f16's range (|q| ~ 2^19) or deep in its subnormals (~2^-18): the f16 math of fp8
    caches scales q by a power of two first, so the result matches the oracle as for ordinary q."""
    monkeypatch.setenv("KVATTN_DECODE_SM90_FP8_CONSUMERS", consumers)
    d = 128
    case = Case(dtype="bf16", kv_fp8=True, d=d, hq=8, hk=2, seqlens=(900, 70, 5), sq=1, layout="paged",
                page_size=16, num_splits=0, scale=1.0 / (q_mult * np.sqrt(d)), seed=5)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    q = (q.astype(np.float32) * np.float32(q_mult)).astype(q.dtype)  # exact: a power of two
    _compare_bf16(q, k_cache, v_cache, kw, ref_kw)


@pytest.mark.parametrize("consumers", ["4", "8"])  # KVATTN_DECODE_SM90_FP8_CONSUMERS
def test_fp8_descale_not_folded(consumers, monkeypatch):
    """k_descale values the softmax cannot fold into its exp2 factor (ScoreScale: it takes the max on the
    dot products, which needs a positive normal factor): negative, zero, and 1e-38 (its product with the
    scale is subnormal), beside ordinary ones; those sequences take the multiply before the max."""
    monkeypatch.setenv("KVATTN_DECODE_SM90_FP8_CONSUMERS", consumers)
    case = Case(dtype="bf16", kv_fp8=True, d=128, hq=8, hk=2, seqlens=(900, 70, 5, 333), sq=1, layout="paged",
                page_size=16, num_splits=0, seed=9)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    k_descale = np.array([[-1.25, 0.75], [0.0, 1.5], [1e-38, 2.0], [-0.5, 1e-38]], dtype=np.float32)
    kw["k_descale"] = ref_kw["k_descale"] = k_descale
    _compare_bf16(q, k_cache, v_cache, kw, ref_kw)


def test_many_sequences_page1():
    """Many short units per CTA: the producer streams the next pieces while the consumers merge."""
    lens = tuple(int(x) for x in np.random.default_rng(3).integers(0, 200, 120))
    case = Case(dtype="bf16", d=128, hq=8, hk=2, seqlens=lens, sq=1, layout="paged", page_size=1,
                num_splits=0, seed=3)
    run_and_compare(case, DEVICE)



@pytest.mark.parametrize("kv_fp8", [False, True])  # fp8 (the 8-consumer kernel): L2-only either way
@pytest.mark.parametrize("min_cta_tiles", [None, "512"])
@pytest.mark.parametrize("sq,hq,hk", [(1, 8, 2), (2, 8, 2), (3, 8, 2), (4, 8, 2)])
def test_copy_paths_long_shares(sq, hq, hk, min_cta_tiles, kv_fp8, monkeypatch):
    """The producers copy through L1 or L2-only by the CTA's share and the packed rows (copy_via_l1 in
    decode_sm90/pieces.cuh: >= 64 tiles a CTA for <= 8 rows, >= 384 for 9-16): 4, 8, 12 and 16 rows over
    ~34k keys a KV head, spread over every SM (short shares: L2-only) or, with at least 512 64-key tiles a
    CTA, over two or three CTAs (long shares: through L1 for every row count here)."""
    if min_cta_tiles is not None:
        monkeypatch.setenv("KVATTN_DECODE_MIN_CTA_COST", min_cta_tiles)
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=hq, hk=hk, seqlens=(20000, 65, 0, 14000, 33), sq=sq,
                new=(sq,) * 5, causal=True, layout="paged", page_size=16, num_splits=0,
                seed=sq * 10 + (min_cta_tiles is None))
    run_and_compare(case, DEVICE)


# One or two units on the persistent kernel: the balanced schedule spreads each over ~132 / 66 CTAs, so the
# split combine merges up to 132 partials a row (merge_row_warp's longer merge, LSEs in registers), with a
# sink and the lse checked; a second, empty sequence.
@pytest.mark.parametrize("wide_rows", [None, "0"])  # KVATTN_COMBINE_WIDE_ROWS: 4 warps a row unless 0
@pytest.mark.parametrize("hk,seqlens", [(1, (30000,)), (2, (9000,)), (1, (3000, 0)), (4, (2100,))])
def test_few_units_many_pieces(hk, seqlens, wide_rows, monkeypatch):
    if wide_rows is not None:
        monkeypatch.setenv("KVATTN_COMBINE_WIDE_ROWS", wide_rows)
    case = Case(dtype="bf16", d=128, hq=4 * hk, hk=hk, seqlens=seqlens, sq=1, layout="paged", page_size=16,
                num_splits=0, sinks="fp32", seed=hk + len(seqlens))
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("switch", ["8", "4", "2", "0"])
@pytest.mark.parametrize("batch", [129, 385, 512])
def test_scan_rounds(batch, switch, monkeypatch):
    """The balanced scan takes a round of sequences a thread per kThreads (384, 256 or 192 threads in
    this kernel with 8, 4 or 2 producer warps, 128 in the portable kernel, "0"): batches that need 2-4
    rounds, with empty sequences at the round edges, so that a position carried wrongly over a round moves
    every later unit."""
    monkeypatch.setenv("KVATTN_DECODE_SM90", switch)
    lens = np.random.default_rng(batch).integers(0, 90, batch)
    for edge in (127, 128, 191, 192, 255, 256, 383, 384, 511):
        if edge < batch:
            lens[edge] = 0
    case = Case(dtype="bf16", d=128, hq=4, hk=1, seqlens=tuple(int(x) for x in lens), sq=1, layout="paged",
                page_size=16, num_splits=0, seed=batch)
    run_and_compare(case, DEVICE)

_DISPATCH_SCRIPT = r"""
import os, numpy as np, torch, kvattn
sq, hk, cap = int(os.environ.get("SQ", "1")), int(os.environ.get("HK", "2")), int(os.environ.get("CAP", "300"))
b, page = int(os.environ.get("B", "2")), int(os.environ.get("PAGE", "0"))
q = torch.randn(b, sq, 4 * hk, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(b * cap // page, page, hk, 128, device="cuda", dtype=torch.bfloat16) if page else \
    torch.randn(b, cap, hk, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
if os.environ.get("KV") == "fp8":
    k, v = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
kw = dict(page_table=torch.arange(b * cap // page, dtype=torch.int32, device="cuda").view(b, -1)) if page else {}
if os.environ.get("LPAD") == "1":
    kw["cache_leftpad"] = torch.tensor([5, 0][:b], dtype=torch.int32, device="cuda")
kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=torch.tensor([300, 77][:b], dtype=torch.int32, device="cuda"),
                               deterministic=os.environ.get("DET") == "1", **kw)
torch.cuda.synchronize()
"""


# The long-sequence cluster rule's cases: batch 1 over 8 kv heads, a 16,384-slot cache (over the bound).
_LONG = dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, CAP="16384", B="1", HK="8")
_FORCED = dict(KVATTN_DECODE_CLUSTER_LONG="1")  # without the card's bandwidth test


@pytest.mark.parametrize("switch,expected", [
    (dict(KVATTN_DECODE_SM90="4"), "4 producer warps"),
    (dict(KVATTN_DECODE_SM90="2"), "2 producer warps"),
    (dict(KVATTN_DECODE_SM90="8"), "8 producer warps"),
    (dict(KVATTN_DECODE_SM90="4", KVATTN_FORCE_PORTABLE="1"), None),
    (dict(KVATTN_DECODE_SM90="0"), None),
    (dict(KVATTN_DECODE_SM90=None, KV="fp8", KVATTN_DECODE_SM90_FP8_CONSUMERS=None),
     "4 producer warps, 8 consumer warps"),  # fp8 caches: 8 consumer warps by default
    (dict(KVATTN_DECODE_SM90=None, KV="fp8", KVATTN_DECODE_SM90_FP8_CONSUMERS="4"),
     "8 producer warps, 4 consumer warps"),
    (dict(KVATTN_DECODE_SM90="2", KV="fp8", KVATTN_DECODE_SM90_FP8_CONSUMERS="4"),
     "2 producer warps, 4 consumer warps"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_SM90_FP8_CONSUMERS=None), "8 producer warps, 4 consumer warps"),
    (dict(KVATTN_DECODE_SM90=None, KV="fp8", SQ="8", KVATTN_DECODE_SM90_FP8_CONSUMERS=None),
     "8 producer warps, 4 consumer warps"),  # 32 packed rows: two groups stay on 4 consumer warps
    (dict(KVATTN_DECODE_SM90=None), "8 producer warps"),  # on by default
    # 4 units (b 2 x 2 kv heads): the cluster form, 16 CTAs a unit (8 when asked); not in deterministic
    # mode, with 17-32 packed rows or when the persistent kernel is off
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None), "cluster kernel, 16 CTAs"),
    (dict(KVATTN_DECODE_SM90=None, KV="fp8", KVATTN_DECODE_CLUSTER=None), "cluster kernel, 16 CTAs"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER="8"), "cluster kernel, 8 CTAs"),
    # 16-bit caches: K / V by TMA when every ring holds 4 stages (an 8,192-slot cache over 16 CTAs: 512 keys a
    # CTA; the capacity bound lifted), not at 4,096 slots (2 a ring) or 300, nor with KVATTN_DECODE_TMA=0 or
    # fp8 caches; "force" at any length, "copy" without the maps
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA=None, CAP="8192",
          KVATTN_DECODE_CLUSTER_MAX_KEYS="8192"), "cluster kernel, 16 CTAs a unit, K/V by TMA"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA=None, CAP="4096"),
     "cluster kernel, 16 CTAs a unit, K/V by cp.async"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA=None),
     "cluster kernel, 16 CTAs a unit, K/V by cp.async"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA="0", CAP="8192",
          KVATTN_DECODE_CLUSTER_MAX_KEYS="8192"), "cluster kernel, 16 CTAs a unit, K/V by cp.async"),
    (dict(KVATTN_DECODE_SM90=None, KV="fp8", KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA=None, CAP="8192",
          KVATTN_DECODE_CLUSTER_MAX_KEYS="8192"), "cluster kernel, 16 CTAs a unit, K/V by cp.async"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA="force"),
     "cluster kernel, 16 CTAs a unit, K/V by TMA"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_TMA="copy"),
     "cluster kernel, 16 CTAs a unit, K/V by cp.async"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, DET="1"), "kernel, 8 producer warps"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, SQ="8"), "kernel, 8 producer warps"),
    (dict(KVATTN_DECODE_SM90="0", KVATTN_DECODE_CLUSTER=None), None),
    # the cache holds 300 keys a sequence: over the bound, and batch 2, but one sequence alone would still
    # stream faster on its clusters than the persistent kernel (cluster_shape.hpp)
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_CLUSTER_MAX_KEYS="299"),
     "cluster kernel, 16 CTAs"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None, KVATTN_DECODE_CLUSTER_MAX_KEYS="300"),
     "cluster kernel, 16 CTAs"),
    # Past the capacity bound (16,384 slots > 4,096): the cluster form for batch 1 where its TMA kernel can
    # take the stages and the model of the two forms' times says it is faster (launch.cu, cluster_faster:
    # 67 MB over 64 CTAs on any Hopper card; 537 MB (131,072 slots) by card: BY_CARD; 2 kv heads, 32 CTAs:
    # 17 MB yes, 134 MB no; =1 skips the model; a paged leftpad too: the TMA kernel's tiles start at the
    # first key's 16-slot run), else the persistent kernel: page 8, an fp8 cache, batch 2, TMA off, or when
    # switched off
    (dict(_LONG), "cluster kernel, * CTAs a unit, K/V by TMA"),
    (dict(_LONG, CAP="131072"), "BY_CARD"),
    (dict(_LONG, HK="2"), "cluster kernel, 8 CTAs a unit, K/V by TMA, clusters a unit: 4"),
    # 1-2 kv heads: S > 1 clusters a unit where the model says more CTAs pay for the combine they bring
    # (decode_cluster_pick; the TMA kernel's 512 keys a CTA cap S; a 16-CTA cluster streams what one GPC
    # does, so clusters of 8): 8.4 MB over 1 kv head, 4 clusters of 8 a unit on any Hopper card; 134 MB
    # over 2 kv heads, the most clusters of 8 that fit
    (dict(_LONG, HK="1"), "cluster kernel, 8 CTAs a unit, K/V by TMA, clusters a unit: 4"),
    (dict(_LONG, HK="2", CAP="131072"), "cluster kernel, 8 CTAs a unit, K/V by TMA, clusters a unit: *"),
    (dict(_LONG, HK="1", KVATTN_DECODE_CLUSTER="8"),
     "cluster kernel, 8 CTAs a unit, K/V by TMA, clusters a unit: 4"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER=None),
     "cluster kernel, 16 CTAs a unit, K/V by cp.async, clusters a unit: 1"),
    (dict(KVATTN_DECODE_SM90=None, KVATTN_DECODE_CLUSTER="8", KVATTN_DECODE_CLUSTER_SPLITS="3"),
     "cluster kernel, 8 CTAs a unit, K/V by cp.async, clusters a unit: 3"),  # asked: 4 units x 8 CTAs x 3
    (dict(_LONG, **_FORCED), "cluster kernel, * CTAs a unit, K/V by TMA"),
    (dict(_LONG, PAGE="16", **_FORCED), "cluster kernel, * CTAs a unit, K/V by TMA"),
    (dict(_LONG, LPAD="1", **_FORCED), "cluster kernel, * CTAs a unit, K/V by TMA"),  # contiguous
    (dict(_LONG, PAGE="16", LPAD="1", **_FORCED), "cluster kernel, * CTAs a unit, K/V by TMA"),
    (dict(_LONG, PAGE="8", **_FORCED), "kernel, 8 producer warps"),
    (dict(_LONG, KV="fp8", **_FORCED), "kernel, 4 producer warps"),
    (dict(_LONG, B="2", HK="4", **_FORCED), "kernel, 8 producer warps"),  # =1: batch 1 only
    # a batch past the bound by the model: 2 x 1 kv head x 32k (one alone on 7 clusters of 8: no slower than
    # the persistent kernel), not 2 x 4 kv heads (one alone on 4 x 8 CTAs: 38 us against 34.5)
    (dict(_LONG, B="2", HK="1", CAP="32768"), "cluster kernel, 8 CTAs a unit, K/V by TMA, clusters a unit: *"),
    (dict(_LONG, B="2", HK="4", CAP="32768"), "kernel, 8 producer warps"),
    (dict(_LONG, KVATTN_DECODE_TMA="0", **_FORCED), "kernel, 8 producer warps"),
    (dict(_LONG, KVATTN_DECODE_CLUSTER_LONG="0"), "kernel, 8 producer warps"),
    (dict(KVATTN_DECODE_SM90=None, SQ="8"), "8 producer warps"),  # 32 packed rows: two row groups
    (dict(KVATTN_DECODE_SM90=None, SQ="8", KVATTN_SM90_SPLIT_ROWS=None), None),  # the default: split kernel
    (dict(KVATTN_DECODE_SM90=None, KV="fp8", SQ="8", KVATTN_SM90_SPLIT_ROWS=None,
          KVATTN_DECODE_SM90_FP8_CONSUMERS=None), "8 producer warps, 4 consumer warps"),  # (fp8: this kernel)
    (dict(KVATTN_DECODE_SM90=None, SQ="9"), None),  # 36 packed rows: the portable kernel
    # deterministic: whole chunks on the balanced schedule; =0: the portable kernel's static splits
    (dict(KVATTN_DECODE_SM90=None, DET="1", KVATTN_DECODE_SM90_DETERMINISTIC=None), "8 producer warps"),
    (dict(KVATTN_DECODE_SM90=None, DET="1", KVATTN_DECODE_SM90_DETERMINISTIC="0"), None),
])
def test_dispatch_on_sm90(switch, expected):
    """On sm_90 a supported decode runs on the Hopper kernel when asked for (and with the producer count
    asked for, 8 by default); KVATTN_FORCE_PORTABLE=1 and KVATTN_DECODE_SM90=0 leave it on the portable
    kernel."""
    if not _sm90():
        pytest.skip("the Hopper decode kernel runs on sm_90 only")
    if expected == "BY_CARD":  # the long-sequence cluster rule's bandwidth test (launch.cu)
        name = sys.modules["torch"].cuda.get_device_name()
        if "H100 80GB HBM3" in name:  # 3.35 TB/s: 64 CTAs at 55 GB/s reach 85%
            expected = "cluster kernel, * CTAs a unit, K/V by TMA"
        elif "H200" in name:  # 4.8 TB/s: they do not, and 537 MB is past what the start saves
            expected = "kernel, 8 producer warps"
        else:
            pytest.skip(f"the rule's outcome on {name} is not written down here")
    env = dict(os.environ, KVATTN_DEBUG_DISPATCH="1", KVATTN_FORCE_PORTABLE="0")
    for k, v in switch.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    r = subprocess.run([sys.executable, "-c", _DISPATCH_SCRIPT], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    if expected is None:
        assert "decode_sm90" not in r.stderr, r.stderr
    elif "*" in expected:  # any cluster size (or count: then > 1)
        m = re.search("decode_sm90 " + re.escape(expected).replace(r"\*", r"(\d+)"), r.stderr)
        assert m, r.stderr
        if expected.endswith("clusters a unit: *"):
            assert int(m.groups()[-1]) > 1, r.stderr
    elif expected.startswith(("cluster", "kernel")):
        assert f"decode_sm90 {expected}" in r.stderr, r.stderr
    else:
        assert f"decode_sm90 kernel, {expected}" in r.stderr, r.stderr


# Deterministic mode on this kernel (the default since session 25; KVATTN_DECODE_SM90_DETERMINISTIC=0 leaves
# it to the portable kernel's static splits): the balanced schedule over whole chunks of the static splits'
# keys (schedule.cuh, walk_balanced_pieces). Capacity 12,000: 3 splits, chunks of 4,032 keys (63 tiles), or
# with KVATTN_DECODE_SM90_DET_CHUNK=1024 12 chunks of 1,024; lengths around the chunk edges, an empty and a
# one-key sequence.
_DET_CAPACITY = 12000
_DET_LENGTHS = np.array([11000, 300, 7000, 4097, 0, 4032, 4033, 1, 8064, 8065], np.int32)


# fp8: an e4m3 cache on the 8-consumer kernel (KVATTN_DECODE_SM90_FP8_CONSUMERS=8; 128-key chunks: pieces
# of 4 of its 32-key stages, so that half of the 8 warps hold empty states in a piece's merge).
@pytest.mark.parametrize("sq,hq,hk,chunk,kv", [(1, 8, 2, None, "bf16"), (4, 8, 2, None, "bf16"),
                                               (4, 16, 2, None, "bf16"), (4, 8, 2, "1024", "bf16"),
                                               (1, 8, 2, "128", "fp8")])  # 4, 16, 32 packed rows
def test_deterministic_chunks_batch_invariant(sq, hq, hk, chunk, kv, monkeypatch):
    """Each sequence's out and lse are bitwise the same alone, in other batches (repeats, other orders,
    many short fillers that move every CTA boundary) and with another CTA count, and match the oracle."""
    monkeypatch.delenv("KVATTN_DECODE_SM90_DETERMINISTIC", raising=False)  # the default
    if chunk is None:
        monkeypatch.delenv("KVATTN_DECODE_SM90_DET_CHUNK", raising=False)
    else:
        monkeypatch.setenv("KVATTN_DECODE_SM90_DET_CHUNK", chunk)
    monkeypatch.setenv("KVATTN_DECODE_SM90_FP8_CONSUMERS", "8" if kv == "fp8" else "4")
    from inputs import DTYPES, randn
    rng = np.random.default_rng(240 + sq)
    dt = DTYPES["bf16"]
    fillers = rng.integers(1, 3000, 16).astype(np.int32)
    lengths = np.concatenate([_DET_LENGTHS, fillers])
    n = len(lengths)
    cache_dt = H.FP8 if kv == "fp8" else dt
    k_cache = randn(rng, (n, _DET_CAPACITY, hk, 128), cache_dt)
    v_cache = randn(rng, (n, _DET_CAPACITY, hk, 128), cache_dt)
    q = randn(rng, (n, sq, hq, 128), dt)
    run = H.deterministic_rows(q, k_cache, v_cache, lengths, DEVICE)
    base = list(range(len(_DET_LENGTHS)))
    full_out, full_lse = run(base)
    ref = reference_attention(q[base], k_cache[base], v_cache[base], cache_seqlens=lengths[base], causal=True)
    H.assert_close("out", full_out, ref["out"], H.TOL_OUT["bf16"])
    H.assert_close("lse", full_lse, ref["lse"], H.TOL_LSE["bf16"])
    batches = [[0], [2, 0], [3, 1, 0], [1, 1, 2], base[::-1], base + list(range(len(base), n)),
               list(range(len(base), n)) + base]
    for rows in batches:
        out, lse = run(rows)
        H.assert_rows_bitwise(out, lse, rows, full_out, full_lse, len(base))
    monkeypatch.setenv("KVATTN_DECODE_MIN_CTA_COST", "200")  # fewer, longer CTAs: other boundaries
    out, lse = run(base)
    np.testing.assert_array_equal(H.f64(out), H.f64(full_out), err_msg="another CTA count")
    np.testing.assert_array_equal(lse, full_lse, err_msg="another CTA count")



# The cluster form (cluster.cuh): C = 16 CTAs a unit when batch x kv heads <= the 16-CTA clusters the device
# holds at once, 8 for <= 16 units; each CTA takes a C-th of the unit's 64-key tiles (so lengths below 64 C leave CTAs empty,
# and CTAs hold 1-3 stages a warp), the warps' and CTAs' states merge through distributed shared memory.
# Batches of <= 8 sequences over 2 kv heads, lengths around the stage, tile and share edges.
_CLUSTER_GROUPS = [
    (0, 1, 31, 32, 33, 63, 64, 65),  # 16 units: 8 CTAs a unit
    (127, 129, 1500, 4097),  # 8 units: 16 CTAs a unit
    (1024 * 16 + 5,),  # 2 units: 16 CTAs of 16 tiles and more (the rings' refills)
]


@pytest.fixture
def _cluster_on(monkeypatch):
    """The cluster form by default, at any capacity (its rule keeps it to caches of <= 4096 keys a sequence)."""
    monkeypatch.delenv("KVATTN_DECODE_CLUSTER", raising=False)
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER_MAX_KEYS", "100000000")


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("kv_fp8", [False, True])
@pytest.mark.parametrize("group", range(len(_CLUSTER_GROUPS)))
@pytest.mark.parametrize("layout,page", [("contiguous", 0), ("paged", 1), ("paged", 16), ("paged", 64),
                                         ("packed", 0)])
def test_cluster_layouts_edges(layout, page, group, kv_fp8):
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=8, hk=2, seqlens=_CLUSTER_GROUPS[group], sq=1,
                layout=layout, page_size=max(page, 1), num_splits=0, seed=page + 7 * kv_fp8 + 13 * group)
    run_and_compare(case, DEVICE)


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("layout,page", [("contiguous", 0), ("paged", 16), ("paged", 64), ("packed", 0)])
def test_cluster_stages_by_cp_async(layout, page, group, monkeypatch):
    """KVATTN_DECODE_TMA=copy: the swizzled kernel's stages that would come by TMA come by cp.async into the
    same places (its path for stages at a sequence's edges and where the tensor-map encoder declines)."""
    monkeypatch.setenv("KVATTN_DECODE_TMA", "copy")
    case = Case(dtype="bf16", d=128, hq=8, hk=2, seqlens=_CLUSTER_GROUPS[group], sq=1, layout=layout,
                page_size=max(page, 1), num_splits=0, seed=page + 13 * group + 1)
    run_and_compare(case, DEVICE)


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("features", _FEATURES + [
    dict(sq=4, new=(4,) * 5, causal=True, rotary="interleaved", dtype="fp16"),  # 16 packed rows
    dict(sq=2, q_lens=(2, 0, 1, 2, 2), causal=True),  # varlen q, an empty one
    dict(layout="ragged", page_size=16),
    dict(hnd=True, page_size=32),
])
@pytest.mark.parametrize("kv_fp8,tma", [(False, None), (True, None), (False, "force")])
@pytest.mark.parametrize("hk", [2, 1])  # 10 units (8 CTAs a unit), 5 (16)
def test_cluster_features(features, kv_fp8, tma, hk, monkeypatch):
    """Every feature on the cluster form; tma="force": on the swizzled TMA kernel (its rule takes caches of
    >= 512 keys a CTA: these 1,300-key caches over 8 or 16 CTAs stay on the padded one), where leftpad,
    page 32 in HND order and ragged lengths put some stages on cp.async."""
    if tma is not None:
        monkeypatch.setenv("KVATTN_DECODE_TMA", tma)
    kw = dict(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=4 * hk, hk=hk, seqlens=(700, 1, 0, 333, 1300), sq=1,
              layout="paged", page_size=16, num_splits=0, seed=len(features) + 3 * hk)
    kw.update(features)
    if kw.get("q_lens"):
        kw.pop("sq")
    if kw.get("leftpad"):
        kw["seqlens"] = tuple(n + lp for n, lp in zip(kw["seqlens"], kw["leftpad"]))
    run_and_compare(Case(**kw), DEVICE)


# Paged leftpads on the TMA kernel (cluster.cuh: a unit's tiles start at its first visible key's 16-slot
# run, the up to 15 keys before it masked and copied as that key; the leftpad slots hold NaN): leftpads 0-100
# and window starts off the runs at pages 16 / 32 / 64 and HND, GQA 4, causal over 2 query rows (their first
# keys one apart), S = 3 clusters a unit over a batch, and short lengths that only KVATTN_DECODE_TMA=force
# puts on the TMA kernel. The first case takes the TMA kernel by its own rule (>= 512 keys a CTA).
_PAGED_LEFTPAD_TMA = {
    "p16_lpad": ({}, dict(page_size=16, seqlens=(13000, 9001, 700, 20), leftpad=(100, 37, 0, 5),
                          sinks="fp32")),
    "p32_lpad_window_softcap": (dict(KVATTN_DECODE_TMA="force"),
                                dict(page_size=32, seqlens=(9000, 3000), leftpad=(61, 100), window=(1000, -1),
                                     softcap=20.0)),
    "p64_lpad_window_alibi": (dict(KVATTN_DECODE_TMA="force"),
                              dict(page_size=64, seqlens=(6000, 2500, 90), leftpad=(17, 64, 3), window=(777, -1),
                                   alibi="bh", batch_idx="scattered")),
    "p16_causal_sq2": (dict(KVATTN_DECODE_TMA="force"),
                       dict(page_size=16, seqlens=(5000, 1000), leftpad=(9, 100), sq=2, causal=True,
                            window=(500, 0), sinks="bf16")),
    "p16_batch_s3": (dict(KVATTN_DECODE_TMA="force", KVATTN_DECODE_CLUSTER="8", KVATTN_DECODE_CLUSTER_SPLITS="3"),
                     dict(page_size=16, hq=4, hk=1, seqlens=(0, 1, 5000, 2049, 65), leftpad=(3, 0, 100, 47, 1),
                          window=(1500, -1))),
    "p16_short": (dict(KVATTN_DECODE_TMA="force"),
                  dict(page_size=16, hq=4, hk=1, seqlens=(1, 15, 16, 17, 33, 100), leftpad=(0, 1, 15, 16, 17, 99),
                       sinks="fp32")),
    "p32_hnd": (dict(KVATTN_DECODE_TMA="force"),
                dict(page_size=32, hnd=True, seqlens=(7000, 300), leftpad=(100, 23), window=(2000, -1))),
}


def _paged_leftpad_case(name):
    env, extra = _PAGED_LEFTPAD_TMA[name]
    kw = dict(dtype="bf16", d=128, hq=8, hk=2, sq=1, layout="paged", num_splits=0, extra_slots=300,
              seed=len(name))
    kw.update(extra)
    kw["seqlens"] = tuple(n + lp for n, lp in zip(kw["seqlens"], kw["leftpad"]))
    return env, Case(**kw)


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("name", list(_PAGED_LEFTPAD_TMA))
def test_cluster_paged_leftpad_tma(name, monkeypatch):
    env, case = _paged_leftpad_case(name)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run_and_compare(case, DEVICE)


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("fp8_math", ["f16", "bf16"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
def test_cluster_fp8_cache(dtype, fp8_math, monkeypatch):
    monkeypatch.setenv("KVATTN_DECODE_SM90_FP8_BF16", "1" if fp8_math == "bf16" else "0")
    case = Case(dtype=dtype, kv_fp8=True, d=128, hq=8, hk=2, seqlens=(2500, 3, 600, 64), sq=1, layout="paged",
                page_size=16, batch_idx="scattered", num_splits=0, seed=5)
    run_and_compare(case, DEVICE)


# Long sequences on the cluster form (past the 4,096-slot capacity bound, batch 1, TMA-eligible layouts;
# KVATTN_DECODE_CLUSTER_LONG=1: also where the card's bandwidth rule keeps the persistent kernel; 8 kv heads:
# 64 or 128 CTAs), with scattered batch indices, a contiguous leftpad, varlen K, causal; NaN in unused slots.
@pytest.mark.parametrize("layout,page,seqlens,hk,extra", [
    ("contiguous", 0, (20000,), 8, {}),
    ("paged", 16, (20000,), 8, dict(hq=32)),
    ("paged", 64, (9000,), 8, dict(batch_idx="scattered")),
    ("contiguous", 0, (9037,), 8, dict(leftpad=(37,), hq=16)),
    ("packed", 0, (12000,), 8, dict(causal=True)),
], ids=["b1_contig", "b1_p16", "b1_p64_scat", "b1_contig_lpad", "b1_packed_causal"])
def test_cluster_long_sequences(layout, page, seqlens, hk, extra, monkeypatch):
    monkeypatch.delenv("KVATTN_DECODE_CLUSTER", raising=False)
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER_LONG", "1")  # whatever the card's bandwidth
    kw = dict(dtype="bf16", d=128, hq=hk, hk=hk, seqlens=seqlens, sq=1, layout=layout, page_size=max(page, 1),
              num_splits=0, extra_slots=500, seed=len(layout) + page + 3 * len(extra))
    kw.update(extra)
    run_and_compare(Case(**kw), DEVICE)


# A batch past the capacity bound on the model's pick (cluster_shape.hpp: the cluster form where one
# sequence alone would stream no slower on its clusters): skewed lengths, an empty sequence, sinks and lse.
@pytest.mark.parametrize("hk,seqlens", [(1, (30000, 2500)), (2, (9000, 0, 31000)), (1, (12, 30000, 5, 29999))])
def test_cluster_long_batch(hk, seqlens, monkeypatch):
    monkeypatch.delenv("KVATTN_DECODE_CLUSTER", raising=False)
    case = Case(dtype="bf16", d=128, hq=4 * hk, hk=hk, seqlens=seqlens, sq=1, layout="paged", page_size=16,
                num_splits=0, sinks="fp32", extra_slots=700, seed=len(seqlens) + hk)
    run_and_compare(case, DEVICE)


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("clusters", ["16", "8"])
def test_cluster_one_sequence_many_heads(clusters, monkeypatch):
    """Batch 1 over 8 kv heads (the short decode of issue #11): 8 clusters of 16 CTAs, or of 8."""
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER", clusters)
    for n, seed in ((1024, 1), (4000, 2), (33, 3)):
        case = Case(dtype="bf16", d=128, hq=32, hk=8, seqlens=(n,), sq=1, layout="paged", page_size=16,
                    num_splits=0, seed=seed)
        run_and_compare(case, DEVICE)


# S > 1 clusters a unit (KVATTN_DECODE_CLUSTER_SPLITS=S, at most what fits: 2 units x 16 CTAs x 3): each
# cluster writes the static splits' partial of its S-th of the tiles, the split combine merges them (sinks,
# lse, rows past seqused_q, clusters without keys: lengths under C S tiles); 16-bit caches on the TMA kernel
# and by cp.async, fp8 caches.
@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("splits,hk", [("3", 2), ("7", 1), ("2", 1)])
@pytest.mark.parametrize("layout,page,seqlens,extra", [
    ("paged", 16, (20000,), dict(sinks="fp32")),
    ("contiguous", 0, (9037,), dict(leftpad=(37,), causal=True)),
    ("paged", 64, (5000,), dict(batch_idx="scattered", softcap=20.0)),
    ("packed", 0, (12000,), dict(window=(3000, 0), causal=True)),
    ("paged", 16, (700,), dict(sq=3, seqused_q=True, causal=True, sinks="bf16")),
    ("paged", 16, (6000,), dict(kv_fp8=True)),
    ("paged", 1, (33,), dict(new=(1,), rotary="neox")),
], ids=["p16_sinks", "contig_lpad", "p64_scat", "packed_window", "p16_seqused", "p16_fp8", "p1_short_append"])
def test_cluster_split_units(splits, hk, layout, page, seqlens, extra, monkeypatch):
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER_SPLITS", splits)
    kw = dict(dtype="bf16", d=128, hq=4 * hk, hk=hk, seqlens=seqlens, sq=1, layout=layout,
              page_size=max(page, 1), num_splits=0, extra_slots=300, seed=int(splits) + 5 * hk + len(layout))
    kw.update(extra)
    if kw.get("leftpad"):
        kw["seqlens"] = tuple(n + lp for n, lp in zip(kw["seqlens"], kw["leftpad"]))
    run_and_compare(Case(**kw), DEVICE)


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("tma", [None, "force"])
def test_cluster_split_units_batch(tma, monkeypatch):
    """S clusters a unit over a batch (the env asks; the model keeps S > 1 to batch 1's long sequences):
    lengths 0, 1, under and over C S tiles, varlen q with an empty sequence."""
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER_SPLITS", "2")
    monkeypatch.setenv("KVATTN_DECODE_CLUSTER", "8")  # 5 units x 8 CTAs x 2
    if tma is not None:
        monkeypatch.setenv("KVATTN_DECODE_TMA", tma)
    case = Case(dtype="bf16", d=128, hq=4, hk=1, seqlens=(0, 1, 2049, 9000, 65), q_lens=(1, 1, 0, 2, 1),
                causal=True, layout="paged", page_size=16, num_splits=0, sinks="fp32", seed=17)
    run_and_compare(case, DEVICE)


@pytest.mark.usefixtures("_cluster_on")
# C = 16; C = 8; S = 2 / 3 clusters a unit at C = 8 (4 units): a bad page in one cluster's share NaNs its partial
@pytest.mark.parametrize("clusters,kv_fp8,splits", [(None, False, None), ("8", False, None), ("8", True, None),
                                                    ("8", False, "2"), ("8", True, "3")])
@pytest.mark.parametrize("column", [3, 100, 187, 240])  # CTA 0's first keys, mid-unit, the last CTA's, past them
def test_cluster_bad_page_is_nan_and_reported(column, clusters, kv_fp8, splits, monkeypatch):
    """A page id out of range in one CTA's share writes NaN for the whole unit (every CTA of its cluster: the
    error flag each rank pushes into the others' inboxes, at C = 16 and C = 8, bf16 and fp8 layouts) and
    names the entry; the other sequence is the oracle's. Column 240 lies past sequence 0's keys (3000 slots
    = 188 pages): the last CTA's check of the pages after the visible keys."""
    if clusters is not None:
        monkeypatch.setenv("KVATTN_DECODE_CLUSTER", clusters)
    if splits is not None:
        monkeypatch.setenv("KVATTN_DECODE_CLUSTER_SPLITS", splits)
    case = Case(dtype="bf16", kv_fp8=kv_fp8, d=128, hq=8, hk=2, seqlens=(3000, 500), sq=1, layout="paged",
                page_size=16, extra_slots=1000, num_splits=0, seed=column)
    q, k_cache, v_cache, kw, _, _ = build(case)
    kw = dict(kw)
    table = kw["page_table"].copy()
    table[0, column] = k_cache.shape[0] + 17  # sequence 0 (row 0)
    kw["page_table"] = table
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    out = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                           H.to_device(v_cache, DEVICE), **dev)
    if column == 240:
        # Past the visible keys the contract does not look (CONTRACT.md: only the pages of [leftpad, end)).
        H.sync_device_errors(DEVICE)
        assert not np.isnan(H.f64(H.to_numpy(out))).any()
        return
    with pytest.raises(H.kvattn.KvattnError) as e:
        H.sync_device_errors(DEVICE)
    assert f"page_table[0, {column}]" in str(e.value), str(e.value)
    out = H.f64(H.to_numpy(out))
    assert np.isnan(out[0]).all() and not np.isnan(out[1]).any()
    H.sync_device_errors(DEVICE)  # the record was cleared


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("splits", [None, "4"])
def test_cluster_cuda_graph_replay(splits, monkeypatch):
    """The cluster form captured in a CUDA graph (grid, clusters and the early launch behind the append are
    static): replays with new lengths and page tables equal eager calls bit for bit. Batch 1 over 8 kv heads,
    a 2,048-slot cache (under the capacity bound), one appended token with rotary; splits: S = 4 clusters a
    unit, their partials and the split combine in the graph."""
    if not _sm90():
        pytest.skip("the cluster form runs on sm_90 only")
    if splits is not None:  # 2 kv heads: 2 units x 16 CTAs x S (<= 3 fit)
        monkeypatch.setenv("KVATTN_DECODE_CLUSTER_SPLITS", splits)
    torch = sys.modules["torch"]
    import kvattn
    gen = torch.Generator(device="cuda")
    gen.manual_seed(3)
    hq, hk, d, page, cap = (32, 8, 128, 16, 2048) if splits is None else (8, 2, 128, 16, 2048)
    pages = 2 * cap // page
    bf = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(1, 1, hq, d, generator=gen, **bf)
    k_cache = torch.randn(pages, page, hk, d, generator=gen, **bf)
    v_cache = torch.randn(pages, page, hk, d, generator=gen, **bf)
    k_new = torch.randn(1, 1, hk, d, generator=gen, **bf)
    v_new = torch.randn(1, 1, hk, d, generator=gen, **bf)
    pos = torch.arange(cap + 1, device="cuda", dtype=torch.float32)[:, None]
    freq = torch.pow(10000.0, -torch.arange(0, d // 2, device="cuda", dtype=torch.float32) / (d // 2))
    cos, sin = torch.cos(pos * freq), torch.sin(pos * freq)
    table = torch.zeros(1, cap // page, dtype=torch.int32, device="cuda")
    lens = torch.zeros(1, dtype=torch.int32, device="cuda")

    def load(seed):
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        table.copy_(torch.randperm(pages, device="cuda", generator=g)[:cap // page].to(torch.int32)[None])
        lens.fill_(int(torch.randint(1, cap - 1, (1,), generator=torch.Generator().manual_seed(seed))))

    def call():
        return kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin,
                                              cache_seqlens=lens, page_table=table, causal=True,
                                              return_softmax_lse=True)

    load(1)
    side = torch.cuda.Stream()  # warm up off the capture stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = call()
    for seed in (2, 3, 4):
        load(seed)
        k0, v0 = k_cache.clone(), v_cache.clone()
        graph.replay()
        torch.cuda.synchronize()
        kvattn.device_errors("cuda")
        got_out, got_lse, got_k = out.clone(), lse.clone(), k_cache.clone()
        k_cache.copy_(k0)
        v_cache.copy_(v0)
        e_out, e_lse = call()
        torch.cuda.synchronize()
        assert not torch.isnan(e_out).any()
        assert torch.equal(got_out.view(torch.int16), e_out.view(torch.int16)), f"seed {seed}: out"
        assert torch.equal(got_lse, e_lse), f"seed {seed}: lse"
        assert torch.equal(got_k.view(torch.int16), k_cache.view(torch.int16)), f"seed {seed}: k_cache"


@pytest.mark.usefixtures("_cluster_on")
@pytest.mark.parametrize("clusters", [None, "0"])
def test_cluster_asks_no_workspace(clusters, monkeypatch):
    """The cluster form merges through distributed shared memory: a call asks the caller for no workspace
    (the first call, with no workspace, runs), where the persistent kernel's partials need one (a second
    call with the size the first returned). The ctypes path, whose workspace tensors.workspace makes."""
    if not _sm90():
        pytest.skip("the cluster form runs on sm_90 only")
    from kvattn import _fwd, _stable
    from kvattn import tensors as T

    if clusters is not None:
        monkeypatch.setenv("KVATTN_DECODE_CLUSTER", clusters)
    asked = []
    make = T.workspace

    def workspace(call, like, nbytes, alignment=256):
        asked.append(nbytes)
        return make(call, like, nbytes, alignment)

    monkeypatch.setattr(_stable, "_op", False)
    monkeypatch.setattr(_fwd, "_workspace_hint", {})
    monkeypatch.setattr(T, "workspace", workspace)
    case = Case(dtype="bf16", d=128, hq=32, hk=8, seqlens=(1024,), sq=1, layout="paged", page_size=16,
                num_splits=0, seed=9)
    run_and_compare(case, DEVICE)
    if clusters is None:
        assert asked == [0], asked
    else:
        assert len(asked) == 2 and asked[0] == 0 and asked[1] > 0, asked
