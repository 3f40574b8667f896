"""flash_attn_with_kvcache's two halves, shared by every entry point and the torch ops:

    normalize(values) -> (op_args, out, return_lse)   the FA3 arguments (in _signature.FWD order) checked and
                                                      normalized once, into the op's arguments (OP_ARGS order)
    run(op_args, out, want_lse, names) -> (out, lse)  kvattn_fwd_params filled from them, the library called

The op's arguments are kvattn_fwd_params's field names, so `run` fills the struct from the schema, and
`call_library` is the one place that calls the library's forward.
"""
import ctypes

from . import _args as A
from . import _lib
from . import _signature as S
from . import tensors as T
from .errors import KvattnError, check

# C ABI argument names -> the Python names, for the library's messages
NAMES = {"window_left": "window_size[0]", "window_right": "window_size[1]", "cache_seqlens_value": "cache_seqlens"}

_INDEX = {a.name: i for i, a in enumerate(S.FWD)}
_SCALAR_CHECKS = {"int": A.check_int, "opt_int": A.check_opt_int, "float": A.check_float,
                  "scale": A.check_scale, "bool": A.check_bool, "opt_bool": A.check_opt_bool}
# (position, name, default, check) of each scalar argument of FWD
_SCALARS = tuple((i, a.name, a.default, _SCALAR_CHECKS[a.kind]) for i, a in enumerate(S.FWD)
                 if a.kind in _SCALAR_CHECKS)
# (target position, ((alias name, alias position), ...)) for page_table and sinks
_ALIASES = tuple((_INDEX[t], tuple((a.name, i) for i, a in enumerate(S.FWD) if a.target == t and a.kind == "alias"))
                 for t in dict.fromkeys(a.target for a in S.FWD if a.kind == "alias"))
_WINDOW = _INDEX["window_size"]
# FA3's rules between arguments (also read by the generated eager entry point, torch_ops.fast_prologue):
# an argument ignored unless one of the arguments that give it meaning is given (rotary positions with
# nothing to rotate; SGLang passes cu_seqlens_k_new with nothing to append) ...
IGNORED_WITHOUT = (("rotary_seqlens", ("rotary_cos", "rotary_sin")), ("cu_seqlens_k_new", ("k", "v")))
# ... and an argument required with another (what it is).
REQUIRED_WITH = (("max_seqlen_q", "cu_seqlens_q", "the longest query sequence"),)
_IGNORED = tuple((_INDEX[a], _INDEX[g], _INDEX[h]) for a, (g, h) in IGNORED_WITHOUT)  # pairs: no genexpr a call
_REQUIRED = tuple((_INDEX[a], _INDEX[w], f"{a}: required with {w} ({what}), got None") for a, w, what in REQUIRED_WITH)
_DEFAULT_WINDOW = S.FWD[_WINDOW].default


def _op_args_builder():
    """A function (values + [seqlens tensor, seqlens value, window left, window right]) -> the op's argument
    tuple in OP_ARGS order: one tuple expression generated from the table (not operator.itemgetter, which
    torch.compile cannot trace)."""
    extra = len(S.FWD)
    positions = []
    for a in S.OP_ARGS:
        if a.kind == "seqlens":
            positions += [extra, extra + 1]
        elif a.kind == "window":
            positions += [extra + 2, extra + 3]
        else:
            positions.append(_INDEX[a.name])
    return eval(f"lambda v: ({', '.join(f'v[{i}]' for i in positions)},)")  # noqa: S307 (our own table)


_op_args = _op_args_builder()
_I = {name: i for i, name in enumerate(S.op_arg_names())}  # the op's argument positions


