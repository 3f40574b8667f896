"""The FlashAttention-3 drop-in (issue 17): FA3's argument forms (int-likes, window_size as any length-2
sequence, rotary_seqlens without rotary ignored, strings where bools belong rejected), flash_attn_func,
get_scheduler_metadata and scheduler_metadata=, and docstrings in step with CONTRACT.md. CPU backend, numpy
(the torch forms of the same rules: test_cuda_torch.py)."""
import inspect
import os
import re

import numpy as np
import pytest

import harness as H
from inputs import cu_from_lengths, randn, rotary_tables, scrambled_page_table, to_paged
from reference import reference_attention

kvattn = H.kvattn
KvattnError = kvattn.KvattnError


def base(seed=0, b=2, sq=2, hq=4, hk=2, d=16, s_cache=12):
    rng = np.random.default_rng(seed)
    return dict(q=randn(rng, (b, sq, hq, d), np.float32), k_cache=randn(rng, (b, s_cache, hk, d), np.float32),
                v_cache=randn(rng, (b, s_cache, hk, d), np.float32), cache_seqlens=np.array([5, 9], np.int32)[:b])


def run(**kwargs):
    return kvattn.flash_attn_with_kvcache(**kwargs, return_softmax_lse=True)


def assert_same(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ---- FA3's argument forms


@pytest.mark.parametrize("window", [[3, 0], np.array([3, 0]), np.array([3, 0], np.int32),
                                    (np.int64(3), np.array(0)), (3, None), (np.array(3), np.int16(0))])
def test_window_size_any_length2_sequence_of_int_likes(window):
    want = run(**base(), window_size=(3, 0 if window[1] is not None else -1))
    assert_same(run(**base(), window_size=window), want)


def test_window_size_changes_the_result():  # the forms above are not all ignored
    assert not np.array_equal(run(**base(), window_size=(1, 0))[0], run(**base())[0])


@pytest.mark.parametrize("name,value,plain", [("num_splits", np.int32(2), 2), ("attention_chunk", np.array(4), 4),
                                              ("sm_margin", np.uint8(1), 1), ("cache_seqlens", np.int64(7), 7)])
def test_int_likes_are_ints(name, value, plain):
    kw = base()
    kw[name] = plain
    want = run(**kw)
    kw[name] = value
    assert_same(run(**kw), want)


def test_max_seqlen_q_int_like_with_varlen_q():
    rng = np.random.default_rng(4)
    kw = base()
    kw["q"] = randn(rng, (3, 4, 16), np.float32)
    kw["cu_seqlens_q"] = cu_from_lengths([1, 2])
    want = run(**kw, max_seqlen_q=2)
    assert_same(run(**kw, max_seqlen_q=np.array(2, np.int64)), want)


@pytest.mark.parametrize("value", ["2", 2.0, 1.5, True, None, [2], np.array([2])])
def test_int_argument_rejects_non_ints(value):
    with pytest.raises(KvattnError, match=r"^num_splits: expected an int"):
        run(**base(), num_splits=value)


def test_max_seqlen_q_none_with_cu_seqlens_q_names_what_was_passed():
    kw = base()
    kw["q"] = kw["q"].reshape(4, 4, 16)
    with pytest.raises(KvattnError, match=r"^max_seqlen_q: required with cu_seqlens_q.*got None"):
        run(**kw, cu_seqlens_q=cu_from_lengths([2, 2]))


def test_rotary_seqlens_without_rotary_is_ignored():
    want = run(**base())
    # out of any range: would be an error if it were used
    assert_same(run(**base(), rotary_seqlens=np.array([10**6, -5], np.int32)), want)


def test_rotary_seqlens_with_rotary_is_used():
    rng = np.random.default_rng(5)
    cos, sin = rotary_tables(rng, 16, 8)
    kw = dict(base(), rotary_cos=cos, rotary_sin=sin, causal=True)
    default = run(**kw)
    assert_same(run(**kw, rotary_seqlens=kw["cache_seqlens"].copy()), default)
    assert not np.array_equal(run(**kw, rotary_seqlens=np.array([0, 1], np.int32))[0], default[0])
    with pytest.raises(KvattnError, match="^rotary"):
        run(**kw, rotary_seqlens=np.array([100, 1], np.int32))  # beyond seqlen_ro


@pytest.mark.parametrize("name", ["causal", "rotary_interleaved", "deterministic", "pack_gqa",
                                  "return_softmax_lse"])
@pytest.mark.parametrize("value", ["no", "False", "", 2, 0.0, [True]])
def test_non_bool_where_a_bool_belongs(name, value):
    kw = base()
    kw[name] = value
    with pytest.raises(KvattnError, match=rf"^{name}: expected a bool"):
        kvattn.flash_attn_with_kvcache(**kw)


@pytest.mark.parametrize("value", [True, np.bool_(True), np.array(True), 1, np.int64(1)])
def test_bool_forms(value):
    assert_same(run(**base(), causal=value), run(**base(), causal=True))
    assert not np.array_equal(run(**base(), causal=value)[0], run(**base(), causal=False)[0])


# ---- flash_attn_func


def test_flash_attn_func_signature_is_fa3s():
    params = inspect.signature(kvattn.flash_attn_func).parameters
    fa3 = ["q", "k", "v", "softmax_scale", "causal", "qv", "q_descale", "k_descale", "v_descale", "window_size",
           "attention_chunk", "softcap", "num_splits", "pack_gqa", "deterministic", "sm_margin",
           "return_attn_probs"]
    assert [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD] == fa3
    assert params["num_splits"].default == 1 and params["window_size"].default == (-1, -1)


@pytest.mark.parametrize("causal,window,softcap", [(False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                                   (False, (3, 1), 5.0)])
def test_flash_attn_func_matches_the_oracle(causal, window, softcap):
    rng = np.random.default_rng(7)
    b, sq, sk, hq, hk, d, dv = 2, 5, 9, 4, 2, 16, 8
    q, k, v = randn(rng, (b, sq, hq, d)), randn(rng, (b, sk, hk, d)), randn(rng, (b, sk, hk, dv))
    out, lse = kvattn.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                      return_attn_probs=True)
    ref = reference_attention(q, k, v, causal=causal, window_size=window, softcap=softcap)
    H.assert_close("out", out, ref["out"], H.TOL_OUT["fp32"])
    H.assert_close("lse", lse, ref["lse"], H.TOL_LSE["fp32"])
    assert kvattn.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap).shape == out.shape


