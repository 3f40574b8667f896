"""The sm_90a MLA decode kernel (src/cuda/mla_sm90: q . k over 64 channels + qv . v over 512, out over v's 512)
against the float64 oracle.

KVATTN_FORCE_SM90_MLA=1 takes the kernel (opt-in for now: KVATTN_SM90_MLA=1) and drops its shape rule (>= 64
packed rows a kv head and >= 64 CTAs), so these small batches run on it wherever it covers the problem
(fp16 / bf16, (d, dv) = (64, 512) with qv, q not varlen, no explicit num_splits > 1). Row counts that are not multiples of the CTA's 64 rows, several 64-key
stages and lengths that are not multiples of them, every layout and mask, the score mods, sinks, append +
rotary ahead of it. On a device that is not sm_90, or a build without it, the same cases run on the portable
kernel and still must pass. Two cases check with the profiler which kernel ran.
"""

import os

import pytest

import harness as H
from cases import Case, run_and_compare

pytestmark = pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICE = "cuda"


@pytest.fixture(autouse=True)
def _force_mla(monkeypatch):
    monkeypatch.setenv("KVATTN_FORCE_SM90_MLA", "1")
    monkeypatch.delenv("KVATTN_FORCE_PORTABLE", raising=False)


def mla(**kw):
    base = dict(dtype="bf16", d=64, dv=512, qv=True, hq=128, hk=1, seqlens=(300, 1000), sq=1, causal=True,
                layout="paged", page_size=64, num_splits=1, seed=5)
    base.update(kw)
    return Case(**base)


CASES = {
    "decode paged 64": mla(),
    "decode paged 64, fp16": mla(dtype="fp16", seed=1),
    "contiguous, lengths around 64": mla(layout="contiguous", seqlens=(63, 64, 65, 129, 1), seed=2),
    "paged 1": mla(page_size=1, seqlens=(200, 70), seed=3),
    "paged 16 hnd": mla(page_size=16, hnd=True, seed=4),
    "packed (cu_seqlens_k)": mla(layout="packed", seqlens=(130, 64, 7), seed=24),
    "ragged page index (kv_indptr)": mla(layout="ragged", page_size=16, seqlens=(150, 77), seed=25),
    "slot pool": mla(layout="slots", seqlens=(90, 200), seed=26),
    "long (many corrections)": mla(seqlens=(4100,), seed=6),
    "empty sequence": mla(seqlens=(0, 77), seed=7),
    "64 heads": mla(hq=64, seed=8),
    "40 heads, 3 tokens (120 rows: a padded second CTA)": mla(hq=40, sq=3, seqlens=(90, 300), seed=9),
    "two kv heads": mla(hq=128, hk=2, seed=10),
    "speculative q 4, causal": mla(hq=32, sq=4, seqlens=(260, 131), seed=11),
    "non-causal q 2": mla(hq=64, sq=2, causal=False, seed=12),
    "window + softcap": mla(window=(100, 0), softcap=20.0, seed=13),
    "alibi + sinks": mla(alibi="bh", sinks="fp32", seed=14),
    "chunk": mla(hq=64, sq=2, chunk=96, seed=15),
    "seqused_q": mla(hq=64, sq=3, seqused_q=True, seed=16),
    "batch idx + leftpad": mla(batch_idx="scattered", leftpad=(30, 0), seed=17),
    "leftpad contiguous": mla(layout="contiguous", leftpad=(0, 70), seed=18),
    "append + rotary (neox)": mla(new=(3, 3), sq=3, hq=64, rotary="neox", seed=19),
    "append + rotary (interleaved, dim 32), varlen new": mla(new=(2, 1), varlen_new=True, sq=2, hq=64,
                                                             rotary="interleaved", rotary_dim=32, seed=20),
    "scale": mla(scale=0.05, seed=21),
    "strided q": mla(strided_q=True, seed=22),
    "out given": mla(out_given=True, seed=23),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mla_sm90(name):
    case = CASES[name]
    if case.dtype == "fp16" and os.environ.get("KVATTN_TEST_DTYPES", "fp16 bf16").split() == ["bf16"]:
        pytest.skip("a bf16 developer build (KVATTN_TEST_DTYPES=bf16)")
    run_and_compare(case, DEVICE)


_kernel_names = H.kernel_names


def test_mla_sm90_runs_on_hopper():
    """The kernel, not the fallback, ran."""
    names = _kernel_names(mla())
    assert any("mla_kernel" in n for n in names), names


def test_mla_sm90_shape_rule(monkeypatch):
    """Without the force switch: the kernel is opt-in (KVATTN_SM90_MLA=1); with it, 128 heads over 64
    sequences (128 CTAs) take the kernel, 16 heads (16 rows, a quarter of a CTA) and 2 sequences (4 CTAs)
    keep the portable kernel's split-KV schedule. All right against the oracle."""
    monkeypatch.delenv("KVATTN_FORCE_SM90_MLA", raising=False)
    many = mla(seqlens=tuple(40 + 37 * i for i in range(64)), seed=30)
    monkeypatch.delenv("KVATTN_SM90_MLA", raising=False)
    names = _kernel_names(many)
    assert not any("mla_kernel" in n for n in names), names
    monkeypatch.setenv("KVATTN_SM90_MLA", "1")
    names = _kernel_names(many)
    assert any("mla_kernel" in n for n in names), names
    run_and_compare(many, DEVICE)
    for case in (mla(hq=16, seqlens=tuple(100 + i for i in range(64)), seed=31), mla(seed=32)):
        names = _kernel_names(case)
        assert not any("mla_kernel" in n for n in names), names
        run_and_compare(case, DEVICE)


def test_mla_sm90_twice_same_bits():
    """Two calls give the same bits (no split: the kernel's order of additions is fixed)."""
    import numpy as np
    import torch
    from cases import build

    case = mla(seqlens=(2000, 500), seed=33)
    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items() if k not in ("k", "v")}
    args = (H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE))
    outs = [H.to_numpy(H.kvattn.flash_attn_with_kvcache(*args, **dev, return_softmax_lse=True)[0])
            for _ in range(2)]
    torch.cuda.synchronize()
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
