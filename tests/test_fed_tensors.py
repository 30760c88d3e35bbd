"""Runs whose plans depend on what they feed (issue #59): a default fed
through `make_callable` and on several devices, a feedable iterator's
string handle, and `replicas="auto"` on a feed it cannot split. The
`run()` idioms of fed defaults are in tests/idioms/test_fed_tensors.py."""
import logging

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import autotune

TWO_CPUS = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
RUNS = 6


def _scaled_regression():
  """x [None, 4], a linear model of ones, a loss scale and a learning rate
  with defaults; returns (x, scale, rate, loss, train op, w)."""
  x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
  w = tf.compat.v1.get_variable(
      "w", [4, 1], initializer=tf.compat.v1.ones_initializer())
  scale = tf.compat.v1.placeholder_with_default(1.0, [], name="scale")
  rate = tf.compat.v1.placeholder_with_default(0.05, [], name="rate")
  target = tf.constant(np.arange(4, dtype=np.float32).reshape(4, 1))
  loss = scale * tf.reduce_mean(tf.square(tf.matmul(x, w - target)))
  train = tf.compat.v1.train.GradientDescentOptimizer(rate).minimize(loss)
  return x, scale, rate, loss, train, w


def _rows(i):
  return np.random.RandomState(i).randn(8, 4).astype(np.float32)


def _alternating(make_session, callable_=False):
  """Six training runs, the scale fed 0 in runs 1 and 4 and the rate fed
  0 in runs 2 and 3: (loss of each run, w after each run)."""
  graph = tf.Graph()
  with graph.as_default():
    x, scale, rate, loss, train, w = _scaled_regression()
    init = tf.compat.v1.global_variables_initializer()
  losses, weights = [], []
  with make_session(graph) as sess:
    sess.run(init)
    with_scale = with_rate = plain = None
    if callable_:
      plain = sess.make_callable([loss, train], [x])
      with_scale = sess.make_callable([loss, train], [x, scale])
      with_rate = sess.make_callable([loss, train], [x, rate])
    for i in range(RUNS):
      if i in (1, 4):
        args, feed = (_rows(i), 0.0), {x: _rows(i), scale: 0.0}
        call = with_scale
      elif i in (2, 3):
        args, feed = (_rows(i), 0.0), {x: _rows(i), rate: 0.0}
        call = with_rate
      else:
        args, feed = (_rows(i),), {x: _rows(i)}
        call = plain
      out = call(*args) if callable_ else sess.run([loss, train], feed)
      losses.append(out[0])
      weights.append(sess.run(w))
  return np.array(losses), np.array(weights)


def test_a_fed_default_through_make_callable_is_read_at_one_replica():
  expected = _alternating(lambda g: tf.compat.v1.Session(graph=g), True)
  actual = _alternating(lambda g: tb.TensorBowSession(graph=g, replicas=1),
                        True)
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)
  losses, weights = actual
  assert losses[1] == 0.0 and losses[4] == 0.0
  # Fed a rate of 0, a run leaves w where it was.
  np.testing.assert_array_equal(weights[2], weights[1])
  np.testing.assert_array_equal(weights[3], weights[2])


def test_make_callable_feeds_defaults_as_run_does_at_four_replicas():
  by_run = _alternating(lambda g: tb.TensorBowSession(graph=g, replicas=4))
  by_callable = _alternating(
      lambda g: tb.TensorBowSession(graph=g, replicas=4), True)
  for a, e in zip(by_callable, by_run):
    np.testing.assert_array_equal(a, e)
  assert by_run[0][1] == 0.0 and by_run[0][4] == 0.0


def test_fed_defaults_on_two_devices_are_as_on_one():
  one = _alternating(lambda g: tb.TensorBowSession(graph=g, replicas=4))
  two = _alternating(lambda g: tb.TensorBowSession(
      graph=g, replicas=4, config=TWO_CPUS,
      devices=["/cpu:0", "/cpu:1"]))
  for a, e in zip(two, one):
    np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-7)


# A feedable iterator: training and validation iterators, the one a run
# reads chosen by the string handle it feeds.

TRAIN_ROWS, VALIDATION_ROWS, BATCH = 64, 16, 8


