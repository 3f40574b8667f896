"""kvattn under torch: CUDA-graph capture and replay, torch.compile(fullgraph=True), torch.library.opcheck,
in-place append through compiled code, and errors as KvattnError (TESTING.md, "On the GPU").

The torch tests need torch; their 'cuda' cases also a GPU and a CUDA build of the library, and the graph
tests run on CUDA only. The 'cpu' cases run the same ops on the CPU backend (torch CPU tensors), so the op
plumbing is checked wherever torch is installed. Two tests need no torch at all: kvattn imports and runs
without it, and the torch entry points take exactly the arguments of interface.py's.
"""
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

import harness as H
from inputs import DTYPES, nan_fill_invalid, randn, rotary_tables, scrambled_page_table, to_paged
from reference import reference_attention

import kvattn
from kvattn import interface, torch_ops

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")


def _cuda_ready():
    return torch is not None and torch.cuda.is_available() and kvattn.has_backend("cuda")


needs_cuda = pytest.mark.skipif(not _cuda_ready(), reason="needs torch, a GPU and a CUDA build")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]

# The shapes of every case here: b sequences over ROWS cache rows (page-table rows), so that
# cache_batch_idx can scatter; SQ query tokens and NEW appended tokens per sequence; a head dim the CUDA
# kernels instantiate, with a partial rotary dim.
B, ROWS, HQ, HK, D, SQ, NEW, ROTARY_DIM = 3, 5, 8, 2, 64, 2, 2, 32
TENSOR_ARGS = ("q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
               "cache_batch_idx", "page_table")


# ---------------------------------------------------------------- helpers


def to_torch(x, device):
    """numpy (fp16/bf16/int32/...) -> a torch tensor on `device` with the same values."""
    if x.dtype == H.BF16:
        t = torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(x))
    return t.to(device)


def bits(t):
    """A tensor's bit pattern (NaN compares equal to the same NaN)."""
    t = t.detach().cpu().contiguous()
    as_int = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
    return t.view(as_int[t.dtype]) if t.dtype in as_int else t


def assert_bitwise(name, got, want):
    assert got.shape == want.shape and got.dtype == want.dtype, f"{name}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    same = bits(got) == bits(want)
    assert bool(same.all()), f"{name}: {int((~same).sum())} elements differ between the two runs"


def scenario(seed, dtype, page_size, cap=40):
    """Numpy inputs of one paged call with scattered cache_batch_idx, append and rotary. The shapes depend
    only on (dtype, page_size, cap), so scenarios of different seeds can be copied into one captured graph.
    Every slot outside a sequence's valid range, and every unused page, is NaN."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    pages_per_row = -(-cap // page_size)
    cap = pages_per_row * page_size
    lens = np.array([cap - NEW, rng.integers(0, cap - NEW + 1), rng.integers(0, 3)])  # full, any, 0..2
    lens = rng.permutation(lens).astype(np.int32)
    rows = rng.permutation(ROWS)[:B].astype(np.int32)  # distinct: append needs them distinct
    table, num_pages = scrambled_page_table(rng, ROWS, pages_per_row, extra_pages=2)
    caches = []
    for dv in (D, D):
        contiguous = nan_fill_invalid(randn(rng, (ROWS, cap, HK, dv), dt), lens, rows=rows)
        caches.append(to_paged(contiguous, table, num_pages, page_size))
    # cos/sin are the same in every scenario (a model's tables); positions come from cache_seqlens.
    cos, sin = rotary_tables(np.random.default_rng(1234), cap + SQ, ROTARY_DIM)
    return dict(q=randn(rng, (B, SQ, HQ, D), dt), k_cache=caches[0], v_cache=caches[1],
                k=randn(rng, (B, NEW, HK, D), dt), v=randn(rng, (B, NEW, HK, D), dt), rotary_cos=cos,
                rotary_sin=sin, cache_seqlens=lens, cache_batch_idx=rows, page_table=table)


def on_device(arrays, device):
    return {name: to_torch(arrays[name], device) for name in TENSOR_ARGS}


def check_against_oracle(arrays, dtype, out, lse, k_cache, v_cache, **flags):
    """TESTING.md's tolerances against the float64 oracle; the appended caches within one ulp (rotary)."""
    ref = reference_attention(**{name: arrays[name] for name in TENSOR_ARGS}, **flags)
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT[dtype])
    H.assert_close("lse", H.to_numpy(lse), ref["lse"], H.TOL_LSE[dtype])
    H.assert_empty_rows_exact(H.to_numpy(out), H.to_numpy(lse), ref["out"], ref["lse"])
    H.assert_cache_equal("k_cache", H.to_numpy(k_cache), ref["k_cache"], True, dtype)
    H.assert_cache_equal("v_cache", H.to_numpy(v_cache), ref["v_cache"], False, dtype)


