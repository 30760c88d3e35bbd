"""The libraries loaded are the ones asked for.

scripts/bazel_build.sh runs the kernel tests with TENSORBOW_LIBRARY_DIR set
to Bazel's output; this makes sure they did not load pip's build instead.
Without the variable, the package's own libraries must be the ones loaded.
"""
import os
import sys

import tensorbow
from tensorbow import ops as tb_ops

import pytest

# Which library files were loaded, no graph or session: the TF1 mode cannot
# change it (conftest.py).
pytestmark = pytest.mark.mode_independent


def expected_dir():
  return os.path.realpath(os.environ.get(tb_ops.LIBRARY_DIR_ENV) or
                          os.path.dirname(tensorbow.__file__))


def test_op_library_comes_from_the_directory_asked_for():
  path = os.path.realpath(tb_ops.library_file("_sma_ops"))
  assert os.path.dirname(path) == expected_dir()
  # TensorFlow registered its ops from there.
  assert callable(tb_ops.library().tensor_bow_replica_mean)


def test_runtime_comes_from_the_directory_asked_for():
  module = sys.modules["tensorbow._runtime"]
  assert os.path.dirname(os.path.realpath(module.__file__)) == expected_dir()