def test_flash_attn_func_names_its_own_arguments():
    rng = np.random.default_rng(8)
    q, k = randn(rng, (1, 2, 4, 16)), randn(rng, (1, 3, 2, 16))
    with pytest.raises(KvattnError, match="^v"):
        kvattn.flash_attn_func(q, k, k.astype(np.float16))


# ---- get_scheduler_metadata and scheduler_metadata=


def test_get_scheduler_metadata_signature_is_fa3s():
    params = list(inspect.signature(kvattn.get_scheduler_metadata).parameters)
    assert params == ["batch_size", "max_seqlen_q", "max_seqlen_k", "num_heads_q", "num_heads_kv", "headdim",
                      "cache_seqlens", "qkv_dtype", "headdim_v", "cu_seqlens_q", "cu_seqlens_k_new",
                      "cache_leftpad", "page_size", "max_seqlen_k_new", "causal", "window_size",
                      "attention_chunk", "has_softcap", "num_splits", "pack_gqa", "sm_margin"]


@pytest.mark.parametrize("page_size", [None, 4])
def test_scheduler_metadata_is_accepted_and_changes_nothing(page_size):
    rng = np.random.default_rng(9)
    kw = base()
    if page_size:
        table, num_pages = scrambled_page_table(rng, 2, 3)
        kw["k_cache"] = to_paged(kw["k_cache"], table, num_pages, page_size)
        kw["v_cache"] = to_paged(kw["v_cache"], table, num_pages, page_size)
        kw["page_table"] = table
    new = 2
    k, v = randn(rng, (2, new, 2, 16)), randn(rng, (2, new, 2, 16))
    md = kvattn.get_scheduler_metadata(2, 2, 12, 4, 2, 16, kw["cache_seqlens"], np.float32, page_size=page_size,
                                       max_seqlen_k_new=new, causal=True, window_size=np.array([4, 0]),
                                       num_splits=np.int32(2))
    assert md.dtype == np.int32 and md.shape == (2,) and md[0] == 2
    caches = (kw["k_cache"].copy(), kw["v_cache"].copy())
    want = run(**kw, k=k, v=v, causal=True, window_size=(4, 0), num_splits=2)
    kw["k_cache"], kw["v_cache"] = caches
    assert_same(run(**kw, k=k, v=v, causal=True, window_size=(4, 0), num_splits=2, scheduler_metadata=md), want)
    # varlen takes it too (vLLM's call)
    rng2 = np.random.default_rng(10)
    q, kp, vp = randn(rng2, (3, 4, 16)), randn(rng2, (9, 2, 16)), randn(rng2, (9, 2, 16))
    args = (q, kp, vp, cu_from_lengths([1, 2]), cu_from_lengths([4, 5]), 2, 5)
    assert_same([kvattn.flash_attn_varlen_func(*args, scheduler_metadata=md)], [kvattn.flash_attn_varlen_func(*args)])