def normalize(values, names=None):
    """FWD-ordered argument values -> (op_args, out, return_lse). `names` maps argument names to the caller's
    (flash_attn_varlen_func's k for k_cache, ...) in this layer's messages."""
    v = list(values)
    for i, name, default, check_scalar in _SCALARS:
        x = v[i]
        if x is not default:
            v[i] = check_scalar(names.get(name, name) if names else name, x)
    for target, aliases in _ALIASES:
        if any(v[i] is not None for _, i in aliases):
            v[target] = A.alias(S.FWD[target].name, v[target], **{name: v[i] for name, i in aliases})
    seqlens = v[_INDEX["cache_seqlens"]]
    seqlens_tensor, seqlens_value = (None, -1) if seqlens is None else A.seqlens(
        names.get("cache_seqlens", "cache_seqlens") if names else "cache_seqlens", seqlens)
    window = v[_WINDOW]
    left, right = (-1, -1) if window is _DEFAULT_WINDOW else A.window(window)
    if v[_INDEX["scheduler_metadata"]] is not None:
        v[_INDEX["scheduler_metadata"]] = A.metadata("scheduler_metadata", v[_INDEX["scheduler_metadata"]], v[0])
    for i, g, h in _IGNORED:
        if v[g] is None and v[h] is None:
            v[i] = None
    for i, w, message in _REQUIRED:
        if v[w] is not None and v[i] is None:
            raise KvattnError(message)
    return_lse = v[_INDEX["return_softmax_lse"]]
    if return_lse is not False:
        return_lse = A.check_bool("return_softmax_lse", return_lse)
    v += (seqlens_tensor, seqlens_value, left, right)
    return _op_args(v), v[_INDEX["out"]], return_lse


# ---------------------------------------------------------------- run: params from the op's arguments

_TENSOR_KINDS = ("tensor", "cache", "opt", "seqlens", "metadata")
_fields = dict(_lib.FwdParams._fields_)
# (position, field offset, name, required) of each tensor the library reads (scheduler_metadata is not one)
_TENSOR_FIELDS = tuple((_I[a.name], getattr(_lib.FwdParams, a.name).offset, a.name, a.kind in ("tensor", "cache"))
                       for a in S.OP_ARGS if a.kind in _TENSOR_KINDS and a.name in _fields
                       and a.name not in ("q", "k_cache", "v_cache", "sinks"))
_K_CACHE, _V_CACHE, _K, _V, _Q = _I["k_cache"], _I["v_cache"], _I["k"], _I["v"], _I["q"]
_SINKS = _I["sinks"]
_OFFSET = {name: getattr(_lib.FwdParams, name).offset for name in ("k_cache", "v_cache", "sinks", "out", "lse")}


def _scalar_fields():
    """(position, field, conversion, default) of each scalar field: bools as int32, None as the ABI's
    "absent" value. `default` is the op argument's value that leaves the field as kvattn_fwd_params_init
    made it, so that a call sets only the fields it changes."""
    def none_is(value):
        return lambda x: value if x is None else x

    fields = []
    for a in S.OP_ARGS:
        i = _I.get(a.name)
        if a.kind == "int":
            fields.append((i, a.name, None, 0))
        elif a.kind == "float":
            fields.append((i, a.name, None, 0.0))
        elif a.kind == "bool":
            fields.append((i, a.name, int, a.name == "rotary_interleaved"))
        elif a.kind == "opt_int":
            fields.append((i, a.name, none_is(0), None))
        elif a.kind == "scale":
            fields.append((i, a.name, none_is(0.0), None))  # 0: the ABI's "default"
        elif a.kind == "opt_bool":
            fields.append((i, a.name, lambda x: -1 if x is None else int(x), None))
        elif a.kind == "seqlens":
            fields.append((_I[a.name + "_value"], a.name + "_value", None, -1))
        elif a.kind == "window":
            fields += [(_I["window_left"], "window_left", None, -1), (_I["window_right"], "window_right", None, -1)]
    return tuple(fields)


_SCALAR_FIELDS = _scalar_fields()


