"""kvattn_tensor descriptors from numpy arrays and torch tensors, and outputs allocated like the inputs.

Neither numpy nor torch is imported here unless the caller already passed one of its arrays (torch) or the
call needs it (numpy); the package itself imports neither.
"""
import ctypes
import struct
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


# Per-call lookups, filled as types and dtypes are first seen (a handful of entries).
_KINDS = {}  # array type -> "torch" or "numpy"
_NUMPY_CODES = {}  # numpy dtype -> kvattn_dtype or None
_TORCH_CODES = {}  # torch dtype -> kvattn_dtype or None
_ELEMENT_STRIDES = {}  # (numpy byte strides, dtype) -> strides in elements (a bounded memo)
_CPU = (_lib.DEVICE_CPU, 0)


# kvattn_tensor's bytes for each rank: data, dtype, ndim, shape[:ndim], (the rest of shape), strides[:ndim]. One
# pack_into writes a descriptor (shape and strides beyond ndim stay as they are: zero in a new struct).
_TENSOR_LAYOUTS = [struct.Struct(f"@Pii{n}q{8 * (_lib.MAX_DIMS - n)}x{n}q") for n in range(_lib.MAX_DIMS + 1)]
assert all(_lib.Tensor.strides.offset == _lib.Tensor.shape.offset + 8 * _lib.MAX_DIMS
           and layout.size == _lib.Tensor.strides.offset + 8 * n for n, layout in enumerate(_TENSOR_LAYOUTS))


def _kind(x):
    """"torch", "numpy" or None (anything else) for an array argument."""
    kind = _KINDS.get(type(x))
    if kind is None:
        kind = "torch" if is_torch(x) else "numpy" if is_numpy(x) else None
        if kind is not None:
            _KINDS[type(x)] = kind
    return kind


