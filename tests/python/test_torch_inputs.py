"""Torch tensors the Python layer cannot take as they are (session 33's audit of python/kvattn), on the CPU
backend: a tensor on another device (meta) among CPU ones is an error (the dispatcher ran the fake kernel
and returned its uninitialized output), a lazily negated or conjugated view where a pointer would lose the
bit is an error, a negated cache that is only read runs (resolved), and a sparse tensor is named."""
import pytest

import kvattn
from kvattn import KvattnError

torch = pytest.importorskip("torch")


def _kw(append=False, seed=3):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    kw = dict(q=r(2, 2, 4, 16), k_cache=r(2, 12, 2, 16), v_cache=r(2, 12, 2, 16),
              cache_seqlens=torch.tensor([5, 7], dtype=torch.int32))
    if append:
        kw.update(k=r(2, 1, 2, 16), v=r(2, 1, 2, 16))
    return kw


@pytest.mark.parametrize("name", ["q", "k_cache", "cache_seqlens", "k"])
def test_meta_tensor_among_cpu_tensors_is_an_error(name):
    kw = _kw(append=True)
    before = kw["k_cache"].clone()
    kw[name] = kw[name].to("meta")
    with pytest.raises(KvattnError, match=f"^{name}: on device meta"):
        kvattn.flash_attn_with_kvcache(**kw)
    if name != "k_cache":
        assert torch.equal(kw["k_cache"], before)  # nothing appended


def test_every_tensor_on_meta_is_shape_inference():
    kw = {k: v.to("meta") for k, v in _kw().items()}
    out = kvattn.flash_attn_with_kvcache(**kw)
    assert out.device.type == "meta" and out.shape == kw["q"].shape


def test_meta_among_cpu_in_combine_and_append_kv():
    op, lse = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4)
    with pytest.raises(KvattnError, match="^lse_partial: on device meta"):
        kvattn.flash_attn_combine(op, lse.to("meta"))
    key, value = torch.randn(3, 2, 16), torch.randn(3, 2, 16)
    kc, vc = torch.zeros(4, 2, 2, 16), torch.zeros(4, 2, 2, 16)
    with pytest.raises(KvattnError, match="^slot_mapping: on device meta"):
        kvattn.append_kv(key, value, kc, vc, torch.tensor([0, 1, 2]).to("meta"))
    assert not kc.any()


def test_negated_view_on_the_numpy_route_is_an_error():
    """With numpy q a torch tensor goes by its pointer: the negative bit would be lost (the call attended over
    +k, an append stored -k)."""
    kw = {k: v.numpy() for k, v in _kw().items()}
    with pytest.raises(KvattnError, match="^k_cache: is a lazily negated view"):
        kvattn.flash_attn_with_kvcache(**dict(kw, k_cache=torch._neg_view(torch.from_numpy(kw["k_cache"]))))
    key, value, kc = torch.randn(3, 2, 16), torch.randn(3, 2, 16), torch.zeros(4, 2, 2, 16)
    with pytest.raises(KvattnError, match="^key_cache: is a lazily negated view"):
        kvattn.append_kv(key.numpy(), value.numpy(), torch._neg_view(kc), kc.numpy().copy(),
                         torch.tensor([0, 1, 2]).numpy())
    assert not kc.any()


@pytest.mark.parametrize("name", ["k_cache", "v_cache"])
def test_negated_cache_only_read_runs(name):
    """A negated view of a cache the call only reads is valid: resolved (it raised torch's internal assert,
    the op declaring the caches written)."""
    kw = _kw()
    want = kvattn.flash_attn_with_kvcache(**kw)
    negated = torch._neg_view(-kw[name])
    assert negated.is_neg() and torch.equal(negated, kw[name])
    got = kvattn.flash_attn_with_kvcache(**dict(kw, **{name: negated}))
    assert torch.equal(got, want)


def test_negated_written_tensors_of_combine_and_append_kv_are_errors():
    op, lse = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4)
    with pytest.raises(KvattnError, match="^out: is a lazily negated view"):
        kvattn.flash_attn_combine(op, lse, out=torch._neg_view(torch.zeros(3, 4, 8)))
    key, value = torch.randn(3, 2, 16), torch.randn(3, 2, 16)
    kc, vc = torch.zeros(4, 2, 2, 16), torch.zeros(4, 2, 2, 16)
    with pytest.raises(KvattnError, match="^key_cache: is a lazily negated view"):
        kvattn.append_kv(key, value, torch._neg_view(kc), vc, torch.tensor([0, 1, 2]))


def test_sparse_tensor_is_named():
    kw = _kw()
    with pytest.raises(KvattnError, match="^q"):
        kvattn.flash_attn_with_kvcache(**dict(kw, q=kw["q"].to_sparse()))


def test_first_call_inside_torch_compile_with_kvattn_imported_first():
    """kvattn imported before torch defines its ops at the first call; made inside torch.compile(fullgraph,
    dynamic), that rebound a global the traced frame reads, and dynamo's restart of the frame diverged
    (SpeculationLogDivergence). A fresh interpreter, so that the import order holds."""
    import os
    import subprocess
    import sys

    script = "\n".join([
        "import kvattn",
        "import torch",
        "q, k, v = torch.randn(2, 2, 4, 16), torch.randn(2, 12, 2, 16), torch.randn(2, 12, 2, 16)",
        "f = torch.compile(lambda q, k, v, n: kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=n),",
        "                  fullgraph=True, dynamic=True, backend='aot_eager')",
        "got = f(q, k, v, 5)",
        "assert torch.equal(got, kvattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=5))",
        "print('ok')",
    ])
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                         env=dict(os.environ))
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
