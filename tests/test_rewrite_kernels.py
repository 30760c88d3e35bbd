"""The faster kernel equivalents of tensorbow/rewrite/kernels.py.

Each substitution must compute the product it replaces (NumPy reference),
apply only where it is meant to, and leave training where it was: the same
variables with and without it, under SMA and with one replica.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.rewrite import kernels

tf.compat.v1.disable_eager_execution()


def matmul_graph(a_shape, b_shape, dtype, **kwargs):
  graph = tf.Graph()
  with graph.as_default():
    a = tf.compat.v1.placeholder(dtype, a_shape, name="a")
    b = tf.compat.v1.placeholder(dtype, b_shape, name="b")
    product = tf.matmul(a, b, name="product", **kwargs)
  return graph, product.op


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize("rows", [2, 4, 17])
def test_substituted_matmul_equals_numpy(dtype, rows):
  rng = np.random.RandomState(rows)
  a = rng.randn(rows, 40).astype(dtype.as_numpy_dtype)
  b = rng.randn(1030, 40).astype(dtype.as_numpy_dtype)
  graph, op = matmul_graph([None, 40], [1030, 40], dtype, transpose_b=True)
  assert kernels.applies(op)
  faster = tf.Graph()
  with faster.as_default():
    tf.compat.v1.import_graph_def(kernels.faster_graph_def(graph), name="")
  product = faster.get_tensor_by_name("product:0")
  assert product.op.type == "Transpose"
  with tf.compat.v1.Session(graph=faster) as sess:
    got = sess.run(product, {"a:0": a, "b:0": b})
  tol = 1e-5 if dtype == tf.float32 else 1e-12
  np.testing.assert_allclose(got, a @ b.T, rtol=tol, atol=tol)
  assert got.shape == (rows, 1030)


@pytest.mark.parametrize("a_shape,b_shape,kwargs", [
    ([None, 40], [1000, 40], {"transpose_b": True}),  # B not tall enough
    ([None, 40], [40, 2048], {}),  # no transpose: Eigen is fine
    ([40, None], [2048, 40], {"transpose_a": True, "transpose_b": True}),
    ([1, 40], [2048, 40], {"transpose_b": True}),  # matrix-vector
    ([512, 40], [2048, 40], {"transpose_b": True}),  # not a small batch
    ([None, 40], [None, 40], {"transpose_b": True}),  # B's rows unknown
])
def test_substitution_applies_only_to_small_times_tall_transposed(
    a_shape, b_shape, kwargs):
  _, op = matmul_graph(a_shape, b_shape, tf.float32, **kwargs)
  assert not kernels.applies(op)
  assert kernels.substitute(op.node_def, op) is None


def two_layer_model():
  """x [None, 6] -> 1024 hidden -> 2; the hidden layer's input gradient
  dH = dY W2^T has a tall W2 (1024 x 2), which the replicas substitute."""
  graph = tf.Graph()
  rng = np.random.RandomState(0)
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 6], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 2], name="y")
    w1 = tf.compat.v1.get_variable(
        "w1", initializer=(0.3 * rng.randn(6, 1024)).astype(np.float32))
    w2 = tf.compat.v1.get_variable(
        "w2", initializer=(0.05 * rng.randn(1024, 2)).astype(np.float32))
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(x @ w1), w2) - y))
    train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  xs = rng.randn(12, 6).astype(np.float32)
  ys = rng.randn(12, 2).astype(np.float32)
  return graph, (x, y, w1, w2, loss, train, init), xs, ys


def train_model(session_factory, waves=3):
  graph, (x, y, w1, w2, loss, train, init), xs, ys = two_layer_model()
  with session_factory(graph) as sess:
    sess.run(init)
    losses = [sess.run([loss, train], {x: xs, y: ys})[0]
              for _ in range(waves)]
    values = sess.run([w1, w2])
  substituted = any(op.name.endswith(">tensorbow_transposed")
                    for op in graph.get_operations())
  return losses, values, substituted


@pytest.mark.parametrize("replicas", [1, 3])
def test_training_with_and_without_substitution_agree(monkeypatch, replicas):
  make = lambda g: tb.TensorBowSession(graph=g, replicas=replicas)
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
  slow_losses, slow_values, slow_substituted = train_model(make)
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "1")
  fast_losses, fast_values, fast_substituted = train_model(make)
  assert not slow_substituted and fast_substituted
  np.testing.assert_allclose(fast_losses, slow_losses, rtol=1e-5)
  for fast, slow in zip(fast_values, slow_values):
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-6)


def test_one_replica_with_substitution_equals_tf_session():
  tf_losses, tf_values, _ = train_model(
      lambda g: tf.compat.v1.Session(graph=g))
  tb_losses, tb_values, substituted = train_model(
      lambda g: tb.TensorBowSession(graph=g, replicas=1))
  assert substituted
  np.testing.assert_allclose(tb_losses, tf_losses, rtol=1e-5)
  for a, b in zip(tb_values, tf_values):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
