"""Builds libkvattn.so with CMake and installs it inside the kvattn package (`pip install .`).

The package is pure Python over the library's C ABI (ctypes), so one wheel serves every Python version:
it is tagged py3-none-<platform>. Environment:
  KVATTN_CUDA=1          build the CUDA backend (-DKVATTN_CUDA=ON; fails without nvcc); =0 never.
                         Unset: built when nvcc is found AND a GPU is visible (nvidia-smi lists one), since
                         compiling every kernel takes many minutes; a build machine without a GPU that
                         makes wheels for GPU machines sets KVATTN_CUDA=1.
  KVATTN_CUDA_ARCHS      passed as -DKVATTN_CUDA_ARCHS (default "80;90a")
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: the number of cores)
  KVATTN_TORCH_OP=0      do not build the optional torch op (built when torch >= 2.10 is importable here)
pip shows a build's output with -v: `pip install -v .` prints each compile step as it starts ("[ 40%]
Building CUDA object ...") and a line per stage from here. The GoogleTest suite is not built. The wheel
also holds the benchmark driver (bench/ as kvattn.bench, with the float64 oracle of the tests) for the
`kvattn-bench` command. Machines without network access: pip install --no-build-isolation .
"""
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def _gpu_visible():
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def _cuda_option():
    """(CMake's KVATTN_CUDA value, why)."""
    value = os.environ.get("KVATTN_CUDA", "").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "OFF", "KVATTN_CUDA=0"
    if value in ("1", "on", "true", "yes"):
        return "ON", "KVATTN_CUDA=1"
    if not (shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")):
        return "OFF", "no nvcc found (KVATTN_CUDA=1 requires it)"
    if not _gpu_visible():
        return "OFF", "nvcc found but no GPU visible; KVATTN_CUDA=1 builds it anyway (many minutes)"
    return "ON", "nvcc found and a GPU visible (KVATTN_CUDA=0 to skip)"


def _say(message):
    print(f"kvattn setup: {message}", flush=True)


class BuildPyWithLibrary(build_py):
    """build_py, then the CMake build of libkvattn.so, copied into the built package."""

    def run(self):
        super().run()
        build_dir = os.path.join(os.path.abspath(self.get_finalized_command("build").build_temp), "cmake")
        cuda, why = _cuda_option()
        _say(f"CUDA backend {cuda}: {why}")
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DKVATTN_CUDA={cuda}", "-DKVATTN_BUILD_TESTS=OFF"]
        if cuda == "ON" and not shutil.which("nvcc") and os.path.exists("/usr/local/cuda/bin/nvcc"):
            configure.append("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
        if os.environ.get("KVATTN_CUDA_ARCHS"):
            configure.append(f"-DKVATTN_CUDA_ARCHS={os.environ['KVATTN_CUDA_ARCHS']}")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        _say(f"configuring in {build_dir}")
        subprocess.check_call(configure)
        _say(f"building libkvattn.so with {jobs} jobs" + (" (the CUDA kernels take many minutes)" if cuda == "ON" else ""))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "kvattn", "--parallel", jobs])
        package_dir = os.path.join(self.build_lib, "kvattn")
        os.makedirs(package_dir, exist_ok=True)
        shutil.copy2(os.path.join(build_dir, "libkvattn.so"), package_dir)
        # kvattn-bench checks its main job against the tests' float64 oracle: the wheel carries a copy.
        bench_dir = os.path.join(package_dir, "bench")
        os.makedirs(bench_dir, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "tests", "python", "reference.py"), bench_dir)
        _say("libkvattn.so built")
        _build_torch_op(package_dir)


def _build_torch_op(package_dir):
    """The optional torch op (src/torch/stable_op.cpp, tools/build_torch_op.sh), built where torch >= 2.10 is
    importable at build time (pip install --no-build-isolation .); KVATTN_TORCH_OP=0 skips it. Without it,
    or when its build fails, eager torch calls take the ctypes path."""
    if os.environ.get("KVATTN_TORCH_OP", "").strip() == "0":
        return _say("torch op: skipped (KVATTN_TORCH_OP=0)")
    try:
        import torch
    except ImportError:
        return _say("torch op: skipped (torch is not importable in this build environment)")
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) < (2, 10):
        return _say(f"torch op: skipped (torch {torch.__version__}; the stable ABI it uses needs 2.10)")
    try:
        subprocess.check_call(["bash", os.path.join(ROOT, "tools", "build_torch_op.sh"), sys.executable,
                               os.path.join(package_dir, "_kvattn_stable.so")])
        _say("torch op built")
    except (OSError, subprocess.CalledProcessError) as exc:
        _say(f"torch op: not built ({exc}); eager torch calls take the ctypes path")


class BinaryDistribution(Distribution):
    """The package holds a native library: install it as platform-specific (platlib)."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for this platform (it holds a native library) but any Python 3 (no extension module)."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
