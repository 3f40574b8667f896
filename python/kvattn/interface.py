"""FlashAttention-3-compatible entry points over the kvattn C ABI (CONTRACT.md).

Arrays are numpy arrays (CPU backend) or torch tensors (CPU or CUDA); outputs are allocated with the array
library and device of `q`. On CUDA the work is queued on torch's current stream. The forward entry points'
signatures, docstrings and argument normalization come from the tables of _signature.py; calls with torch
tensors go through the torch.library ops of torch_ops.py (eager calls straight to their implementation).
"""
import ctypes
import numbers
import sys

from . import _args as A
from . import _fwd
from . import _lib
from . import _signature as S
from . import tensors as T
from . import torch_ops
from .errors import KvattnError, check

_VARLEN_NAMES = dict(_fwd.NAMES, k_cache="k", v_cache="v", cache_seqlens="seqused_k", page_table="block_table")
_APPEND_NAMES = {"k_cache": "key_cache", "v_cache": "value_cache"}
_COMBINE_NAMES = {"out_partial": "out_partial", "out_partials": "out_partial", "lse_partials": "lse_partial"}
_RETURNS_LSE = ("out, or (out, lse) with {flag} (lse fp32: (b, hq, sq), or (hq, total_q) for varlen q). "
                "Not differentiable: kvattn has no backward pass")


def _forward(values, names=_fwd.NAMES):
    """flash_attn_with_kvcache's body for FWD-ordered argument values."""
    op_args, out, return_lse = _fwd.normalize(values, names)
    if T.is_torch(values[0]):
        out, lse = torch_ops.fwd(op_args, out, names, return_lse)
    else:
        out, lse = _fwd.run(op_args, out, return_lse, names)
    return (out, lse) if return_lse else out


flash_attn_with_kvcache = S.make_function("flash_attn_with_kvcache", S.FWD, _forward, S.docstring(
    """Attention of `q` over a KV cache, appending `k`, `v` to it in place first (CONTRACT.md).

FlashAttention-3's arguments, positions and defaults, plus kvattn's keyword-only ones. Wherever an int
is expected, anything operator.index takes is one (a numpy int, a 0-d integer array or tensor).""",
    S.FWD, _RETURNS_LSE.format(flag="return_softmax_lse")), prologue=torch_ops.fast_prologue)


def _mapper(args):
    """A function: values of an entry point with `args` -> FWD-ordered values (each to its `target`)."""
    index = {a.name: i for i, a in enumerate(S.FWD)}
    pairs = tuple((i, index[a.target]) for i, a in enumerate(args) if a.target is not None)
    defaults = tuple(a.default for a in S.FWD)

    def to_fwd(values):
        v = list(defaults)
        for i, j in pairs:
            v[j] = values[i]
        return v

    return to_fwd


_varlen_to_fwd = _mapper(S.VARLEN)
_MAX_SEQLEN_K = [a.name for a in S.VARLEN].index("max_seqlen_k")


def _varlen(values):
    if values[_MAX_SEQLEN_K] is not None:
        A.check_int("max_seqlen_k", values[_MAX_SEQLEN_K], A.I64)
    return _forward(_varlen_to_fwd(values), _VARLEN_NAMES)


flash_attn_varlen_func = S.make_function("flash_attn_varlen_func", S.VARLEN, _varlen, S.docstring(
    """FlashAttention-3's varlen forward: packed `k`, `v` (total_k, hk, d) owned per sequence by `cu_seqlens_k`.

Runs as flash_attn_with_kvcache with k_cache=k, v_cache=v, cache_seqlens=seqused_k. With `block_table`
(vLLM's form), `k`, `v` are a paged cache and seqused_k the lengths.""",
    S.VARLEN, _RETURNS_LSE.format(flag="return_attn_probs")))

_dense_to_fwd = _mapper(S.DENSE)
_DENSE_NAMES = dict(_fwd.NAMES, k_cache="k", v_cache="v")


_DENSE_Q, _DENSE_K, _DENSE_V = ([a.name for a in S.DENSE].index(n) for n in ("q", "k", "v"))