@pytest.mark.parametrize("page_size", [None, 16])
def test_get_scheduler_metadata_with_varlen_q_and_real_index_arrays(page_size):
    """The shapes' descriptors never overlap the call's real arrays (cache_seqlens, cu_seqlens_q, the page
    table): FA3's kvcache test with varlen q and a large cache failed on that overlap (the descriptors were
    laid out from cache_seqlens' own address)."""
    seqlens = np.array([700, 1024, 3], np.int32)
    for i in range(20):  # several allocations, so that the real arrays land next to each other
        md = kvattn.get_scheduler_metadata(3, 128, 1024, 8, 1, 128, seqlens, np.float32, page_size=page_size,
                                           cu_seqlens_q=cu_from_lengths([128, 5, 77]), max_seqlen_k_new=0,
                                           causal=True)
        assert md.dtype == np.int32 and md.shape == (2,) and md[0] == 3 and md[1] >= 0


@pytest.mark.parametrize("change,name", [(dict(num_heads_q=3), "num_heads"), (dict(qkv_dtype=np.float64), "qkv_dtype"),
                                         (dict(batch_size="2"), "batch_size"), (dict(causal="yes"), "causal"),
                                         (dict(window_size=(1,)), "window_size"), (dict(headdim=0), "headdim"),
                                         (dict(max_seqlen_k_new=20), "max_seqlen_k_new|cache_seqlens"),
                                         (dict(cache_seqlens=[5, 9]), "cache_seqlens")])
def test_get_scheduler_metadata_errors_name_the_argument(change, name):
    kw = dict(batch_size=2, max_seqlen_q=1, max_seqlen_k=12, num_heads_q=4, num_heads_kv=2, headdim=16,
              cache_seqlens=np.array([5, 9], np.int32), qkv_dtype="float32")
    kw.update(change)
    with pytest.raises(KvattnError, match=rf"^({name})"):
        kvattn.get_scheduler_metadata(**kw)


# ---- docstrings in step with CONTRACT.md

CONTRACT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "CONTRACT.md")
PUBLIC = ["flash_attn_with_kvcache", "flash_attn_varlen_func", "flash_attn_func", "get_scheduler_metadata",
          "append_kv", "flash_attn_combine", "device_errors", "has_backend"]


def _contract_tensor_rows():
    """{argument: [shapes]} from CONTRACT.md's Tensors table (backticked shapes)."""
    rows = {}
    text = open(CONTRACT).read()
    table = text[text.index("## Tensors"):text.index("## Semantics")]
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`(\w+)`", cells[0])
        shapes = re.findall(r"`(\([^`]*\))`", cells[1])
        for name in names:
            rows[name] = shapes
    return rows


def test_every_argument_of_every_public_function_is_documented():
    for fn_name in PUBLIC:
        fn = getattr(kvattn, fn_name)
        doc = fn.__doc__ or ""
        for name in inspect.signature(fn).parameters:
            assert re.search(rf"^\s+{name}: \S", doc, re.M), f"{fn_name}: argument {name} is not documented"


