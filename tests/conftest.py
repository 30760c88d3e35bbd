"""Runs the whole suite in one of TensorFlow's two TF1 modes.

The switch is process-wide and cannot be undone, so a pytest process runs
in one mode and `scripts/test.sh` runs the suite once per mode:

* `--tf-mode=v1`: `tf.compat.v1.disable_v2_behavior()`, how most TF1
  scripts run on TensorFlow 2: reference variables by default, v1 shapes
  (`TensorShape[i]` is a `Dimension`, never None), v1 control flow.
* `--tf-mode=graph`: `tf.compat.v1.disable_eager_execution()` alone:
  resource variables, v2 shapes and control flow.

Tests that start a Python script in a child process make it switch to the
same mode with the `tf_mode_statement` fixture.
"""
import os
import tempfile

import pytest

# The `tf.compat.v1` function a TF1 script calls to enter each mode.
TF_MODE_SWITCHES = {
    "v1": "disable_v2_behavior",
    "graph": "disable_eager_execution",
}


def _statement(mode):
  return f"tf.compat.v1.{TF_MODE_SWITCHES[mode]}()"


def pytest_addoption(parser):
  parser.addoption(
      "--tf-mode", choices=sorted(TF_MODE_SWITCHES), default="v1",
      help="TF1 mode of the whole run: v1 (disable_v2_behavior, the "
      "default) or graph (disable_eager_execution alone)")


def pytest_configure(config):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  getattr(tf.compat.v1, TF_MODE_SWITCHES[config.getoption("--tf-mode")])()
  # One cache of kernel choices (rewrite/kernel_choice.py) for the test
  # session, not the user's: each shape is timed once per session.
  if "TENSORBOW_CACHE_DIR" not in os.environ:
    os.environ["TENSORBOW_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="tensorbow_test_cache_")


def pytest_report_header(config):
  mode = config.getoption("--tf-mode")
  return f"TF1 mode: {mode} ({_statement(mode)})"


@pytest.fixture(scope="session")
def tf_mode(request):
  """The TF1 mode of this run: "v1" or "graph"."""
  return request.config.getoption("--tf-mode")


@pytest.fixture(scope="session")
def tf_mode_statement(tf_mode):
  """The statement that puts a child process's TF1 script in this mode."""
  return _statement(tf_mode)