def bad_page_table(arrays):
    """The scenario with an out-of-range page id where sequence 0 reads; returns (arrays, sequence)."""
    bad = dict(arrays, page_table=arrays["page_table"].copy())
    bad["page_table"][arrays["cache_batch_idx"][0], 0] = arrays["k_cache"].shape[0] + 7
    return bad


# ---------------------------------------------------------------- no torch needed


def test_op_schema_is_derived_from_the_signature():
    """The fwd ops' arguments are flash_attn_with_kvcache's (aliases, the lse flag and out folded) and
    kvattn_fwd_params's field names: one table (_signature.FWD) gives the signature and the schema."""
    from kvattn import _lib, _signature as S

    params = list(inspect.signature(kvattn.flash_attn_with_kvcache).parameters)
    assert params == [a.name for a in S.FWD]
    names = S.op_arg_names()
    fields = {name for name, _ in _lib.FwdParams._fields_}
    assert set(names) - {"scheduler_metadata"} <= fields, set(names) - fields
    schema = S.op_schema(with_out=False)
    assert schema.split(" -> ")[0].count(",") + 1 == len(names) and "Tensor(a!) k_cache" in schema
    assert S.op_schema(with_out=True).endswith("Tensor(c!) out) -> Tensor")


def test_import_and_numpy_calls_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"  # `import torch` now raises ImportError
            "import numpy as np, kvattn\n"
            "from kvattn import torch_ops\n"
            "q = np.ones((1, 1, 2, 8), np.float32); kc = np.ones((1, 4, 1, 8), np.float32)\n"
            "out = kvattn.flash_attn_with_kvcache(q, kc, kc.copy(), cache_seqlens=2)\n"
            "assert out.shape == (1, 1, 2, 8) and torch_ops._ops is None\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- CUDA graphs


@needs_cuda
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cuda_graph_replay_with_changed_lengths_tables_and_batch_indices(dtype, page_size):
    flags = dict(causal=True, rotary_interleaved=True)
    scenarios = [scenario(seed, dtype, page_size) for seed in range(5)]
    static = on_device(scenarios[0], "cuda")

    def load(arrays):
        for name in TENSOR_ARGS:
            static[name].copy_(to_torch(arrays[name], "cuda"))
        torch.cuda.synchronize()

    def call():
        return kvattn.flash_attn_with_kvcache(**static, **flags, return_softmax_lse=True)

    side = torch.cuda.Stream()  # warm up (library, ops, lazy module loading) off the capture stream
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    kvattn.device_errors("cuda")
    load(scenarios[0])  # the warm-up appended into the caches
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = call()

    for seed, arrays in list(enumerate(scenarios))[1:] + [(0, scenarios[0])]:
        load(arrays)
        graph.replay()
        torch.cuda.synchronize()
        kvattn.device_errors("cuda")
        replayed = dict(out=out.clone(), lse=lse.clone(), k_cache=static["k_cache"].clone(),
                        v_cache=static["v_cache"].clone())
        eager = on_device(arrays, "cuda")
        e_out, e_lse = kvattn.flash_attn_with_kvcache(**eager, **flags, return_softmax_lse=True)
        kvattn.device_errors("cuda")
        for name, want in (("out", e_out), ("lse", e_lse), ("k_cache", eager["k_cache"]),
                           ("v_cache", eager["v_cache"])):
            assert_bitwise(f"seed {seed}: replayed {name} vs eager", replayed[name], want)
        check_against_oracle(arrays, dtype, e_out, e_lse, eager["k_cache"], eager["v_cache"], **flags)

    # An out-of-range page id copied into the captured table: reported by device_errors, nothing crashes,
    # the offending sequence's output is NaN; the graph then runs on with a good table.
    load(bad_page_table(scenarios[1]))
    graph.replay()
    with pytest.raises(kvattn.KvattnError, match="page_table"):
        kvattn.device_errors("cuda")
    assert bool(torch.isnan(out[0]).all()), "the sequence with the bad page id must give NaN"
    kvattn.device_errors("cuda")  # the record was cleared
    load(scenarios[2])
    graph.replay()
    kvattn.device_errors("cuda")
    check_against_oracle(scenarios[2], dtype, out, lse, static["k_cache"], static["v_cache"], **flags)