def _dense(values):
    # k, v (b, sk, ...) have q's batch: as the kvcache call's caches a larger one would be a pool of rows
    # (b_cache >= b), its extra rows ignored without a word.
    q = values[_DENSE_Q]
    for name, x in (("k", values[_DENSE_K]), ("v", values[_DENSE_V])):
        if (T.is_torch(q) or T.is_numpy(q)) and (T.is_torch(x) or T.is_numpy(x)):
            qs, xs = T.shape_of(q), T.shape_of(x)
            if len(qs) == 4 and len(xs) == 4 and xs[0] != qs[0]:
                raise KvattnError(f"{name}: expected shape (b, sk, hk, {'d' if name == 'k' else 'dv'}) with b = "
                                  f"{qs[0]} (q's), got {tuple(xs)}")
    return _forward(_dense_to_fwd(values), _DENSE_NAMES)


flash_attn_func = S.make_function("flash_attn_func", S.DENSE, _dense, S.docstring(
    """FlashAttention-3's dense forward: q (b, sq, hq, d) over k, v (b, sk, hk, d / dv), every key valid.

Runs as flash_attn_with_kvcache with k_cache=k, v_cache=v and the full length.""",
    S.DENSE, _RETURNS_LSE.format(flag="return_attn_probs")))


def append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None):
    """vLLM's reshape_and_cache_flash: token t goes to slot slot_mapping[t] of a paged cache, in place.

    Arguments:
        key: (num_tokens, hk, d), the cache's dtype (fp16/bf16 into an fp8 cache: quantized on write);
            rows past len(slot_mapping) are ignored (vLLM passes buffers padded past the live tokens).
        value: (num_tokens, hk, dv), as key.
        key_cache: (num_pages, page_size, hk, d), any strides with the head dim contiguous; written.
        value_cache: (num_pages, page_size, hk, dv), as key_cache; written.
        slot_mapping: (num_tokens,) int64 (or int32): slot = page * page_size + offset; negative = skip.
        k_scale: fp8 caches: a float or an fp32 () or (hk,) array, the scale of key_cache. (default None)
        v_scale: as k_scale for value_cache. (default None)

    Returns:
        None.
    """
    n = _rows(slot_mapping)
    if n is not None:  # vLLM's padded buffers: the first len(slot_mapping) rows are the tokens
        if _rows(key) is not None and _rows(key) > n:
            key = key[:n]
        if _rows(value) is not None and _rows(value) > n:
            value = value[:n]
    if T.is_torch(key):
        return torch_ops.append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    return _append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)


def _rows(x):
    """Leading dim of an array-like with at least one dim, else None (validation names the argument)."""
    shape = getattr(x, "shape", None)
    return shape[0] if shape is not None and len(shape) >= 1 else None


def _append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None):
    """append_kv on the library (numpy arrays, or a torch op's tensors).

    vLLM's reshape_and_cache_flash: token t goes to slot slot_mapping[t] (int64; negative = skip).

    key (num_tokens, hk, d), caches (num_pages, page_size, hk, d) with any strides (head dim contiguous).
    k_scale/v_scale (fp8 caches): a float or an fp32 () or (hk,) array.
    """
    lib = _lib.load()
    call = T.Call()
    p = _lib.AppendParams()
    lib.kvattn_append_params_init(ctypes.byref(p))
    p.key = call.tensor(key, "key", required=True)
    p.value = call.tensor(value, "value", required=True)
    p.k_cache = call.tensor(key_cache, "key_cache", required=True, written=True)
    p.v_cache = call.tensor(value_cache, "value_cache", required=True, written=True)
    p.slot_mapping = call.tensor(slot_mapping, "slot_mapping", required=True)
    scales = []
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if isinstance(scale, numbers.Real):
            scale = T.scalar_f32(key_cache, A.check_float(name, scale))
        scales.append(scale)
    call.keep.append(scales)
    p.k_scale = call.tensor(scales[0], "k_scale")
    p.v_scale = call.tensor(scales[1], "v_scale")
    call.header(p)
    check(lib, lib.kvattn_append_kv(ctypes.byref(p)), _APPEND_NAMES)


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, sinks=None):
    """Merge split-KV partials with the sink-aware rule of CONTRACT.md step 7 (FlashAttention-3's fwd_combine).

    Arguments:
        out_partial: (n, ..., dv) fp32, any strides: n partial outputs. FlashAttention-3's form is
            (n, b, s, h, dv).
        lse_partial: (n, ...) fp32, any strides (FlashAttention-3's: a transposed view of (n, b, h, s)).
        out: (..., dv) fp32, fp16 or bf16: written and returned. (default None: allocated)
        out_dtype: float32, float16 or bfloat16 (torch or numpy dtype, or its name). (default None: fp32,
            or out's dtype)
        sinks: (h,) fp32 (fp16/bf16 widened): the head axis is the last "..." axis. (default None)

    Returns:
        (out, lse): lse (...) fp32 in lse_partial's memory order (FlashAttention-3's form gets a (b, s, h)
        view of (b, h, s) storage).
    """
    if T.is_torch(out_partial):
        return torch_ops.flash_attn_combine(out_partial, lse_partial, out, out_dtype, sinks=sinks)
    return _flash_attn_combine(out_partial, lse_partial, out, out_dtype, sinks=sinks)


