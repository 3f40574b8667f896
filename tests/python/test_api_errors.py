"""The Python layer's errors and argument handling: every violated rule raises KvattnError (a ValueError)
whose message starts with the argument's name; aliases; scheduler_metadata's form; int cache_seqlens; nothing is
written by a rejected call; the package imports without numpy or torch."""
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

import harness as H
from inputs import cu_from_lengths, randn, rotary_tables, scrambled_page_table

kvattn = H.kvattn
KvattnError = kvattn.KvattnError
INVALID, UNSUPPORTED = 1, 2


def base(seed=0, b=2, sq=2, hq=4, hk=2, d=16, s_cache=12, dtype=np.float32):
    """A valid small call: dict of flash_attn_with_kvcache keyword arguments (fresh arrays each time)."""
    rng = np.random.default_rng(seed)
    return dict(q=randn(rng, (b, sq, hq, d), dtype), k_cache=randn(rng, (b, s_cache, hk, d), dtype),
                v_cache=randn(rng, (b, s_cache, hk, d), dtype), cache_seqlens=np.array([5, 7], np.int32)[:b])


def expect_error(name, status=INVALID, fn=None, **kwargs):
    """The call raises KvattnError whose message starts with `name` (the argument)."""
    with pytest.raises(KvattnError) as e:
        (fn or kvattn.flash_attn_with_kvcache)(**kwargs)
    msg = str(e.value)
    assert msg.startswith(name), f"message should start with {name!r}: {msg}"
    assert e.value.status == status, msg
    assert isinstance(e.value, ValueError) and not isinstance(e.value, NotImplementedError)
    return msg


def test_valid_base_runs():
    out = kvattn.flash_attn_with_kvcache(**base())
    assert out.shape == (2, 2, 4, 16) and not np.isnan(out).any()


def test_signature_is_flash_attention_3():
    """Positions and defaults of FlashAttention-3's flash_attn_with_kvcache, then keyword-only extras."""
    params = inspect.signature(kvattn.flash_attn_with_kvcache).parameters
    fa3 = ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin", "cache_seqlens",
           "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q", "cu_seqlens_k_new", "max_seqlen_q",
           "rotary_seqlens", "q_descale", "k_descale", "v_descale", "softmax_scale", "causal", "window_size",
           "attention_chunk", "softcap", "rotary_interleaved", "scheduler_metadata", "num_splits", "pack_gqa",
           "sm_margin", "return_softmax_lse"]
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == fa3
    assert params["window_size"].default == (-1, -1) and params["num_splits"].default == 0
    assert params["rotary_interleaved"].default is True and params["softcap"].default == 0.0
    keyword_only = {n for n, p in params.items() if p.kind == p.KEYWORD_ONLY}
    assert {"sinks", "alibi_slopes", "seqused_q", "out", "block_table", "s_aux", "learnable_sink"} <= keyword_only
    varlen = list(inspect.signature(kvattn.flash_attn_varlen_func).parameters)
    assert varlen[:9] == ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                          "seqused_q", "seqused_k"]


# ---- errors raised by the Python layer itself


@pytest.mark.parametrize("metadata", [[0, 1], np.zeros(4, np.float32), np.zeros((2, 2), np.int32)])
def test_scheduler_metadata_not_get_scheduler_metadatas(metadata):
    msg = expect_error("scheduler_metadata", **base(), scheduler_metadata=metadata)
    assert "get_scheduler_metadata" in msg


@pytest.mark.parametrize("name,alias", [("page_table", "block_table"), ("sinks", "s_aux"),
                                        ("sinks", "learnable_sink")])
def test_alias_and_name_together(name, alias):
    x = np.zeros(4, np.float32)
    msg = expect_error(name, **base(), **{name: x, alias: x})
    assert alias in msg


def test_alias_s_aux_and_learnable_sink_together():
    x = np.zeros(4, np.float32)
    expect_error("s_aux", **base(), s_aux=x, learnable_sink=x)


