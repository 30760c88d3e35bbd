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

Tests where the mode cannot matter (they build no graph and open no
session, here or in a child process that switches mode) are marked
`mode_independent` and run in one mode only, v1, so once per
`scripts/test.sh`; in graph mode they are deselected unless `--all-modes`
is given. While such a test runs, building a graph or opening a session
fails it, and tests/test_tf_mode.py checks the marked tests' source.
"""
import contextlib
import os
import tempfile

import pytest

# The `tf.compat.v1` function a TF1 script calls to enter each mode.
TF_MODE_SWITCHES = {
    "v1": "disable_v2_behavior",
    "graph": "disable_eager_execution",
}


# The one mode that runs the tests marked mode_independent.
MODE_INDEPENDENT_RUNS_IN = "v1"


def _statement(mode):
  return f"tf.compat.v1.{TF_MODE_SWITCHES[mode]}()"


def pytest_addoption(parser):
  parser.addoption(
      "--tf-mode", choices=sorted(TF_MODE_SWITCHES), default="v1",
      help="TF1 mode of the whole run: v1 (disable_v2_behavior, the "
      "default) or graph (disable_eager_execution alone)")
  parser.addoption(
      "--all-modes", action="store_true",
      help="run the tests marked mode_independent in this mode too (by "
      f"default they run in {MODE_INDEPENDENT_RUNS_IN} mode only)")


def _runs_tests(config):
  """Whether this process runs tests: not pytest-xdist's controller, which
  hands them to its workers (and need not spend seconds importing
  TensorFlow first)."""
  return not (getattr(config.option, "numprocesses", None) and
              "PYTEST_XDIST_WORKER" not in os.environ)


def pytest_configure(config):
  if _runs_tests(config):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    getattr(tf.compat.v1, TF_MODE_SWITCHES[config.getoption("--tf-mode")])()
  # One cache of kernel choices (rewrite/kernel_choice.py) for the test
  # session, not the user's: each shape is timed once per session (by
  # whichever of pytest-xdist's workers times it first).
  if "TENSORBOW_CACHE_DIR" not in os.environ:
    os.environ["TENSORBOW_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="tensorbow_test_cache_")
  # Every faster kernel TensorBow has, untimed, wherever a test does not
  # choose: which of TensorFlow's kernels and TensorBow's a timed choice
  # keeps depends on the machine and on the load of the moment, so the
  # tests would cover a different mix each run. Each substitute is then
  # exercised everywhere; TensorFlow's kernels are, by the tests that set
  # TENSORBOW_FAST_KERNELS=0, and the timed choice by those that set 1
  # (test_kernel_choice.py and the fast-kernels parametrisations).
  os.environ.setdefault("TENSORBOW_FAST_KERNELS", "all")


def pytest_collection_modifyitems(config, items):
  if (config.getoption("--tf-mode") == MODE_INDEPENDENT_RUNS_IN or
      config.getoption("--all-modes")):
    return
  once = [i for i in items if i.get_closest_marker("mode_independent")]
  if once:
    config.hook.pytest_deselected(items=once)
    items[:] = [i for i in items if not i.get_closest_marker(
        "mode_independent")]


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


@contextlib.contextmanager
def _mode_independent_guard(test):
  """Fails `test` if it makes a TensorFlow graph or session, or adds ops to
  the default graph: what the TF1 modes change, so what a test marked
  mode_independent, run in one mode only, must not do."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  made = []

  def recording(cls, init):
    def record(self, *args, **kwargs):
      made.append(cls.__name__)
      init(self, *args, **kwargs)
    return record

  # The constructors are recorded, not refused: a session that fails in
  # __init__ fails again in __del__.
  inits = [(cls, cls.__dict__["__init__"]) for cls in (
      tf.Graph, tf.compat.v1.Session, tf.compat.v1.InteractiveSession)]
  default_graph = tf.compat.v1.get_default_graph()
  ops = len(default_graph.get_operations())
  for cls, init in inits:
    cls.__init__ = recording(cls, init)
  try:
    yield
  finally:
    for cls, init in inits:
      cls.__init__ = init
  added = len(default_graph.get_operations()) - ops
  if added:
    made.append(f"{added} op(s) in the default graph")
  assert not made, (
      f"{test} is marked mode_independent, so it runs in "
      f"{MODE_INDEPENDENT_RUNS_IN} mode only, but it made "
      f"{', '.join(sorted(set(made)))}: remove the mark so that it runs in "
      "both TF1 modes")


@pytest.fixture(autouse=True)
def _guard_mode_independent(request):
  if request.node.get_closest_marker("mode_independent") is None:
    yield
  else:
    with _mode_independent_guard(request.node.nodeid):
      yield


@pytest.fixture(scope="session")
def mode_independent_guard():
  """The guard around each test marked mode_independent, for its own test:
  a context manager that takes the test's name."""
  return _mode_independent_guard