def _flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, sinks=None):
    """flash_attn_combine on the library (numpy arrays, or a torch op's tensors).

    Merge split-KV partials (FlashAttention-3's fwd_combine): returns (out, lse).

    out_partial (n, ..., dv) fp32 and lse_partial (n, ...) fp32, any strides. FlashAttention-3's form is
    out_partial (n, b, s, h, dv) with lse_partial (n, b, s, h), usually a transposed view of (n, b, h, s).
    `out` (..., dv) is fp32 unless `out_dtype` (or a given `out`) is fp16/bf16; the returned lse (...) is
    fp32 with the memory order of lse_partial (so FlashAttention-3's form gets a (b, s, h) view of
    (b, h, s) storage, as FlashAttention-3 returns it). `sinks` (h,): the head axis is the last "..." axis;
    fp16/bf16 sinks are widened to an fp32 copy.
    """
    lib = _lib.load()
    call = T.Call()
    p = _lib.CombineParams()
    lib.kvattn_combine_params_init(ctypes.byref(p))
    if T.is_torch(sinks) or T.is_numpy(sinks):
        sinks = T.to_float32(sinks)
        call.keep.append(sinks)
    code = _lib.DTYPE_F32 if out_dtype is None else T.dtype_code_of(out_dtype)
    if code not in (_lib.DTYPE_F32, _lib.DTYPE_F16, _lib.DTYPE_BF16):
        raise KvattnError(f"out_dtype: must be float32, float16 or bfloat16, got {out_dtype!r}")
    if out is not None and not (T.is_torch(out) or T.is_numpy(out)):
        call.tensor(out, "out")  # raises, naming the argument
    if out is not None and out_dtype is not None and T.dtype_code(out) != code:
        raise KvattnError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype!r}")

    for name, x in (("out_partial", out_partial), ("lse_partial", lse_partial)):
        if not (T.is_torch(x) or T.is_numpy(x)):
            call.tensor(x, name, required=True)  # raises, naming the argument
    rank = len(T.shape_of(out_partial)) - 2  # of "..."
    rows = T.shape_of(out_partial)[1:-1]
    if out is None and rank >= 0:
        out = T.empty(out_partial, T.shape_of(out_partial)[1:], code)
    lse = None
    if rank >= 0 and T.shape_of(lse_partial)[1:] == rows:  # else the library says what is wrong
        memory_order = [i - 1 for i in T.order_by_stride(lse_partial) if i > 0]  # of "..."
        lse = T.empty_in_order(out_partial, rows, memory_order, _lib.DTYPE_F32)
    p.out_partials = call.tensor(out_partial, "out_partial", required=True)
    p.lse_partials = call.tensor(lse_partial, "lse_partial", required=True)
    p.sinks = call.tensor(sinks, "sinks")
    p.out = call.tensor(out, "out", required=True, written=True)
    p.lse = call.tensor(lse, "lse", written=True)
    call.header(p)
    check(lib, lib.kvattn_combine(ctypes.byref(p)), _COMBINE_NAMES)
    return out, lse


def _cuda_index(device):
    """The CUDA device index `device` names, or None for the CPU."""
    if device is None:
        current = _cuda_current()
        return 0 if current is None else current
    if isinstance(device, numbers.Integral) and not isinstance(device, bool):
        return A.check_int("device", device)
    name = str(device)
    if name == "cpu":
        return None
    if name == "cuda":
        current = _cuda_current()
        return 0 if current is None else current
    if name.startswith("cuda:") and name[5:].isdigit():
        return int(name[5:])
    raise KvattnError(f"device: expected None, an int, 'cpu', 'cuda' or 'cuda:N', got {device!r}")


def _cuda_current():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return None


