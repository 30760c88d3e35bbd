"""Orderings a copy must keep (rewrite/phases.py `orders_only`): an op that
waits for the optimizer's step and reads a weight reads it after the step,
for reference variables too, whose `read` Identity hands its consumers the
variable's buffer, with every kernel the copies may choose."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb


def _mlp_with_moving_average(optimizer):
  """A two-layer classifier whose train op is the moving average of its
  weights applied after the optimizer's step, as ExponentialMovingAverage's
  own docstring writes it."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(1)
    x = tf.compat.v1.placeholder(tf.float32, [None, 8])
    y = tf.compat.v1.placeholder(tf.int64, [None])
    w1 = tf.compat.v1.get_variable("w1", [8, 16])
    b1 = tf.compat.v1.get_variable(
        "b1", [16], initializer=tf.compat.v1.zeros_initializer())
    w2 = tf.compat.v1.get_variable("w2", [16, 3])
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    step = optimizer().minimize(
        loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    ema = tf.compat.v1.train.ExponentialMovingAverage(0.5)
    weights = [w1, b1, w2]
    with tf.control_dependencies([step]):
      train = ema.apply(weights)
    shadows = [ema.average(w) for w in weights]
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, weights + shadows, loss, train, init


_OPTIMIZERS = {
    "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
}


def _run(make_session, optimizer, batches):
  graph, x, y, state, loss, train, init = _mlp_with_moving_average(
      _OPTIMIZERS[optimizer])
  with graph.as_default(), make_session(graph) as sess:
    sess.run(init)
    for xs, ys in batches:
      sess.run([loss, train], {x: xs, y: ys})
    return sess.run(state)


@pytest.mark.parametrize("fast_kernels", ["0", "1", "all"])
@pytest.mark.parametrize("optimizer", sorted(_OPTIMIZERS))
def test_moving_average_after_the_step_reads_the_stepped_weights(
    monkeypatch, optimizer, fast_kernels):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast_kernels)
  rng = np.random.RandomState(0)
  batches = [(rng.rand(8, 8).astype(np.float32), rng.randint(0, 3, 8))
             for _ in range(3)]
  want = _run(lambda g: tf.compat.v1.Session(graph=g), optimizer, batches)
  got = _run(lambda g: tb.TensorBowSession(graph=g, replicas=1), optimizer,
             batches)
  # Weights, then their shadows: a shadow read before the step would be
  # off by about half a step, far beyond rounding.
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
