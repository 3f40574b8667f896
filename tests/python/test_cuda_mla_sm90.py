"""The sm_90a MLA decode kernel (src/cuda/mla_sm90: q . k over 64 channels + qv . v over 512, out over v's 512)
against the float64 oracle.

KVATTN_FORCE_SM90_MLA=1 takes the kernels (on by default; KVATTN_SM90_MLA=0 declines them): the 64-row kernel, and for
<= 16 packed rows a kv head the rows kernel (rows along wgmma's N), wherever they cover the problem (fp16 /
bf16, (d, dv) = (64, 512) with qv, q not varlen). Row counts that are not multiples of the CTA's 64 rows, several 64-key stages
and lengths that are not multiples of them, every layout and mask, the score mods, sinks, append + rotary ahead
of it; one pass (num_splits = 1) and static key splits (the plan's, an explicit count, deterministic mode's
chunks), whose partials the split combine merges. On a device that is not sm_90, or a build without it, the
same cases run on the portable kernel and still must pass. Some cases check with the profiler which kernels ran.
"""

import dataclasses
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
    # Static key splits: partials (O / l, lse without the sink) and the split combine.
    "splits: the plan's, 2 sequences": mla(num_splits=0, seqlens=(3000, 700), seed=40),
    "splits: 16 heads (a quarter of a CTA's rows)": mla(hq=16, num_splits=0, seqlens=(5000, 1200, 33), seed=41),
    # (the capacity sets the split count: >= 4 tiles a split; extra_slots widens it)
    "splits: explicit 3, lengths of 1-2 tiles a split": mla(num_splits=3, seqlens=(300, 129, 64), extra_slots=800,
                                                           seed=42),
    "splits: more splits than a sequence has tiles": mla(num_splits=16, seqlens=(200, 1100), extra_slots=3000,
                                                        seed=43),
    "splits: 40 heads x 3 tokens (a block over tokens), window": mla(hq=40, sq=3, window=(300, 0), num_splits=0,
                                                                     seqlens=(2000, 500), seed=53),
    "splits + alibi + sinks (the sink in the combine)": mla(num_splits=0, alibi="bh", sinks="fp32",
                                                           seqlens=(2000, 300), seed=44),
    "splits + window + batch idx + leftpad": mla(num_splits=0, window=(500, 0), batch_idx="scattered",
                                                leftpad=(30, 0), seqlens=(2500, 400), seed=45),
    "splits, an empty sequence": mla(num_splits=0, seqlens=(0, 3000), seed=46),
    "splits + seqused_q, q 3": mla(num_splits=0, hq=64, sq=3, seqused_q=True, seqlens=(1500, 400), seed=47),
    "splits + append + rotary": mla(num_splits=0, new=(3, 3), sq=3, hq=64, rotary="neox", seqlens=(2000, 300),
                                    seed=48),
    "splits, paged 1": mla(num_splits=0, page_size=1, seqlens=(1500, 70), seed=49),
    "splits, packed (cu_seqlens_k)": mla(num_splits=0, layout="packed", seqlens=(1300, 640, 7), seed=50),
    "splits, deterministic (the capacity's chunks)": mla(num_splits=0, deterministic=True, seqlens=(9000, 100),
                                                   seed=51),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mla_sm90(name):
    run_and_compare(CASES[name], DEVICE)  # (a dtype a developer build lacks: skipped there)