def device_errors(device=None):
    """Raise KvattnError if a kernel on `device` recorded an out-of-range index since the last check.

    Synchronizes torch's current stream on that device. The CPU backend raises such errors from the call
    itself, so there is nothing to check there (and nothing without a CUDA backend).

    Arguments:
        device: None (torch's current CUDA device), an int, 'cpu', 'cuda' or 'cuda:N'. (default None)

    Returns:
        None; raises KvattnError naming the argument, the sequence and the value of the first error.
    """
    lib = _lib.load()
    index = _cuda_index(device)
    if index is None or not lib.kvattn_has_backend(_lib.DEVICE_CUDA):
        return
    check(lib, lib.kvattn_device_errors(index, T.cuda_stream(index)))


def has_backend(device="cpu"):
    """True if this build of the library can run on `device` ('cpu' or 'cuda').

    Arguments:
        device: 'cpu', 'cuda' or 'cuda:N'. (default 'cpu')
    """
    kind = {"cpu": _lib.DEVICE_CPU, "cuda": _lib.DEVICE_CUDA}.get(str(device).split(":")[0])
    if kind is None:
        raise KvattnError(f"device: expected 'cpu' or 'cuda', got {device!r}")
    return bool(_lib.load().kvattn_has_backend(kind))


# ---------------------------------------------------------------- get_scheduler_metadata

_METADATA_NAMES = {"q": "num_heads_q / headdim / max_seqlen_q", "k_cache": "num_heads_kv / headdim / max_seqlen_k",
                   "v_cache": "headdim_v", "k": "max_seqlen_k_new", "v": "max_seqlen_k_new", "out": "headdim_v",
                   "cache_seqlens_value": "cache_seqlens"}


