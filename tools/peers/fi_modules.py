"""Compile, on a machine without a GPU, the FlashInfer kernels that the kvattn bench's `flashinfer` peer runs.

FlashInfer builds each kernel family as a JIT module (nvcc through ninja) the first time a wrapper plans it.
The GPU machine has no time for that inside a benchmark call, so the modules are built here for sm_90a only
and shipped as AOT artifacts (flashinfer/data/aot/<uri>/<uri>.so, looked up before any JIT build).

    python fi_modules.py GROUP...   # groups: see MODULES; prints "MODULE <uri> <path of the .so>" per module

Environment: PYTHONPATH = an unpacked flashinfer wheel + apache-tvm-ffi for this Python;
FLASHINFER_WORKSPACE_BASE = where the build goes; FLASHINFER_JIT_PREBUILD_MAX_JOBS = parallel nvcc jobs.
"""
import os
import sys

os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"  # H200 only
# FLASHINFER_JIT_VERBOSE=1 would also turn on a -G debug build: keep the release build, print with KIT_VERBOSE.
os.environ["FLASHINFER_JIT_DEBUG"] = "0"
os.environ.pop("FLASHINFER_JIT_VERBOSE", None)

import torch  # noqa: E402  (FlashInfer's JIT layer keys its dtype tables on torch dtypes)
from flashinfer.jit.attention import modules as M  # noqa: E402
from flashinfer.jit.core import build_jit_specs  # noqa: E402

# Arguments shared by every module the bench needs: (q, kv, o, index dtypes, head dims, no positional
# encoding, no sliding window, no logits soft cap). The K/V dtype is q's unless given (an fp8 cache).
def _args(dtype, d, kv_dtype=None):
    return (dtype, kv_dtype or dtype, dtype, torch.int32, d, d, 0, False, False)


# group -> [(kind, dtype, head dim[, K/V dtype])]; kind "fa2" is the module that BatchDecodeWithPagedKVCacheWrapper
# (use_tensor_cores=True) and the FA2 prefill backend load; "fa3" the Hopper prefill backend.
MODULES = {
    "fa2": [("fa2", torch.bfloat16, 128)],            # decode W1 W2 W4(q1)
    "fa3": [("fa3", torch.bfloat16, 128)],            # prefill W3 W4 W6 d128
    "fa2_fp16": [("fa2", torch.float16, 128)],        # the W1 fp16 cases
    "fa2_fp8kv": [("fa2", torch.bfloat16, 128, torch.float8_e4m3fn)],  # decode W1 W2 fp8kv: bf16 q, e4m3 K/V
    "fa3_d64": [("fa3", torch.bfloat16, 64)],         # W6 d64
    "fa3_d256": [("fa3", torch.bfloat16, 256)],       # W6 d256
}


def spec_of(kind, dtype, d, kv_dtype=None):
    if kind == "fa2":  # equal K/V strides (one cache tensor per K and V, as the bench passes them)
        return M._gen_batch_prefill_primary_module("fa2", *_args(dtype, d, kv_dtype), False)
    return M.gen_batch_prefill_module("fa3", *_args(dtype, d, kv_dtype), False)


def main(groups):
    unknown = [g for g in groups if g not in MODULES]
    if unknown or not groups:
        raise SystemExit(f"fi_modules.py: groups expected from {sorted(MODULES)}, got {groups}")
    for g in groups:  # one group at a time: a finished group is usable even if a later one is cut short
        specs = [spec_of(*m) for m in MODULES[g]]
        build_jit_specs(specs, verbose=os.environ.get("KIT_VERBOSE") == "1", skip_prebuilt=False)
        for s in specs:
            print("MODULE", s.name, s.jit_library_path, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
