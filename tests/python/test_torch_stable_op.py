"""The optional C++ op kvattn_stable::fwd (src/torch/stable_op.cpp, python/kvattn/_stable.py): where it is
built, an eager torch call runs through it and gives bit for bit what the ctypes path gives (same library,
same params), writes a caller's `out`, appends in place, and every call it declines or the library rejects
falls back to the ctypes path (KvattnError naming the argument). Skipped without torch or the extension
(tools/build_torch_op.sh builds it). The 'cpu' cases run the op on the CPU backend (_stable.CPU_CALLS).
"""
import contextlib
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


@contextlib.contextmanager
def _counting_op():
    """A list of the ops' calls while inside (True: it ran; False: it raised, declining the call)."""
    ops, ran = (_stable._op, _stable._op_lse), []

    def counting(op):
        def counted(*args):
            try:
                result = op(*args)
            except Exception:
                ran.append(False)
                raise
            ran.append(True)
            return result
        return counted

    _stable._op, _stable._op_lse = (counting(op) for op in ops)
    try:
        yield ran
    finally:
        _stable._op, _stable._op_lse = ops


def _general(fn, *args, **kw):
    """fn(...) with the generated eager fast path declining (normalize, torch_ops.fwd, _stable.run)."""
    tensor, _stable.TENSOR = _stable.TENSOR, None
    try:
        return fn(*args, **kw)
    finally:
        _stable.TENSOR = tensor


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
    with _counting_op() as ran:
        (out, lse), (out2, lse2), a, b = _both(kw, return_softmax_lse=True)
    assert ran == [True], "the op declined the call"
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


def _ragged(kw):
    """kw with page_table as FlashInfer's ragged index (kv_indptr, kv_indices): the same pages."""
    table = kw["page_table"]
    b, pages = table.shape
    indptr = torch.arange(0, (b + 1) * pages, pages, dtype=torch.int32, device=table.device)
    return dict({k: v for k, v in kw.items() if k != "page_table"}, kv_indptr=indptr,
                kv_indices=table.reshape(-1).contiguous())