def _scheduler_metadata(values):
    a = dict(zip((x.name for x in S.METADATA), values))
    ints = {n: A.check_int(n, a[n]) for n in ("batch_size", "max_seqlen_q", "max_seqlen_k", "num_heads_q",
                                                "num_heads_kv", "headdim", "max_seqlen_k_new", "attention_chunk",
                                                "num_splits", "sm_margin")}
    dv = ints["headdim"] if a["headdim_v"] is None else A.check_int("headdim_v", a["headdim_v"])
    page_size = None if a["page_size"] is None else A.check_int("page_size", a["page_size"])
    causal, has_softcap = A.check_bool("causal", a["causal"]), A.check_bool("has_softcap", a["has_softcap"])
    pack_gqa = A.check_opt_bool("pack_gqa", a["pack_gqa"])
    left, right = A.window(a["window_size"])
    code = T.dtype_code_of(a["qkv_dtype"])
    if code not in (_lib.DTYPE_F32, _lib.DTYPE_F16, _lib.DTYPE_BF16, _lib.DTYPE_FP8_E4M3):
        raise KvattnError(f"qkv_dtype: expected float16, bfloat16, float8_e4m3fn (float32 on the CPU backend), "
                          f"got {a['qkv_dtype']!r}")
    seqlens = a["cache_seqlens"]
    if not (T.is_torch(seqlens) or T.is_numpy(seqlens)):
        raise KvattnError(f"cache_seqlens: expected a (batch_size,) int32 array or tensor, got "
                          f"{type(seqlens).__name__}")
    b, sq, sk, hq, hk, d = (ints[n] for n in ("batch_size", "max_seqlen_q", "max_seqlen_k", "num_heads_q",
                                               "num_heads_kv", "headdim"))
    new = ints["max_seqlen_k_new"]
    for name in ("batch_size", "max_seqlen_q", "num_heads_q", "num_heads_kv", "headdim"):
        if ints[name] < 1:
            raise KvattnError(f"{name}: must be >= 1, got {ints[name]}")

    # The call these shapes describe, validated and sized by the library without touching data: the
    # arrays are descriptors of the right shapes at synthetic addresses (the library never reads q,
    # k, v or out before a run; on the CPU it reads index arrays, so the page table is a real one).
    lib = _lib.load()
    call = T.Call()
    p = _lib.new_fwd_params()
    if T.shape_of(seqlens) != (b,) or T.dtype_code(seqlens) != _lib.DTYPE_I32:
        raise KvattnError(f"cache_seqlens: expected ({b},) int32 (batch_size,), got shape {T.shape_of(seqlens)} "
                          f"dtype {seqlens.dtype}")
    for name in ("cu_seqlens_q", "cu_seqlens_k_new", "cache_leftpad"):
        if a[name] is not None and not (T.is_torch(a[name]) or T.is_numpy(a[name])):
            raise KvattnError(f"{name}: expected an int32 array or tensor, got {type(a[name]).__name__}")
    # The static part of the call: the index arrays are synthetic ones of the right shapes (lengths 0,
    # uniform varlen offsets, page 0), made on cache_seqlens' device, since the CPU backend's validation
    # reads index data and the values are the call's business, not the schedule's.
    # Each descriptor gets an address range of its own (never read, never dereferenced: validation rejects
    # outputs that overlap inputs, so they cannot all sit at one address), laid end to end from 2^56:
    # above every user-space address (host or device), so no real array of the call (cache_seqlens, the
    # index arrays below) can overlap them, and far below 2^63, so no extent wraps.
    ptr = [1 << 56]
    elem = {_lib.DTYPE_F32: 4, _lib.DTYPE_F16: 2, _lib.DTYPE_BF16: 2, _lib.DTYPE_FP8_E4M3: 1}

    def describe(field, dtype_code, shape):
        T.describe_at(p, getattr(_lib.FwdParams, field).offset, ptr[0], dtype_code, shape)
        nbytes = elem[dtype_code]
        for n in shape:
            nbytes *= max(n, 1)
        ptr[0] += -(-nbytes // 256) * 256 + 256

    out_code = _lib.DTYPE_BF16 if code == _lib.DTYPE_FP8_E4M3 else code
    varlen_q = a["cu_seqlens_q"] is not None
    q_shape = (b * sq, hq, d) if varlen_q else (b, sq, hq, d)
    describe("q", code, q_shape)
    describe("out", out_code, q_shape[:-1] + (dv,))
    p.cache_seqlens_value = 0
    if page_size is None:
        cache_rows, rows_len = b, sk
    else:
        if page_size < 1:
            raise KvattnError(f"page_size: must be >= 1 or None, got {page_size}")
        pages_per_row = max(1, -(-sk // page_size))
        call.set(p, "page_table", call.keep_array(T.index_steps(seqlens, (b, pages_per_row), 0)))
        cache_rows, rows_len = 1, page_size
    describe("k_cache", code, (cache_rows, rows_len, hk, d))
    describe("v_cache", code, (cache_rows, rows_len, hk, dv))
    if new > 0:
        new_shape = (b * new, hk) if a["cu_seqlens_k_new"] is not None else (b, new, hk)
        describe("k", code, new_shape + (d,))
        describe("v", code, new_shape + (dv,))
        if a["cu_seqlens_k_new"] is not None:
            call.set(p, "cu_seqlens_k_new", call.keep_array(T.index_steps(seqlens, (b + 1,), new)))
    if varlen_q:
        call.set(p, "cu_seqlens_q", call.keep_array(T.index_steps(seqlens, (b + 1,), sq)))
    if varlen_q:
        p.max_seqlen_q = sq
    p.causal, p.window_left, p.window_right = int(causal), left, right
    p.attention_chunk, p.softcap = ints["attention_chunk"], 1.0 if has_softcap else 0.0
    p.num_splits, p.sm_margin = ints["num_splits"], ints["sm_margin"]
    p.pack_gqa = -1 if pack_gqa is None else int(pack_gqa)
    call.header(p)
    nbytes = ctypes.c_size_t(0)
    status = lib.kvattn_fwd_workspace_size(ctypes.byref(p), ctypes.byref(nbytes))
    if status != _lib.OK:
        try:
            check(lib, status, _METADATA_NAMES)
        except KvattnError as e:
            raise KvattnError(f"{e.message} (get_scheduler_metadata: a call with these shapes would fail)",
                              e.status) from None
    return T.int32_record(seqlens, (b, min(nbytes.value, A.I32[1])))


get_scheduler_metadata = S.make_function("get_scheduler_metadata", S.METADATA, _scheduler_metadata, S.docstring(
    """FlashAttention-3's get_scheduler_metadata: validates a flash_attn_with_kvcache configuration once.

kvattn plans every call on the host from its static shapes (CUDA-graph safe: the split-KV schedule is
computed in the kernels from the device-side lengths), so there is no device schedule to precompute.
This checks the configuration with the library (an unsupported head dim or dtype is reported here, not at
the first call) and returns a small record that `scheduler_metadata=` accepts and never reads, so that
code written for FlashAttention-3 (vLLM's copy into a persistent buffer included) runs unchanged.""",
    S.METADATA, "int32 (2,) array or tensor on cache_seqlens' device: [batch_size, workspace bytes a call "
    "needs (CUDA; 0 on the CPU backend)]. Made with device fills only (no host-to-device copy)"))