def rows_case(case):
    """The case with <= 16 packed rows a kv head (the rows kernel, rows_kernel.cuh): 16 // sq query heads a kv
    head (16 heads at one token, 8 at two, 5 at three: 15 rows)."""
    return dataclasses.replace(case, hq=case.hk * max(1, 16 // case.sq), seed=case.seed + 1000)


# Every case again on the rows kernel (<= 16 rows: the rows along wgmma's N, S^T and O^T; WRITTEN WITHOUT A
# GPU, session 29, branch mla6: checked against the oracle on the CPU backend only).
@pytest.mark.parametrize("name", list(CASES))
def test_mla_sm90_rows(name):
    run_and_compare(rows_case(CASES[name]), DEVICE)


_kernel_names = H.kernel_names


def test_mla_sm90_runs_on_hopper():
    """The kernels, not the fallback, ran: 128 heads the 64-row kernel, 16 the rows kernel."""
    names = _kernel_names(mla())
    assert any("mla_kernel" in n for n in names), names
    names = _kernel_names(mla(hq=16))
    assert any("mla_rows_kernel" in n for n in names) and not any("mla_kernel" in n for n in names), names


def test_mla_sm90_shape_rule(monkeypatch):
    """Without the force switch: the kernels run by default and KVATTN_SM90_MLA=0 declines them; 128 heads over 64
    sequences (128 CTAs) take the 64-row kernel in one pass, 2 sequences (4 CTAs) with key splits and the
    combine, 16 heads over 8 sequences the rows kernel with splits, 8 heads the rows kernel, and 16 heads
    the 64-row kernel under KVATTN_SM90_MLA_ROWS=0. All right against the oracle."""
    monkeypatch.delenv("KVATTN_FORCE_SM90_MLA", raising=False)
    many = mla(seqlens=tuple(40 + 37 * i for i in range(64)), num_splits=0, seed=30)
    monkeypatch.setenv("KVATTN_SM90_MLA", "0")
    names = _kernel_names(many)
    assert not any("mla_kernel" in n for n in names), names
    monkeypatch.delenv("KVATTN_SM90_MLA", raising=False)  # the default
    names = _kernel_names(many)
    assert any("mla_kernel" in n for n in names) and not any("combine" in n for n in names), names
    run_and_compare(many, DEVICE)
    sixteen = mla(hq=16, seqlens=tuple(2000 + i for i in range(8)), num_splits=0, seed=31)
    for case, kernel in ((sixteen, "mla_rows_kernel"), (mla(seqlens=(3000, 2500), num_splits=0, seed=32), "mla_kernel")):
        names = _kernel_names(case)
        assert any(kernel in n for n in names) and any("split_combine" in n for n in names), names
        run_and_compare(case, DEVICE)
    few = mla(hq=8, seed=34)
    names = _kernel_names(few)
    assert any("mla_rows_kernel" in n for n in names), names
    run_and_compare(few, DEVICE)
    monkeypatch.setenv("KVATTN_SM90_MLA_ROWS", "0")
    names = _kernel_names(sixteen)
    assert any("mla_kernel" in n for n in names) and not any("mla_rows_kernel" in n for n in names), names
    run_and_compare(sixteen, DEVICE)


@pytest.mark.parametrize("hq", [128, 16])
@pytest.mark.parametrize("num_splits", [1, 0])
def test_mla_sm90_twice_same_bits(num_splits, hq):
    """Two calls give the same bits (one pass, and static splits merged by the combine in split order: the
    kernel's order of additions is fixed either way)."""
    import numpy as np
    import torch
    from cases import build

    case = mla(hq=hq, seqlens=(2000, 500), num_splits=num_splits, seed=33)
    q, k_cache, v_cache, kw, _, _ = build(case)
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items() if k not in ("k", "v")}
    args = (H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE))
    outs = [H.to_numpy(H.kvattn.flash_attn_with_kvcache(*args, **dev, return_softmax_lse=True)[0])
            for _ in range(2)]
    torch.cuda.synchronize()
    assert np.array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))