# ---------------------------------------------------------------- torch.compile


def _backend(device):
    # inductor on the GPU (what users run); aot_eager on the CPU keeps the suite free of a C++ compile.
    return "inductor" if device == "cuda" else "aot_eager"


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_compile_fullgraph_appends_in_place(device, dtype):
    flags = dict(causal=True, rotary_interleaved=False)

    def step(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, page_table):
        out, lse = kvattn.flash_attn_with_kvcache(
            q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin, cache_seqlens=cache_seqlens,
            cache_batch_idx=cache_batch_idx, page_table=page_table, return_softmax_lse=True, **flags)
        return out.float() * 2.0, lse  # a torch op around the call: a graph, not just the op

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=_backend(device))
    for seed in (3, 4):  # the second call reuses the compiled graph with new lengths, tables, indices
        arrays = scenario(seed, dtype, page_size=16)
        c_in, e_in = on_device(arrays, device), on_device(arrays, device)
        c_out, c_lse = compiled(**c_in)
        e_out, e_lse = step(**e_in)
        H.sync_device_errors(device)
        assert_bitwise("compiled out", c_out, e_out)
        assert_bitwise("compiled lse", c_lse, e_lse)
        # The append happened in place, in the caller's tensors, through the compiled graph.
        assert_bitwise("k_cache after compile", c_in["k_cache"], e_in["k_cache"])
        assert_bitwise("v_cache after compile", c_in["v_cache"], e_in["v_cache"])
        check_against_oracle(arrays, dtype, c_out / 2, c_lse, c_in["k_cache"], c_in["v_cache"], **flags)


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_writes_given_out(device):
    arrays = scenario(5, "fp16", page_size=16)

    def step(q, k_cache, v_cache, cache_seqlens, cache_batch_idx, page_table, out):
        result = kvattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens,
                                                cache_batch_idx=cache_batch_idx, page_table=page_table, out=out)
        return result + 0

    names = ("q", "k_cache", "v_cache", "cache_seqlens", "cache_batch_idx", "page_table")
    args = {n: t for n, t in on_device(arrays, device).items() if n in names}
    out = torch.full((B, SQ, HQ, D), float("nan"), dtype=torch.float16, device=device)
    torch._dynamo.reset()
    got = torch.compile(step, fullgraph=True, backend=_backend(device))(**args, out=out)
    H.sync_device_errors(device)
    assert_bitwise("returned vs out", got, out)
    ref = reference_attention(**{n: arrays[n] for n in names})
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT["fp16"])


# ---------------------------------------------------------------- torch.library.opcheck


