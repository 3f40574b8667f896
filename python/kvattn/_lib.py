"""Loads libkvattn.so and declares its C ABI (include/kvattn/kvattn.h) with ctypes.

The structs here mirror kvattn.h field by field; `load()` checks their sizes against the library's own
(the `struct_size` each *_params_init writes), so a mismatch fails at the first call instead of corrupting
memory. The library is loaded on first use, so `import kvattn` works without it.
"""
import ctypes
import os
import threading

ABI_VERSION = 1
MAX_DIMS = 5

# kvattn_status
OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_UNSUPPORTED = 2
ERROR_DEVICE_INDEX = 3
ERROR_CUDA = 4
ERROR_INTERNAL = 5
ERROR_INTERRUPTED = 6

# kvattn_dtype
DTYPE_NONE, DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_FP8_E4M3, DTYPE_I32, DTYPE_I64 = range(7)

# kvattn_device_type
DEVICE_CPU = 0
DEVICE_CUDA = 1

_enum = ctypes.c_int  # C enums are int-sized on every ABI we build for


class Tensor(ctypes.Structure):
    """kvattn_tensor: a strided view; data == NULL means absent; strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", _enum),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
    ]


def _header():
    return [
        ("struct_size", ctypes.c_uint32),
        ("abi_version", ctypes.c_uint32),
        ("device_type", _enum),
        ("device_id", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


class FwdParams(ctypes.Structure):
    """kvattn_fwd_params."""

    _fields_ = _header() + [
        ("q", Tensor),
        ("k_cache", Tensor),
        ("v_cache", Tensor),
        ("k", Tensor),
        ("v", Tensor),
        ("qv", Tensor),
        ("rotary_cos", Tensor),
        ("rotary_sin", Tensor),
        ("rotary_seqlens", Tensor),
        ("cache_seqlens", Tensor),
        ("cache_seqlens_value", ctypes.c_int64),
        ("cache_batch_idx", Tensor),
        ("cache_leftpad", Tensor),
        ("page_table", Tensor),
        ("cu_seqlens_q", Tensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("seqused_q", Tensor),
        ("cu_seqlens_k_new", Tensor),
        ("cu_seqlens_k", Tensor),
        ("alibi_slopes", Tensor),
        ("sinks", Tensor),
        ("q_descale", Tensor),
        ("k_descale", Tensor),
        ("v_descale", Tensor),
        ("softmax_scale", ctypes.c_double),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("attention_chunk", ctypes.c_int32),
        ("softcap", ctypes.c_double),
        ("rotary_interleaved", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("pack_gqa", ctypes.c_int32),
        ("sm_margin", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("out", Tensor),
        ("lse", Tensor),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("force_portable", ctypes.c_int32),
        ("kv_indptr", Tensor),
        ("kv_indices", Tensor),
    ]


class AppendParams(ctypes.Structure):
    """kvattn_append_params."""

    _fields_ = _header() + [
        ("key", Tensor),
        ("value", Tensor),
        ("k_cache", Tensor),
        ("v_cache", Tensor),
        ("slot_mapping", Tensor),
        ("k_scale", Tensor),
        ("v_scale", Tensor),
    ]


class CombineParams(ctypes.Structure):
    """kvattn_combine_params."""

    _fields_ = _header() + [
        ("out_partials", Tensor),
        ("lse_partials", Tensor),
        ("sinks", Tensor),
        ("out", Tensor),
        ("lse", Tensor),
    ]


# (struct, its *_params_init function) for the size check
_PARAMS = {
    "kvattn_fwd_params": (FwdParams, "kvattn_fwd_params_init"),
    "kvattn_append_params": (AppendParams, "kvattn_append_params_init"),
    "kvattn_combine_params": (CombineParams, "kvattn_combine_params_init"),
}

_status = ctypes.c_int


def _declare(lib):
    p = ctypes.POINTER
    sigs = {
        "kvattn_abi_version": (ctypes.c_int32, []),
        "kvattn_last_error": (ctypes.c_char_p, []),
        "kvattn_has_backend": (ctypes.c_int32, [_enum]),
        "kvattn_fwd_params_init": (None, [ctypes.c_void_p]),
        "kvattn_append_params_init": (None, [ctypes.c_void_p]),
        "kvattn_combine_params_init": (None, [ctypes.c_void_p]),
        "kvattn_check": (_status, [p(FwdParams)]),
        "kvattn_fwd_workspace_size": (_status, [p(FwdParams), p(ctypes.c_size_t)]),
        "kvattn_fwd": (_status, [p(FwdParams)]),
        "kvattn_fwd_sized": (_status, [p(FwdParams), p(ctypes.c_size_t)]),
        "kvattn_append_kv": (_status, [p(AppendParams)]),
        "kvattn_combine": (_status, [p(CombineParams)]),
        "kvattn_device_errors": (_status, [ctypes.c_int32, ctypes.c_void_p]),
        "kvattn_cpu_num_threads": (ctypes.c_int32, []),
        "kvattn_interrupt": (None, []),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def candidates():
    """Where libkvattn.so is looked for, in order: $KVATTN_LIBRARY, next to the package, build/."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = []
    env = os.environ.get("KVATTN_LIBRARY")
    if env:
        paths.append(env)
    paths.append(os.path.join(here, "libkvattn.so"))
    paths.append(os.path.join(here, os.pardir, os.pardir, "build", "libkvattn.so"))  # source checkout
    return paths


