"""A batch with fewer rows than replicas (DESIGN.md, "Batch feeds are split",
feed sharding).

An epoch's last batch may have fewer rows than L: it trains replicas 0,
1, ... one row each, the others sit the wave out (unchanged) and the
central update is over those that trained. The model is least squares
(tests/graphs.py) at L = 4; each wave is checked against the NumPy SMA
reference (tests/references.py), or against TensorFlow for synchronous
SGD, and so is the full wave after the partial one.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import references
from graphs import B0, W0, build

LR, REPLICAS = 0.1, 4
RNG = np.random.RandomState(23)
X = RNG.randn(60, 3).astype(np.float32)
Y = RNG.randn(60, 1).astype(np.float32)
# Rows per wave: full, the 2-row last batch, full again, and 3 rows.
ROWS = (10, 2, 10, 3, 10)


def _batches(rows=ROWS):
  out, start = [], 0
  for n in rows:
    out.append((X[start:start + n], Y[start:start + n]))
    start += n
  return out


def _optimizer(name, decay=False):
  def make():
    lr = LR
    if decay:  # halved every wave: each replica reads its global step
      lr = tf.compat.v1.train.exponential_decay(
          LR, tf.compat.v1.train.get_global_step(), 1, 0.5, staircase=True)
    if name == "momentum":
      return tf.compat.v1.train.MomentumOptimizer(lr, 0.8)
    return tf.compat.v1.train.GradientDescentOptimizer(lr)
  return make


def _train(m, batches, session=None, **options):
  """Per wave (w, b, fetched loss, fetched pred), then the global step."""
  sess = session or tb.TensorBowSession(graph=m.graph, **options)
  seen = []
  with sess:
    sess.run(m.init)
    for x, y in batches:
      loss, pred, _ = sess.run([m.loss, m.pred, m.train], {m.x: x, m.y: y})
      seen.append(sess.run([m.w, m.b]) + [loss, pred])
    step = sess.run(m.step) if m.step is not None else None
  return seen, step


def _assert_sma(seen, reference):
  for (w, b, loss, _), (z, expected, _, _) in zip(seen, reference):
    np.testing.assert_allclose(w, z[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, z[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


@pytest.mark.parametrize("fast", ["1", "0"])
@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_a_fed_partial_batch_is_sma_over_the_replicas_that_trained(
    optimizer, use_resource, fast, monkeypatch):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast)
  m = build(_optimizer(optimizer), use_resource)
  seen, _ = _train(m, _batches(), replicas=REPLICAS)
  reference = references.sma(
      [W0, B0], _batches(), REPLICAS, 1.0 / REPLICAS, 0.9, LR,
      momentum=0.8 if optimizer == "momentum" else None)
  _assert_sma(seen, reference)
  # The 2-row wave's loss is the mean over its 2 rows (the reference's,
  # above); its prediction has their 2 rows.
  assert seen[1][3].shape == (2, 1)


def test_replicas_that_sit_out_keep_counting_the_global_step():
  """A learning rate decayed by the global step: replicas 2 and 3 sit the
  2-row wave out, and the next full wave they step at its rate too."""
  m = build(_optimizer("sgd", decay=True), global_step=True)
  seen, step = _train(m, _batches(), replicas=REPLICAS)
  assert step == len(ROWS)
  _assert_sma(seen, references.sma(
      [W0, B0], _batches(), REPLICAS, 1.0 / REPLICAS, 0.9,
      [LR * 0.5 ** t for t in range(len(ROWS))]))


@pytest.mark.parametrize("algorithm", ["easgd", "none"])
def test_easgd_and_independent_replicas_sit_out_too(algorithm):
  m = build(_optimizer("momentum"))
  seen, _ = _train(m, _batches(), replicas=REPLICAS, algorithm=algorithm)
  # EASGD is SMA without central momentum, alpha 0.9 / L; "none" is
  # replica 0's model, and replica 0 always trains.
  alpha = 0.9 / REPLICAS if algorithm == "easgd" else 0.0
  _assert_sma(seen, references.sma(
      [W0, B0], _batches(), REPLICAS, alpha, 0.0, LR, momentum=0.8,
      algorithm="sma" if algorithm == "easgd" else "none"))


def _assert_momentum_tensorflow(seen):
  """`seen` (per wave, the models) equals tf.compat.v1.Session training
  the momentum model on the same batches, the short one whole."""
  m = build(_optimizer("momentum"))
  expected, _ = _train(m, _batches(),
                       session=tf.compat.v1.Session(graph=m.graph))
  for got, want in zip(seen, expected):
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast", ["1", "0"])
def test_ssgd_on_a_partial_batch_is_tensorflow_on_it(fast, monkeypatch):
  """Replicas that sit out take the common step (computed on a borrowed
  row, weighted 0), so every replica stays the central model."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast)
  m = build(_optimizer("momentum"))
  seen, _ = _train(m, _batches(), replicas=REPLICAS, algorithm="ssgd")
  _assert_momentum_tensorflow(seen)


