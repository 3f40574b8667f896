"""Lay out the trimmed FlashInfer tree of the peer kit: the Python package without the subsystems that
paged decode / prefill never import, the kernel sources and headers that the bench's modules are built from
(so the build here runs from this very tree), and an __init__ that exposes only the attention wrappers.

    python3 fi_stage.py UNPACKED_WHEEL DEST
"""
import os
import shutil
import sys

# Subpackages of flashinfer/ that the paged attention wrappers never import (MoE, GEMM, communication,
# linear-attention families, ...). Their .py files are left out; `data` is handled separately below.
SKIP_PACKAGES = {"experimental", "fused_moe", "moe_ep", "comm", "gdn_kernels", "kda_kernels", "prims_ts",
                 "msa_ops", "topk_varlen", "diffusion_ops", "mamba", "norm", "gemm", "attn_scores",
                 "attention", "triton", "cute_dsl", "b12x", "data"}
# ...except these files, imported by flashinfer.utils and the JIT layer.
KEEP_FILES = {"cute_dsl/__init__.py", "cute_dsl/availability.py"}
# Kernel sources of the batch prefill family (the FA2 module that decode with tensor cores uses, and FA3).
CSRC_PREFIXES = ("batch_prefill",)
CSRC_HEADERS = (".h",)
# Header trees on the nvcc include path of FlashInfer's JIT (flashinfer.jit.cpp_ext).
INCLUDE_TREES = ["include", "cutlass/include", "cutlass/tools/util/include", "spdlog/include",
                 "cccl/libcudacxx/include", "cccl/cub/cub", "cccl/thrust/thrust"]

INIT = '''"""FlashInfer, trimmed for the kvattn benchmark's peer kit: only the paged attention wrappers."""
from .version import __version__, __git_commit__  # noqa: F401
from . import jit  # noqa: F401
from .decode import BatchDecodeWithPagedKVCacheWrapper  # noqa: F401
from .prefill import BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper  # noqa: F401
'''


def main(wheel_dir, dest):
    src = os.path.join(wheel_dir, "flashinfer")
    out = os.path.join(dest, "flashinfer")
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        top = rel.split(os.sep)[0]
        for f in files:
            r = f if rel == "." else os.path.join(rel, f)
            if not f.endswith(".py") or (top in SKIP_PACKAGES and r not in KEEP_FILES):
                continue
            os.makedirs(os.path.join(out, rel), exist_ok=True)
            shutil.copy2(os.path.join(root, f), os.path.join(out, r))
    with open(os.path.join(out, "__init__.py"), "w") as f:
        f.write(INIT)
    csrc = os.path.join(src, "data", "csrc")
    os.makedirs(os.path.join(out, "data", "csrc"), exist_ok=True)
    for f in os.listdir(csrc):
        if f.startswith(CSRC_PREFIXES) or f.endswith(CSRC_HEADERS):
            shutil.copy2(os.path.join(csrc, f), os.path.join(out, "data", "csrc", f))
    for t in INCLUDE_TREES:
        shutil.copytree(os.path.join(src, "data", t), os.path.join(out, "data", t), dirs_exist_ok=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
