"""Head dim 512 (d = dv = 512: Gemma's global layers) on every backend, against the float64 oracle: decode
and short prefill, GQA, contiguous and paged caches (pages of 1, 16, 64), fp8 caches, softcap, sinks, ALiBi,
sliding window, splits, append + rotary; and dims between 256 and 512, which run zero-padded on the
(512, 512) CUDA kernel. The CPU backend runs them in CI; the CUDA cases (several key tiles, the split
combine) on the GPU machine (tools/gpu_check.sh).
"""
import dataclasses

import pytest

import harness as H
from cases import Case, run_and_compare

C = Case

# Small enough for the CPU backend in CI, long enough for several 16-key tiles of the CUDA kernel.
CASES = [
    ("decode-gqa-page1", C(hq=8, hk=2, seqlens=(70, 33, 1), new=(1, 1, 1), sq=1, causal=True, layout="paged",
                           page_size=1, rotary="neox")),
    ("decode-gqa-page16", C(hq=16, hk=2, seqlens=(130, 47), new=(1, 1), sq=1, causal=True, layout="paged",
                            page_size=16, rotary="interleaved", sinks="fp32")),
    ("decode-page64-softcap", C(hq=4, hk=1, seqlens=(150, 64), sq=1, layout="paged", page_size=64, softcap=5.0,
                                leftpad=(20, 0))),
    ("decode-contiguous-window", C(hq=8, hk=4, seqlens=(90, 17), new=(2, 2), sq=2, causal=True, window=(40, 0),
                                   batch_idx="scattered")),
    ("decode-splits-alibi", C(hq=8, hk=2, seqlens=(260, 5), sq=1, num_splits=3, alibi="h", sinks="fp32")),
    ("speculative-chunk", C(hq=4, hk=2, seqlens=(61, 30), new=(4, 4), sq=4, causal=True, chunk=32,
                            layout="paged", page_size=16)),
    ("prefill-causal", C(hq=4, hk=2, seqlens=(40, 3), new=(37, 37), sq=37, causal=True, rotary="neox",
                         layout="paged", page_size=16)),
    ("prefill-varlen-packed", C(hq=2, hk=1, layout="packed", seqlens=(45, 0, 20), q_lens=(9, 1, 20), causal=True,
                                softcap=3.0)),
    ("hnd-seqused", C(hq=4, hk=2, layout="paged", page_size=16, hnd=True, seqlens=(33, 50), sq=3,
                      seqused_q=True, window=(20, 2))),
    ("deterministic", C(hq=4, hk=1, seqlens=(300, 9), sq=1, deterministic=True, num_splits=0)),
]


def _params(cases, dtypes):
    out = []
    for name, case in cases:
        for dt in dtypes:
            c = dataclasses.replace(case, dtype=dt, d=512, seed=len(out))
            out.append(pytest.param(c, id=f"{name}-{dt}"))
    return out


@H.on_devices
@pytest.mark.parametrize("case", _params(CASES, ("fp32", "fp16", "bf16")))
def test_head_dim_512(case, device):
    run_and_compare(case, device)


FP8_CASES = [
    ("fp8-decode-page16", C(hq=8, hk=2, seqlens=(130, 40), new=(1, 1), sq=1, causal=True, layout="paged",
                            page_size=16, rotary="neox", sinks="fp32")),
    ("fp8-decode-page1-softcap", C(hq=4, hk=1, seqlens=(70, 9), sq=2, layout="paged", page_size=1,
                                   softcap=4.0, window=(30, 0), causal=True)),
    ("fp8-prefill", C(hq=4, hk=2, seqlens=(30, 2), new=(21, 21), sq=21, causal=True, layout="paged",
                      page_size=64, descales="broadcast")),
]


@H.on_devices
@pytest.mark.parametrize("case", _params(FP8_CASES, ("fp16", "bf16", "fp8")))
def test_head_dim_512_fp8_cache(case, device):
    run_and_compare(dataclasses.replace(case, kv_fp8=True), device)


# Dims past 256 that are not 512: zero-padded on the (512, 512) CUDA kernel (channels past d / dv are zero
# in shared memory and never written), as they are on the CPU backend's loops.
@H.on_devices
@pytest.mark.parametrize("d,dv", [(320, 320), (512, 384), (384, 512), (272, 128)])
@pytest.mark.parametrize("dtype", ["bf16"])
def test_head_dims_between_256_and_512(d, dv, dtype, device):
    case = C(dtype=dtype, d=d, dv=dv, hq=4, hk=2, seqlens=(75, 20), new=(2, 2), sq=2, causal=True,
             layout="paged", page_size=16, rotary="neox", sinks="fp32", seed=d + dv)
    run_and_compare(case, device)


@pytest.mark.skipif(not H._cuda_ready(), reason="needs torch, a GPU and a CUDA build")
def test_head_dim_past_512_is_an_error_naming_the_dims():
    """d > 512 has no CUDA kernel: an error naming the dims and the kernels (the CPU backend has no limit)."""
    import torch
    q = torch.zeros(1, 1, 2, 528, dtype=torch.bfloat16, device="cuda")
    kc = torch.zeros(1, 8, 2, 528, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(H.kvattn.KvattnError, match=r"head_dim=528.*\(512, 512\)"):
        H.kvattn.flash_attn_with_kvcache(q, kc, kc)