@pytest.mark.parametrize("hq", [128, 16])
def test_mla_sm90_deterministic_is_independent_of_the_batch(hq, monkeypatch):
    """deterministic=True on the kernel: the splits are whole-tile chunks of the capacity (<= 4096 keys) and the kernel is
    picked by the static shapes but not the batch (on by default; <= 16 rows the rows kernel), so a sequence has the same bits in
    every batch (test_deterministic's check, with qv); and the kernel ran, with its splits."""
    import numpy as np
    from inputs import DTYPES, randn
    from reference import reference_attention

    if "bf16" not in os.environ.get("KVATTN_TEST_DTYPES", "fp16 bf16").split():
        pytest.skip("an fp16 developer build (KVATTN_TEST_DTYPES)")
    monkeypatch.delenv("KVATTN_FORCE_SM90_MLA", raising=False)
    monkeypatch.setenv("KVATTN_SM90_MLA", "1")
    lengths = np.array([9000, 300, 4097, 5000], np.int32)
    rng = np.random.default_rng(52)
    dt = DTYPES["bf16"]
    k_cache = randn(rng, (len(lengths), 9100, 1, 64), dt)
    v_cache = randn(rng, (len(lengths), 9100, 1, 512), dt)
    q = randn(rng, (len(lengths), 1, hq, 64), dt)
    qv = randn(rng, (len(lengths), 1, hq, 512), dt)
    kc, vc = H.to_device(k_cache, DEVICE), H.to_device(v_cache, DEVICE)

    def run(rows):
        rows = np.asarray(rows, np.int32)
        out, lse = H.kvattn.flash_attn_with_kvcache(
            H.to_device(np.ascontiguousarray(q[rows]), DEVICE), kc, vc,
            qv=H.to_device(np.ascontiguousarray(qv[rows]), DEVICE),
            cache_seqlens=H.to_device(lengths[rows], DEVICE), cache_batch_idx=H.to_device(rows, DEVICE),
            causal=True, deterministic=True, return_softmax_lse=True)
        H.sync_device_errors(DEVICE)
        return H.to_numpy(out), H.to_numpy(lse)

    names = H.profiled_kernel_names(lambda: run([0, 1, 2, 3]))
    kernel = "mla_rows_kernel" if hq <= 16 else "mla_kernel"
    assert any(kernel in n for n in names) and any("split_combine" in n for n in names), names
    full_out, full_lse = run([0, 1, 2, 3])
    ref = reference_attention(q, k_cache, v_cache, qv=qv, cache_seqlens=lengths, causal=True)
    H.assert_close("out", full_out, ref["out"], H.TOL_OUT["bf16"])
    H.assert_close("lse", full_lse, ref["lse"], H.TOL_LSE["bf16"])
    for rows in ([0], [2, 0], [3, 1, 0], [1, 1, 2]):
        out, lse = run(rows)
        H.assert_rows_bitwise(out, lse, rows, full_out, full_lse, len(lengths))


@pytest.mark.parametrize("hq", [128, 16])
def test_mla_sm90_splits_nan_page_is_contained(hq):
    """An out-of-range page id in one split's share: the error is recorded, that split's partials are NaN and
    the combine makes the whole sequence NaN; the other sequence stays right."""
    import numpy as np
    from cases import build
    from reference import reference_attention

    case = mla(hq=hq, num_splits=0, seqlens=(3000, 700), seed=54)
    q, k_cache, v_cache, kw, ref_kw, _ = build(case)
    ref = reference_attention(q, k_cache, v_cache, **ref_kw)
    kw = dict(kw)
    table = kw["page_table"].copy()
    table[0, 20] = 1 << 20  # keys 1280-1343 of sequence 0: a middle split's share
    kw["page_table"] = table
    dev = {k: H.to_device(v, DEVICE) for k, v in kw.items()}
    with H.poisoned_outputs():
        out, _ = H.kvattn.flash_attn_with_kvcache(H.to_device(q, DEVICE), H.to_device(k_cache, DEVICE),
                                                  H.to_device(v_cache, DEVICE), return_softmax_lse=True, **dev)
    with pytest.raises(H.kvattn.KvattnError, match="page_table"):
        H.sync_device_errors(DEVICE)
    out = H.to_numpy(out)
    assert np.isnan(out[0]).all()
    H.assert_close("out", out[1:], ref["out"][1:], H.TOL_OUT["bf16"])
