"""kvattn: attention over a KV cache (CONTRACT.md), a FlashAttention-3 drop-in over a C library.

Pure Python over libkvattn.so through ctypes; works with numpy arrays (CPU) and torch tensors (CPU, CUDA).
Neither numpy nor torch is needed to import it, and the library is loaded on first use.
"""
from .errors import KvattnError
from .interface import (
    append_kv,
    device_errors,
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
    get_scheduler_metadata,
    has_backend,
)

__version__ = "0.1.0"

__all__ = [
    "KvattnError",
    "append_kv",
    "device_errors",
    "flash_attn_combine",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "get_scheduler_metadata",
    "has_backend",
]
