"""The sm_90a decode kernel for head dim 512 (src/cuda/wide_sm90: d = dv = 512, <= 16 packed rows a kv head,
the rows along wgmma's N, K and V in a ring of three slots) against the float64 oracle.

WRITTEN WITHOUT A GPU (session 29, branch wide): the cases were checked against the oracle on the CPU backend
only. Lengths of several 64-key tiles (the three-slot ring wraps after a tile and a half) and not multiples of
them, every layout and mask, the score mods, sinks, append + rotary ahead of it, one pass and static key
splits (the plan's, explicit, deterministic chunks); test_head_dim_512's decode cases run on it too. On a
device that is not sm_90, or a build without it, the same cases run on the portable kernel and must pass.
"""

import dataclasses
import os

import numpy as np
import pytest

import harness as H
from cases import Case, run_and_compare

pytestmark = pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICE = "cuda"


@pytest.fixture(autouse=True)
def _no_switches(monkeypatch):
    monkeypatch.delenv("KVATTN_SM90_WIDE", raising=False)
    monkeypatch.delenv("KVATTN_FORCE_PORTABLE", raising=False)


def wide(**kw):
    base = dict(dtype="bf16", d=512, dv=512, hq=8, hk=2, seqlens=(300, 1000), sq=1, causal=True, layout="paged",
                page_size=16, num_splits=1, seed=5)
    base.update(kw)
    return Case(**base)


CASES = {
    "decode paged 16": wide(),
    "decode paged 16, fp16": wide(dtype="fp16", seed=1),
    "contiguous, lengths around 64": wide(layout="contiguous", seqlens=(63, 64, 65, 129, 1), seed=2),
    "paged 1": wide(page_size=1, seqlens=(200, 70), seed=3),
    "paged 64 hnd": wide(page_size=64, hnd=True, seed=4),
    "packed (cu_seqlens_k)": wide(layout="packed", seqlens=(130, 64, 7), seed=24),
    "ragged page index (kv_indptr)": wide(layout="ragged", seqlens=(150, 77), seed=25),
    "slot pool": wide(layout="slots", seqlens=(90, 200), seed=26),
    "long (the ring wraps many times)": wide(seqlens=(4100,), seed=6),
    "empty sequence": wide(seqlens=(0, 77), seed=7),
    "16 rows (GQA 16)": wide(hq=16, hk=1, seed=8),
    "GQA 4 x 4 tokens, causal": wide(hq=8, hk=2, sq=4, seqlens=(260, 131), seed=9),
    "GQA 5 x 3 tokens (15 rows)": wide(hq=10, hk=2, sq=3, seqlens=(90, 300), seed=10),
    "MHA": wide(hq=4, hk=4, seed=11),
    "non-causal q 2": wide(sq=2, causal=False, seed=12),
    "window + softcap": wide(window=(100, 0), softcap=20.0, seed=13),
    "alibi + sinks": wide(alibi="bh", sinks="fp32", seed=14),
    "chunk": wide(sq=2, chunk=96, seed=15),
    "seqused_q": wide(sq=3, seqused_q=True, seed=16),
    "batch idx + leftpad": wide(batch_idx="scattered", leftpad=(30, 0), seed=17),
    "leftpad contiguous": wide(layout="contiguous", leftpad=(0, 70), seed=18),
    "append + rotary (neox)": wide(new=(3, 3), sq=3, rotary="neox", seed=19),
    "append + rotary (interleaved, dim 32), varlen new": wide(new=(2, 1), varlen_new=True, sq=2,
                                                              rotary="interleaved", rotary_dim=32, seed=20),
    "scale": wide(scale=0.05, seed=21),
    "strided q": wide(strided_q=True, seed=22),
    "out given": wide(out_given=True, seed=23),
    "splits: the plan's": wide(num_splits=0, seqlens=(3000, 700), seed=40),
    "splits: explicit 3": wide(num_splits=3, seqlens=(300, 129, 64), extra_slots=800, seed=42),
    "splits: more splits than a sequence has tiles": wide(num_splits=16, seqlens=(200, 1100), extra_slots=3000,
                                                          seed=43),
    "splits + alibi + sinks": wide(num_splits=0, alibi="bh", sinks="fp32", seqlens=(2000, 300), seed=44),
    "splits, an empty sequence": wide(num_splits=0, seqlens=(0, 3000), seed=46),
    "splits + window + batch idx + leftpad": wide(num_splits=0, window=(500, 0), batch_idx="scattered",
                                                 leftpad=(30, 0), seqlens=(2500, 400), seed=45),
    "splits, packed (cu_seqlens_k)": wide(num_splits=0, layout="packed", seqlens=(1300, 640, 7), seed=47),
    "splits, deterministic (the capacity's chunks)": wide(num_splits=0, deterministic=True,
                                                          seqlens=(9000, 100), seed=51),
}


