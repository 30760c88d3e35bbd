"""Sparse updates: an embedding table trained through `embedding_lookup`.

TF1's optimizers update a variable whose gradient is sparse without an
apply op (GradientDescent scatters, Adam assigns) or with a sparse one
(Momentum). Each replica takes that step on its copy; the algorithm keeps
the central model. Checked against the NumPy reference
(tests/references.py) and, at one replica, against tf.compat.v1.Session.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import references

LR, MU, REPLICAS, WAVES = 0.1, 0.9, 4, 3
RNG = np.random.RandomState(13)
TABLE0 = RNG.randn(10, 4).astype(np.float32)
V0 = RNG.randn(4).astype(np.float32)
IDS = [RNG.randint(0, 10, 16).astype(np.int32) for _ in range(WAVES)]
YS = [RNG.randn(16).astype(np.float32) for _ in range(WAVES)]
OPTIMIZERS = {
    "gd": lambda: tf.compat.v1.train.GradientDescentOptimizer(LR),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(LR, 0.9),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(LR),
}


def build(optimizer):
  graph = tf.Graph()
  with graph.as_default():
    ids = tf.compat.v1.placeholder(tf.int32, [None])
    y = tf.compat.v1.placeholder(tf.float32, [None])
    table = tf.compat.v1.get_variable("table", initializer=TABLE0)
    v = tf.compat.v1.get_variable("v", initializer=V0)
    pred = tf.reduce_sum(tf.nn.embedding_lookup(table, ids) * v, axis=1)
    loss = 0.5 * tf.reduce_mean(tf.square(pred - y))
    train = OPTIMIZERS[optimizer]().minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  return graph, ids, y, [table, v], loss, train, init


def train(sess, model):
  _, ids, y, params, loss, train_op, init = model
  sess.run(init)
  losses = [sess.run([loss, train_op], {ids: i, y: t})[0]
            for i, t in zip(IDS, YS)]
  return losses, sess.run(params)


@pytest.mark.parametrize("algorithm", ["sma", "none"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_embedding_trains_as_the_numpy_reference(optimizer, algorithm):
  model = build(optimizer)
  with tb.TensorBowSession(graph=model[0], replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    losses, (table, v) = train(sess, model)
    # A training run, not a plain one: the replicas' tasks ran.
    assert sess.task_timings()
  waves = references.sma_embedding(
      [TABLE0, V0], list(zip(IDS, YS)), REPLICAS, 1.0 / REPLICAS, MU,
      optimizer, LR, algorithm=algorithm)
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(table, waves[-1][0][0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(v, waves[-1][0][1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_one_replica_equals_plain_tensorflow(optimizer):
  model = build(optimizer)
  with tf.compat.v1.Session(graph=model[0]) as sess:
    expected = train(sess, model)
  with tb.TensorBowSession(graph=model[0], replicas=1) as sess:
    got = train(sess, model)
  np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
  for a, b in zip(got[1], expected[1]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_table_only_model_is_a_training_run():
  # No dense variable: the scatter alone makes the run a training run.
  graph = tf.Graph()
  with graph.as_default():
    ids = tf.compat.v1.placeholder(tf.int32, [None])
    y = tf.compat.v1.placeholder(tf.float32, [None])
    table = tf.compat.v1.get_variable("table", initializer=TABLE0)
    pred = tf.reduce_sum(tf.nn.embedding_lookup(table, ids) * V0, axis=1)
    loss = 0.5 * tf.reduce_mean(tf.square(pred - y))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        loss, var_list=[table])
    init = tf.compat.v1.global_variables_initializer()
  with tb.TensorBowSession(graph=graph, replicas=REPLICAS) as sess:
    sess.run(init)
    for i, t in zip(IDS, YS):
      sess.run(train_op, {ids: i, y: t})
    assert sess.task_timings()
    final = sess.run(table)
  np.testing.assert_allclose(final, _table_only_reference(), rtol=1e-4,
                             atol=1e-5)


def _table_only_reference():
  """SMA of the table alone (v fixed at V0), gradient descent."""
  z = TABLE0.astype(np.float64)
  z_prev = z.copy()
  models = [z.copy() for _ in range(REPLICAS)]
  alpha = 1.0 / REPLICAS
  for ids, y in zip(IDS, YS):
    correction = np.zeros_like(z)
    for j, (i, t) in enumerate(zip(np.array_split(ids, REPLICAS),
                                   np.array_split(y.astype(np.float64),
                                                  REPLICAS))):
      (grad, _), _, _ = references.embedding_regression([models[j], V0], i,
                                                        t)
      c = alpha * (models[j] - z)
      models[j] = models[j] - LR * grad - c
      correction += c
    z, z_prev = z + correction + MU * (z - z_prev), z
  return z


def test_assign_sub_outside_an_optimizer_is_still_refused():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    v = tf.compat.v1.get_variable("v", initializer=V0)
    w = tf.compat.v1.get_variable("w", initializer=V0)
    loss = tf.reduce_mean(tf.linalg.matvec(x, v))
    step = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        loss, var_list=[v])
    with tf.control_dependencies([step]):
      train_op = w.assign_sub(V0 * 0.1)
    init = tf.compat.v1.global_variables_initializer()
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.UnimplementedError,
                       match="writes trainable variable 'w' outside an "
                       "optimizer's apply op"):
      sess.run(train_op, {x: np.ones((4, 4), np.float32)})
    np.testing.assert_array_equal(sess.run(w), V0)
