"""Normalization of the Python entry points' scalar arguments, by kind (_signature.py), with FA3's rules
(CONTRACT.md, "Layouts and the Python drop-in"): an int is anything operator.index takes, window_size any
length-2 sequence, a bool a bool (a string where a bool belongs is an error).

Each check has a fast path for the common plain value; anything else takes the general, slower path.
Symbolic ints and floats of torch.compile pass as they are (the library checks the values at run time).
"""
import math
import numbers
import operator
import sys

from . import _lib
from . import tensors as T
from .errors import KvattnError

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)

# Per scalar kind (_signature.py), the plain values its check passes unchanged, as a source expression of
# the argument {x} (its default is {d}): the generated eager entry point (torch_ops.fast_prologue) runs the
# op at once when every argument is such a value (a tensor argument: torch.Tensor itself, or None), and
# hands anything else to the general path and these checks. So each entry is a subset of what its check
# accepts as it is.
PLAIN = {
    "int": f"({{x}} is {{d}} or type({{x}}) is int and {I32[0]} <= {{x}} <= {I32[1]})",
    "opt_int": f"({{x}} is None or type({{x}}) is int and {I64[0]} <= {{x}} <= {I64[1]})",
    "float": "type({x}) is float",
    "scale": "({x} is None or type({x}) is float and 0.0 < {x} < _inf)",
    "bool": "({x} is True or {x} is False)",
    "opt_bool": "({x} is None or {x} is True or {x} is False)",
    "window": (f"({{x}} is {{d}} or type({{x}}) is tuple and len({{x}}) == 2 and type({{x}}[0]) is int and "
               f"type({{x}}[1]) is int and {I32[0]} <= {{x}}[0] <= {I32[1]} and {I32[0]} <= {{x}}[1] <= {I32[1]})"),
    "metadata": "({x} is None or _metadata({x!r}, {x}, None) is {x})",
    "alias": "{x} is None",
    "lse_flag": "({x} is True or {x} is False)",
}


def _symbolic(x, kind):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, getattr(torch, kind))


def _bool_like(x):
    """A Python or numpy bool, or a 0-d bool array or tensor: never an int here (operator.index takes numpy's,
    with a DeprecationWarning that an error filter turns into a raw exception)."""
    if isinstance(x, bool):
        return True
    dtype = getattr(x, "dtype", None)
    return dtype is not None and str(dtype) in ("bool", "torch.bool")


def check_int(name, value, bounds=I32):
    """`value` as a Python int in `bounds` (ctypes would truncate silently): a Python or numpy int, a 0-d
    integer array or tensor (anything operator.index takes; not a bool, not a float)."""
    if type(value) is not int:
        if _symbolic(value, "SymInt"):
            return value
        if _bool_like(value) or value is None or isinstance(value, (str, bytes)):
            raise KvattnError(f"{name}: expected an int, got {value!r}")
        try:
            value = operator.index(value)
        except TypeError:
            raise KvattnError(f"{name}: expected an int, got {_show(value)}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise KvattnError(f"{name}: {value} is out of range [{bounds[0]}, {bounds[1]}]")
    return value


def check_opt_int(name, value, bounds=I64):
    return None if value is None else check_int(name, value, bounds)


def check_float(name, value):
    """A real number (Python or numpy int or float, a 0-d real array or tensor) as a float."""
    if type(value) is float:
        return value
    if _symbolic(value, "SymFloat") or _symbolic(value, "SymInt"):
        return value
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or _is_0d_number(value)):
        raise KvattnError(f"{name}: expected a float, got {_show(value)}")
    return float(value)


def check_scale(name, value):
    """softmax_scale: None (the default) or a float > 0. The ABI reads <= 0 as "default", so a caller's 0,
    negative or NaN must not reach it."""
    if value is None:
        return None
    scale = check_float(name, value)
    if not isinstance(scale, float):
        return scale  # symbolic: the library checks it
    if not (scale > 0 and math.isfinite(scale)):
        raise KvattnError(f"{name}: must be a finite float > 0 (None for the default), got {value!r}")
    return scale