def check_struct_sizes(lib):
    """Compare each ctypes struct with the size the library's *_params_init writes into struct_size."""
    for cname, (struct, init) in _PARAMS.items():
        # A buffer larger than ours, so that a library with a larger struct cannot write past it.
        buf = ctypes.create_string_buffer(ctypes.sizeof(struct) + 4096)
        getattr(lib, init)(buf)
        lib_size = ctypes.c_uint32.from_buffer(buf).value
        if lib_size != ctypes.sizeof(struct):
            raise ImportError(
                f"kvattn: {cname} is {lib_size} bytes in the library but {ctypes.sizeof(struct)} in the "
                "Python binding: the package and libkvattn.so are from different versions")


_lock = threading.Lock()
_lib = None


def load():
    """The loaded, checked library (loaded once per process)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            path = os.path.normpath(path)
            if not os.path.exists(path):
                tried.append(f"{path} (missing)")
                continue
            lib = ctypes.CDLL(path)
            _declare(lib)
            if lib.kvattn_abi_version() != ABI_VERSION:
                raise ImportError(f"kvattn: {path} has ABI version {lib.kvattn_abi_version()}, "
                                  f"the binding expects {ABI_VERSION}")
            check_struct_sizes(lib)
            _lib = lib
            return lib
        raise ImportError("kvattn: libkvattn.so not found; set KVATTN_LIBRARY or install the package "
                          "(pip install .). Tried: " + "; ".join(tried))


_fwd_template = None


def new_fwd_params():
    """A kvattn_fwd_params as kvattn_fwd_params_init makes it: a copy of one made once (cheaper per call)."""
    global _fwd_template
    if _fwd_template is None:
        template = FwdParams()
        load().kvattn_fwd_params_init(ctypes.byref(template))
        _fwd_template = bytes(template)
    return FwdParams.from_buffer_copy(_fwd_template)


# A CPU call with more (query row, key) pairs than this runs on a helper thread while the calling (main)
# thread waits, so that Ctrl-C reaches Python during it; about 5 ms of work, so the thread's ~50 us is noise.
INTERRUPTIBLE_PAIRS = 1 << 20


def _cpu_pairs(p):
    """An upper bound of the (query row, key) pairs of a CPU kvattn_fwd: q's rows times a row's cache slots."""
    q, k = p.q, p.k_cache
    if q.ndim < 3 or k.ndim < 3:
        return 0
    rows = 1
    for i in range(q.ndim - 1):
        rows *= q.shape[i]
    slots = k.shape[0] if k.ndim == 3 else k.shape[0] * k.shape[1]  # packed, or (rows|pages) x slots
    if p.page_table.data and p.page_table.ndim == 2:
        slots = min(slots, p.page_table.shape[1] * k.shape[1])
    elif k.ndim == 4 and q.ndim == 4:
        slots = k.shape[1]
    return rows * slots


def fwd(lib, p):
    """kvattn_fwd(p), its status; the message of a failure is this thread's kvattn_last_error().

    A long CPU call on the main thread runs on a helper thread instead: the main thread waits where Python
    can take Ctrl-C (the call releases the GIL), and on KeyboardInterrupt (or any exception) asks the
    library to stop (kvattn_interrupt; it does within about a millisecond), waits for it, and re-raises."""
    ref = ctypes.byref(p)
    if (p.device_type != DEVICE_CPU or threading.current_thread() is not threading.main_thread()
            or _cpu_pairs(p) < INTERRUPTIBLE_PAIRS):
        return lib.kvattn_fwd(ref)
    status = lib.kvattn_check(ref)  # validation here, so that its message is this thread's
    if status != OK:
        return status
    result = {}

    def call():
        result["status"] = lib.kvattn_fwd(ref)
        if result["status"] != OK:
            result["message"] = lib.kvattn_last_error()

    helper = threading.Thread(target=call, name="kvattn-cpu-call", daemon=True)
    helper.start()
    try:
        helper.join()
    except BaseException:
        lib.kvattn_interrupt()
        helper.join()
        raise
    if result["status"] != OK:
        from .errors import KvattnError
        message = (result.get("message") or b"").decode("utf-8", "replace")
        raise KvattnError(message or f"kvattn status {result['status']}", result["status"])
    return OK
