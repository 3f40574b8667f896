"""kvattn's calls as torch.library custom ops, for CUDA graphs, torch.compile and torch.library.opcheck.

    kvattn::fwd         flash_attn_with_kvcache -> (out, lse); appends k, v into k_cache, v_cache in place
    kvattn::fwd_out     the same, writing a caller's `out` in place -> lse
    kvattn::append_kv   reshape_and_cache_flash: writes key, value into key_cache, value_cache in place
    kvattn::combine     split-KV combine -> (out, lse)
    kvattn::combine_out the same, writing a caller's `out` in place -> lse

The fwd ops' schema is derived from _signature.FWD (op_schema): FlashAttention-3's arguments, normalized
once by _fwd.normalize (cache_seqlens split into a tensor and an int, window_size into two ints). Each op
has a fake (meta) implementation that computes output shapes without data, so torch.compile(fullgraph=True)
traces the whole call. The real implementations are the ctypes calls (_fwd.run, interface.py): the
workspace is a torch.empty(uint8) on q's device made inside the op, the stream is torch's current one, and
nothing synchronizes or reads device data, so a call is CUDA-graph safe (its device-side index checks
report through kvattn.device_errors()).

Eager calls skip the dispatcher (see `_plain`): they bump the version counters of the written tensors and
run the implementation directly. Outputs are not differentiable: kvattn has no backward pass, and in eager
mode its outputs do not require grad whatever the inputs (a cache that requires grad and would be
appended to is an error).

Errors: the fake implementations never raise; the library's validation raises KvattnError when an op runs,
also inside compiled code. Only an argument that the Python layer rejects while dynamo traces it (a
window_size that is not two ints, say) reaches a torch.compile(fullgraph=True) caller as torch's error.

This module imports without torch; the ops are defined by `register()`, on the first call with a torch
tensor (also from inside torch.compile: see `_registered`), or at import when torch is already loaded.
"""
import sys
import threading

from . import _fwd
from . import _lib
from . import _signature as S
from . import _stable
from . import tensors as T
from .errors import KvattnError

NAMESPACE = "kvattn"

_lock = threading.Lock()
_ops = None  # namespace of the registered ops (torch.ops.kvattn) once register() has run


def _torch():
    return sys.modules["torch"]


# ---------------------------------------------------------------- the entry points interface.py calls

_K_CACHE, _V_CACHE, _K, _V = (S.op_arg_names().index(n) for n in ("k_cache", "v_cache", "k", "v"))
_TENSOR_POSITIONS = tuple(i for i, n in enumerate(S.op_arg_names())
                          if n in {a.name for a in S.OP_ARGS if a.kind in ("tensor", "cache", "opt", "metadata")}
                          or n == "cache_seqlens")


def fwd(op_args, out, names=_fwd.NAMES, want_lse=True):
    """flash_attn_with_kvcache's torch route: (out, lse) through kvattn::fwd / fwd_out, or straight to the
    implementation in eager mode (which computes lse only when wanted: lse None otherwise)."""
    if not _eager():
        for i in _TENSOR_POSITIONS:
            if op_args[i] is not None:
                _check_tensor(S.op_arg_names()[i], op_args[i])
        if out is None:
            return _op("fwd")(*op_args)
        return out, _op("fwd_out")(*op_args, out)
    if _eager is _eager_unbound:
        _bind_eager()
    result = _stable.run(op_args, out, want_lse)  # the C++ op where built and the call is plain; else None
    if result is None:
        _check_written_not_negated(op_args, out, names)
        op_args = _resolve_read_caches(op_args)
        if not _plain(op_args, out, names):
            return (_op("fwd")(*op_args) if out is None else (out, _op("fwd_out")(*op_args, out)))
        k_cache, v_cache = op_args[_K_CACHE], op_args[_V_CACHE]
        if k_cache is None or v_cache is None:  # the library's "is required" message, before any version bump
            return _fwd.run(op_args, out, True, names)
        if _appends(op_args) and (k_cache.requires_grad or v_cache.requires_grad) and _torch().is_grad_enabled():
            name = "k_cache" if k_cache.requires_grad else "v_cache"
            raise KvattnError(f"{names.get(name, name)}: requires grad, and kvattn appends k, v into it in place; "
                              "kvattn computes no gradients (pass a tensor that does not require grad)")
        result = _fwd.run(op_args, out, want_lse, names)
    # What the call wrote, as autograd's version counters should see it (the op declares the caches
    # written always; here only an append writes them).
    written = (op_args[_K_CACHE], op_args[_V_CACHE]) if _appends(op_args) else ()
    written += (out,) if out is not None else ()
    if written:
        _torch()._C._increment_version(written)
    return result


