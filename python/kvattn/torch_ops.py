"""kvattn's calls as torch.library custom ops, for CUDA graphs, torch.compile and torch.library.opcheck.

    kvattn::fwd         flash_attn_with_kvcache -> (out, lse); appends k, v into k_cache, v_cache in place
    kvattn::fwd_out     the same, writing a caller's `out` in place -> lse
    kvattn::append_kv   reshape_and_cache_flash: writes key, value into key_cache, value_cache in place
    kvattn::combine     split-KV combine -> (out, lse)
    kvattn::combine_out the same, writing a caller's `out` in place -> lse

Each op has a fake (meta) implementation that computes output shapes and dtypes without data, so
torch.compile(fullgraph=True) traces the whole call. The real implementations are the ctypes calls of
interface.py, run with the op's plain tensors: the workspace is a torch.empty(uint8) on q's device made
inside the op, the stream is torch.cuda.current_stream(), and nothing synchronizes or reads device data,
so a call is CUDA-graph safe (its device-side index checks report through kvattn.device_errors()).

`lse` is always computed (the op's output list is static); the Python entry points drop it unless asked.

Errors: the fake implementations never raise; the library's validation raises KvattnError when an op runs,
also inside compiled code. Only an argument that the Python entry rejects while dynamo traces it (a
window_size that is not two ints, say) reaches a torch.compile(fullgraph=True) caller as torch's error.

This module imports without torch: `routed` (the decorator interface.py puts on its entry points) only
looks for torch in sys.modules, and the ops are defined by `register()`, on the first call with a torch
tensor (also from inside torch.compile: see `_registered`), or at import when torch is already loaded.
"""
import functools
import inspect
import numbers
import sys
import threading

from . import _args as A
from . import _lib
from . import tensors as T
from .errors import KvattnError

NAMESPACE = "kvattn"

_lock = threading.Lock()
_ops = None  # namespace of the registered ops (torch.ops.kvattn) once register() has run


def _torch():
    return sys.modules["torch"]


# ---------------------------------------------------------------- routing from interface.py


def routed(name):
    """Decorator for interface.py's entry points: a call whose first argument is a torch tensor goes through
    the torch op entry `name` of this module ('flash_attn_with_kvcache', 'append_kv', 'flash_attn_combine'),
    which takes the same arguments; anything else runs the decorated function itself.

    The undecorated function stays reachable as `fn.__kvattn_direct__`: the ops' real implementations call
    that one, so the route never recurses."""

    def decorate(fn):
        first = next(iter(inspect.signature(fn).parameters))

        @functools.wraps(fn)
        def entry(*args, **kwargs):
            x = args[0] if args else kwargs.get(first)
            if T.is_torch(x):
                return _ENTRIES[name](*args, **kwargs)
            return fn(*args, **kwargs)

        entry.__kvattn_direct__ = fn
        return entry

    return decorate


def _direct(name):
    """interface.py's function `name` without the torch route."""
    from . import interface

    fn = getattr(interface, name)
    return getattr(fn, "__kvattn_direct__", fn)


# ---------------------------------------------------------------- argument normalization (traceable)


def _is_sym(x, kind):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, getattr(torch, kind))


def _int(name, value):
    """An int argument: checked like interface.py does, except a symbolic int from torch.compile."""
    if type(value) is int or not _is_sym(value, "SymInt"):
        return A.check_int(name, value)
    return value


def _float(name, value):
    if type(value) is float:
        return value
    if _is_sym(value, "SymFloat") or _is_sym(value, "SymInt"):
        return value
    return A.check_float(name, value)


def _scalar_tensor(like, name, scale):
    """A float scale as an fp32 0-d tensor on `like`'s device; tensors and None pass as they are."""
    if scale is None or T.is_torch(scale):
        return scale
    torch = _torch()
    return torch.full((), _float(name, scale), dtype=torch.float32, device=like.device)


def _all_torch(**arrays):
    """Every array argument of a routed call is a torch tensor (or None): the ops take nothing else."""
    tensor = _torch().Tensor
    for name, x in arrays.items():
        if x is not None and not isinstance(x, tensor):
            raise KvattnError(f"{name}: expected a torch tensor (as the first argument is), got {type(x).__name__}")


def _torch_dtype(name, dtype):
    """A torch dtype from a torch dtype, numpy dtype or name (None passes)."""
    if dtype is None:
        return None
    code = T.dtype_code_of(dtype)
    if code not in (_lib.DTYPE_F32, _lib.DTYPE_F16, _lib.DTYPE_BF16):
        raise KvattnError(f"{name}: must be float32, float16 or bfloat16, got {dtype!r}")
    return getattr(_torch(), T._DTYPE_NAMES[code])