def _feedable_runs(make_session, rounds=4):
  """Each round a training run on the training handle, then an
  evaluation run on the validation handle: (per run its loss and rows x,
  the final weights)."""
  graph = tf.Graph()
  with graph.as_default():
    tx = np.arange(TRAIN_ROWS * 4, dtype=np.float32).reshape(-1, 4) / 100.
    ty = np.arange(TRAIN_ROWS) % 3
    vx = -np.arange(VALIDATION_ROWS * 4, dtype=np.float32).reshape(-1, 4)
    vy = np.arange(VALIDATION_ROWS) % 2
    datasets = [tf.data.Dataset.from_tensor_slices(
        (a, b.astype(np.int64))).batch(BATCH).repeat()
                for a, b in ((tx, ty), (vx / 100., vy))]
    iterators = [tf.compat.v1.data.make_one_shot_iterator(d)
                 for d in datasets]
    handle = tf.compat.v1.placeholder(tf.string, [], name="handle")
    it = tf.compat.v1.data.Iterator.from_string_handle(
        handle, tf.compat.v1.data.get_output_types(iterators[0]),
        tf.compat.v1.data.get_output_shapes(iterators[0]))
    x, y = it.get_next()
    w = tf.compat.v1.get_variable(
        "w", [4, 3], initializer=tf.compat.v1.constant_initializer(0.1))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=tf.matmul(x, w)))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
    handles = [i.string_handle() for i in iterators]
  out = []
  with make_session(graph) as sess:
    sess.run(init)
    training, validation = sess.run(handles)
    for _ in range(rounds):
      out.append(sess.run([loss, x, train], {handle: training})[:2])
      out.append(sess.run([loss, x], {handle: validation}))
    return out, sess.run(w), (tx, vx / 100.)


@pytest.mark.parametrize("fast_kernels", ["0", "all"])
def test_a_feedable_iterator_trains_as_tensorflow_at_one_replica(
    fast_kernels, monkeypatch):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast_kernels)
  expected, expected_w, _ = _feedable_runs(
      lambda g: tf.compat.v1.Session(graph=g))
  actual, actual_w, _ = _feedable_runs(
      lambda g: tb.TensorBowSession(graph=g, replicas=1))
  exact = fast_kernels == "0"
  for (a_loss, a_x), (e_loss, e_x) in zip(actual, expected):
    np.testing.assert_array_equal(a_x, e_x)
    np.testing.assert_allclose(a_loss, e_loss, rtol=0 if exact else 1e-6)
  np.testing.assert_allclose(actual_w, expected_w,
                             rtol=0 if exact else 1e-6)


def test_a_feedable_iterator_reads_where_each_run_points_at_four_replicas():
  runs, _, (tx, vx) = _feedable_runs(
      lambda g: tb.TensorBowSession(graph=g, replicas=4))
  for k, (_, x) in enumerate(runs):
    batch = k // 2
    # Training runs take the training rows in order, whole (their shards'
    # rows concatenated); evaluation runs the validation rows alone.
    rows = (tx[batch * BATCH:(batch + 1) * BATCH] if k % 2 == 0 else
            vx[(batch * BATCH) % VALIDATION_ROWS:][:BATCH])
    np.testing.assert_array_equal(x, rows, err_msg=f"run {k}")


# replicas="auto" on a SparseTensor feed.


@pytest.mark.parametrize("varying", [False, True], ids=["same", "varying"])
def test_auto_keeps_one_replica_for_a_sparse_feed(varying, monkeypatch,
                                                  caplog):
  # A tuner that decides within a few runs, so that one that did not know
  # the feed cannot be split would move L within this test's runs.
  monkeypatch.setattr(autotune, "MIN_SECONDS", 0.0)
  monkeypatch.setattr(autotune, "PATIENCE", 0.0)
  graph = tf.Graph()
  with graph.as_default():
    features = tf.compat.v1.sparse_placeholder(tf.float32, name="features")
    y = tf.compat.v1.placeholder(tf.float32, [None], name="y")
    w = tf.compat.v1.get_variable(
        "w", [64, 1], initializer=tf.compat.v1.zeros_initializer())
    pred = tf.reshape(tf.sparse.sparse_dense_matmul(features, w), [-1])
    loss = tf.reduce_mean(tf.square(pred - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(0)
  caplog.set_level(logging.INFO, logger="tensorbow")
  with tb.TensorBowSession(graph=graph, replicas="auto") as sess:
    sess.run(init)
    for i in range(60):
      count = 12 + (i % 5 if varying else 0)
      indices = np.stack([np.sort(rng.randint(0, 4, count)),
                          rng.randint(0, 64, count)], 1)
      sess.run(train, {features: tf.compat.v1.SparseTensorValue(
          indices, np.ones(count, np.float32), [4, 64]),
                       y: np.ones(4, np.float32)})
    assert sess.replicas == 1
    decisions = sess.tuning_decisions()
  assert len(decisions) == 1, decisions
  assert decisions[0].next[0] == 1
  assert "SparseTensor feed" in decisions[0].reason
  assert "features" in decisions[0].reason
  lines = [r for r in caplog.records if "auto-tuner" in r.getMessage()]
  assert len(lines) == 1