@pytest.mark.parametrize("name", list(CASES))
def test_wide_sm90(name):
    run_and_compare(CASES[name], DEVICE)  # (a dtype a developer build lacks: skipped there)


def test_wide_sm90_rule(monkeypatch):
    """The kernel takes d = dv = 512 with <= 16 rows (with splits for 2 sequences), not 32 rows, not d 384
    (zero-padded onto the portable (512, 512) kernel), not under KVATTN_SM90_WIDE=0. All right against the
    oracle."""
    runs = H.kernel_names(wide(num_splits=0, seqlens=(3000, 2500), seed=60))
    assert any("wide_kernel" in n for n in runs) and any("split_combine" in n for n in runs), runs
    for case in (wide(hq=16, hk=1, sq=2, seed=61), wide(d=384, dv=384, seed=62)):
        names = H.kernel_names(case)
        assert not any("wide_kernel" in n for n in names), names
        run_and_compare(case, DEVICE)
    monkeypatch.setenv("KVATTN_SM90_WIDE", "0")
    case = wide(seed=63)
    names = H.kernel_names(case)
    assert not any("wide_kernel" in n for n in names), names
    run_and_compare(case, DEVICE)


@pytest.mark.parametrize("num_splits", [1, 0])
def test_wide_sm90_twice_same_bits(num_splits):
    """Two calls give the same bits (one pass, and static splits merged in split order)."""
    from cases import build

    case = wide(seqlens=(2000, 500), num_splits=num_splits, seed=33)
    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items() if k not in ("k", "v")}
    args = (H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE))
    outs = [H.to_numpy(H.kvattn.flash_attn_with_kvcache(*args, **dev, return_softmax_lse=True)[0])
            for _ in range(2)]
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


def test_wide_sm90_nan_page_is_contained():
    """An out-of-range page id: recorded, that sequence NaN (through the combine), the other right."""
    from cases import build
    from reference import reference_attention

    case = wide(num_splits=0, seqlens=(3000, 700), seed=54)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    kw = dict(kw)
    table = kw["page_table"].copy()
    table[0, 80] = 1 << 20  # keys 1280-1295 of sequence 0
    kw["page_table"] = table
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    with H.poisoned_outputs():
        out, lse = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                                    H.to_device(v_cache, DEVICE), return_softmax_lse=True, **dev)
    with pytest.raises(H.kvattn.KvattnError, match="page_table"):
        H.sync_device_errors(DEVICE)
    out, lse = H.to_numpy(out), H.to_numpy(lse)
    assert np.isnan(out[0]).all() and np.isnan(lse[0]).all()
    H.assert_close("out", out[1:], ref["out"][1:], H.TOL_OUT["bf16"])
    H.assert_close("lse", lse[1:], ref["lse"][1:], H.TOL_LSE["bf16"])


@pytest.mark.parametrize("name", ["decode paged 16", "paged 1", "paged 64 hnd", "packed (cu_seqlens_k)",
                                  "ragged page index (kv_indptr)", "slot pool", "batch idx + leftpad",
                                  "GQA 5 x 3 tokens (15 rows)", "append + rotary (neox)"])
def test_wide_sm90_runs_on_hopper(name):
    """The kernel, not the fallback, took each layout and shape (sm_90 devices only)."""
    names = H.kernel_names(CASES[name])
    assert any("wide_kernel" in n for n in names), names


# The portable (512, 512) kernel keeps its decode coverage on sm_90: test_head_dim_512's cases with the kernel
# switched off.
def _head_dim_512_cases():
    import test_head_dim_512 as T512
    return T512.CASES


@pytest.mark.parametrize("name", [name for name, _ in _head_dim_512_cases()])
def test_head_dim_512_on_the_portable_kernel(monkeypatch, name):
    monkeypatch.setenv("KVATTN_SM90_WIDE", "0")
    case = dict(_head_dim_512_cases())[name]
    for dtype in ("bf16",) + (("fp16",) if "fp16" in os.environ.get("KVATTN_TEST_DTYPES", "fp16 bf16") else ()):
        run_and_compare(dataclasses.replace(case, dtype=dtype, d=512, dv=512), DEVICE)
