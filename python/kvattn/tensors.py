"""kvattn_tensor descriptors from numpy arrays and torch tensors, and outputs allocated like the inputs.

Neither numpy nor torch is imported here unless the caller already passed one of its arrays (torch) or the
call needs it (numpy); the package itself imports neither.
"""
import ctypes
import sys

from . import _lib
from .errors import KvattnError

# kvattn_dtype by numpy dtype name (ml_dtypes adds bfloat16 and float8_e4m3fn to numpy under these names)
_NUMPY_DTYPES = {
    "float32": _lib.DTYPE_F32,
    "float16": _lib.DTYPE_F16,
    "bfloat16": _lib.DTYPE_BF16,
    "float8_e4m3fn": _lib.DTYPE_FP8_E4M3,
    "int32": _lib.DTYPE_I32,
    "int64": _lib.DTYPE_I64,
}
_TORCH_DTYPES = {"torch." + name: code for name, code in _NUMPY_DTYPES.items()}
_DTYPE_NAMES = {code: name for name, code in _NUMPY_DTYPES.items()}

# Where a zero-element tensor whose library gives it no address points, so that it is not "absent".
# Nothing is ever read or written through it.
_EMPTY = ctypes.c_int64(0)


def _numpy():
    import numpy

    return numpy


def is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x):
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, numpy.ndarray)