# ---------------------------------------------------------------- the entry points the route calls


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, *, sinks=None, alibi_slopes=None, seqused_q=None, out=None,
                            block_table=None, s_aux=None, learnable_sink=None, cu_seqlens_k=None,
                            deterministic=False):
    """interface.flash_attn_with_kvcache for torch tensors, through torch.ops.kvattn.fwd / fwd_out."""
    page_table = A.alias("page_table", page_table, block_table=block_table)
    sinks = A.alias("sinks", sinks, s_aux=s_aux, learnable_sink=learnable_sink)
    _all_torch(k_cache=k_cache, v_cache=v_cache, k=k, v=v, qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
               cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad, page_table=page_table,
               cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new, rotary_seqlens=rotary_seqlens,
               q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
               scheduler_metadata=scheduler_metadata, sinks=sinks, alibi_slopes=alibi_slopes, seqused_q=seqused_q,
               out=out, cu_seqlens_k=cu_seqlens_k)
    if cache_seqlens is None:
        seqlens_tensor, seqlens_value = None, -1  # full capacity
    elif T.is_torch(cache_seqlens):
        seqlens_tensor, seqlens_value = cache_seqlens, -1
    elif _is_sym(cache_seqlens, "SymInt") or (isinstance(cache_seqlens, numbers.Integral)
                                              and not isinstance(cache_seqlens, bool)):
        seqlens_tensor, seqlens_value = None, _int("cache_seqlens", cache_seqlens)
        if not _is_sym(seqlens_value, "SymInt") and seqlens_value < 0:
            raise KvattnError(f"cache_seqlens: {seqlens_value} is negative")
    else:
        raise KvattnError(f"cache_seqlens: expected an int or an int32 tensor, got {type(cache_seqlens).__name__}")
    window_left, window_right = A.window(window_size)
    args = (q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, seqlens_tensor, seqlens_value,
            cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new,
            None if max_seqlen_q is None else _int("max_seqlen_q", max_seqlen_q), rotary_seqlens,
            q_descale, k_descale, v_descale,
            None if softmax_scale is None else _float("softmax_scale", softmax_scale), bool(causal),
            window_left, window_right, _int("attention_chunk", attention_chunk), _float("softcap", softcap),
            bool(rotary_interleaved), scheduler_metadata, _int("num_splits", num_splits),
            None if pack_gqa is None else bool(pack_gqa), _int("sm_margin", sm_margin), sinks, alibi_slopes,
            seqused_q, cu_seqlens_k, bool(deterministic))
    if out is None:
        out, lse = _op("fwd")(*args)
    else:
        lse = _op("fwd_out")(*args, out)
    return (out, lse) if return_softmax_lse else out


def append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None):
    """interface.append_kv for torch tensors, through torch.ops.kvattn.append_kv."""
    _all_torch(value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping)
    _op("append_kv")(key, value, key_cache, value_cache, slot_mapping,
                  _scalar_tensor(key_cache, "k_scale", k_scale), _scalar_tensor(key_cache, "v_scale", v_scale))


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, sinks=None):
    """interface.flash_attn_combine for torch tensors, through torch.ops.kvattn.combine / combine_out."""
    _all_torch(lse_partial=lse_partial, out=out, sinks=sinks)
    dtype = _torch_dtype("out_dtype", out_dtype)
    if out is None:
        return _op("combine")(out_partial, lse_partial, sinks, dtype)
    if dtype is not None and T.is_torch(out) and out.dtype != dtype:
        raise KvattnError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype!r}")
    return out, _op("combine_out")(out_partial, lse_partial, sinks, out)


_ENTRIES = {
    "flash_attn_with_kvcache": flash_attn_with_kvcache,
    "append_kv": append_kv,
    "flash_attn_combine": flash_attn_combine,
}


# ---------------------------------------------------------------- output shapes (shared by real and fake)


def _fwd_out_spec(q, v_cache, cu_seqlens_q):
    """(out shape, out dtype, lse shape) of a forward call.

    Never raises: arguments the library rejects get some shape here (lse (0,) for a q of the wrong rank),
    and the real implementation raises KvattnError with the library's message at run time. (An error raised
    here would reach a torch.compile user as torch's TorchRuntimeError instead of KvattnError.)"""
    torch = _torch()
    out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    dv = v_cache.shape[-1] if v_cache.dim() else 0
    out_shape = tuple(q.shape[:-1]) + (dv,)
    lse_shape = A.lse_shape(q, cu_seqlens_q is not None)
    return out_shape, out_dtype, (0,) if lse_shape is None else lse_shape