def test_asgd_applies_one_step_per_row(monkeypatch):
  """ASGD applies each task's step to the central model as it ends; with
  one stream group the tasks run in replica order: two rows, two steps."""
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "1")
  m = build(_optimizer("sgd"))
  seen, _ = _train(m, _batches((2,)), replicas=REPLICAS, algorithm="asgd")
  x, y = _batches((2,))[0]
  params = [W0.astype(np.float64), B0.astype(np.float64)]
  losses = []
  for i in range(2):
    grads, loss = references.least_squares(params, x[i:i + 1], y[i:i + 1])
    losses.append(loss)
    params = [p - LR * g for p, g in zip(params, grads)]
  w, b, loss, _ = seen[0]
  np.testing.assert_allclose(w, params[0], rtol=1e-5)
  np.testing.assert_allclose(b, params[1], rtol=1e-5)
  np.testing.assert_allclose(loss, np.mean(losses), rtol=1e-5)


def test_adaptive_sgd_takes_a_partial_batch_as_one_chunk():
  """The pool cuts 2 rows into one chunk (batch sizes are at least 1 row
  each): one replica steps; the central model moves only at the merge."""
  m = build(_optimizer("sgd"))
  seen, _ = _train(m, _batches((2,)), replicas=REPLICAS,
                   algorithm="adaptive")
  x, y = _batches((2,))[0]
  _, expected = references.least_squares([W0, B0], x, y)
  w, b, loss, _ = seen[0]
  np.testing.assert_array_equal(w, W0)
  np.testing.assert_array_equal(b, B0)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)


def _pipeline(rows_per_batch, total, epochs):
  dataset = tf.data.Dataset.from_tensor_slices(
      (X[:total], Y[:total])).batch(rows_per_batch).repeat(epochs)
  return tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_pipelines_last_batch_of_two_rows_trains_two_replicas(
    fast, monkeypatch):
  # 22 rows in batches of 10: each epoch ends with 2 rows.
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast)
  with tf.Graph().as_default() as graph:
    x, y = _pipeline(10, 22, 2)
    w = tf.compat.v1.get_variable("w", initializer=W0)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf.compat.v1.train.MomentumOptimizer(LR, 0.8).minimize(loss)
    losses, models = [], []
    with tb.TensorBowSession(graph=graph, replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      while True:
        try:
          losses.append(sess.run([loss, train])[0])
        except tf.errors.OutOfRangeError:
          break
        models.append(sess.run(w))
  data = [(X[i:min(i + 10, 22)], Y[i:min(i + 10, 22)])
          for i in (0, 10, 20)] * 2
  reference = references.sma([W0], data, REPLICAS, 1.0 / REPLICAS, 0.9, LR,
                             momentum=0.8)
  assert len(losses) == len(reference) == 6
  for got, loss, (z, expected, _, _) in zip(models, losses, reference):
    np.testing.assert_allclose(got, z[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_an_empty_batch_trains_as_tensorflow_does():
  """TensorFlow trains on an empty batch (its mean loss is NaN, the
  gradient of no rows zero): replica 0 trains on it alone, and with
  synchronous SGD every replica takes its step, as TensorFlow's model
  does."""
  empty = (X[:0], Y[:0])
  m = build(_optimizer("sgd"))
  seen, _ = _train(m, [_batches()[0], empty], replicas=REPLICAS,
                   algorithm="ssgd")
  m2 = build(_optimizer("sgd"))
  expected, _ = _train(m2, [_batches()[0], empty],
                       session=tf.compat.v1.Session(graph=m2.graph))
  # TensorFlow's loss is NaN; the gradient of no rows is zero.
  assert np.isnan(expected[1][2])
  np.testing.assert_array_equal(expected[1][0], expected[0][0])
  for got, want in zip(seen, expected):
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  assert seen[1][3].shape == (0, 1)


TWO_CPUS = tf.compat.v1.ConfigProto(device_count={"CPU": 2})


@pytest.mark.parametrize("use_resource", [True, False])
def test_on_two_devices_a_device_whose_replicas_all_sit_out_adds_nothing(
    use_resource):
  """Replicas 0 and 1 are on device 0, 2 and 3 on device 1: 2 rows leave
  device 1 idle (its copy moves by the central momentum alone), 3 rows
  train one of its two replicas."""
  # Not first: the central momentum is still zero after the first wave.
  rows = (10, 10) + ROWS
  m = build(_optimizer("momentum"), use_resource)
  seen, _ = _train(m, _batches(rows), replicas=REPLICAS, config=TWO_CPUS,
                   devices=["/cpu:0", "/cpu:1"], central_momentum=0.6)
  _assert_sma(seen, references.sma(
      [W0, B0], _batches(rows), REPLICAS, 1.0 / REPLICAS, 0.6, LR,
      momentum=0.8))


def test_on_two_devices_ssgd_on_a_partial_batch_is_tensorflow_on_it():
  m = build(_optimizer("momentum"))
  seen, _ = _train(m, _batches(), replicas=REPLICAS, config=TWO_CPUS,
                   devices=["/cpu:0", "/cpu:1"], algorithm="ssgd")
  _assert_momentum_tensorflow(seen)
