"""The user's graph is left as the user built it (tensorbow/execution.py).

TensorBow's replicas and bookkeeping ops live in the session's own
execution graph: a finalized graph trains and evaluates, sessions leave
nothing behind in the graph, and `graph_def`, savers and collections see
the user's ops only. Checked against NumPy's SMA and tf.compat.v1.Session.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

RNG = np.random.RandomState(23)
X = RNG.randn(8, 3).astype(np.float32)
Y = RNG.randn(8, 1).astype(np.float32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)
LR, ALPHA, MU = 0.1, 0.5, 0.9


def build(use_resource):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w = tf.compat.v1.get_variable("w", initializer=W0,
                                  use_resource=use_resource)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, w, loss, train, init


def sma_sgd(waves, replicas=2):
  """SMA with SGD on least squares in NumPy; the central model per wave."""
  z = W0.astype(np.float64)
  z_prev = z.copy()
  ws = [z.copy() for _ in range(replicas)]
  out = []
  for _ in range(waves):
    total = np.zeros_like(z)
    for j, (xs, ys) in enumerate(zip(np.array_split(X, replicas),
                                     np.array_split(Y, replicas))):
      g = xs.T @ (xs @ ws[j] - ys) / len(xs)
      c = ALPHA * (ws[j] - z)
      ws[j] = ws[j] - LR * g - c
      total += c
    z_prev, z = z, z + total + MU * (z - z_prev)
    out.append(z)
  return out


def _session(graph):
  return tb.TensorBowSession(graph=graph, replicas=2, alpha=ALPHA,
                             central_momentum=MU)


@pytest.mark.parametrize("use_resource", [True, False])
def test_finalized_graph_trains_and_evaluates(use_resource):
  graph, x, y, w, loss, train, init = build(use_resource)
  graph.finalize()
  with _session(graph) as sess:
    sess.run(init)
    for z in sma_sgd(3):
      sess.run(train, {x: X, y: Y})
      np.testing.assert_allclose(sess.run(w), z, rtol=1e-5, atol=1e-6)
    evaluated = sess.run(loss, {x: X, y: Y})
  np.testing.assert_allclose(
      evaluated, 0.5 * np.mean((X @ sma_sgd(3)[-1] - Y) ** 2), rtol=1e-5)


@pytest.mark.parametrize("use_resource", [True, False])
def test_sessions_leave_the_users_graph_as_it_was(use_resource, tmp_path):
  graph, x, y, w, _, train, init = build(use_resource)
  ops = [op.name for op in graph.get_operations()]
  version = graph.version
  collections = {key: list(graph.get_collection(key))
                 for key in graph.get_all_collection_keys()}
  for _ in range(50):
    with _session(graph) as sess:
      sess.run(init)
      sess.run(train, {x: X, y: Y})
      assert sess.execution_graph is not graph
      assert any(op.name.startswith("tensorbow/")
                 for op in sess.execution_graph.get_operations())
      assert not any("tensorbow" in n.name for n in sess.graph_def.node)
  assert [op.name for op in graph.get_operations()] == ops
  assert graph.version == version
  assert {key: list(graph.get_collection(key))
          for key in graph.get_all_collection_keys()} == collections
  with graph.as_default():
    saver = tf.compat.v1.train.Saver()
  with _session(graph) as sess:
    sess.run(init)
    sess.run(train, {x: X, y: Y})
    path = saver.save(sess, str(tmp_path / "model"))
  assert [name for name, _ in tf.train.list_variables(path)] == [
      "global_step", "w"]


def test_ops_added_later_run_and_train():
  graph, x, y, w, loss, train, init = build(True)
  with _session(graph) as sess:
    sess.run(init)
    sess.run(train, {x: X, y: Y})
    with graph.as_default():
      # An op depending (by control) on one without outputs, and a new
      # training signature.
      after = tf.identity(2.0 * loss)
      with tf.control_dependencies([train]):
        counted = tf.identity(loss)
    z = sma_sgd(3)
    np.testing.assert_allclose(
        sess.run(after, {x: X, y: Y}),
        np.mean((X @ z[0] - Y) ** 2), rtol=1e-5)
    sess.run([counted, train], {x: X, y: Y})
    np.testing.assert_allclose(sess.run(w), z[1], rtol=1e-5, atol=1e-6)
    # The new ops are the user's: TensorFlow's own session runs them too.
  with tf.compat.v1.Session(graph=graph) as plain:
    plain.run(init)
    assert np.isfinite(plain.run(after, {x: X, y: Y}))