def _describe_numpy(x, name):
    dtype = x.dtype
    try:
        code = _NUMPY_CODES[dtype]
    except KeyError:
        code = _NUMPY_CODES[dtype] = _NUMPY_DTYPES.get(dtype.name) if dtype.isnative else None
    byte_strides = x.strides
    try:
        strides = _ELEMENT_STRIDES[byte_strides, dtype]
    except KeyError:
        itemsize = dtype.itemsize
        if code is not None and any(s % itemsize for s in byte_strides):
            raise KvattnError(f"{name}: strides {byte_strides} (bytes) are not a multiple of the element size "
                              f"{itemsize}") from None
        strides = tuple(s // itemsize for s in byte_strides)
        if len(_ELEMENT_STRIDES) < 4096:
            _ELEMENT_STRIDES[byte_strides, dtype] = strides
    flags = x.flags
    if flags.c_contiguous and flags.writeable and dtype.isbuiltin == 1 and x.nbytes:  # 3x cheaper than below
        return ctypes.addressof(ctypes.c_char.from_buffer(x)), code, x.shape, strides, _CPU
    return x.__array_interface__["data"][0], code, x.shape, strides, _CPU


def _dtype_label(x):
    """x's dtype as messages name it."""
    if is_torch(x):
        return str(x.dtype)
    dtype = x.dtype
    return dtype.name if dtype.isnative else f"{dtype.str} (non-native byte order)"


def _describe_torch(x, name):
    dtype = x.dtype
    try:
        code = _TORCH_CODES[dtype]
    except KeyError:
        code = _TORCH_CODES[dtype] = _TORCH_DTYPES.get(str(dtype))
    if x.is_cuda:
        device = (_lib.DEVICE_CUDA, x.get_device())
    elif x.is_cpu:
        device = _CPU
    else:
        raise KvattnError(f"{name}: device {x.device} is not supported (cpu or cuda)")
    # What the memory does not say: a lazy negation or conjugation (torch resolves them in its ops; a
    # pointer to the memory would read, or write, the values without it), and a layout other than strided.
    if x.is_neg() or x.is_conj():
        raise KvattnError(f"{name}: is a lazily {'negated' if x.is_neg() else 'conjugated'} view; pass "
                          f"{'.resolve_neg()' if x.is_neg() else '.resolve_conj()'} (or call with torch tensors "
                          "throughout, as q)")
    if x.layout != sys.modules["torch"].strided:
        raise KvattnError(f"{name}: layout {x.layout} is not supported (torch.strided)")
    return x.data_ptr(), code, tuple(x.shape), x.stride(), device


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


# The index arguments (int32, or int64 where said); every other array holds floating-point values.
_INDEX_DTYPES = {"slot_mapping": "int64 or int32"}
_INDEX_NAMES = ("cache_seqlens", "seqused_k", "cache_batch_idx", "cache_leftpad", "page_table", "block_table",
                "cu_seqlens_q", "cu_seqlens_k", "cu_seqlens_k_new", "seqused_q", "rotary_seqlens",
                "scheduler_metadata", "kv_indptr", "kv_indices")


def allowed_dtypes(name):
    """The dtypes argument `name` may have, for messages (the library checks the exact rule)."""
    if name in _INDEX_DTYPES:
        return _INDEX_DTYPES[name]
    if name in _INDEX_NAMES:
        return "int32"
    if name in ("q", "k_cache", "v_cache", "k", "v", "qv", "key", "value", "key_cache", "value_cache", "out"):
        return "float16, bfloat16, float8_e4m3fn; float32 on the CPU backend"
    return "float32, float16, bfloat16"


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
        self.fill(t, x, name, required, written)
        return t

    def set(self, params, field, x, required=False, written=False):
        """`params.<field> = self.tensor(x, field, ...)`, written in place (a new params struct is zeroed, so None
        leaves the field absent)."""
        if x is not None or required:
            self.fill_at(params, getattr(type(params), field).offset, x, field, required, written)

    def fill(self, t, x, name, required=False, written=False):
        """Write the descriptor of `x` into the kvattn_tensor `t` (a zeroed one: None leaves it absent)."""
        self.fill_at(t, 0, x, name, required, written)

    def fill_at(self, params, offset, x, name, required=False, written=False):
        """Write the descriptor of `x` into the kvattn_tensor at byte `offset` of the struct `params`."""
        if x is None:
            if required:
                raise KvattnError(f"{name} is required")
            return
        kind = _kind(x)
        if kind == "torch":
            ptr, code, shape, strides, device = _describe_torch(x, name)
        elif kind == "numpy":
            ptr, code, shape, strides, device = _describe_numpy(x, name)
            if written and not x.flags.writeable:
                raise KvattnError(f"{name}: the array is read-only, and kvattn writes into it")
        else:
            raise KvattnError(f"{name}: expected a numpy array or a torch tensor, got {type(x).__name__}")
        if code is None:
            raise KvattnError(f"{name}: dtype {_dtype_label(x)} is not supported ({allowed_dtypes(name)})")
        ndim = len(shape)
        if ndim > _lib.MAX_DIMS:
            raise KvattnError(f"{name}: {ndim} dims, at most {_lib.MAX_DIMS} are supported")
        if self.device is None:
            self.device, self.device_from = device, name
        elif device != self.device:
            raise KvattnError(f"{name} is on {device_name(device)} but {self.device_from} is on "
                              f"{device_name(self.device)}")
        if not ptr:
            ptr = ctypes.addressof(_EMPTY)  # zero elements: present, never dereferenced
        if 0 in shape or (ndim and shape[-1] == 1):
            strides = _canonical_strides(shape, strides)
        _TENSOR_LAYOUTS[ndim].pack_into(params, offset, ptr, code, ndim, *shape, *strides)

    def keep_array(self, x):
        """`x`, kept alive as long as the call."""
        self.keep.append(x)
        return x

    def header(self, params):
        """Set device_type, device_id and stream (torch's current stream on CUDA) of a params struct."""
        kind, index = self.device if self.device is not None else (_lib.DEVICE_CPU, 0)
        params.device_type = kind
        params.device_id = index
        params.stream = _current_raw_stream(index) if kind == _lib.DEVICE_CUDA else None


def cuda_stream(device_id):
    """The cudaStream_t of torch's current stream on `device_id` (NULL, the default stream, without torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return torch.cuda.current_stream(device_id).cuda_stream or None


def _current_raw_stream(device_id):
    """cuda_stream() for a call with a CUDA tensor (so torch's CUDA is initialized): torch's
    _cuda_getCurrentRawStream (what inductor's code uses), the same stream without building a Stream object."""
    raw = getattr(sys.modules["torch"]._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return cuda_stream(device_id)
    return raw(device_id) or None


_DTYPE_CODES = {}  # dtype_code's results by dtype object


def dtype_code(x):
    """The kvattn_dtype of an array or tensor (None if unsupported)."""
    dtype = x.dtype
    try:
        return _DTYPE_CODES[dtype]
    except KeyError:
        code = _DTYPE_CODES[dtype] = dtype_code_of(dtype)
        return code


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
    return getattr(sys.modules["torch"], _DTYPE_NAMES[code])


def empty(like, shape, code):
    """An uninitialized array of `shape` and kvattn dtype `code`, from the array library and device of `like`."""
    if is_torch(like):
        return like.new_empty(shape, dtype=_torch_dtype(code))  # faster than torch.empty(..., device=)
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
        buf = like.new_empty((nbytes + alignment,), dtype=torch.uint8)
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


def data_address(x):
    """The address of x's first element."""
    if is_torch(x):
        return x.data_ptr() or ctypes.addressof(_EMPTY)
    return x.__array_interface__["data"][0] or ctypes.addressof(_EMPTY)


def describe_at(params, offset, ptr, code, shape):
    """A contiguous kvattn_tensor of `shape` at `ptr` written at byte `offset` of `params` (a descriptor with
    no array of its own: the library validates and sizes it without reading it)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    _TENSOR_LAYOUTS[len(shape)].pack_into(params, offset, ptr, code, len(shape), *shape, *reversed(strides))


def index_steps(like, shape, step):
    """An int32 array of `shape` on the device of `like`: 0, step, 2 step, ... along its last dim (zeros for
    step 0). Made by a device kernel, no host-to-device copy."""
    n = shape[-1]
    if is_torch(like):
        torch = sys.modules["torch"]
        if step == 0:
            return torch.zeros(shape, dtype=torch.int32, device=like.device)
        return torch.arange(0, n * step, step, dtype=torch.int32, device=like.device).expand(shape).contiguous()
    numpy = _numpy()
    return numpy.broadcast_to(numpy.arange(n, dtype=numpy.int32) * step, shape).copy()


def int32_record(like, values):
    """A 1-d int32 array of `values` on the device of `like`, made by device fills (no host-to-device copy,
    so it can be made while a CUDA graph is captured)."""
    if is_torch(like):
        torch = sys.modules["torch"]
        record = torch.empty((len(values),), dtype=torch.int32, device=like.device)
        for i, value in enumerate(values):
            record[i].fill_(value)
        return record
    return _numpy().array(values, dtype=_numpy().int32)
