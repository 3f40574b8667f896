"""FlashAttention-3's module name, resolved to kvattn: FA3's own tests (hopper/test_flash_attn.py) import
their functions from here and so run against kvattn unmodified (tools/fa3_tests.sh)."""
from kvattn import (  # noqa: F401
    flash_attn_combine,
    flash_attn_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
    get_scheduler_metadata,
)

__all__ = ["flash_attn_combine", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "get_scheduler_metadata"]