def _combine_lse(lse_partial, rows):
    """lse of a combine as interface.flash_attn_combine makes it: shape `rows`, in the memory order of
    lse_partial's "..." dims (FlashAttention-3's transposed lse_partial gives a transposed lse)."""
    torch = _torch()
    order = [i - 1 for i in T.order_by_stride(lse_partial) if i > 0]
    store = lse_partial.new_empty(tuple(rows[i] for i in order), dtype=torch.float32)
    return store.permute(sorted(range(len(order)), key=lambda i: order[i]))


# ---------------------------------------------------------------- the ops' real implementations


_direct_fwd_fn = None


def _direct_fwd():
    """interface.flash_attn_with_kvcache without the torch route (looked up once)."""
    global _direct_fwd_fn
    if _direct_fwd_fn is None:
        _direct_fwd_fn = _direct("flash_attn_with_kvcache")
    return _direct_fwd_fn


def _run_fwd(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
             cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q,
             rotary_seqlens, q_descale, k_descale, v_descale, softmax_scale, causal, window_left,
             window_right, attention_chunk, softcap, rotary_interleaved, scheduler_metadata, num_splits,
             pack_gqa, sm_margin, sinks, alibi_slopes, seqused_q, cu_seqlens_k, deterministic, out):
    """The ops' real implementation, the ctypes call with plain tensors: kvattn::fwd's with `out` None (allocated
    here), kvattn::fwd_out's with the caller's `out`; returns (out, lse)."""
    if out is None:
        out_shape, out_dtype, _ = _fwd_out_spec(q, v_cache, cu_seqlens_q)
        # Through tensors.empty, so that a test's poisoning of kvattn's allocations reaches this path too.
        out = T.empty(q, out_shape, T.dtype_code_of(out_dtype))
    seqlens = cache_seqlens if cache_seqlens is not None else (
        None if cache_seqlens_value < 0 else cache_seqlens_value)
    _, lse = _direct_fwd()(
        q, k_cache, v_cache, k=k, v=v, qv=qv, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
        cache_seqlens=seqlens, cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
        page_table=page_table, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new,
        max_seqlen_q=max_seqlen_q, rotary_seqlens=rotary_seqlens, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, softmax_scale=softmax_scale, causal=causal,
        window_size=(window_left, window_right), attention_chunk=attention_chunk, softcap=softcap,
        rotary_interleaved=rotary_interleaved, scheduler_metadata=scheduler_metadata,
        num_splits=num_splits, pack_gqa=pack_gqa, sm_margin=sm_margin, return_softmax_lse=True,
        sinks=sinks, alibi_slopes=alibi_slopes, seqused_q=seqused_q, out=out, cu_seqlens_k=cu_seqlens_k,
        deterministic=deterministic)
    if lse is None:  # q's rank is wrong and the library did not say so: never return a missing output
        raise KvattnError(f"q: expected (b, sq, hq, d), or (total_q, hq, d) with cu_seqlens_q; got "
                          f"{tuple(q.shape)}")
    return out, lse


# ---------------------------------------------------------------- the ops


def register():
    """Define the kvattn ops with torch.library once (imports torch); returns torch.ops.kvattn."""
    global _ops
    if _ops is not None:
        return _ops
    with _lock:
        if _ops is None:
            _define()
            _ops = getattr(_torch().ops, NAMESPACE)
    return _ops


def _registered():
    register()
    return True


# torch.compiler.assume_constant_result, set by hand so that this module needs no torch at import: dynamo
# runs the function while it traces instead of tracing into it, so the first call of an op may come from
# inside torch.compile(fullgraph=True) (defining an op is untraceable).
_registered._dynamo_marked_constant = True


def _op(name):
    """torch.ops.kvattn.<name>, the ops registered first; in eager code, the op's fast path if it has one."""
    _registered()
    torch = _torch()
    op = getattr(getattr(torch.ops, NAMESPACE), name)
    if not torch.compiler.is_compiling() and name in _FAST:
        return _FAST[name]
    return op