def check_bool(name, value):
    """A bool: Python or numpy bool, a 0-d bool array or tensor, or an int 0 / 1. Anything else, a string
    above all (causal="no" must not run causal), is an error."""
    if value is True or value is False:
        return value
    numpy = sys.modules.get("numpy")
    if (type(value) is int or (numpy is not None and isinstance(value, (numpy.bool_, numpy.integer)))) \
            and value in (0, 1):
        return bool(value)
    if _is_0d_number(value) and str(value.dtype).rsplit(".", 1)[-1] == "bool":
        return bool(value)
    raise KvattnError(f"{name}: expected a bool (True or False), got {_show(value)}")


def check_opt_bool(name, value):
    return None if value is None else check_bool(name, value)


def window(window_size, name="window_size"):
    """(left, right) from any length-2 sequence of ints (tuple, list, 1-d array or tensor); None is -1."""
    if type(window_size) is tuple and len(window_size) == 2:
        left, right = window_size
    else:
        if isinstance(window_size, (str, bytes)) or window_size is None:
            raise KvattnError(f"{name}: expected (left, right), got {window_size!r}")
        try:
            left, right = window_size
        except (TypeError, ValueError):
            raise KvattnError(f"{name}: expected (left, right), got {_show(window_size)}") from None
    # None is FlashAttention's newer spelling of -1 (unbounded).
    return (check_int(f"{name}[0]", -1 if left is None else left),
            check_int(f"{name}[1]", -1 if right is None else right))


def seqlens(name, value):
    """cache_seqlens: (tensor or None, int value or -1 (absent: full capacity))."""
    if value is None:
        return None, -1
    if T.is_torch(value):  # the common case first: a (b,) tensor
        return value, -1
    if _symbolic(value, "SymInt"):  # torch.compile's dynamic int: the library checks its value
        return None, value
    if type(value) is int or (not (T.is_torch(value) or T.is_numpy(value)) and _int_like(value)):
        return None, check_int(name, value, (0, I64[1]))
    return value, -1


def metadata(name, value, like):
    """scheduler_metadata: None, or a 1-d int32 array like get_scheduler_metadata's (on q's device). Its
    content is never read (kvattn plans every call from static shapes), so any such array is accepted."""
    if value is None:
        return None
    if not (T.is_torch(value) or T.is_numpy(value)):
        raise KvattnError(f"{name}: expected None or what kvattn.get_scheduler_metadata returned, got "
                          f"{type(value).__name__}")
    shape = T.shape_of(value)
    if len(shape) != 1 or T.dtype_code(value) != _lib.DTYPE_I32:
        raise KvattnError(f"{name}: expected a 1-d int32 array (what kvattn.get_scheduler_metadata returned), "
                          f"got shape {shape} dtype {value.dtype}")
    return value


def alias(name, value, **aliases):
    """The one of `name` and its aliases that is given (giving two of them is an error)."""
    if all(v is None for v in aliases.values()):
        return value
    given = [(n, v) for n, v in [(name, value)] + list(aliases.items()) if v is not None]
    if len(given) > 1:
        raise KvattnError(f"{' and '.join(n for n, _ in given)} are the same argument; give only one")
    return given[0][1]


def lse_shape(q, varlen_q):
    """fp32 lse: (hq, total_q) for varlen q, else (b, hq, sq); None when q's rank is wrong (the library says so)."""
    shape = T.shape_of(q)
    if varlen_q and len(shape) == 3:
        return (shape[1], shape[0])
    if not varlen_q and len(shape) == 4:
        return (shape[0], shape[2], shape[1])
    return None


def _int_like(x):
    if _bool_like(x):
        return False
    try:
        operator.index(x)
        return True
    except TypeError:
        return False


def _is_0d_number(x):
    """A 0-d numpy array or torch tensor (operator.index / float() read its one value)."""
    return (T.is_torch(x) or T.is_numpy(x)) and len(T.shape_of(x)) == 0


def _show(value):
    """A value for a message: short, with its type when the repr does not say it."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return text if isinstance(value, (int, float, str, tuple, list)) else f"{text} ({type(value).__name__})"
