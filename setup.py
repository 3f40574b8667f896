"""Builds libkvattn.so with CMake and installs it inside the kvattn package (`pip install .`).

The package is pure Python over the library's C ABI (ctypes), so one wheel serves every Python version:
it is tagged py3-none-<platform>. Environment:
  KVATTN_CUDA=0          build without the CUDA backend (-DKVATTN_CUDA=OFF); =1 requires it (ON);
                         otherwise AUTO (built when nvcc is found)
  KVATTN_CUDA_ARCHS      passed as -DKVATTN_CUDA_ARCHS (default "80;90a")
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: the number of cores)
The GoogleTest suite is not built. Machines without network access: pip install --no-build-isolation .
"""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def _cuda_option():
    value = os.environ.get("KVATTN_CUDA", "").strip().lower()
    if value in ("0", "off", "false", "no"):
        return "OFF"
    if value in ("1", "on", "true", "yes"):
        return "ON"
    return "AUTO"


class BuildPyWithLibrary(build_py):
    """build_py, then the CMake build of libkvattn.so, copied into the built package."""

    def run(self):
        super().run()
        build_dir = os.path.join(os.path.abspath(self.get_finalized_command("build").build_temp), "cmake")
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DKVATTN_CUDA={_cuda_option()}", "-DKVATTN_BUILD_TESTS=OFF"]
        if os.environ.get("KVATTN_CUDA_ARCHS"):
            configure.append(f"-DKVATTN_CUDA_ARCHS={os.environ['KVATTN_CUDA_ARCHS']}")
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "kvattn", "--parallel", jobs])
        package_dir = os.path.join(self.build_lib, "kvattn")
        os.makedirs(package_dir, exist_ok=True)
        shutil.copy2(os.path.join(build_dir, "libkvattn.so"), package_dir)


class BinaryDistribution(Distribution):
    """The package holds a native library: install it as platform-specific (platlib)."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for this platform (it holds a native library) but any Python 3 (no extension module)."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
