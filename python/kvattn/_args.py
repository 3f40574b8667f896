"""Checks of the Python entry points' scalar arguments, shared by interface.py and torch_ops.py.

Each has a fast path for the common plain int/float/None; anything else takes the general (slower) path.
"""
import numbers

from . import tensors as T
from .errors import KvattnError

I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)


def check_int(name, value, bounds=I32):
    """`value` as a Python int in `bounds` (ctypes would truncate silently)."""
    if type(value) is not int:  # bool is not int here; numpy ints and the like take the general path
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise KvattnError(f"{name}: expected an int, got {value!r}")
        value = int(value)
    if not bounds[0] <= value <= bounds[1]:
        raise KvattnError(f"{name}: {value} is out of range [{bounds[0]}, {bounds[1]}]")
    return value


def check_float(name, value):
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise KvattnError(f"{name}: expected a float, got {value!r}")
    return float(value)


def alias(name, value, **aliases):
    """The one of `name` and its aliases that is given (giving two of them is an error)."""
    if all(v is None for v in aliases.values()):
        return value
    given = [(n, v) for n, v in [(name, value)] + list(aliases.items()) if v is not None]
    if len(given) > 1:
        raise KvattnError(f"{' and '.join(n for n, _ in given)} are the same argument; give only one")
    return given[0][1]


def window(window_size):
    if type(window_size) is tuple and len(window_size) == 2:
        left, right = window_size
    else:
        try:
            left, right = window_size
        except (TypeError, ValueError):
            raise KvattnError(f"window_size: expected (left, right), got {window_size!r}") from None
    # None is FlashAttention's newer spelling of -1 (unbounded).
    return (check_int("window_size[0]", -1 if left is None else left),
            check_int("window_size[1]", -1 if right is None else right))


def lse_shape(q, varlen_q):
    """fp32 lse: (hq, total_q) for varlen q, else (b, hq, sq); None when q's rank is wrong (the library says so)."""
    shape = T.shape_of(q)
    if varlen_q and len(shape) == 3:
        return (shape[1], shape[0])
    if not varlen_q and len(shape) == 4:
        return (shape[0], shape[2], shape[1])
    return None