@pytest.mark.parametrize("alias", ["s_aux", "learnable_sink"])
def test_sink_aliases_equal_sinks(alias):
    sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    want = kvattn.flash_attn_with_kvcache(**base(), sinks=sinks, return_softmax_lse=True)
    got = kvattn.flash_attn_with_kvcache(**base(), **{alias: sinks}, return_softmax_lse=True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_block_table_equals_page_table():
    rng = np.random.default_rng(3)
    table, num_pages = scrambled_page_table(rng, 2, 3)
    kw = base()
    kw["k_cache"] = randn(rng, (num_pages, 4, 2, 16))
    kw["v_cache"] = randn(rng, (num_pages, 4, 2, 16))
    want = kvattn.flash_attn_with_kvcache(**kw, page_table=table)
    np.testing.assert_array_equal(kvattn.flash_attn_with_kvcache(**kw, block_table=table), want)


def test_bf16_sinks_are_widened():
    kw = base(dtype=H.BF16)
    sinks = np.array([0.5, -1.0, 2.0, 0.0], H.BF16)
    want = kvattn.flash_attn_with_kvcache(**kw, sinks=sinks.astype(np.float32))
    np.testing.assert_array_equal(kvattn.flash_attn_with_kvcache(**kw, sinks=sinks), want)


def test_int_cache_seqlens_equals_array():
    kw = base()
    kw.pop("cache_seqlens")
    want = kvattn.flash_attn_with_kvcache(**kw, cache_seqlens=np.array([6, 6], np.int32), return_softmax_lse=True)
    for value in (6, np.int64(6)):
        got = kvattn.flash_attn_with_kvcache(**kw, cache_seqlens=value, return_softmax_lse=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_negative_int_cache_seqlens():
    kw = base()
    kw["cache_seqlens"] = -1
    expect_error("cache_seqlens", **kw)


def test_int_cache_seqlens_beyond_capacity():
    kw = base()
    kw["cache_seqlens"] = 13  # s_cache is 12
    expect_error("cache_seqlens", **kw)


@pytest.mark.parametrize("scale", [0.0, -0.5, float("nan")])
def test_softmax_scale_not_positive(scale):
    expect_error("softmax_scale", **base(), softmax_scale=scale)


@pytest.mark.parametrize("window", [(1,), 3, (1, 2, 3), ("a", 1)])
def test_window_size_malformed(window):
    expect_error("window_size", **base(), window_size=window)


def test_window_size_none_is_unbounded():
    want = kvattn.flash_attn_with_kvcache(**base(), window_size=(-1, 2))
    np.testing.assert_array_equal(kvattn.flash_attn_with_kvcache(**base(), window_size=(None, 2)), want)


@pytest.mark.parametrize("name,value", [("num_splits", 2**40), ("attention_chunk", 1.5), ("sm_margin", "1"),
                                        ("max_seqlen_q", 2.0)])
def test_scalar_type_and_range(name, value):
    expect_error(name, **base(), **{name: value})


def test_not_an_array():
    kw = base()
    kw["cache_batch_idx"] = [0, 1]
    expect_error("cache_batch_idx", **kw)


def test_unsupported_dtype_float64():
    kw = base()
    kw["q"] = kw["q"].astype(np.float64)
    msg = expect_error("q", **kw)
    # A float tensor is told the float dtypes, not the index ones.
    assert "float64" in msg and "bfloat16" in msg and "int32" not in msg and "int64" not in msg, msg
    kw = base()
    kw["cache_seqlens"] = kw["cache_seqlens"].astype(np.float32)
    msg = expect_error("cache_seqlens", **kw)
    assert "float32" in msg and "int32" in msg, msg


def test_dtype_names_are_numpys():
    """The library names dtypes as numpy does (float32, not f32 or fp32), each allowed one once."""
    kw = base()
    kw["k_cache"] = kw["k_cache"].astype(np.float16)
    msg = expect_error("k_cache", **kw)
    assert "float16" in msg and "float32" in msg and "f32" not in msg.replace("float32", ""), msg
    kw = base(sq=1)
    cos, sin = rotary_tables(np.random.default_rng(1), 32, 8, np.float16)
    kw.update(rotary_cos=cos, rotary_sin=sin, k=kw["q"][:, :, :2].copy(), v=kw["q"][:, :, :2].copy())
    msg = expect_error("rotary_cos", **kw)
    assert msg.count("float32") == 1 and "float32 or float32" not in msg, msg


def test_too_many_dims():
    kw = base()
    kw["q"] = kw["q"][None, None]
    expect_error("q", **kw)


def test_read_only_cache_with_append():
    kw = base()
    rng = np.random.default_rng(1)
    kw["k_cache"].flags.writeable = False
    expect_error("k_cache", **kw, k=randn(rng, (2, 1, 2, 16)), v=randn(rng, (2, 1, 2, 16)))


def test_required_missing():
    kw = base()
    kw["v_cache"] = None
    expect_error("v_cache", **kw)


# ---- errors from the library, raised with its message


def test_dtype_mismatch():
    kw = base()
    kw["k_cache"] = kw["k_cache"].astype(np.float16)
    expect_error("k_cache", **kw)


def test_hq_not_multiple_of_hk():
    kw = base(hq=3, hk=2)
    expect_error("k_cache", **kw)


def test_index_dtype_int64():
    kw = base()
    kw["cache_seqlens"] = kw["cache_seqlens"].astype(np.int64)
    expect_error("cache_seqlens", **kw)


def test_page_table_entry_out_of_range():
    rng = np.random.default_rng(4)
    table, num_pages = scrambled_page_table(rng, 2, 3)
    table[1, 1] = num_pages + 5
    kw = base()
    kw["k_cache"] = randn(rng, (num_pages, 4, 2, 16))
    kw["v_cache"] = randn(rng, (num_pages, 4, 2, 16))
    msg = expect_error("page_table", **kw, page_table=table)
    assert str(num_pages + 5) in msg


def test_cache_batch_idx_out_of_range():
    expect_error("cache_batch_idx", **base(), cache_batch_idx=np.array([0, 2], np.int32))


def test_duplicate_cache_batch_idx_with_append_writes_nothing():
    kw = base()
    rng = np.random.default_rng(5)
    before = kw["k_cache"].copy()
    expect_error("cache_batch_idx", **kw, cache_batch_idx=np.array([1, 1], np.int32),
                 k=randn(rng, (2, 1, 2, 16)), v=randn(rng, (2, 1, 2, 16)))
    np.testing.assert_array_equal(kw["k_cache"], before)


def test_duplicate_cache_batch_idx_without_append_is_fine():
    kvattn.flash_attn_with_kvcache(**base(), cache_batch_idx=np.array([1, 1], np.int32))


def test_append_beyond_capacity_writes_nothing():
    kw = base()
    rng = np.random.default_rng(6)
    kw["cache_seqlens"] = np.array([5, 11], np.int32)
    before = (kw["k_cache"].copy(), kw["v_cache"].copy())
    expect_error("cache_seqlens", **kw, k=randn(rng, (2, 2, 2, 16)), v=randn(rng, (2, 2, 2, 16)))
    np.testing.assert_array_equal(kw["k_cache"], before[0])
    np.testing.assert_array_equal(kw["v_cache"], before[1])


def test_leftpad_beyond_cache_seqlens():
    expect_error("cache_leftpad", **base(), cache_leftpad=np.array([0, 8], np.int32))


def test_rotary_position_beyond_seqlen_ro():
    rng = np.random.default_rng(7)
    cos, sin = rotary_tables(rng, 6, 16)
    expect_error("rotary_cos", **base(), rotary_cos=cos, rotary_sin=sin, causal=True)


def test_cu_seqlens_q_decreasing():
    kw = base()
    rng = np.random.default_rng(8)
    kw["q"] = randn(rng, (4, 4, 16))
    msg = expect_error("cu_seqlens_q", **kw, cu_seqlens_q=np.array([0, 3, 2], np.int32), max_seqlen_q=4)
    assert "non-decreasing" in msg


def test_cu_seqlens_q_without_max_seqlen_q():
    kw = base()
    kw["q"] = randn(np.random.default_rng(9), (4, 4, 16))
    expect_error("max_seqlen_q", **kw, cu_seqlens_q=cu_from_lengths([1, 3]))


def test_packed_cache_with_page_table():
    kw = base()
    kw["k_cache"], kw["v_cache"] = kw["k_cache"][0], kw["v_cache"][0]
    expect_error("page_table", **kw, cu_seqlens_k=cu_from_lengths([5, 7]), page_table=np.zeros((2, 1), np.int32))


def test_seqused_q_beyond_query_length():
    expect_error("seqused_q", **base(), seqused_q=np.array([1, 3], np.int32))


def test_varlen_func_names_its_own_arguments():
    rng = np.random.default_rng(10)
    q, k, v = randn(rng, (3, 4, 16)), randn(rng, (9, 2, 16)), randn(rng, (9, 2, 8))
    msg = expect_error("seqused_k", fn=kvattn.flash_attn_varlen_func, q=q, k=k, v=v,
                       cu_seqlens_q=cu_from_lengths([1, 2]), cu_seqlens_k=cu_from_lengths([4, 5]),
                       max_seqlen_q=2, max_seqlen_k=5, seqused_k=np.array([4, 6], np.int32))
    assert "cache_seqlens" not in msg


def test_out_wrong_shape():
    kw = base()
    expect_error("out", **kw, out=np.zeros((2, 2, 4, 8), np.float32))


def test_cuda_tensors_without_torch_are_impossible_but_cuda_device_errors_is_a_no_op_on_cpu():
    assert kvattn.device_errors() is None
    assert kvattn.device_errors("cpu") is None
    with pytest.raises(KvattnError):
        kvattn.device_errors("gpu:0")


def test_has_backend():
    assert kvattn.has_backend("cpu") is True
    assert isinstance(kvattn.has_backend("cuda"), bool)
    with pytest.raises(KvattnError):
        kvattn.has_backend("tpu")


# ---- append_kv and combine


def test_append_kv_errors():
    rng = np.random.default_rng(11)
    key, value = randn(rng, (3, 2, 16)), randn(rng, (3, 2, 16))
    kc, vc = randn(rng, (4, 2, 2, 16)), randn(rng, (4, 2, 2, 16))
    expect_error("slot_mapping", fn=kvattn.append_kv, key=key, value=value, key_cache=kc, value_cache=vc,
                 slot_mapping=np.array([0, 1, 2], np.int32))
    before = kc.copy()
    expect_error("slot_mapping", fn=kvattn.append_kv, key=key, value=value, key_cache=kc, value_cache=vc,
                 slot_mapping=np.array([0, 8, 1], np.int64))
    np.testing.assert_array_equal(kc, before)
    expect_error("key_cache", fn=kvattn.append_kv, key=key, value=value, key_cache=kc.astype(np.float16),
                 value_cache=vc.astype(np.float16), slot_mapping=np.array([0, 1, 2], np.int64))


def test_combine_errors():
    rng = np.random.default_rng(12)
    out_p, lse_p = randn(rng, (2, 3, 4, 8)), randn(rng, (2, 3, 4))
    expect_error("out_dtype", fn=kvattn.flash_attn_combine, out_partial=out_p, lse_partial=lse_p,
                 out_dtype=np.float64)
    expect_error("lse_partial", fn=kvattn.flash_attn_combine, out_partial=out_p, lse_partial=lse_p[:, :2])
    expect_error("out_partial", fn=kvattn.flash_attn_combine, out_partial=out_p.astype(np.float16),
                 lse_partial=lse_p)
    expect_error("out", fn=kvattn.flash_attn_combine, out_partial=out_p, lse_partial=lse_p,
                 out=np.zeros((3, 4, 8), np.float16), out_dtype=np.float32)


# ---- the package itself


def test_import_needs_neither_numpy_nor_torch():
    code = ("import sys, kvattn; assert 'numpy' not in sys.modules and 'torch' not in sys.modules, "
            "[m for m in ('numpy', 'torch') if m in sys.modules]")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kvattn.__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_struct_sizes_match_the_library():
    from kvattn import _lib

    lib = _lib.load()
    _lib.check_struct_sizes(lib)  # raises on a mismatch
    assert lib.kvattn_abi_version() == _lib.ABI_VERSION


# ---- session 33's audit of the Python layer (numpy): bools are not ints, dense k / v have q's batch


@pytest.mark.parametrize("value", [np.bool_(True), np.array(True), (np.True_, 0)])
def test_numpy_bools_are_not_ints(value):
    """operator.index takes numpy's bools (with a DeprecationWarning): they ran as 1. Not an int, as Python's
    True is not."""
    import warnings

    name = "window_size" if isinstance(value, tuple) else "cache_seqlens"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a filter that raised the DeprecationWarning raw)
        expect_error(name, **dict(base(), **{name: value}))


def test_dense_k_v_batch_is_q_batch():
    """flash_attn_func's k, v have q's batch: a larger one ran on its first rows, the rest ignored."""
    rng = np.random.default_rng(12)
    q = randn(rng, (2, 3, 4, 16))
    k, v = randn(rng, (3, 5, 2, 16)), randn(rng, (3, 5, 2, 8))
    msg = expect_error("k", fn=kvattn.flash_attn_func, q=q, k=k, v=v)
    assert "b = 2 (q's), got (3, 5, 2, 16)" in msg, msg
    expect_error("v", fn=kvattn.flash_attn_func, q=q, k=k[:2], v=v)


def test_combine_out_not_an_array_is_named():
    op, lse = np.ones((2, 3, 4, 8), np.float32), np.zeros((2, 3, 4), np.float32)
    expect_error("out", fn=kvattn.flash_attn_combine, out_partial=op, lse_partial=lse, out=[1],
                 out_dtype=np.float16)
