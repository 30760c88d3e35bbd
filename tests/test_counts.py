"""Counts of rows stay exact however a wave goes (DESIGN.md, "What leaves
the replicas"; issue #60): a counter of rows and a metric's count, over
waves whose L changes, batches from a pipeline, two devices, a wave that
fails and a replica left out for a non-finite loss. The idioms of the
counts are in tests/idioms/test_batch_totals.py.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

TWO_CPUS = tf.compat.v1.ConfigProto(device_count={"CPU": 2})


def _counting(x, y, metric=True):
  """A least-squares model on rows `x`, `y` whose train op also counts
  the rows (an int64 counter) and, with `metric`, updates metrics.mean of
  the squared errors; returns (train op, counter, the metric's count
  variable or the counter)."""
  w = tf.compat.v1.get_variable(
      "w", [3, 1], initializer=tf.compat.v1.constant_initializer(0.1))
  errors = tf.square(tf.matmul(x, w) - y)
  seen = tf.compat.v1.get_variable("seen", [], tf.int64, trainable=False,
                                    initializer=tf.zeros_initializer())
  step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
      tf.reduce_mean(errors))
  counted = seen.assign_add(tf.cast(tf.shape(x)[0], tf.int64))
  if not metric:
    return tf.group(step, counted), seen, seen
  _, update = tf.compat.v1.metrics.mean(errors, name="errors")
  count = [v for v in tf.compat.v1.local_variables()
           if v.name.endswith("count:0")][0]
  return tf.group(step, counted, update), seen, count


def _fed(metric=True):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    train, seen, count = _counting(x, y, metric)
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
  return graph, x, y, train, seen, count, init


def _rows(i, n):
  rng = np.random.RandomState(i)
  return (rng.randn(n, 3).astype(np.float32),
          rng.randn(n, 1).astype(np.float32))


def test_counts_stay_exact_while_l_changes():
  graph, x, y, train, seen, count, init = _fed()
  rows = 0
  with tb.TensorBowSession(graph=graph, replicas=1) as sess:
    sess.run(init)
    for replicas in (1, 2, 4, 1, 4, 2):
      if replicas != sess.replicas:
        sess.retune(replicas)
      for i, n in enumerate((10, 7, 3)):
        xs, ys = _rows(i, n)
        sess.run(train, {x: xs, y: ys})
        rows += n
    assert sess.run(seen) == rows
    assert sess.run(count) == rows


@pytest.mark.parametrize("replicas", [2, 4])
def test_counts_over_a_pipelines_batches_count_every_row(replicas):
  # Batches of 10 rows from a tf.data pipeline, the last of 6, split
  # across the replicas.
  graph = tf.Graph()
  with graph.as_default():
    xs, ys = _rows(0, 36)
    data = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(10)
    x, y = tf.compat.v1.data.make_one_shot_iterator(data).get_next()
    train, seen, count = _counting(x, y)
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
  with tb.TensorBowSession(graph=graph, replicas=replicas) as sess:
    sess.run(init)
    for _ in range(4):
      sess.run(train)
    assert sess.run(seen) == 36
    assert sess.run(count) == 36


def test_counts_on_two_devices_are_as_on_one():
  graph, x, y, train, seen, count, init = _fed()
  with graph.as_default():
    rows = tf.shape(x)[0]
  with tb.TensorBowSession(graph=graph, replicas=4, config=TWO_CPUS,
                           devices=["/cpu:0", "/cpu:1"]) as sess:
    sess.run(init)
    for i, n in enumerate((10, 7, 3, 12)):
      xs, ys = _rows(i, n)
      # Fetched, the row count is the whole batch's too.
      assert sess.run([train, rows], {x: xs, y: ys})[1] == n
    assert sess.run(seen) == 32
    assert sess.run(count) == 32


def test_a_failed_wave_moves_no_count():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    checked = tf.debugging.check_numerics(x, "bad rows")
    train, seen, count = _counting(checked, y)
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
  with tb.TensorBowSession(graph=graph, replicas=4) as sess:
    sess.run(init)
    xs, ys = _rows(0, 8)
    sess.run(train, {x: xs, y: ys})
    bad = xs.copy()
    bad[6, 0] = np.nan  # replica 3's shard
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad rows"):
      sess.run(train, {x: bad, y: ys})
    assert sess.run(seen) == 8 and sess.run(count) == 8
    sess.run(train, {x: xs, y: ys})
    assert sess.run(seen) == 16 and sess.run(count) == 16


def test_a_replica_left_out_for_a_nonfinite_loss_counts_nothing():
  # (A metric's update waits on its values through a control dependency,
  # which nonfinite="skip" refuses: the counter alone.)
  graph, x, y, train, seen, count, init = _fed(metric=False)
  with tb.TensorBowSession(graph=graph, replicas=4,
                           nonfinite="skip") as sess:
    sess.run(init)
    xs, ys = _rows(0, 8)
    sess.run(train, {x: xs, y: ys})
    bad = ys.copy()
    bad[6, 0] = np.inf  # replica 3's shard: rows 6 and 7
    sess.run(train, {x: xs, y: bad})
    assert sess.run(seen) == 8 + 6
    assert sess.run(count) == 8 + 6