def _describe_numpy(x, name):
    code = _NUMPY_DTYPES.get(x.dtype.name) if x.dtype.isnative else None
    itemsize = x.dtype.itemsize
    if code is not None and any(s % itemsize for s in x.strides):
        raise KvattnError(f"{name}: strides {x.strides} (bytes) are not a multiple of the element size {itemsize}")
    strides = tuple(s // itemsize for s in x.strides)
    dtype_name = x.dtype.name if x.dtype.isnative else f"{x.dtype.str} (non-native byte order)"
    return x.ctypes.data, code, dtype_name, tuple(x.shape), strides, (_lib.DEVICE_CPU, 0)


def _describe_torch(x, name):
    code = _TORCH_DTYPES.get(str(x.dtype))
    if x.device.type == "cuda":
        device = (_lib.DEVICE_CUDA, x.device.index if x.device.index is not None else 0)
    elif x.device.type == "cpu":
        device = (_lib.DEVICE_CPU, 0)
    else:
        raise KvattnError(f"{name}: device {x.device} is not supported (cpu or cuda)")
    return x.data_ptr(), code, str(x.dtype), tuple(x.shape), tuple(x.stride()), device


def _canonical_strides(shape, strides):
    """Strides that address no element are free (numpy gives a zero-size array all-0 strides, torch gives size-1
    dims any stride): make them the contiguous ones, so the library's stride checks see what matters."""
    if 0 in shape:
        out, step = [], 1
        for n in reversed(shape):
            out.append(step)
            step *= max(n, 1)
        return tuple(reversed(out))
    if shape and shape[-1] == 1:
        return strides[:-1] + (1,)
    return strides


def device_name(device):
    kind, index = device
    return "cpu" if kind == _lib.DEVICE_CPU else f"cuda:{index}"


class Call:
    """Builds the descriptors of one library call: all tensors on one device, their owners kept alive."""

    def __init__(self):
        self.device = None  # (kvattn_device_type, device_id), from the first tensor given
        self.device_from = None  # the name of that tensor
        self.keep = []  # arrays made here (widened copies, workspace) live as long as the call

    def tensor(self, x, name, required=False, written=False):
        """A kvattn_tensor for `x` (None -> absent, or an error naming `name` when required).

        `written`: the library writes into `x`, so a read-only numpy array is an error."""
        t = _lib.Tensor()
        if x is None:
            if required:
                raise KvattnError(f"{name} is required")
            return t
        if is_torch(x):
            ptr, code, dtype_name, shape, strides, device = _describe_torch(x, name)
        elif is_numpy(x):
            ptr, code, dtype_name, shape, strides, device = _describe_numpy(x, name)
            if written and not x.flags.writeable:
                raise KvattnError(f"{name}: the array is read-only, and kvattn writes into it")
        else:
            raise KvattnError(f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}")
        if code is None:
            raise KvattnError(f"{name}: dtype {dtype_name} is not supported "
                              "(float32, float16, bfloat16, float8_e4m3fn, int32, int64)")
        if len(shape) > _lib.MAX_DIMS:
            raise KvattnError(f"{name}: {len(shape)} dims, at most {_lib.MAX_DIMS} are supported")
        if self.device is None:
            self.device, self.device_from = device, name
        elif device != self.device:
            raise KvattnError(f"{name} is on {device_name(device)} but {self.device_from} is on "
                              f"{device_name(self.device)}")
        if not ptr:
            ptr = ctypes.addressof(_EMPTY)  # zero elements: present, never dereferenced
        strides = _canonical_strides(shape, strides)
        t.data = ptr
        t.dtype = code
        t.ndim = len(shape)
        for i, (n, s) in enumerate(zip(shape, strides)):
            t.shape[i] = n
            t.strides[i] = s
        return t

    def header(self, params):
        """Set device_type, device_id and stream (torch's current stream on CUDA) of a params struct."""
        kind, index = self.device if self.device is not None else (_lib.DEVICE_CPU, 0)
        params.device_type = kind
        params.device_id = index
        params.stream = cuda_stream(index) if kind == _lib.DEVICE_CUDA else None


def cuda_stream(device_id):
    """The cudaStream_t of torch's current stream on `device_id` (NULL, the default stream, without torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return torch.cuda.current_stream(device_id).cuda_stream or None


def dtype_code(x):
    """The kvattn_dtype of an array or tensor (None if unsupported)."""
    return dtype_code_of(x.dtype)


def dtype_code_of(dtype):
    """The kvattn_dtype of a torch dtype, a numpy dtype or type, or a name like "bfloat16" (None if unsupported)."""
    name = str(dtype)
    if name.startswith("torch."):
        return _TORCH_DTYPES.get(name)
    if not isinstance(dtype, str):
        try:
            name = _numpy().dtype(dtype).name
        except TypeError:
            return None
    return _NUMPY_DTYPES.get(name)


def _numpy_dtype(code):
    if code in (_lib.DTYPE_BF16, _lib.DTYPE_FP8_E4M3):
        import ml_dtypes

        return ml_dtypes.bfloat16 if code == _lib.DTYPE_BF16 else ml_dtypes.float8_e4m3fn
    return _numpy().dtype(_DTYPE_NAMES[code])


def _torch_dtype(code):
    torch = sys.modules["torch"]
    return getattr(torch, _DTYPE_NAMES[code])


def empty(like, shape, code):
    """An uninitialized array of `shape` and kvattn dtype `code`, from the array library and device of `like`."""
    if is_torch(like):
        return sys.modules["torch"].empty(shape, dtype=_torch_dtype(code), device=like.device)
    return _numpy().empty(shape, dtype=_numpy_dtype(code))


def scalar_f32(like, value):
    """A 0-d float32 array holding `value`, like `like`."""
    if is_torch(like):
        return sys.modules["torch"].full((), float(value), dtype=sys.modules["torch"].float32, device=like.device)
    return _numpy().array(value, dtype=_numpy().float32)


def to_float32(x):
    """A float32 copy of a float16/bfloat16 array or tensor; any other array is returned as it is."""
    if dtype_code(x) not in (_lib.DTYPE_F16, _lib.DTYPE_BF16):
        return x
    if is_torch(x):
        return x.float()
    return x.astype(_numpy().float32)


def shape_of(x):
    return tuple(x.shape)


def transpose_last2(x):
    """A view of `x` with its last two dims swapped (no copy)."""
    if is_torch(x):
        return x.transpose(-1, -2)
    return _numpy().swapaxes(x, -1, -2)


def workspace(call, like, nbytes, alignment=256):
    """A device buffer of `nbytes` on the device of `like`, aligned to `alignment`; returns its address."""
    if nbytes == 0:
        return None
    if is_torch(like):
        torch = sys.modules["torch"]
        buf = torch.empty((nbytes + alignment,), dtype=torch.uint8, device=like.device)
        ptr = buf.data_ptr()
    else:
        buf = _numpy().empty((nbytes + alignment,), dtype=_numpy().uint8)
        ptr = buf.ctypes.data
    call.keep.append(buf)
    return ptr + (-ptr) % alignment


def permute(x, axes):
    """A view of `x` with its dims in the order `axes` (no copy)."""
    if is_torch(x):
        return x.permute(*axes)
    return _numpy().transpose(x, axes)


def strides_of(x):
    """Strides in elements."""
    if is_torch(x):
        return tuple(x.stride())
    return tuple(s // x.dtype.itemsize for s in x.strides)


def order_by_stride(x):
    """x's dims from the largest stride to the smallest (ties keep their order): its memory order."""
    strides = strides_of(x)
    return sorted(range(len(strides)), key=lambda i: -strides[i])


def empty_in_order(like, shape, order, code):
    """An uninitialized array of `shape` whose memory holds its dims in the order `order` (outermost first)."""
    store = empty(like, tuple(shape[i] for i in order), code)
    inverse = sorted(range(len(order)), key=lambda i: order[i])
    return permute(store, inverse)
