"""Builds TensorBow: the SMA op library and the runtime extension.

Compile and link flags come from `tf.sysconfig` (DESIGN.md section 5), so
the build matches the installed TensorFlow wheel; the runtime links the C
API from libtensorflow_cc.so.2, beside libtensorflow_framework.so.2. Needs
TensorFlow installed first: `pip install --no-build-isolation .`.
"""
import os

import pybind11
import setuptools
from setuptools.command.build_ext import build_ext
import tensorflow as tf

TF_DIR = os.path.dirname(tf.__file__)
COMPILE = tf.sysconfig.get_compile_flags() + [
    "-O3", "-fPIC", "-Wno-deprecated-declarations", "-Wno-sign-compare"]
LINK = tf.sysconfig.get_link_flags() + [f"-Wl,-rpath,{TF_DIR}"]


class BuildExt(build_ext):
  """Builds both libraries in parallel."""

  def finalize_options(self):
    super().finalize_options()
    if self.parallel is None:
      self.parallel = os.cpu_count() or 1


setuptools.setup(
    name="tensorbow",
    version="0.1.0",
    description="Small-batch multi-replica training with SMA for TensorFlow",
    # The product is `tensorbow`; `models` (reference models, their training
    # loop and data) and `benchmarks` are the checkout's tools, installed
    # with it so that scripts import them by name.
    packages=setuptools.find_packages(
        include=["tensorbow", "tensorbow.*", "models", "models.*",
                 "benchmarks", "benchmarks.*"]),
    python_requires=">=3.9",
    install_requires=["tensorflow-cpu==2.21.0", "numpy"],
    extras_require={"tools": ["absl-py", "matplotlib"]},
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
                     "cc/runtime/tf_adapter.cc"],
            include_dirs=[".", pybind11.get_include()],
            extra_compile_args=COMPILE,
            extra_link_args=LINK + [f"-L{TF_DIR}", "-l:libtensorflow_cc.so.2"],
            language="c++"),
    ],
    entry_points={"console_scripts": ["tensorbow-run=tensorbow.run:main"]},
    cmdclass={"build_ext": BuildExt},
)