def test_flash_attn_with_kvcache_docs_give_contract_shapes_dtypes_and_defaults():
    from kvattn import _signature as S

    fn = kvattn.flash_attn_with_kvcache
    rows = _contract_tensor_rows()
    assert {"q", "k_cache", "v_cache", "page_table", "sinks"} <= set(rows)
    for name, shapes in rows.items():
        if name not in inspect.signature(fn).parameters:
            continue
        doc = S.argument_doc(fn, name)
        assert doc, name
        own_dim = "dv" if name in ("v_cache", "v", "out", "qv") else "d"
        for shape in shapes:
            if shape.startswith("(total_k") and name not in ("k_cache", "v_cache"):
                continue  # the packed cache's shape, in cu_seqlens_k's row
            variants = {shape, shape.replace("d / dv", own_dim)}
            assert any(v in doc for v in variants), f"{name}: CONTRACT.md's shape {shape} is not in {doc!r}"
    index_args = ["cache_batch_idx", "cache_leftpad", "page_table", "rotary_seqlens", "cu_seqlens_q",
                  "seqused_q", "cu_seqlens_k_new", "cu_seqlens_k", "cache_seqlens"]
    for name in index_args:
        assert "int32" in S.argument_doc(fn, name), name
    for name in ("alibi_slopes", "sinks", "q_descale"):
        assert "fp32" in S.argument_doc(fn, name), name
    for name, p in inspect.signature(fn).parameters.items():
        want = "(required)" if p.default is p.empty else f"(default {p.default!r})"
        if name in ("block_table", "s_aux", "learnable_sink"):
            want = "(alias of"
        assert want in S.argument_doc(fn, name), (name, want)


# ---- the one library call site


def test_call_library_guesses_the_cuda_workspace_and_retries_once(monkeypatch):
    """With kvattn_fwd_sized (one validation for size and run), the CUDA path allocates what the device's
    last call needed and calls once; a too-small guess costs one more call. (A fake library: this machine
    may have no CUDA.)"""
    from kvattn import _fwd, _lib
    from kvattn import tensors as T

    calls = []

    class FakeLib:
        _kvattn_fwd_sized = None

        def kvattn_fwd_sized(self, p_ref, needed_ref):
            p, needed = p_ref._obj, needed_ref._obj
            calls.append(p.workspace_bytes)
            needed.value = 1000
            return _lib.OK if p.workspace_bytes >= 1000 and p.workspace else _lib.ERROR_INVALID_ARGUMENT

        def kvattn_last_error(self):
            return b"workspace_bytes: too small"

    fake = FakeLib()
    fake._kvattn_fwd_sized = fake.kvattn_fwd_sized
    monkeypatch.setattr(_fwd, "_workspace_hint", {})
    for expected in ([0, 1000], [1000]):
        calls.clear()
        p = _lib.new_fwd_params()
        p.device_type, p.device_id = _lib.DEVICE_CUDA, 3
        _fwd.call_library(fake, p, T.Call(), np.zeros(1, np.float32), _fwd.NAMES)
        assert calls == expected and p.workspace_bytes == 1000 and p.workspace % 256 == 0


def test_get_scheduler_metadata_is_static():
    """FA3's kvcache test passes max_seqlen_k_new even when nothing is appended, with full caches and
    varlen offsets of its own: the metadata describes shapes, so none of that is an error."""
    full = np.array([12, 12], np.int32)
    md = kvattn.get_scheduler_metadata(2, 3, 12, 4, 2, 16, full, "float32", cu_seqlens_q=cu_from_lengths([1, 3]),
                                       cu_seqlens_k_new=cu_from_lengths([2, 0]), cache_leftpad=full,
                                       max_seqlen_k_new=2, page_size=4)
    assert md.tolist() == [2, 0]
    with pytest.raises(KvattnError, match=r"^cache_seqlens: expected \(2,\) int32"):
        kvattn.get_scheduler_metadata(2, 3, 12, 4, 2, 16, full[:1], "float32")


def test_varlen_func_with_block_table_is_vllms_paged_call():
    """vLLM calls flash_attn_varlen_func with a paged cache, block_table and seqused_k (cu_seqlens_k None):
    the same as flash_attn_with_kvcache with page_table and cache_seqlens."""
    rng = np.random.default_rng(12)
    table, num_pages = scrambled_page_table(rng, 2, 3)
    kc, vc = randn(rng, (num_pages, 4, 2, 16)), randn(rng, (num_pages, 4, 2, 16))
    q, cu_q, lens = randn(rng, (3, 4, 16)), cu_from_lengths([1, 2]), np.array([5, 11], np.int32)
    got = kvattn.flash_attn_varlen_func(q, kc, vc, cu_q, None, 2, 12, seqused_k=lens, block_table=table,
                                        causal=True, return_attn_probs=True)
    want = kvattn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, page_table=table, cu_seqlens_q=cu_q,
                                          max_seqlen_q=2, causal=True, return_softmax_lse=True)
    assert_same(got, want)
    with pytest.raises(KvattnError, match="^block_table"):
        kvattn.flash_attn_varlen_func(q, kc, vc, cu_q, None, 2, 12, seqused_k=lens, block_table=table[:1])
