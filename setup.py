"""Builds TensorBow: the SMA op library and the runtime extension.

Compile and link flags come from `tf.sysconfig` (DESIGN.md, "Builds"), so
the build matches the installed TensorFlow wheel; the runtime links the C
API from libtensorflow_cc.so.2, beside libtensorflow_framework.so.2.
pyproject.toml declares TensorFlow and pybind11 as build requirements, so
`pip install .` works in a fresh virtualenv; with both installed already,
`pip install --no-build-isolation .` skips the isolated build environment.
"""
import concurrent.futures
import os

import pybind11
import setuptools
from setuptools.command.build_ext import build_ext
import tensorflow as tf

TF_DIR = os.path.dirname(tf.__file__)
# No contracted multiply-adds: the fused SMA ops add a correction as they
# step or keep it to add later, and both must round alike.
COMPILE = tf.sysconfig.get_compile_flags() + [
    "-O3", "-fPIC", "-ffp-contract=off", "-Wno-deprecated-declarations",
    "-Wno-sign-compare"]
# Installed, the libraries sit beside the tensorflow package; built in place
# (pip install -e), they find the TensorFlow they were built against.
LINK = tf.sysconfig.get_link_flags() + [
    "-Wl,-rpath,$ORIGIN/../tensorflow", f"-Wl,-rpath,{TF_DIR}"]


class BuildExt(build_ext):
  """Compiles every source file of a library at once, one per CPU.

  Each file takes tens of seconds against TensorFlow's headers, and the op
  library has twice the runtime's files: compiling per library, in
  parallel, left one CPU idle for most of the build.
  """

  def build_extensions(self):
    jobs = os.cpu_count() or 1
    compile_files = self.compiler.compile

    def compile_each(sources, *args, **kwargs):
      with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        objects = pool.map(
            lambda source: compile_files([source], *args, **kwargs), sources)
        return [o for some in objects for o in some]

    self.compiler.compile = compile_each
    try:
      super().build_extensions()
    finally:
      self.compiler.compile = compile_files


# Metadata, dependencies and entry points are in pyproject.toml.
setuptools.setup(
    ext_modules=[
        setuptools.Extension(
            "tensorbow._sma_ops",
            sources=["cc/ops/sma_ops.cc", "cc/kernels/sma_ops.cc",
                     "cc/kernels/sma_with_central_ops.cc",
                     "cc/ops/matmul_ops.cc", "cc/kernels/matmul_ops.cc",
                     "cc/kernels/small_matmul.cc",
                     "cc/ops/replica_ops.cc", "cc/kernels/replica_ops.cc"],
            include_dirs=["."],
            extra_compile_args=COMPILE,
            extra_link_args=LINK,
            language="c++"),
        setuptools.Extension(
            "tensorbow._runtime",
            sources=["cc/runtime/binding.cc", "cc/runtime/scheduler.cc",
                     "cc/runtime/tf_adapter.cc", "cc/runtime/wave.cc",
                     "cc/runtime/wave_runner.cc"],
            include_dirs=[".", pybind11.get_include()],
            extra_compile_args=COMPILE,
            extra_link_args=LINK + [f"-L{TF_DIR}", "-l:libtensorflow_cc.so.2"],
            language="c++"),
    ],
    cmdclass={"build_ext": BuildExt},
)