def run(op_args, out=None, want_lse=True, names=NAMES):
    """kvattn_fwd with the op's arguments; allocates `out` (when None) and lse (when wanted) like q.
    Returns (out, lse or None)."""
    lib = _lib.load()
    call = T.Call()
    p = _lib.new_fwd_params()
    q = op_args[_Q]
    call.fill_at(p, _lib.FwdParams.q.offset, q, "q", required=True)  # first: out's dtype follows q's
    appends = op_args[_K] is not None or op_args[_V] is not None
    call.fill_at(p, _OFFSET["k_cache"], op_args[_K_CACHE], "k_cache", True, appends)
    call.fill_at(p, _OFFSET["v_cache"], op_args[_V_CACHE], "v_cache", True, appends)
    for i, offset, name, required in _TENSOR_FIELDS:
        x = op_args[i]
        if x is not None:
            call.fill_at(p, offset, x, name, required)
    sinks = op_args[_SINKS]
    if sinks is not None:
        if T.is_torch(sinks) or T.is_numpy(sinks):
            sinks = T.to_float32(sinks)  # fp16/bf16 -> an fp32 copy; fp32 passes as it is
            call.keep.append(sinks)
        call.fill_at(p, _OFFSET["sinks"], sinks, "sinks")
    for i, field, convert, default in _SCALAR_FIELDS:
        x = op_args[i]
        if x is not default and x != default:
            setattr(p, field, convert(x) if convert is not None else x)

    if out is None:
        q_code = T.dtype_code(q)
        out_code = _lib.DTYPE_BF16 if q_code == _lib.DTYPE_FP8_E4M3 else q_code
        out = T.empty(q, T.shape_of(q)[:-1] + T.shape_of(op_args[_V_CACHE])[-1:], out_code)
    call.fill_at(p, _OFFSET["out"], out, "out", required=True, written=True)
    lse = None
    if want_lse:
        lse_shape = A.lse_shape(q, op_args[_I["cu_seqlens_q"]] is not None)
        if lse_shape is None:
            raise KvattnError(f"q: expected (b, sq, hq, d), or (total_q, hq, d) with cu_seqlens_q; got "
                              f"{T.shape_of(q)}")
        lse = T.empty(q, lse_shape, _lib.DTYPE_F32)
        call.fill_at(p, _OFFSET["lse"], lse, "lse", written=True)
    call.header(p)
    call_library(lib, p, call, q, names)
    return out, lse


_workspace_hint = {}  # CUDA device id -> the workspace bytes its last call needed (a first guess)


def _sized_entry(lib):
    """kvattn_fwd_sized (workspace size and run in one validation) where the library has it, else None."""
    fn = getattr(lib, "_kvattn_fwd_sized", False)
    if fn is False:
        fn = getattr(lib, "kvattn_fwd_sized", None)
        if fn is not None:
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.POINTER(_lib.FwdParams), ctypes.POINTER(ctypes.c_size_t)]
        lib._kvattn_fwd_sized = fn
    return fn


def call_library(lib, p, call, like, names):
    """The one call site of the library's forward. The CPU backend needs no workspace: one kvattn_fwd.
    On CUDA, with kvattn_fwd_sized: a workspace of the size the device's last call needed, one call, and a
    second only when that was too small; else kvattn_fwd_workspace_size, then kvattn_fwd."""
    if p.device_type == _lib.DEVICE_CPU:  # _lib.fwd: a long call on the main thread takes Ctrl-C
        check(lib, _lib.fwd(lib, p), names)
        return
    needed = ctypes.c_size_t(0)
    sized = _sized_entry(lib)
    if sized is None:
        check(lib, lib.kvattn_fwd_workspace_size(ctypes.byref(p), ctypes.byref(needed)), names)
        p.workspace = T.workspace(call, like, needed.value)
        p.workspace_bytes = needed.value
        check(lib, lib.kvattn_fwd(ctypes.byref(p)), names)
        return
    guess = _workspace_hint.get(p.device_id, 0)
    p.workspace = T.workspace(call, like, guess)
    p.workspace_bytes = guess
    status = sized(ctypes.byref(p), ctypes.byref(needed))
    if status != _lib.OK and needed.value > guess:  # too small a guess: nothing ran
        _workspace_hint[p.device_id] = needed.value
        p.workspace = T.workspace(call, like, needed.value)
        p.workspace_bytes = needed.value
        status = sized(ctypes.byref(p), ctypes.byref(needed))
    check(lib, status, names)