def fast_prologue(defaults):
    """flash_attn_with_kvcache's eager fast path, as source lines for _signature.make_function: when the
    stable-ABI op is loaded, the call is eager (_eager) and every argument is a plain value (each tensor
    torch.Tensor itself, none needing grad; each scalar one that _args.PLAIN says its check passes as it
    is; no alias), the FA3 arguments go straight to the op (torch_ops.fwd's and _stable.run's conditions,
    without normalize and the op's argument tuple in between). Anything else, or a call the op declines
    (it raises), takes the general path (normalize, torch_ops.fwd), whose checks and KvattnErrors apply.
    One pass over the tensor arguments both checks them and builds the op's list. Returns (lines, names)."""
    import math

    from . import _args as A

    order = {name: bit for bit, name in enumerate(_stable.TENSORS)}
    ignored = dict((a, given) for a, given in _fwd.IGNORED_WITHOUT)
    tensor_kinds = ("tensor", "cache", "opt", "seqlens", "out")
    guards, tensors = [], []
    for a in S.FWD[1:]:
        if a.kind in tensor_kinds:
            if a.name not in ("k_cache", "v_cache"):
                tensors.append(a.name)
        else:
            guards.append(A.PLAIN[a.kind].format(x=a.name, d=defaults.get(a.name)))
    guards.sort(key=lambda g: g.startswith("(scheduler_metadata"))  # last: its check may raise, as in normalize
    assert set(tensors) == set(_stable.TENSORS[3:]) | {"out"}, "every tensor argument reaches the op"
    tensors.sort(key=lambda n: order.get(n, len(order)))  # the op's order, out last
    guards += [f"({w} is None or {a} is not None)" for a, w, _ in _fwd.REQUIRED_WITH]
    # A written tensor with the negative bit: the dispatcher would hand the op a resolved copy (the write lost).
    guards += ["(k is None and v is None or not (k_cache.is_neg() or v_cache.is_neg()))",
               "(out is None or not out.is_neg())"]
    guards += ["(sinks is None or sinks.dtype is _s.F32)", "(q.is_cuda or _s.CPU_CALLS)"]
    needs_grad = " or ".join(["q.requires_grad", "k_cache.requires_grad", "v_cache.requires_grad"] + [
        f"{n} is not None and {n}.requires_grad" for n in tensors if n not in _stable.INDEX_TENSORS])
    lines = ["_op = _s._op",
             "if _op and type(q) is _s.TENSOR and _ops._eager():",
             "    _T = _s.TENSOR",
             "    _plain = type(k_cache) is _T and type(v_cache) is _T",
             "    _t = [q, k_cache, v_cache]",
             "    _m = 7"]
    for name in tensors:
        given = ignored.get(name)  # FA3: ignored (not even checked) without these
        when = f"{name} is not None" + (" and (" + " or ".join(f"{g} is not None" for g in given) + ")"
                                        if given else "")
        bit = _stable.OUT_BIT if name == "out" else 1 << order[name]
        lines += [f"    if {when}:", f"        if type({name}) is _T:", f"            _t.append({name})",
                  f"            _m |= {bit}", "        else:", "            _plain = False"]
    window = defaults["window_size"]
    value = {"cache_seqlens_value": "-1", "window_left": f"(-1 if window_size is {window} else window_size[0])",
             "window_right": f"(-1 if window_size is {window} else window_size[1])"}
    ints = ", ".join(_stable.scalar_source(n, n) if n not in value else value[n]
                     for n in _stable.INTS + _stable.FLOATS)
    lines += ["    if (_plain",
              "            and " + "\n            and ".join(guards),
              f"            and not (_s.GRAD_ENABLED() and ({needs_grad}))):",
              "        try:",
              f"            _r = (_s._op_lse if return_softmax_lse else _op)(_t, [_m, {ints}])",
              "        except Exception:",
              "            _r = None  # declined or rejected: the general path, whose error names the argument",
              "        if _r is not None:",
              "            if k is not None or v is not None:",
              "                _s.BUMP((k_cache, v_cache) if out is None else (k_cache, v_cache, out))",
              "            elif out is not None:",
              "                _s.BUMP((out,))",
              "            return (_r[0], _r[1]) if return_softmax_lse else _r"]
    return lines, dict(_stable.SOURCE_NAMES, _s=_stable, _ops=sys.modules[__name__], _inf=math.inf,
                       _metadata=A.metadata)


