"""The eager torch path through the optional C++ op kvattn_stable::fwd (src/torch/stable_op.cpp, built by
tools/build_torch_op.sh against torch's stable ABI): tensor pointers, sizes and strides are read in C++,
out / lse / the workspace allocated there, and the C ABI called from there, so a call costs Python only the
argument normalization and one op call.

Optional: without the extension (or with KVATTN_TORCH_OP=0) `run` returns None and the caller takes the
ctypes path (_fwd.run). The op serves the plain valid call only; anything else (a tensor subclass, a
tensor that requires grad under grad mode, a bad argument the library rejects) also returns None, so the
ctypes path runs it or raises its KvattnError naming the argument. Eager only: under torch.compile, modes
or tracing the registered Python ops (torch_ops.py) run, as before.
"""
import os
import struct
import sys

from . import _lib
from . import _signature as S
from . import tensors as T

# The op's tensors and scalars in src/torch/stable_op.cpp's order, by op argument name: the ops (fwd -> out,
# fwd_lse -> [out, lse]) take the list of the tensors given (bit i of the mask says tensor i is among them;
# bit len(TENSORS): out) and one int list, [mask, *INTS, *FLOATS as their bits] (each argument and list
# entry of a boxed call costs the caller ~0.1-0.5 us, so there are two of them and no None entries).
TENSORS = ("q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin", "rotary_seqlens",
           "cache_seqlens", "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q", "seqused_q",
           "cu_seqlens_k_new", "cu_seqlens_k", "alibi_slopes", "sinks", "q_descale", "k_descale", "v_descale",
           "kv_indptr", "kv_indices")
INTS = ("cache_seqlens_value", "max_seqlen_q", "causal", "window_left", "window_right", "attention_chunk",
        "rotary_interleaved", "num_splits", "pack_gqa", "sm_margin", "deterministic")
FLOATS = ("softmax_scale", "softcap")
OUT_BIT = 1 << len(TENSORS)
# The index arrays: int32 by the ABI (the library rejects any other dtype) and an int tensor cannot require
# grad, so the fast path (torch_ops.fast_prologue) need not ask them.
INDEX_TENSORS = ("rotary_seqlens", "cache_seqlens", "cache_batch_idx", "cache_leftpad", "page_table", "cu_seqlens_q",
                 "seqused_q", "cu_seqlens_k_new", "cu_seqlens_k", "kv_indptr", "kv_indices")
# Every op argument the library reads reaches the op (a new one left out would be silently dropped).
assert set(S.op_arg_names()) - {"scheduler_metadata"} == set(TENSORS + INTS + FLOATS), "_stable.py's tables"

_I = {name: i for i, name in enumerate(S.op_arg_names())}
_TENSOR_POS = tuple(_I[n] for n in TENSORS)
_SINKS, _K, _V = _I["sinks"], _I["k"], _I["v"]
# A float's IEEE-754 bits as an int64, inline in the generated code (the op's int list carries the two
# floats): _unpack(_pack(x))[0], 0.18 us against 0.25 through int.from_bytes and a function call.
SOURCE_NAMES = {"_pack": struct.Struct("<d").pack, "_unpack": struct.Struct("<q").unpack}


# The op's value of each scalar from its op argument's (None -> the ABI's "absent": max_seqlen_q 0,
# pack_gqa -1, softmax_scale 0.0; bools -> 0/1; floats -> bits), as source with {x} the argument.
_SCALAR_SOURCE = {"max_seqlen_q": "(0 if {x} is None else {x})",
                  "pack_gqa": "(-1 if {x} is None else 1 if {x} else 0)",
                  "causal": "(1 if {x} else 0)", "rotary_interleaved": "(1 if {x} else 0)",
                  "deterministic": "(1 if {x} else 0)",
                  "softmax_scale": "(0 if {x} is None else _unpack(_pack({x}))[0])",
                  "softcap": "(_unpack(_pack({x}))[0] if {x} else 0)"}


def scalar_source(name, x):
    """The op's int for scalar `name` (of INTS or FLOATS) whose value is the expression `x`."""
    return _SCALAR_SOURCE.get(name, "{x}").format(x=x)


