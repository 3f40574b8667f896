"""FlashAttention-3-compatible entry points over the kvattn C ABI (CONTRACT.md).

Arrays are numpy arrays (CPU backend) or torch tensors (CPU or CUDA); outputs are allocated with the array
library and device of `q`. On CUDA the work is queued on torch's current stream. Every argument is passed
to the library; the library's message for a violated rule is raised as KvattnError. Calls with torch
tensors are routed through the torch.library ops of torch_ops.py, which call these same functions.
"""
import ctypes
import inspect
import numbers
import sys
import types

from . import _args as A
from . import _lib
from . import tensors as T
from .errors import KvattnError, check
from .torch_ops import routed

# C ABI argument names -> the Python argument names, for the library's messages
_FWD_NAMES = {"window_left": "window_size[0]", "window_right": "window_size[1]",
              "cache_seqlens_value": "cache_seqlens"}
_VARLEN_NAMES = dict(_FWD_NAMES, k_cache="k", v_cache="v", cache_seqlens="seqused_k")
_APPEND_NAMES = {"k_cache": "key_cache", "v_cache": "value_cache"}
_COMBINE_NAMES = {"out_partials": "out_partial", "lse_partials": "lse_partial"}

# The argument checks (kept importable from here under their old names)
_I32, _I64 = A.I32, A.I64
_int, _float, _alias, _window, _lse_shape = A.check_int, A.check_float, A.alias, A.window, A.lse_shape

# flash_attn_with_kvcache's optional tensor arguments that go to the kvattn_fwd_params field of their name
_FWD_OPTIONAL = ("k", "v", "qv", "rotary_cos", "rotary_sin", "rotary_seqlens", "cache_batch_idx", "cache_leftpad",
                 "cu_seqlens_q", "seqused_q", "cu_seqlens_k_new", "cu_seqlens_k", "alibi_slopes", "q_descale",
                 "k_descale", "v_descale")


@routed("flash_attn_with_kvcache")
def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, *, sinks=None, alibi_slopes=None, seqused_q=None, out=None,
                            block_table=None, s_aux=None, learnable_sink=None, cu_seqlens_k=None,
                            deterministic=False):
    """Attention of `q` over a KV cache, appending `k`, `v` to it in place first (CONTRACT.md).

    FlashAttention-3's arguments, positions and defaults, plus keyword-only `sinks` (aliases `s_aux`,
    `learnable_sink`; fp16/bf16 sinks are widened to an fp32 copy), `alibi_slopes`, `seqused_q`, `out`,
    `block_table` (alias of `page_table`), `cu_seqlens_k` (packed varlen cache) and `deterministic`.
    `cache_seqlens` is an int or an int32 (b,) array. `scheduler_metadata` must be None: kvattn plans every
    call itself from static shapes, so there is no metadata to precompute. `softmax_scale` None means
    1/sqrt(d) (1/sqrt(d + dv) with `qv`). Returns `out`, or `(out, lse)` with `return_softmax_lse`.
    """
    return _fwd(types.SimpleNamespace(**locals()), _FWD_NAMES)


def _fwd(a, names):
    """flash_attn_with_kvcache's body: `a` holds its arguments; `names` maps ABI names to the caller's."""
    page_table = _alias("page_table", a.page_table, block_table=a.block_table)
    sinks = _alias("sinks", a.sinks, s_aux=a.s_aux, learnable_sink=a.learnable_sink)
    if a.scheduler_metadata is not None:
        raise KvattnError("scheduler_metadata: must be None; kvattn has no scheduler metadata (each call "
                          "plans itself from static shapes, which is CUDA-graph safe)")
    lib = _lib.load()
    call = T.Call()
    p = _lib.new_fwd_params()

    appends = a.k is not None or a.v is not None
    call.set(p, "q", a.q, required=True)
    call.set(p, "k_cache", a.k_cache, required=True, written=appends)
    call.set(p, "v_cache", a.v_cache, required=True, written=appends)
    for name in _FWD_OPTIONAL:
        call.set(p, name, getattr(a, name))
    call.set(p, "page_table", page_table)
    if sinks is not None and (T.is_torch(sinks) or T.is_numpy(sinks)):
        sinks = T.to_float32(sinks)  # fp16/bf16 -> an fp32 copy; fp32 passes as it is
        call.keep.append(sinks)
    call.set(p, "sinks", sinks)
    if a.cache_seqlens is None:
        p.cache_seqlens_value = -1  # full capacity
    elif type(a.cache_seqlens) is int or (isinstance(a.cache_seqlens, numbers.Integral)
                                          and not isinstance(a.cache_seqlens, bool)):
        p.cache_seqlens_value = _int("cache_seqlens", a.cache_seqlens, (0, _I64[1]))
    else:
        call.set(p, "cache_seqlens", a.cache_seqlens)
    if a.max_seqlen_q is not None:
        p.max_seqlen_q = _int("max_seqlen_q", a.max_seqlen_q, _I64)

    p.softmax_scale = 0.0  # the ABI's "default"
    if a.softmax_scale is not None:
        p.softmax_scale = _float("softmax_scale", a.softmax_scale)
        if not p.softmax_scale > 0:  # the ABI would read it as "default": a caller's 0 or negative must not
            raise KvattnError(f"softmax_scale: must be > 0 (None for the default), got {a.softmax_scale!r}")
    p.causal = int(bool(a.causal))
    p.window_left, p.window_right = _window(a.window_size)
    p.attention_chunk = _int("attention_chunk", a.attention_chunk)
    p.softcap = _float("softcap", a.softcap)
    p.rotary_interleaved = int(bool(a.rotary_interleaved))
    p.num_splits = _int("num_splits", a.num_splits)
    p.pack_gqa = -1 if a.pack_gqa is None else int(bool(a.pack_gqa))
    p.sm_margin = _int("sm_margin", a.sm_margin)
    p.deterministic = int(bool(a.deterministic))

    out = a.out
    if out is None:
        q_code = T.dtype_code(a.q)
        out_code = _lib.DTYPE_BF16 if q_code == _lib.DTYPE_FP8_E4M3 else q_code
        out = T.empty(a.q, T.shape_of(a.q)[:-1] + T.shape_of(a.v_cache)[-1:], out_code)
    call.set(p, "out", out, written=True)
    lse = None
    if a.return_softmax_lse:
        lse_shape = _lse_shape(a.q, a.cu_seqlens_q is not None)
        if lse_shape is not None:
            lse = T.empty(a.q, lse_shape, _lib.DTYPE_F32)
        call.set(p, "lse", lse, written=True)

    call.header(p)
    nbytes = ctypes.c_size_t(0)
    check(lib, lib.kvattn_fwd_workspace_size(ctypes.byref(p), ctypes.byref(nbytes)), names)
    p.workspace = T.workspace(call, a.q, nbytes.value)
    p.workspace_bytes = nbytes.value
    check(lib, _lib.fwd(lib, p), names)
    return (out, lse) if a.return_softmax_lse else out