def _recorded_op_calls(monkeypatch, fn, *args, **kwargs):
    """Run a kvattn entry point and return the (op overload, positional args) it called torch.ops with."""
    calls = []
    real = torch_ops._op

    def recording(name):
        op = real(name)

        def call(*op_args):
            calls.append((getattr(torch.ops.kvattn, name).default, op_args))
            return op(*op_args)

        return call

    with monkeypatch.context() as m:
        m.setattr(torch_ops, "_op", recording)
        m.setattr(torch_ops, "_eager", lambda: False)  # through the op, as under torch.compile
        fn(*args, **kwargs)
    return calls


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, monkeypatch):
    arrays = scenario(6, "bf16", page_size=4)
    t = on_device(arrays, device)
    rng = np.random.default_rng(6)
    samples = [
        # paged, scattered batch indices, append + rotary, causal, lse
        (kvattn.flash_attn_with_kvcache, (), dict(t, causal=True, return_softmax_lse=True)),
        # the same writing a given out (fwd_out), with a window and a sink
        (kvattn.flash_attn_with_kvcache, (), dict(t, window_size=(5, 0), out=torch.empty_like(t["q"]),
                                                  sinks=torch.randn(HQ, device=device))),
        # contiguous cache, int cache_seqlens, left padding, no append
        (kvattn.flash_attn_with_kvcache,
         (t["q"], to_torch(randn(rng, (B, 12, HK, D), H.BF16), device),
          to_torch(randn(rng, (B, 12, HK, D), H.BF16), device)),
         dict(cache_seqlens=9, cache_leftpad=torch.tensor([0, 3, 9], dtype=torch.int32, device=device))),
        # varlen q
        (kvattn.flash_attn_with_kvcache,
         (to_torch(randn(rng, (5, HQ, D), H.BF16), device), t["k_cache"], t["v_cache"]),
         dict(cache_seqlens=t["cache_seqlens"], cache_batch_idx=t["cache_batch_idx"], page_table=t["page_table"],
              cu_seqlens_q=torch.tensor([0, 2, 2, 5], dtype=torch.int32, device=device), max_seqlen_q=3,
              causal=True)),
        # vLLM-style append
        (kvattn.append_kv,
         (to_torch(randn(rng, (4, HK, D), H.BF16), device), to_torch(randn(rng, (4, HK, D), H.BF16), device),
          t["k_cache"], t["v_cache"], torch.tensor([0, 5, -1, 13], dtype=torch.int64, device=device)), {}),
        # combine: 4-d, to bf16; FlashAttention-3's 5-d form; into a given out
        (kvattn.flash_attn_combine,
         (torch.randn(3, B, HQ, D, device=device), torch.randn(3, B, HQ, device=device)),
         dict(out_dtype=torch.bfloat16)),
        (kvattn.flash_attn_combine,
         (torch.randn(2, B, SQ, HQ, D, device=device), torch.randn(2, B, SQ, HQ, device=device)),
         dict(sinks=torch.randn(HQ, device=device))),
        (kvattn.flash_attn_combine,
         (torch.randn(3, B, HQ, D, device=device), torch.randn(3, B, HQ, device=device)),
         dict(out=torch.empty(B, HQ, D, device=device))),
    ]
    seen = set()
    for fn, args, kwargs in samples:
        calls = _recorded_op_calls(monkeypatch, fn, *args, **kwargs)
        H.sync_device_errors(device)
        assert len(calls) == 1, f"{fn.__name__} made {len(calls)} op calls"
        op, op_args = calls[0]
        torch.library.opcheck(op, op_args)
        seen.add(op)
    assert seen == {getattr(torch.ops.kvattn, n).default
                    for n in ("fwd", "fwd_out", "append_kv", "combine", "combine_out")}


# ---------------------------------------------------------------- errors


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_errors_raise_kvattn_error(device):
    t = on_device(scenario(8, "fp16", page_size=16), device)
    bad = [
        dict(t, k_cache=t["k_cache"].to(torch.bfloat16)),  # dtype mismatch
        dict(t, q=t["q"][:, :, :7]),  # hq % hk
        dict(t, q=t["q"][0]),  # rank of q
        dict(t, window_size=(-2, 0)),
        dict(t, scheduler_metadata=torch.zeros(4, dtype=torch.float32, device=device)),
        dict(t, cache_seqlens=-3),
        # issue 17: through torch these escaped as KeyError / RuntimeError / torch's schema error
        dict(t, q=t["q"].double()),
        dict(t, k_cache=None),
        dict(t, causal="no"),
        dict(t, pack_gqa="False"),
        dict(t, cache_batch_idx=[0, 1, 2]),
        dict(t, out=[0.0]),
    ]
    for kwargs in bad:
        with pytest.raises(kvattn.KvattnError):
            kvattn.flash_attn_with_kvcache(**kwargs)
    with pytest.raises(kvattn.KvattnError):
        kvattn.flash_attn_combine(torch.randn(2, 3, 4, 8, device=device), torch.randn(2, 3, 5, device=device))

    def step(q, k_cache, v_cache):
        return kvattn.flash_attn_with_kvcache(q, k_cache, v_cache) * 2

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=_backend(device))
    for q, k_cache in ((t["q"], t["k_cache"].to(torch.bfloat16)), (t["q"][0], t["k_cache"])):
        with pytest.raises(kvattn.KvattnError):  # the library's message, also through compiled code
            compiled(q, k_cache, t["v_cache"])


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("what", ["page_table", "cache_batch_idx"])
def test_out_of_range_indices_are_reported(device, what):
    arrays = scenario(9, "fp16", page_size=16)
    if what == "page_table":
        arrays = bad_page_table(arrays)
    else:
        arrays = dict(arrays, cache_batch_idx=arrays["cache_batch_idx"].copy())
        arrays["cache_batch_idx"][0] = ROWS + 3
    t = on_device(arrays, device)
    out = None
    with pytest.raises(kvattn.KvattnError, match=what):
        out = kvattn.flash_attn_with_kvcache(**t, causal=True)
        H.sync_device_errors(device)  # CUDA: reported by the next check; the CPU backend raises at once
    if device == "cuda":
        assert bool(torch.isnan(out[0]).all()), "the offending sequence's output must be NaN"
        kvattn.device_errors("cuda")  # cleared by the check that reported it