class _FastOp:
    """A call of torch.ops.kvattn.<name> (same arguments, same result) that skips the dispatcher's Python layers
    (custom_op's autograd and ADInplaceOrView kernels, ~20 us a call) when they would do nothing but bump the
    version counters of the mutated arguments: it bumps them and runs the op's implementation itself. Any call
    the dispatcher could treat differently takes the op: a dispatch or function mode (FakeTensorMode, make_fx,
    `with torch.device(...)`), a functorch transform, a jit trace, the profiler (which should see the op), a
    tensor subclass, a negative view, a tensor needing autograd, or one on neither the CPU nor CUDA."""

    def __init__(self, name, impl):
        self.name = name
        self.impl = impl  # the op's real implementation, called with the op's positional arguments
        self.op = None
        self.nargs = -1
        self.tensor_idxs = self.mutated_idxs = ()

    def _bind(self):
        torch = _torch()
        self.op = getattr(getattr(torch.ops, NAMESPACE), self.name).default
        args = self.op._schema.arguments
        self.nargs = len(args)
        tensor_types = (torch._C.TensorType.get(), torch._C.OptionalType(torch._C.TensorType.get()))
        self.tensor_idxs = tuple(i for i, a in enumerate(args) if a.type in tensor_types)
        self.mutated_idxs = tuple(i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write)

    def __call__(self, *args):
        if self.op is None:
            self._bind()
        if len(args) != self.nargs or not self._plain(args):
            return self.op(*args)
        increment_version = _torch().autograd.graph.increment_version
        for i in self.mutated_idxs:
            increment_version(args[i])
        return self.impl(*args)

    def _plain(self, args):
        torch = _torch()
        c = torch._C
        if (c._len_torch_dispatch_stack() or c._len_torch_function_stack() or c._autograd._profiler_enabled()
                or c._get_tracing_state() is not None or c._functorch.peek_interpreter_stack() is not None):
            return False
        tensor = torch.Tensor
        grad = torch.is_grad_enabled()
        for i in self.tensor_idxs:
            x = args[i]
            if x is None:
                continue
            if type(x) is not tensor:  # not a tensor (the op raises), or a subclass (its dispatch must see the op)
                return False
            if (grad and x.requires_grad) or not (x.is_cpu or x.is_cuda) or x.is_neg():
                return False
        return True


_FAST = {
    "fwd": _FastOp("fwd", lambda *args: _run_fwd(*args, None)),
    "fwd_out": _FastOp("fwd_out", lambda *args: _run_fwd(*args)[1]),
}


