"""A pytest plugin running TensorFlow's own session tests on TensorBow.

Loaded by scripts/tf_oracle.py (`-p tf_oracle_plugin`). TensorFlow's
tests make sessions as `session.Session(...)` (their module's
`tensorflow.python.client.session`) and through `test_util`'s
`ErrorLoggingSession` (`self.session()`, `self.cached_session()`). With
`--oracle-session=tensorbow` both make `TensorBowSession(replicas=N)`
for a local target; a remote target keeps TensorFlow's session, as
`tensorbow-run` does. With `--oracle-session=tf` nothing is replaced:
the baseline. `--tf-mode` puts the process in one of the two TF1 modes.
"""
import os
import types

import pytest

_MODES = {"v1": "disable_v2_behavior", "graph": "disable_eager_execution"}
_MADE = []  # the TensorBowSessions made


def pytest_addoption(parser):
  parser.addoption("--oracle-session", choices=["tf", "tensorbow"],
                   default="tensorbow")
  parser.addoption("--oracle-replicas", type=int, default=2)
  parser.addoption("--tf-mode", choices=sorted(_MODES), default="v1")


def pytest_configure(config):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  getattr(tf.compat.v1, _MODES[config.getoption("--tf-mode")])()
  _shim_removed_apis()
  if config.getoption("--oracle-session") == "tensorbow":
    from tensorflow.python.framework import test_util  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    test_util.ErrorLoggingSession = _factory(
        test_util.ErrorLoggingSession,
        config.getoption("--oracle-replicas"))


def _shim_removed_apis():
  """What older copies of TensorFlow's session tests call at import time
  and TensorFlow 2.21 no longer has (shape functions registered from
  Python), as no-ops, so that their tests collect; the tests' own code is
  not changed."""
  from tensorflow.python.framework import common_shapes  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  from tensorflow.python.framework import ops  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  if not hasattr(ops, "RegisterShape"):
    ops.RegisterShape = lambda op_type: (lambda shape_fn: shape_fn)
  if not hasattr(common_shapes, "unknown_shape"):
    common_shapes.unknown_shape = lambda op: None


def _factory(original, replicas):
  """A callable making sessions as `original(target, graph, config)`
  would: a TensorBowSession for a local target."""
  import tensorbow  # pylint: disable=g-import-not-at-top

  def make(target="", graph=None, config=None):
    if target:
      return original(target, graph, config)
    _MADE.append(None)
    return tensorbow.TensorBowSession(target, graph, config,
                                      replicas=replicas)

  return make


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
  if session.config.getoption("--oracle-session") != "tensorbow":
    return
  replicas = session.config.getoption("--oracle-replicas")
  done = set()
  for item in session.items:
    module = getattr(item, "module", None)
    client = getattr(module, "session", None)
    if module is None or id(module) in done or client is None:
      continue
    done.add(id(module))
    shim = types.ModuleType(client.__name__)
    shim.__dict__.update(vars(client))
    shim.Session = _factory(client.Session, replicas)
    module.session = shim


def pytest_sessionfinish(session):
  # For scripts/tf_oracle.py: proof that the stand-in was used.
  path = os.environ.get("TF_ORACLE_COUNT")
  if path:
    with open(path, "w") as f:
      f.write(str(len(_MADE)))

