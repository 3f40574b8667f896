"""The optional C++ op kvattn_stable::fwd (src/torch/stable_op.cpp, python/kvattn/_stable.py): where it is
built, an eager torch call runs through it and gives bit for bit what the ctypes path gives (same library,
same params), writes a caller's `out`, appends in place, and every call it declines or the library rejects
falls back to the ctypes path (KvattnError naming the argument). Skipped without torch or the extension
(tools/build_torch_op.sh builds it). The 'cpu' cases run the op on the CPU backend (_stable.CPU_CALLS).
"""
import math

import pytest

import kvattn
from kvattn import _stable

torch = pytest.importorskip("torch")


def _op_ready():
    return _stable.load() is not None


pytestmark = pytest.mark.skipif(not _op_ready(), reason="the stable-ABI op is not built (tools/build_torch_op.sh)")


def _cuda_ready():
    return torch.cuda.is_available() and kvattn.has_backend("cuda")


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not _cuda_ready(), reason="needs a GPU"))]


@pytest.fixture(autouse=True)
def _cpu_calls():
    _stable.CPU_CALLS = True
    yield
    _stable.CPU_CALLS = False


def _inputs(device, append, seed):
    g = torch.Generator().manual_seed(seed)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    b, hq, hk, d, page, pages, sq = 3, 8, 2, 64, 16, 6, 2
    r = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    perm = torch.randperm(b * pages, generator=g).to(torch.int32).reshape(b, pages).to(device)
    seqlens = torch.tensor([40, 0, 81], dtype=torch.int32, device=device)
    k_cache, v_cache = r(b * pages, page, hk, d), r(b * pages, page, hk, d)
    kw = dict(q=r(b, sq, hq, d), k_cache=k_cache, v_cache=v_cache, cache_seqlens=seqlens, page_table=perm,
              causal=True, softcap=30.0, sinks=torch.randn(hq, generator=g).to(device))
    if append:
        cos = torch.rand(128, d // 2, generator=g).to(device)
        kw.update(k=r(b, 1, hk, d), v=r(b, 1, hk, d), rotary_cos=cos, rotary_sin=torch.sqrt(1 - cos * cos))
    return kw


def _fresh(kw):
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def _both(kw, **extra):
    """(result through the op, result through the ctypes path, the caches after each)."""
    a, b = _fresh(kw), _fresh(kw)
    got = kvattn.flash_attn_with_kvcache(**a, **extra)
    _stable.CPU_CALLS, op = False, _stable._op
    _stable._op = False  # the ctypes path
    try:
        want = kvattn.flash_attn_with_kvcache(**b, **extra)
    finally:
        _stable._op, _stable.CPU_CALLS = op, True
    return got, want, a, b


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("append", [False, True])
def test_op_matches_ctypes_path(device, append):
    kw = _inputs(device, append, seed=7 + append)
    run, ran = _stable.run, []

    def counted(*args):  # the op must really run (not decline): count its results
        result = run(*args)
        ran.append(result is not None)
        return result

    _stable.run = counted
    try:
        (out, lse), (out2, lse2), a, b = _both(kw, return_softmax_lse=True)
    finally:
        _stable.run = run
    assert ran[0] and len(ran) == 2, "the op declined the call"
    assert out.shape == kw["q"].shape and lse.shape == (3, 8, 2)
    assert torch.isfinite(out[0]).all() and torch.isfinite(out[2]).all()
    assert torch.equal(out, out2) and torch.equal(lse, lse2)
    assert torch.equal(a["k_cache"], b["k_cache"]) and torch.equal(a["v_cache"], b["v_cache"])
    if append:  # the new key landed at slot cache_seqlens[i] of sequence i
        assert not torch.equal(a["k_cache"], kw["k_cache"])


@pytest.mark.parametrize("device", DEVICES)
def test_op_writes_out(device):
    kw = _inputs(device, False, seed=3)
    out = torch.full_like(kw["q"], math.nan)
    got = _stable.run(*_normalized(kw), out, False)
    assert got is not None and got[0] is out and got[1] is None
    want = kvattn.flash_attn_with_kvcache(**kw)
    assert torch.equal(out, want)


def _normalized(kw):
    from kvattn import _fwd
    from kvattn import _signature as S

    op_args, _, _ = _fwd.normalize([kw.get(a.name, a.default) for a in S.FWD])
    return (op_args,)


@pytest.mark.parametrize("device", DEVICES)
def test_rejected_calls_fall_back_with_named_errors(device):
    kw = _inputs(device, False, seed=5)
    assert _stable.run(*_normalized(dict(kw, v_cache=kw["v_cache"][:, :, :1])), None, False) is None
    with pytest.raises(kvattn.KvattnError, match="v_cache"):
        kvattn.flash_attn_with_kvcache(**dict(kw, v_cache=kw["v_cache"][:, :, :1]))
    with pytest.raises(kvattn.KvattnError, match="page_table"):
        kvattn.flash_attn_with_kvcache(**dict(kw, page_table=kw["page_table"].to(torch.int64)))
    q = kw["q"].clone().requires_grad_()
    assert _stable.run(*_normalized(dict(kw, q=q)), None, False) is None  # autograd: the ctypes path
    out = kvattn.flash_attn_with_kvcache(**dict(kw, q=q))
    assert not out.requires_grad