def _define():
    import torch
    from typing import Optional, Tuple

    Tensor = torch.Tensor
    OptTensor = Optional[Tensor]

    def fake_lse(q, v_cache, cu_seqlens_q):
        _, _, lse_shape = _fwd_out_spec(q, v_cache, cu_seqlens_q)
        return q.new_empty(lse_shape, dtype=torch.float32)

    # One signature for fwd and fwd_out (schema inferred from the annotations): FlashAttention-3's
    # arguments with cache_seqlens split into a tensor and an int (-1: full capacity), window_size into
    # two ints, and kvattn's keyword-only extras at the end.
    @torch.library.custom_op(f"{NAMESPACE}::fwd", mutates_args=("k_cache", "v_cache"))
    def fwd(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: OptTensor, v: OptTensor, qv: OptTensor,
            rotary_cos: OptTensor, rotary_sin: OptTensor, cache_seqlens: OptTensor, cache_seqlens_value: int,
            cache_batch_idx: OptTensor, cache_leftpad: OptTensor, page_table: OptTensor,
            cu_seqlens_q: OptTensor, cu_seqlens_k_new: OptTensor, max_seqlen_q: Optional[int],
            rotary_seqlens: OptTensor, q_descale: OptTensor, k_descale: OptTensor, v_descale: OptTensor,
            softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
            attention_chunk: int, softcap: float, rotary_interleaved: bool, scheduler_metadata: OptTensor,
            num_splits: int, pack_gqa: Optional[bool], sm_margin: int, sinks: OptTensor,
            alibi_slopes: OptTensor, seqused_q: OptTensor, cu_seqlens_k: OptTensor,
            deterministic: bool) -> Tuple[Tensor, Tensor]:
        return _run_fwd(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
                        cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q,
                        rotary_seqlens, q_descale, k_descale, v_descale, softmax_scale, causal, window_left,
                        window_right, attention_chunk, softcap, rotary_interleaved, scheduler_metadata, num_splits,
                        pack_gqa, sm_margin, sinks, alibi_slopes, seqused_q, cu_seqlens_k, deterministic, None)

    @fwd.register_fake
    def _(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
          cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q,
          rotary_seqlens, q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
          attention_chunk, softcap, rotary_interleaved, scheduler_metadata, num_splits, pack_gqa, sm_margin,
          sinks, alibi_slopes, seqused_q, cu_seqlens_k, deterministic):
        out_shape, out_dtype, _ = _fwd_out_spec(q, v_cache, cu_seqlens_q)
        return q.new_empty(out_shape, dtype=out_dtype), fake_lse(q, v_cache, cu_seqlens_q)

    @torch.library.custom_op(f"{NAMESPACE}::fwd_out", mutates_args=("k_cache", "v_cache", "out"))
    def fwd_out(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: OptTensor, v: OptTensor, qv: OptTensor,
                rotary_cos: OptTensor, rotary_sin: OptTensor, cache_seqlens: OptTensor, cache_seqlens_value: int,
                cache_batch_idx: OptTensor, cache_leftpad: OptTensor, page_table: OptTensor,
                cu_seqlens_q: OptTensor, cu_seqlens_k_new: OptTensor, max_seqlen_q: Optional[int],
                rotary_seqlens: OptTensor, q_descale: OptTensor, k_descale: OptTensor, v_descale: OptTensor,
                softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
                attention_chunk: int, softcap: float, rotary_interleaved: bool, scheduler_metadata: OptTensor,
                num_splits: int, pack_gqa: Optional[bool], sm_margin: int, sinks: OptTensor,
                alibi_slopes: OptTensor, seqused_q: OptTensor, cu_seqlens_k: OptTensor, deterministic: bool,
                out: Tensor) -> Tensor:
        return _run_fwd(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
                        cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q,
                        rotary_seqlens, q_descale, k_descale, v_descale, softmax_scale, causal, window_left,
                        window_right, attention_chunk, softcap, rotary_interleaved, scheduler_metadata, num_splits,
                        pack_gqa, sm_margin, sinks, alibi_slopes, seqused_q, cu_seqlens_k, deterministic, out)[1]

    @fwd_out.register_fake
    def _(q, k_cache, v_cache, k, v, qv, rotary_cos, rotary_sin, cache_seqlens, cache_seqlens_value,
          cache_batch_idx, cache_leftpad, page_table, cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q,
          rotary_seqlens, q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
          attention_chunk, softcap, rotary_interleaved, scheduler_metadata, num_splits, pack_gqa, sm_margin,
          sinks, alibi_slopes, seqused_q, cu_seqlens_k, deterministic, out):
        return fake_lse(q, v_cache, cu_seqlens_q)

    @torch.library.custom_op(f"{NAMESPACE}::append_kv", mutates_args=("key_cache", "value_cache"))
    def append_kv(key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor,
                  k_scale: OptTensor, v_scale: OptTensor) -> None:
        _direct("append_kv")(key, value, key_cache, value_cache, slot_mapping, k_scale=k_scale, v_scale=v_scale)

    @append_kv.register_fake
    def _(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
        return None

    def combine_out_spec(out_partial, out_dtype):
        """(out shape, out dtype, lse shape); never raises (see _fwd_out_spec), the library does."""
        shape = tuple(out_partial.shape)
        return shape[1:], (torch.float32 if out_dtype is None else out_dtype), shape[1:-1]

    @torch.library.custom_op(f"{NAMESPACE}::combine", mutates_args=())
    def combine(out_partial: Tensor, lse_partial: Tensor, sinks: OptTensor,
                out_dtype: Optional[torch.dtype]) -> Tuple[Tensor, Tensor]:
        out_shape, dtype, _ = combine_out_spec(out_partial, out_dtype)
        out = T.empty(out_partial, out_shape, T.dtype_code_of(dtype))
        return _direct("flash_attn_combine")(out_partial, lse_partial, out=out, sinks=sinks)

    @combine.register_fake
    def _(out_partial, lse_partial, sinks, out_dtype):
        out_shape, dtype, rows = combine_out_spec(out_partial, out_dtype)
        return out_partial.new_empty(out_shape, dtype=dtype), _combine_lse(lse_partial, rows)

    @torch.library.custom_op(f"{NAMESPACE}::combine_out", mutates_args=("out",))
    def combine_out(out_partial: Tensor, lse_partial: Tensor, sinks: OptTensor, out: Tensor) -> Tensor:
        _, lse = _direct("flash_attn_combine")(out_partial, lse_partial, out=out, sinks=sinks)
        return lse

    @combine_out.register_fake
    def _(out_partial, lse_partial, sinks, out):
        _, _, rows = combine_out_spec(out_partial, None)
        return _combine_lse(lse_partial, rows)



if sys.modules.get("torch") is not None:  # torch already loaded: define the ops now, outside any trace
    register()