_FWD_SIGNATURE = inspect.signature(flash_attn_with_kvcache.__kvattn_direct__)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False,
                           *, sinks=None, alibi_slopes=None, out=None):
    """FlashAttention-3's varlen forward: packed `k`, `v` (total_k, hk, d) owned per sequence by `cu_seqlens_k`.

    Runs as flash_attn_with_kvcache with k_cache=k, cache_seqlens=seqused_k. `max_seqlen_k` is only checked
    to be an int: kvattn reads each sequence's length from `cu_seqlens_k`/`seqused_k` and needs no bound.
    Returns `out`, or `(out, lse)` with `return_attn_probs` (as FlashAttention-3 does).
    """
    if max_seqlen_k is not None:
        _int("max_seqlen_k", max_seqlen_k, _I64)
    bound = _FWD_SIGNATURE.bind(
        q, k, v, qv=qv, cache_seqlens=seqused_k, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
        q_descale=q_descale, k_descale=k_descale, v_descale=v_descale, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, attention_chunk=attention_chunk, softcap=softcap,
        num_splits=num_splits, pack_gqa=pack_gqa, sm_margin=sm_margin, return_softmax_lse=return_attn_probs,
        sinks=sinks, alibi_slopes=alibi_slopes, seqused_q=seqused_q, out=out, cu_seqlens_k=cu_seqlens_k,
        deterministic=deterministic)
    bound.apply_defaults()
    if T.is_torch(q):  # through the torch op (torch.compile, CUDA graphs)
        return flash_attn_with_kvcache(*bound.args, **bound.kwargs)
    return _fwd(types.SimpleNamespace(**bound.arguments), _VARLEN_NAMES)


@routed("append_kv")
def append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None):
    """vLLM's reshape_and_cache_flash: token t goes to slot slot_mapping[t] (int64; negative = skip).

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
            scale = T.scalar_f32(key_cache, _float(name, scale))
        scales.append(scale)
    call.keep.append(scales)
    p.k_scale = call.tensor(scales[0], "k_scale")
    p.v_scale = call.tensor(scales[1], "v_scale")
    call.header(p)
    check(lib, lib.kvattn_append_kv(ctypes.byref(p)), _APPEND_NAMES)


@routed("flash_attn_combine")
def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, sinks=None):
    """Merge split-KV partials (FlashAttention-3's fwd_combine): returns (out, lse).

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
        return _int("device", device)
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
    """
    lib = _lib.load()
    index = _cuda_index(device)
    if index is None or not lib.kvattn_has_backend(_lib.DEVICE_CUDA):
        return
    check(lib, lib.kvattn_device_errors(index, T.cuda_stream(index)))


def has_backend(device="cpu"):
    """True if this build of the library can run on `device` ('cpu' or 'cuda')."""
    kind = {"cpu": _lib.DEVICE_CPU, "cuda": _lib.DEVICE_CUDA}.get(str(device).split(":")[0])
    if kind is None:
        raise KvattnError(f"device: expected 'cpu' or 'cuda', got {device!r}")
    return bool(_lib.load().kvattn_has_backend(kind))