def _lists_builder():
    """A function: (op args, out) -> the op's (present tensors, ints)."""
    lines = ["def lists(v, out):", "    t = [v[0], v[1], v[2]]", "    m = 7"]
    for bit, name in enumerate(TENSORS[3:], 3):
        lines += [f"    if v[{_I[name]}] is not None:", f"        t.append(v[{_I[name]}])", f"        m |= {1 << bit}"]
    lines += ["    if out is not None:", "        t.append(out)", f"        m |= {OUT_BIT}"]
    ints = ", ".join(scalar_source(n, f"v[{_I[n]}]") for n in INTS + FLOATS)
    lines += [f"    return t, [m, {ints}]"]
    env = dict(SOURCE_NAMES)
    exec("\n".join(lines), env)  # noqa: S102 (our own table)
    return env["lists"]


_lists = _lists_builder()
_op = None  # the op's C++ callable (kvattn_stable::fwd) once loaded; False: not available
_op_lse = None  # kvattn_stable::fwd_lse, loaded with it
# Set with _op when it loads (the generated eager entry point reads them; torch is not imported before).
TENSOR = None  # torch.Tensor
GRAD_ENABLED = None  # torch.is_grad_enabled
BUMP = None  # torch._C._increment_version (autograd's version counters of the tensors a call wrote)
F32 = None  # torch.float32 (the op takes fp32 sinks only)
# CPU tensors take the ctypes path, whose long calls run on a helper thread so that Ctrl-C reaches Python;
# tests set this to run the op on the CPU backend.
CPU_CALLS = False


def path():
    """Where the extension is looked for: $KVATTN_TORCH_OP, else next to the package."""
    return os.environ.get("KVATTN_TORCH_OP") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "_kvattn_stable.so")


def load():
    """The op (its C++ callable), or None when the extension is absent, disabled or fails to load."""
    global _op
    if _op is None:
        _op = False
        where = path()
        if where != "0" and os.path.exists(where):
            try:
                torch = sys.modules["torch"]
                torch.ops.load_library(where)
                lib = _lib.load()
                torch.ops.kvattn_stable.init(lib._name)
                ops = torch.ops.kvattn_stable
                overloads = ops.fwd.default, ops.fwd_lse.default  # an older build lacks fwd_lse: not used
                global TENSOR, GRAD_ENABLED, BUMP, F32, _op_lse
                TENSOR, GRAD_ENABLED, BUMP, F32 = (torch.Tensor, torch.is_grad_enabled, torch._C._increment_version,
                                                   torch.float32)
                _op, _op_lse = (getattr(o, "_op", o) for o in overloads)
            except Exception:  # noqa: BLE001 (an extension of another build: the ctypes path serves)
                _op = False
    return _op or None


def run(op_args, out, want_lse):
    """(out, lse or None) through the op, or None: the caller runs the ctypes path instead."""
    op = _op if _op is not None else load()
    if not op:
        return None
    torch = sys.modules["torch"]
    tensor = torch.Tensor
    grad = torch.is_grad_enabled()
    for i in _TENSOR_POS:
        x = op_args[i]
        if x is not None and (type(x) is not tensor or (grad and x.requires_grad)):
            return None
    if out is not None and (type(out) is not tensor or (grad and out.requires_grad)):
        return None
    q, k_cache, v_cache = op_args[0], op_args[1], op_args[2]
    if q is None or k_cache is None or v_cache is None or not (CPU_CALLS or q.is_cuda):
        return None
    # A written tensor with the negative bit: the dispatcher would hand the op a resolved copy (the write lost).
    if (out is not None and out.is_neg()) or ((op_args[_K] is not None or op_args[_V] is not None)
                                              and (k_cache.is_neg() or v_cache.is_neg())):
        return None
    sinks = op_args[_SINKS]
    if sinks is not None and T.dtype_code(sinks) != _lib.DTYPE_F32:
        return None  # fp16/bf16 sinks: the ctypes path makes the fp32 copy
    try:
        result = (_op_lse if want_lse else op)(*_lists(op_args, out))
    except Exception:  # noqa: BLE001 (rejected or unusual: the ctypes path raises the named error)
        return None
    return (result[0], result[1]) if want_lse else (result, None)