def _check_written_not_negated(op_args, out, names):
    """fwd's written tensors through _reject_negated_written: out, and the caches of an append."""
    caches = (("k_cache", _K_CACHE), ("v_cache", _V_CACHE)) if _appends(op_args) else ()
    _reject_negated_written(**{names.get(n, n): op_args[i] for n, i in caches}, out=out)


def _appends(op_args):
    return op_args[_K] is not None or op_args[_V] is not None


def _resolve_read_caches(op_args):
    """Caches with the negative bit that the call only reads, resolved (a copy): the op declares the caches
    written, and torch's negation fallback fails on an op with several written tensors (an internal
    assert). Written ones raise before (_check_written_not_negated)."""
    if _appends(op_args):
        return op_args
    tensor, args = _torch().Tensor, None
    for i in (_K_CACHE, _V_CACHE):
        if isinstance(op_args[i], tensor) and op_args[i].is_neg():
            args = list(op_args) if args is None else args
            args[i] = op_args[i].resolve_neg()
    return op_args if args is None else type(op_args)(args)


def _reject_negated_written(**written):
    """A KvattnError for a written tensor with the negative bit (a lazy negated view): the dispatcher would
    write a resolved copy (the write lost) or fail inside torch."""
    for name, x in written.items():
        if isinstance(x, _torch().Tensor) and x.is_neg():
            raise KvattnError(f"{name}: is a lazily negated view (is_neg()), and kvattn writes it in place; pass a "
                              "tensor without the negative bit (.resolve_neg())")


def _check_devices(named):
    """Eager calls (each tensor taken for what it holds): a tensor on a device other than the CPU or CUDA
    (meta, say) among tensors that are is a KvattnError naming it. The dispatcher would pick that device's
    kernel, the fake one, and return its uninitialized output as the answer (and append nothing). Every
    tensor on such a device is shape inference, and passes."""
    tensor = _torch().Tensor
    present = [(n, x) for n, x in named if isinstance(x, tensor)]
    other = [(n, x) for n, x in present if not (x.is_cpu or x.is_cuda)]
    if other and len(other) < len(present):
        name, x = other[0]
        real = next(y for _, y in present if y.is_cpu or y.is_cuda)
        raise KvattnError(f"{name}: on device {x.device}, while the call's other tensors are on {real.device}: "
                          "kvattn computes on the cpu or cuda devices")