# ---------------------------------------------------------------- the FA3 drop-in's torch forms (issue 17)


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_fa3_argument_forms_through_torch(device):
    t = on_device(scenario(10, "fp16", page_size=16), device)
    plain = dict(t, causal=True, window_size=(5, 0), num_splits=2, return_softmax_lse=True)
    want = kvattn.flash_attn_with_kvcache(**dict(plain, k_cache=t["k_cache"].clone(), v_cache=t["v_cache"].clone()))
    window = torch.tensor([5, 0], device=device)  # FA3's tests: torch.randint(0, seqlen_k, (2,))
    forms = dict(plain, window_size=window, num_splits=torch.tensor(2), causal=torch.tensor(True),
                 scheduler_metadata=kvattn.get_scheduler_metadata(
                     B, SQ, t["page_table"].shape[1] * 16, HQ, HK, D, t["cache_seqlens"], torch.float16,
                     page_size=16, max_seqlen_k_new=NEW, causal=True, window_size=window, num_splits=2))
    got = kvattn.flash_attn_with_kvcache(**forms)
    H.sync_device_errors(device)
    assert_bitwise("out", got[0], want[0])
    assert_bitwise("lse", got[1], want[1])
    md = forms["scheduler_metadata"]
    assert md.dtype == torch.int32 and md.device == t["q"].device and md.shape == (2,)


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_requires_grad_gives_a_non_differentiable_output(device):
    """FA3's forward tests call flash_attn_func with q, k, v that require grad: the forward runs and its
    output does not require grad (kvattn has no backward); a cache that requires grad and would be
    appended to in place is an error at the call."""
    rng = np.random.default_rng(11)
    q, k, v = (to_torch(randn(rng, shape, H.BF16), device).requires_grad_()
               for shape in ((B, 3, HQ, D), (B, 7, HK, D), (B, 7, HK, D)))
    out = kvattn.flash_attn_func(q, k, v, causal=True)
    H.sync_device_errors(device)
    assert not out.requires_grad and out.grad_fn is None
    ref = reference_attention(*(H.to_numpy(x.detach()) for x in (q, k, v)), causal=True)
    H.assert_close("out", H.to_numpy(out), ref["out"], H.TOL_OUT["bf16"])
    new = to_torch(randn(rng, (B, 1, HK, D), H.BF16), device)
    with pytest.raises(kvattn.KvattnError, match="^k_cache: requires grad"):
        kvattn.flash_attn_with_kvcache(q, k, v.detach(), k=new, v=new, cache_seqlens=3)
    with torch.no_grad():  # no autograd: the append is allowed
        kvattn.flash_attn_with_kvcache(q, k, v.detach(), k=new, v=new, cache_seqlens=3)


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_eager_append_and_combine_equal_their_ops(device, monkeypatch):
    """append_kv and flash_attn_combine skip the dispatcher in eager mode: the same bits as through the ops,
    and the written tensors' version counters move as the ops' would."""
    rng = np.random.default_rng(13)
    key, value = (to_torch(randn(rng, (4, HK, D), H.BF16), device) for _ in range(2))
    caches = [to_torch(randn(rng, (6, 4, HK, D), H.BF16), device) for _ in range(2)]
    slots = torch.tensor([0, 5, -1, 13], dtype=torch.int64, device=device)
    parts = (torch.randn(3, B, HQ, D, device=device), torch.randn(3, B, HQ, device=device))
    results = []
    for eager in (True, False):
        with monkeypatch.context() as m:
            if not eager:
                m.setattr(torch_ops, "_eager", lambda: False)
            kc, vc = caches[0].clone(), caches[1].clone()
            version = kc._version
            kvattn.append_kv(key, value, kc, vc, slots)
            assert kc._version > version
            out = torch.empty(B, HQ, D, device=device)
            combined = kvattn.flash_attn_combine(*parts, out=out)
            assert combined[0] is out
            results.append((kc, vc, out, combined[1], *kvattn.flash_attn_combine(*parts, out_dtype=torch.bfloat16)))
    H.sync_device_errors(device)
    for name, got, want in zip(("k_cache", "v_cache", "out", "lse", "out bf16", "lse 2"), *results):
        assert_bitwise(name, got, want)
