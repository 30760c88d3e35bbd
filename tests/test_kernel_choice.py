"""Kernel substitutes chosen by measurement (rewrite/kernel_choice.py).

The timer is replaced so that the outcome is known: whichever kernel it
says is faster is the one in the replicas' copies, the choice is listed
and cached per shape, and training gives the same values either way."""
import json

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.rewrite import kernel_choice

tf1 = tf.compat.v1
RNG = np.random.RandomState(41)
X = RNG.randn(16, 64).astype(np.float32)
Y = RNG.randn(16, 1).astype(np.float32)
W0 = RNG.randn(64, 1).astype(np.float32) * 0.1


@pytest.fixture(autouse=True)
def _timed_choice(monkeypatch):
  """The default a user gets: each substitute timed (conftest.py makes
  the other tests keep them all)."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "1")


def _build():
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 64])
    y = tf1.placeholder(tf.float32, [None, 1])
    w = tf1.get_variable("w", initializer=W0)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf1.global_variables_initializer()
  return graph, x, y, w, train, init


def _timers(faster, calls):
  """(timer, outer timer) saying `faster` ("tf" or "tensorbow") wins,
  each call noted in `calls`."""

  def timer(graph_def, fetch, values):
    del values
    calls.append(fetch)
    uses_tensorbow = any(n.op.startswith("TensorBow") for n in graph_def.node)
    return 1.0 if uses_tensorbow == (faster == "tf") else 0.5

  def outer_timer(fused, op_type, a_shape, b_shape, dtype, nesterov):
    del a_shape, b_shape, dtype, nesterov
    calls.append(op_type)
    return 1.0 if fused == (faster == "tf") else 0.5

  return timer, outer_timer


def _train(monkeypatch, tmp_path, faster, timers=None):
  """Trains with a timer saying `faster` ("tf" or "tensorbow") wins (or
  with `timers`); returns (weights, kernel choices, op types of the
  copies, timer calls)."""
  calls = []
  timer, outer_timer = timers or _timers(faster, calls)
  monkeypatch.setattr(kernel_choice, "_timed", timer)
  monkeypatch.setattr(kernel_choice, "_timed_outer", outer_timer)
  monkeypatch.setenv("TENSORBOW_CACHE_DIR", str(tmp_path))
  graph, x, y, w, train, init = _build()
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    for _ in range(3):
      sess.run(train, {x: X, y: Y})
    types = {op.type for op in sess.execution_graph.get_operations()}
    return sess.run(w), sess.kernel_choices(), types, calls


@pytest.mark.parametrize("faster", ["tf", "tensorbow"])
def test_the_faster_kernel_is_used(monkeypatch, tmp_path, faster):
  weights, choices, types, calls = _train(monkeypatch, tmp_path, faster)
  assert choices and all(c["substitute"] == (faster == "tensorbow")
                         for c in choices)
  assert ("TensorBowMatMul" in types) == (faster == "tensorbow")
  # The SMA step takes the weight's gradient as its factors (x, dy).
  assert bool({"TensorBowApplySmaGradientDescentOuterWithCentral",
               "TensorBowResourceApplySmaGradientDescentOuterWithCentral"} &
              types) == (faster == "tensorbow")
  # Both kernels timed once per op, the replicas' rows (8) on unknowns.
  assert len(calls) == 2 * len(choices)
  assert [8, 64] in choices[0]["shapes"] or [8, 1] in choices[0]["shapes"]
  # Same training either way.
  np.testing.assert_allclose(weights, _with_tensorflows_kernels(monkeypatch),
                             rtol=1e-5, atol=1e-6)


def _with_tensorflows_kernels(monkeypatch):
  """The weights _train's steps give without any substitute."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
  graph, x, y, w, train, init = _build()
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    for _ in range(3):
      sess.run(train, {x: X, y: Y})
    assert sess.kernel_choices() == []
    return sess.run(w)


def test_choices_are_cached_per_machine_and_shape(monkeypatch, tmp_path):
  _, first, _, calls = _train(monkeypatch, tmp_path, "tensorbow")
  assert calls
  _, again, _, calls = _train(monkeypatch, tmp_path, "tf")
  # Cached: not timed again, and the cached winner still rules.
  assert calls == []
  assert [c["substitute"] for c in again] == [c["substitute"] for c in first]
  assert (tmp_path / "kernel_choices.json").exists()


def test_a_rivals_timing_written_first_is_the_one_used(monkeypatch,
                                                      tmp_path):
  """Two processes (two workers of a job) time the same shapes at once:
  the one that writes first is the one both use, and neither drops what
  the other wrote."""
  _train(monkeypatch, tmp_path / "rival", "tf")
  rival = json.loads((tmp_path / "rival" / "kernel_choices.json").read_text())
  rival[next(iter(rival))]["another shape"] = {"tf": 1.0, "tensorbow": 2.0}
  ours = tmp_path / "ours"

  def rival_writes_while(timed):
    def timed_beside_a_rival(*args):
      ours.mkdir(exist_ok=True)
      (ours / "kernel_choices.json").write_text(json.dumps(rival))
      return timed(*args)
    return timed_beside_a_rival

  timers = [rival_writes_while(t) for t in _timers("tensorbow", [])]
  _, choices, _, _ = _train(monkeypatch, ours, "tensorbow", timers)
  assert choices and not any(c["substitute"] for c in choices)
  assert json.loads((ours / "kernel_choices.json").read_text()) == rival


def test_real_timings_are_positive(tmp_path, monkeypatch):
  monkeypatch.setenv("TENSORBOW_CACHE_DIR", str(tmp_path))
  graph, x, y, w, train, init = _build()
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    sess.run(train, {x: X, y: Y})
    choices = sess.kernel_choices()
  assert choices
  for c in choices:
    assert c["tf_seconds"] > 0 and c["tensorbow_seconds"] > 0


def test_a_failed_measurement_keeps_tensorflows_kernel(monkeypatch, tmp_path,
                                                       caplog):
  """Timing a substitute can fail (a shape known only at run time); the
  run then trains with TensorFlow's kernels, as without substitutes."""

  def broken(*args):
    del args
    raise ValueError("Dimensions must be equal")

  monkeypatch.setattr(kernel_choice, "_timed", broken)
  monkeypatch.setattr(kernel_choice, "_timed_outer", broken)
  monkeypatch.setenv("TENSORBOW_CACHE_DIR", str(tmp_path))
  graph, x, y, w, train, init = _build()
  with caplog.at_level("WARNING", logger="tensorbow"):
    with tb.TensorBowSession(graph=graph, replicas=2) as sess:
      sess.run(init)
      for _ in range(3):
        sess.run(train, {x: X, y: Y})
      types = {op.type for op in sess.execution_graph.get_operations()}
      weights = sess.run(w)
  assert not any(t.startswith("TensorBowMatMul") or t.endswith("Outer") or
                 t.endswith("OuterWithCentral") for t in types)
  warned = [r for r in caplog.records if "could not time" in r.getMessage()]
  assert warned and len(warned) == len({r.getMessage() for r in warned})
  np.testing.assert_allclose(weights, _with_tensorflows_kernels(monkeypatch),
                             rtol=1e-5, atol=1e-6)