def append_kv(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None):
    """interface.append_kv for torch tensors, through torch.ops.kvattn.append_kv (eager: straight to it)."""
    _all_torch(value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping)
    _reject_negated_written(key_cache=key_cache, value_cache=value_cache)
    args = (key, value, key_cache, value_cache, slot_mapping, _scalar_tensor(key_cache, "k_scale", k_scale),
            _scalar_tensor(key_cache, "v_scale", v_scale))
    if _eager() and _plain_tensors(args, ("key", "value", "key_cache", "value_cache", "slot_mapping", "k_scale",
                                          "v_scale")):
        _direct("append_kv")(*args)
        _torch()._C._increment_version((key_cache, value_cache))
        return
    _op("append_kv")(*args)


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None, *, sinks=None):
    """interface.flash_attn_combine for torch tensors, through torch.ops.kvattn.combine / combine_out
    (eager: straight to the implementation)."""
    _all_torch(lse_partial=lse_partial, out=out, sinks=sinks)
    dtype = _torch_dtype("out_dtype", out_dtype)
    if out is not None and dtype is not None and T.is_torch(out) and out.dtype != dtype:
        raise KvattnError(f"out: dtype {out.dtype} differs from out_dtype {out_dtype!r}")
    _reject_negated_written(out=out)
    if _eager() and _plain_tensors((out_partial, lse_partial, sinks, out), ("out_partial", "lse_partial", "sinks",
                                                                           "out")):
        result = _direct("flash_attn_combine")(out_partial, lse_partial, out, dtype, sinks=sinks)
        if out is not None:
            _torch()._C._increment_version((out,))
        return result
    if out is None:
        return _op("combine")(out_partial, lse_partial, sinks, dtype)
    return out, _op("combine_out")(out_partial, lse_partial, sinks, out)


def _plain_tensors(tensors, names):
    """Every one a plain torch.Tensor (or None) on the CPU or CUDA without the negative bit (see _plain)."""
    tensor = _torch().Tensor
    for x in tensors:
        if x is not None and (type(x) is not tensor or not (x.is_cpu or x.is_cuda) or x.is_neg()):
            _check_devices(zip(names, tensors))
            return False
    return True


def _scalar_tensor(like, name, scale):
    """A float scale as an fp32 0-d tensor on `like`'s device; tensors and None pass as they are."""
    from . import _args as A

    if scale is None or T.is_torch(scale):
        return scale
    torch = _torch()
    return torch.full((), A.check_float(name, scale), dtype=torch.float32, device=like.device)


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


# ---------------------------------------------------------------- eager calls past the dispatcher


def _eager():
    """No torch.compile trace, mode, transform, jit trace or profiler that should see the op. (The first eager
    call replaces it with _bound_eager(): the same checks, torch's functions looked up once.)"""
    torch = _torch()
    c = torch._C
    return not (torch.compiler.is_compiling() or c._len_torch_dispatch_stack() or c._len_torch_function_stack()
                or c._autograd._profiler_enabled() or c._get_tracing_state() is not None
                or c._functorch.peek_interpreter_stack() is not None)


_eager_unbound = _eager


def _bind_eager():
    """_eager becomes _bound_eager(), from an eager call only: register() may run inside a torch.compile
    trace (the first call there), and a frame dynamo restarts must see the _eager it saw before
    (SpeculationLogDivergence when register() rebound it)."""
    global _eager
    _eager = _bound_eager()


def _bound_eager():
    """_eager with torch's functions bound (their attribute lookups were about a third of its ~0.6 us)."""
    torch = _torch()
    c = torch._C
    compiling, dispatch_modes, function_modes = (torch.compiler.is_compiling, c._len_torch_dispatch_stack,
                                                 c._len_torch_function_stack)
    profiling, tracing, transforms = c._autograd._profiler_enabled, c._is_tracing, c._functorch.peek_interpreter_stack

    def _eager():  # _is_tracing: _get_tracing_state() is not None, without returning the state (0.06 us less)
        return not (compiling() or dispatch_modes() or function_modes() or profiling() or tracing()
                    or transforms() is not None)

    _eager.__doc__ = globals()["_eager"].__doc__
    return _eager


