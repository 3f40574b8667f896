"""Lay out the FlashAttention-4 tree of the peer kit: flash_attn.cute, quack and the CuTe DSL (its compiler
is a Python extension; FA4 compiles each kernel at its first call), unpacked from their wheels as pip
--target would, minus what the GPU machine never loads.

    python3 fa4_stage.py DEST WHEEL...

apache-tvm-ffi is not here: it ships in the FlashInfer archive, which bench/peerkit.py puts on sys.path first.
"""
import os
import shutil
import sys
import zipfile

# Paths (relative to the unpacked tree) that the x86-64 Linux import and compile path never touches.
DROP = [
    "nvidia_cutlass_dsl/cu13/lib/stubs",  # empty-body runtime stubs for aarch64 / QNX cross builds
    # In-kernel event tracing tool (profiler, CLI, its own .so files): loaded only when a compile asks for
    # it; cutlass.cute.experimental imports it under try/except and stands a stub in.
    "nvidia_cutlass_dsl/dsl_packages/iket",
    "build_backend.py",
]


def main(dest, wheels):
    os.makedirs(dest, exist_ok=True)
    for w in wheels:
        with zipfile.ZipFile(w) as z:
            for info in z.infolist():
                name = info.filename
                if name.endswith("/"):
                    continue
                if any(name == d or name.startswith(d + "/") for d in DROP):
                    continue
                path = z.extract(info, dest)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(path, mode)
    for d in DROP:
        p = os.path.join(dest, d)
        if os.path.isdir(p):
            shutil.rmtree(p)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