# (arguments added to _inputs', whether the generated fast path takes them as they are)
VARIANTS = [
    (dict(), True),
    (dict(softmax_scale=0.2, window_size=(40, 0), num_splits=2, pack_gqa=False, attention_chunk=0), True),
    (dict(max_seqlen_q=2, deterministic=True, rotary_interleaved=False, sm_margin=0), True),
    (dict(window_size=[40, None], causal=1, softmax_scale=1), False),  # normalized by the general path
    (dict(num_splits=torch.tensor(2), softcap=30), False),
    (dict(rotary_seqlens=torch.zeros(3, dtype=torch.int32)), True),  # ignored without rotary_cos
    (dict(block_table="page_table"), False),  # the alias
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
@pytest.mark.parametrize("ragged", [False, True])
def test_fast_path_matches_general_and_ctypes(device, variant, ragged):
    """The generated fast path, the general path through the op and the ctypes path agree bit for bit; the
    fast path runs the op itself exactly when every argument is plain; kv_indptr/kv_indices reach the op."""
    extra, plain = VARIANTS[variant]
    kw = _inputs(device, False, seed=11 + variant)
    if extra.get("block_table") == "page_table":
        extra = dict(block_table=kw.pop("page_table"))
    if ragged:
        if "block_table" in extra:
            pytest.skip("the alias of page_table")
        kw = _ragged(kw)
    kw = dict(kw, **{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in extra.items()})
    fa = kvattn.flash_attn_with_kvcache
    out = torch.full_like(kw["q"], math.nan)
    with _counting_op() as ran:
        got, lse = fa(**kw, out=out, return_softmax_lse=True)
    assert got is out and ran == [True]
    with _counting_op() as ran_general:
        general, general_lse = _general(fa, **kw, return_softmax_lse=True)
    assert ran_general == [True]
    _stable._op, op = False, _stable._op
    try:
        want, want_lse = fa(**kw, return_softmax_lse=True)
    finally:
        _stable._op = op
    assert torch.isfinite(want[0]).all() and torch.isfinite(want[2]).all()
    assert torch.equal(got, want) and torch.equal(lse, want_lse)
    assert torch.equal(general, want) and torch.equal(general_lse, want_lse)
    # Plain: the op ran from the fast path (no normalize); else from _stable.run after normalize.
    normalize, seen = kvattn._fwd.normalize, []
    kvattn._fwd.normalize = lambda *a: seen.append(1) or normalize(*a)
    try:
        fa(**kw)
    finally:
        kvattn._fwd.normalize = normalize
    assert bool(seen) != plain


@pytest.mark.parametrize("device", DEVICES)
def test_fast_path_errors_name_the_argument(device):
    kw = _inputs(device, False, seed=13)
    fa = kvattn.flash_attn_with_kvcache
    for name, value in (("softmax_scale", -1.0), ("softmax_scale", math.nan), ("causal", "no"),
                        ("window_size", (1,)), ("num_splits", 2**31), ("max_seqlen_q", 1.5),
                        ("scheduler_metadata", torch.zeros(2, 2, dtype=torch.int32))):
        with pytest.raises(kvattn.KvattnError, match=name):
            fa(**dict(kw, **{name: value}))
    with pytest.raises(kvattn.KvattnError, match="max_seqlen_q"):  # required with cu_seqlens_q
        fa(**dict(kw, q=kw["q"].reshape(6, 8, 64), cu_seqlens_q=torch.tensor([0, 2, 4, 6], dtype=torch.int32,
                                                                             device=device)))
    with pytest.raises(kvattn.KvattnError, match="k_cache"):  # the op declines, the library names it
        fa(**dict(kw, k_cache=kw["k_cache"][..., :32]))
    with pytest.raises(kvattn.KvattnError, match="page_table and block_table"):
        fa(**kw, block_table=kw["page_table"])


@pytest.mark.parametrize("device", DEVICES)
def test_fast_path_appends_and_bumps_versions(device):
    kw = _inputs(device, True, seed=17)
    a, b = _fresh(kw), _fresh(kw)
    versions = a["k_cache"]._version, a["v_cache"]._version
    with _counting_op() as ran:
        got = kvattn.flash_attn_with_kvcache(**a)
    assert ran == [True]
    assert a["k_cache"]._version > versions[0] and a["v_cache"]._version > versions[1]
    want = _general(kvattn.flash_attn_with_kvcache, **b)
    assert torch.equal(got, want)
    assert torch.equal(a["k_cache"], b["k_cache"]) and torch.equal(a["v_cache"], b["v_cache"])
    out = torch.empty_like(kw["q"])
    version = out._version
    kvattn.flash_attn_with_kvcache(**_fresh(kw), out=out)
    assert out._version > version


def test_compile_traces_past_the_fast_path():
    """torch.compile(fullgraph=True) traces the generated entry point's fast path (declined: compiling) into
    the registered ops; the compiled call equals the eager one (which the op runs), the append included."""
    kw = _inputs("cpu", True, seed=19)
    a, b = _fresh(kw), _fresh(kw)

    def step(**args):
        return kvattn.flash_attn_with_kvcache(**args, return_softmax_lse=True)

    with _counting_op() as ran:
        got, got_lse = torch.compile(step, fullgraph=True, backend="aot_eager")(**a)
    assert ran == []  # compiled: the registered op, not the stable one
    with _counting_op() as ran:
        want, want_lse = step(**b)
    assert ran == [True]
    assert torch.equal(got, want) and torch.equal(got_lse, want_lse)
    assert torch.equal(a["k_cache"], b["k_cache"]) and torch.equal(a["v_cache"], b["v_cache"])


def test_modes_and_profiler_see_the_registered_op():
    """Under a dispatch mode, a function mode or the profiler the fast path declines (_eager): they see
    kvattn::fwd, and the result equals the op's."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    kw = _inputs("cpu", False, seed=23)
    with _counting_op() as ran:
        want = kvattn.flash_attn_with_kvcache(**kw)
    assert ran == [True]
    seen = []

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    class Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    for mode in (Dispatch, Function):
        seen.clear()
        with _counting_op() as ran, mode():
            got = kvattn.flash_attn_with_kvcache(**kw)
        assert ran == [] and any("kvattn.fwd" in s or "kvattn::fwd" in s for s in seen), (mode, seen[:5])
        assert torch.equal(got, want)
    with _counting_op() as ran, torch.profiler.profile() as prof:
        got = kvattn.flash_attn_with_kvcache(**kw)
    assert ran == [] and any("kvattn::fwd" in e.name for e in prof.events())
    assert torch.equal(got, want)


@pytest.mark.parametrize("use_op", [True, False])
def test_negated_views(use_op):
    """Tensors with the negative bit: read ones are resolved (the dispatcher's copy), written ones (out, the
    caches of an append) raise a KvattnError naming them (their writes would land in a copy)."""
    kw = _inputs("cpu", True, seed=29)
    want = kvattn.flash_attn_with_kvcache(**_fresh(dict(kw, q=-kw["q"])))
    _stable._op, op = (_stable._op if use_op else False), _stable._op
    try:
        got = kvattn.flash_attn_with_kvcache(**dict(_fresh(kw), q=torch._neg_view(kw["q"])))
        assert torch.equal(got, want)
        for name in ("k_cache", "v_cache"):
            negated = torch._neg_view(-kw[name])  # (a clone would drop the bit)
            assert negated.is_neg() and torch.equal(negated, kw[name])
            with pytest.raises(kvattn.KvattnError, match=name):
                kvattn.flash_attn_with_kvcache(**dict(_fresh(kw), **{name: negated}))
        with pytest.raises(kvattn.KvattnError, match="out"):
            kvattn.flash_attn_with_kvcache(**_fresh(kw), out=torch._neg_view(torch.zeros_like(kw["q"])))
    finally:
        _stable._op = op