def _plain(op_args, out, names=_fwd.NAMES):
    """Every tensor argument a plain torch.Tensor on the CPU or CUDA, without the negative bit: the dispatcher
    would do nothing with the call but run the implementation. Anything else (a subclass, another array type,
    a non-tensor where a tensor belongs) takes the op, whose checks and error messages apply (a tensor on
    another device among CPU / CUDA ones raises here: _check_devices)."""
    tensor = _torch().Tensor
    arg_names = S.op_arg_names()
    for i in _TENSOR_POSITIONS:
        x = op_args[i]
        if x is None:
            continue
        if type(x) is not tensor:
            _check_tensor(arg_names[i], x)
            return False
        if not (x.is_cpu or x.is_cuda) or x.is_neg():
            _check_devices(_named_tensors(op_args, out, names))
            return False
    if out is None:
        return True
    _check_tensor("out", out)
    if type(out) is tensor and not (out.is_cpu or out.is_cuda):
        _check_devices(_named_tensors(op_args, out, names))
    return type(out) is tensor and (out.is_cpu or out.is_cuda)


def _named_tensors(op_args, out, names):
    """(name as the caller's function calls it, value) of fwd's tensor arguments and out."""
    arg_names = S.op_arg_names()
    return [(names.get(arg_names[i], arg_names[i]), op_args[i]) for i in _TENSOR_POSITIONS] + [("out", out)]


def _check_tensor(name, x):
    """A KvattnError naming `name` unless `x` is a torch tensor (or subclass): the op would raise torch's
    schema error."""
    if not isinstance(x, _torch().Tensor):
        raise KvattnError(f"{name}: expected a torch tensor (as q is), got {type(x).__name__}")


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
    """torch.ops.kvattn.<name>, the ops registered first."""
    _registered()
    return getattr(getattr(_torch().ops, NAMESPACE), name)


def _fwd_out_spec(q, v_cache, cu_seqlens_q):
    """(out shape, out dtype, lse shape) of a forward call.

    Never raises: arguments the library rejects get some shape here (lse (0,) for a q of the wrong rank),
    and the real implementation raises KvattnError with the library's message at run time. (An error raised
    here would reach a torch.compile user as torch's TorchRuntimeError instead of KvattnError.)"""
    from . import _args as A

    torch = _torch()
    out_dtype = torch.bfloat16 if q.dtype == torch.float8_e4m3fn else q.dtype
    if T.dtype_code_of(out_dtype) is None:
        out_dtype = torch.float32  # unsupported q: the library says so at run time
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


def _direct(name):
    """interface.py's function `name` without the torch route."""
    from . import interface

    return getattr(interface, "_" + name)


_Q, _CU_Q = (S.op_arg_names().index(n) for n in ("q", "cu_seqlens_q"))


def _define():
    import torch
    from typing import Optional, Tuple

    Tensor = torch.Tensor
    OptTensor = Optional[Tensor]

    def fwd_impl(*op_args):
        return _fwd.run(op_args, None, True)

    def fwd_fake(*op_args):
        out_shape, out_dtype, lse_shape = _fwd_out_spec(op_args[_Q], op_args[_V_CACHE], op_args[_CU_Q])
        q = op_args[_Q]
        return q.new_empty(out_shape, dtype=out_dtype), q.new_empty(lse_shape, dtype=torch.float32)

    def fwd_out_impl(*args):
        return _fwd.run(args[:-1], args[-1], True)[1]

    def fwd_out_fake(*args):
        return fwd_fake(*args[:-1])[1]

    fwd = torch.library.custom_op(f"{NAMESPACE}::fwd", fwd_impl, mutates_args=("k_cache", "v_cache"),
                                  schema=S.op_schema(with_out=False))
    fwd.register_fake(fwd_fake)
    fwd_out = torch.library.custom_op(f"{NAMESPACE}::fwd_out", fwd_out_impl,
                                      mutates_args=("k_cache", "v_cache", "out"), schema=S.op_schema(with_out=True))
    fwd_out.register_fake(fwd_out_fake)

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
    _bind_eager()
