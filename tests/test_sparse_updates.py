"""Sparse updates: an embedding table trained through `embedding_lookup`.

TF1's optimizers update a variable whose gradient is sparse without an
apply op (GradientDescent scatters, Adam assigns) or with a sparse one
(Momentum). Each replica takes that step on its copy; the algorithm keeps
the central model. Checked against the NumPy reference
(tests/references.py) and, at one replica, against tf.compat.v1.Session;
ASGD against consecutive tf.compat.v1.Session steps, Adaptive SGD with
Momentum against its weighted merge. SSGD (which averages gradients) and
Adaptive SGD (which scales each apply's learning rate: GradientDescent's
scatter and Adam's assign have none) refuse the updates they cannot take,
by name.
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
def test_easgd_trains_as_sma_without_central_momentum(optimizer):
  # EASGD with period 1 is SMA with alpha 0.9 / L and no central momentum.
  model = build(optimizer)
  with tb.TensorBowSession(graph=model[0], replicas=REPLICAS,
                           algorithm="easgd") as sess:
    losses, (table, v) = train(sess, model)
  waves = references.sma_embedding(
      [TABLE0, V0], list(zip(IDS, YS)), REPLICAS, 0.9 / REPLICAS, 0.0,
      optimizer, LR)
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(table, waves[-1][0][0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(v, waves[-1][0][1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_asgd_on_one_stream_group_equals_consecutive_tf_steps(
    monkeypatch, optimizer):
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "1")
  model = build(optimizer)
  _, ids, y, params, loss, train_op, init = model
  with tf.compat.v1.Session(graph=model[0]) as sess:
    sess.run(init)
    expected_losses = []
    for i, t in zip(IDS, YS):
      steps = [sess.run([loss, train_op], {ids: si, y: st})[0]
               for si, st in zip(np.array_split(i, REPLICAS),
                                 np.array_split(t, REPLICAS))]
      expected_losses.append(np.mean(steps))  # equal shards of 4
    expected = sess.run(params)
  with tb.TensorBowSession(graph=model[0], replicas=REPLICAS,
                           algorithm="asgd") as sess:
    losses, got = train(sess, model)
  np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
  for g, e in zip(got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_adaptive_with_sparse_momentum_matches_its_weighted_merge():
  # Merging every run, never perturbing: the pool hands each replica one
  # chunk of a run's rows, in order; replicas take TF1's sparse momentum
  # step alone; with equal counts and batch sizes the central model becomes
  # their mean plus its momentum, and they restart from it.
  model = build("momentum")
  algorithm = tb.algorithms.Adaptive(mega_batch=1, theta=0.0, momentum=0.5)
  with tb.TensorBowSession(graph=model[0], replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    losses, (table, v) = train(sess, model)
  z = [TABLE0.astype(np.float64), V0.astype(np.float64)]
  z_prev = [p.copy() for p in z]
  models = [[p.copy() for p in z] for _ in range(REPLICAS)]
  accums = [[np.zeros_like(p) for p in z] for _ in range(REPLICAS)]
  expected_losses = []
  for ids, y in zip(IDS, YS):
    wave_losses = []
    for j, (i, t) in enumerate(zip(np.array_split(ids, REPLICAS),
                                   np.array_split(y.astype(np.float64),
                                                  REPLICAS))):
      grads, rows, loss = references.embedding_regression(models[j], i, t)
      wave_losses.append(loss)
      for k, g in enumerate(grads):
        touched = rows if k == 0 else slice(None)
        accums[j][k][touched] = 0.9 * accums[j][k][touched] + g[touched]
        models[j][k][touched] -= LR * accums[j][k][touched]
    merged = [np.mean([m[k] for m in models], axis=0) +
              0.5 * (z[k] - z_prev[k]) for k in range(2)]
    z_prev, z = z, merged
    models = [[p.copy() for p in z] for _ in range(REPLICAS)]
    expected_losses.append(np.mean(wave_losses))
  np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
  np.testing.assert_allclose(table, z[0], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(v, z[1], rtol=1e-4, atol=1e-5)


# Patterns: the op types differ between resource and reference variables.
@pytest.mark.parametrize("algorithm,optimizer,pattern", [
    ("ssgd", "gd", r"ssgd averages the replicas' gradients, which a sparse "
     r"update \('GradientDescent/update_table/(ResourceScatterAdd|ScatterSub)'"
     r"\) does not allow"),
    ("ssgd", "momentum",
     r"'Momentum/update_table/(Resource)?SparseApplyMomentum'"),
    ("ssgd", "adam", r"'Adam/update_table/AssignSub(VariableOp)?'"),
    ("adaptive", "gd", r"adaptive SGD cannot scale the learning rate of "
     r"'GradientDescent/update_table/(ResourceScatterAdd|ScatterSub)'"),
    ("adaptive", "adam", r"'Adam/update_table/AssignSub(VariableOp)?'"),
])
def test_algorithms_that_cannot_take_a_sparse_update_say_so(
    algorithm, optimizer, pattern):
  model = build(optimizer)
  _, ids, y, params, _, train_op, init = model
  with tb.TensorBowSession(graph=model[0], replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.UnimplementedError, match=pattern):
      sess.run(train_op, {ids: IDS[0], y: YS[0]})
    # Refused before anything ran: the model is as initialized.
    table, v = sess.run(params)
  np.testing.assert_array_equal(table, TABLE0)
  np.testing.assert_array_equal(v, V0)


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
