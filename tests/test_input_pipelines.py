"""Training runs whose batch comes from an input pipeline (DESIGN.md, "Input
pipelines").

A `tf.data` iterator's `get_next()` or a queue's dequeue in a training run
is taken before the wave: an element of unknown batch size is split across
the replicas as a fed batch would be; with a batch size built into the
graph, each replica takes an element of its own. The model is least
squares trained by gradient descent: the central model follows the NumPy
SMA reference over the pipeline's batches in order (tests/references.py).
"""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tensorbow

import references

LR, REPLICAS, BATCH = 0.1, 4, 8
RNG = np.random.RandomState(5)
X = RNG.randn(40, 3).astype(np.float32)
Y = RNG.randn(40, 1).astype(np.float32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)


def batches(x=X, y=Y, size=BATCH):
  return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def sma(data, replicas=REPLICAS, w0=W0):
  """Per wave (central w, fetched loss) of SMA over `data`'s batches."""
  return [(params[0], loss) for params, loss, _, _ in references.sma(
      [w0], data, replicas, alpha=1.0 / replicas, mu=0.9, lr=LR)]


def model(x, y):
  w = tf.compat.v1.get_variable("w", initializer=W0)
  loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
  train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss)
  return w, loss, train


def train_epoch(sess, loss, train, w):
  """Trains until the pipeline ends; returns the losses. The run that hits
  the end must change nothing."""
  losses = []
  while True:
    before = sess.run(w)
    try:
      losses.append(sess.run([loss, train])[0])
    except tf.errors.OutOfRangeError:
      np.testing.assert_array_equal(sess.run(w), before)
      return losses


def test_one_shot_iterator_trains_as_the_fed_batches_would():
  with tf.Graph().as_default():
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)
    x, y = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    w, loss, train = model(x, y)
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      losses = train_epoch(sess, loss, train, w)
      final = sess.run(w)
      # Still at the end: every later run raises too.
      with pytest.raises(tf.errors.OutOfRangeError):
        sess.run(train)
  waves = sma(batches())
  assert len(losses) == len(waves) == 5
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)


def test_initializable_iterator_trains_epoch_after_epoch():
  with tf.Graph().as_default():
    features = tf.compat.v1.placeholder(tf.float32, [None, 3])
    labels = tf.compat.v1.placeholder(tf.float32, [None, 1])
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    iterator = tf.compat.v1.data.make_initializable_iterator(
        dataset.batch(BATCH))
    x, y = iterator.get_next()
    w, loss, train = model(x, y)
    losses = []
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(2):
        sess.run(iterator.initializer, {features: X, labels: Y})
        losses += train_epoch(sess, loss, train, w)
      final = sess.run(w)
  waves = sma(batches() * 2)
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)


def test_reinitializable_iterator_trains_and_evaluates():
  with tf.Graph().as_default():
    train_data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)
    test_data = tf.data.Dataset.from_tensor_slices(
        (X[:12] * 2, Y[:12])).batch(12)
    iterator = tf.compat.v1.data.Iterator.from_structure(
        tf.compat.v1.data.get_output_types(train_data),
        tf.compat.v1.data.get_output_shapes(train_data))
    x, y = iterator.get_next()
    w, loss, train = model(x, y)
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(iterator.make_initializer(train_data))
      losses = train_epoch(sess, loss, train, w)
      sess.run(iterator.make_initializer(test_data))
      test_loss = sess.run(loss)  # a plain run: the central model
      final = sess.run(w)
  waves = sma(batches())
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  r = X[:12] * 2 @ final - Y[:12]
  np.testing.assert_allclose(test_loss, 0.5 * np.mean(r ** 2), rtol=1e-5)


def queue_model():
  """(queue, its enqueue of X and Y, w, loss, train) of `model` over the
  queue's batches of up to BATCH rows."""
  queue = tf.queue.FIFOQueue(64, [tf.float32, tf.float32], shapes=[[3], [1]])
  enqueue = queue.enqueue_many((X, Y))
  return (queue, enqueue) + model(*queue.dequeue_up_to(BATCH))


def test_queue_dequeue_trains_as_the_fed_batches_would():
  with tf.Graph().as_default():
    queue, enqueue, w, loss, train = queue_model()
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(enqueue)
      sess.run(queue.close())
      losses = train_epoch(sess, loss, train, w)
      final = sess.run(w)
  waves = sma(batches())
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)


def ids_model(x, y, ids):
  """`model`, plus a per-example fetch recording the rows each replica
  trained on (merged in replica order, DESIGN.md, "Input pipelines")."""
  w, loss, train = model(x, y)
  return w, loss, train, tf.identity(ids)


# 80 rows: ten elements of BATCH.
X80 = np.concatenate([X, 0.5 - X])
Y80 = np.concatenate([Y, 2 * Y])


def element_dataset(rows):
  ids = np.arange(rows, dtype=np.int64)
  return tf.data.Dataset.from_tensor_slices(
      (X80[:rows], Y80[:rows], ids)).batch(BATCH, drop_remainder=True)


def test_static_batch_gives_each_replica_an_element_of_its_own():
  # With drop_remainder the batch size is part of the graph (the gradient
  # of the mean divides by it): each replica takes an element of its own,
  # L elements a wave, as Crossbow's learners each keep their batch size.
  with tf.Graph().as_default():
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        element_dataset(80)).get_next()
    assert x.shape.as_list() == [BATCH, 3]
    w, loss, train, seen = ids_model(x, y, ids)
    step = tf.compat.v1.train.get_or_create_global_step()
    with tf.control_dependencies([train]):
      train = tf.compat.v1.assign_add(step, 1)
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      rows, losses = [], []
      for _ in range(2):
        got_ids, got_x, value, _ = sess.run([seen, x, loss, train])
        rows.append(got_ids)
        losses.append(value)
        # The element fetched whole: the wave's L elements, in order.
        np.testing.assert_array_equal(got_x, X80[got_ids])
      # 10 elements of 8: the third wave finds 2 and commits nothing.
      before = sess.run([w, step])
      with pytest.raises(tf.errors.OutOfRangeError):
        sess.run([loss, train])
      after = sess.run([w, step])
  np.testing.assert_array_equal(after[0], before[0])
  assert before[1] == after[1] == 2  # one global step a wave
  # Replica r trained on element r of its wave: rows 32k + 8r ... + 7.
  np.testing.assert_array_equal(np.concatenate(rows), np.arange(64))
  waves = sma([(X80[i:i + 32], Y80[i:i + 32]) for i in (0, 32)])
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(before[0], waves[-1][0], rtol=1e-5, atol=1e-6)


def test_elements_left_at_the_end_begin_the_next_epoch():
  # 5 elements an epoch, 4 a wave: what a wave took before the end is
  # trained first in the next epoch, so every element is trained once.
  with tf.Graph().as_default():
    iterator = tf.compat.v1.data.make_initializable_iterator(
        element_dataset(40))
    x, y, ids = iterator.get_next()
    w, loss, train, seen = ids_model(x, y, ids)
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      rows, losses = [], []
      for _ in range(4):
        sess.run(iterator.initializer)
        while True:
          try:
            got, value, _ = sess.run([seen, loss, train])
          except tf.errors.OutOfRangeError:
            break
          rows.append(got)
          losses.append(value)
      final = sess.run(w)
  # 4 epochs of 5 elements: 5 waves of 4.
  order = np.concatenate([np.arange(40)] * 4)
  np.testing.assert_array_equal(np.concatenate(rows), order)
  waves = sma([(X80[order[i:i + 32]], Y80[order[i:i + 32]])
               for i in range(0, 160, 32)])
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)


def image_source(source):
  """(runs to set it up, x, y): batches of BATCH rows of X80, Y80, each row
  of X80 an image of 1 x 3 pixels, from a `tf.data` iterator or a queue."""
  images = X80.reshape(-1, 1, 3, 1)
  if source == "dataset":
    dataset = tf.data.Dataset.from_tensor_slices((images, Y80)).batch(
        BATCH, drop_remainder=True)
    x, y = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    return [], x, y
  queue = tf.queue.FIFOQueue(80, [tf.float32, tf.float32],
                             shapes=[[1, 3, 1], [1]])
  x, y = queue.dequeue_many(BATCH)
  return [queue.enqueue_many((images, Y80)), queue.close()], x, y


def train_convolution(source, make_session):
  """(losses, final w as [3, 1]) of `model` written as a convolution over
  `image_source(source)`, one epoch in a session `make_session()`."""
  with tf.Graph().as_default():
    setup, x, y = image_source(source)
    w = tf.compat.v1.get_variable("w", initializer=W0.reshape(1, 3, 1, 1))
    # The convolution's gradient takes the batch's shape (ShapeN), which
    # Grappler makes a constant waiting on the op the batch comes from: fed
    # the batch, a run still ran that op and took an element more.
    out = tf.reshape(tf.nn.conv2d(x, w, [1, 1, 1, 1], "VALID"), [-1, 1])
    loss = 0.5 * tf.reduce_mean(tf.square(out - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss)
    with make_session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for op in setup:
        sess.run(op)
      return train_epoch(sess, loss, train, w), sess.run(w).reshape(3, 1)


@pytest.mark.parametrize("source", ["dataset", "queue"])
def test_one_replica_takes_the_elements_tensorflow_takes(source):
  losses, final = train_convolution(
      source, lambda: tensorbow.TensorBowSession(replicas=1))
  expected, expected_final = train_convolution(source, tf.compat.v1.Session)
  assert len(losses) == len(expected) == 10
  np.testing.assert_allclose(losses, expected, rtol=1e-6)
  np.testing.assert_allclose(final, expected_final, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("source", ["dataset", "queue"])
def test_replicas_take_one_element_each_through_a_convolution(source):
  losses, final = train_convolution(
      source, lambda: tensorbow.TensorBowSession(replicas=2))
  # 10 elements: 5 waves of 2, replica r on element r of its wave.
  waves = sma([(X80[i:i + 16], Y80[i:i + 16]) for i in range(0, 80, 16)],
              replicas=2)
  assert len(losses) == len(waves) == 5
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)


def test_one_replica_refuses_a_graph_it_cannot_copy_reading_the_shape():
  # Two steps on one variable in one run: TensorBow cannot copy that graph,
  # and the user's own graph fed its batch would take an element more.
  with tf.Graph().as_default():
    _, x, y = image_source("dataset")
    w = tf.compat.v1.get_variable("w", initializer=W0.reshape(1, 3, 1, 1))
    out = tf.reshape(tf.nn.conv2d(x, w, [1, 1, 1, 1], "VALID"), [-1, 1])
    loss = 0.5 * tf.reduce_mean(tf.square(out - y))
    sgd = tf.compat.v1.train.GradientDescentOptimizer(LR)
    train = tf.group(sgd.minimize(loss), sgd.minimize(loss))
    with tensorbow.TensorBowSession(replicas=1) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      before = sess.run(w)
      with pytest.raises(tf.errors.UnimplementedError,
                         match="reads the batch's shape"):
        sess.run(train)
      np.testing.assert_array_equal(sess.run(w), before)


def test_a_plain_run_reading_the_shape_takes_its_own_element(caplog):
  # After a wave, the next wave's elements are pulled ahead. A plain run
  # of the gradients (whose ShapeN reads the batch's shape) fed one of them
  # would still run get_next and lose the element after them: it takes its
  # own instead, out of order, and no element is lost or trained twice.
  with tf.Graph().as_default():
    dataset = tf.data.Dataset.from_tensor_slices(
        (X80.reshape(-1, 1, 3, 1), Y80, np.arange(80))).batch(
            BATCH, drop_remainder=True)
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    w = tf.compat.v1.get_variable("w", initializer=W0.reshape(1, 3, 1, 1))
    out = tf.reshape(tf.nn.conv2d(x, w, [1, 1, 1, 1], "VALID"), [-1, 1])
    loss = 0.5 * tf.reduce_mean(tf.square(out - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss)
    seen = tf.identity(ids)
    gradient = tf.gradients(loss, w)[0]
    with tensorbow.TensorBowSession(replicas=2) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      trained = [sess.run([seen, train])[0]]
      plain, _ = sess.run([seen, gradient])
      while True:
        try:
          trained.append(sess.run([seen, train])[0])
        except tf.errors.OutOfRangeError:
          break
  # Elements 0-8 once each; the wave that met the end carries element 9.
  rows = np.concatenate(trained)
  np.testing.assert_array_equal(
      np.sort(np.concatenate([rows, plain])), np.arange(72))
  np.testing.assert_array_equal(plain, np.arange(32, 40))  # element 4
  assert "reads the shape" in caplog.text


def test_a_refused_run_keeps_the_elements_it_took():
  with tf.Graph().as_default():
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        element_dataset(64)).get_next()
    lr = tf.compat.v1.placeholder(tf.float32, [])
    w = tf.compat.v1.get_variable("w", initializer=W0)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(lr).minimize(loss)
    seen = tf.identity(ids)
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      with pytest.raises(ValueError, match="Cannot feed value of shape"):
        sess.run([seen, train], {lr: [LR, LR]})
      got, _ = sess.run([seen, train], {lr: LR})
  np.testing.assert_array_equal(got, np.arange(32))


def test_fetching_the_element_returns_it_whole():
  with tf.Graph().as_default():
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)
    x, y = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    _, _, train = model(x, y)
    with tensorbow.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for bx, by in batches()[:2]:
        got_x, got_y, _ = sess.run([x, y, train])
        np.testing.assert_array_equal(got_x, bx)
        np.testing.assert_array_equal(got_y, by)


def test_a_last_element_smaller_than_the_replicas_trains_one_per_row():
  # 36 rows in batches of 8: the last element has 4 rows; 5 replicas train
  # 4 of them, one row each, as a fed batch would (DESIGN.md).
  with tf.Graph().as_default():
    dataset = tf.data.Dataset.from_tensor_slices((X[:36], Y[:36])).batch(
        BATCH)
    x, y = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
    w, loss, train = model(x, y)
    with tensorbow.TensorBowSession(replicas=5) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      losses = train_epoch(sess, loss, train, w)
      final = sess.run(w)
  waves = sma(batches(X[:36], Y[:36]), replicas=5)
  assert len(losses) == len(waves) == 5
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)


def test_an_enqueue_callable_is_tensorflows_own():
  # A queue runner calls make_callable(enqueue) once a record, from several
  # threads: a run that no replica's state concerns goes straight to
  # TensorFlow's callable, not through TensorBowSession.run.
  with tf.Graph().as_default():
    queue, enqueue, w, loss, train = queue_model()
    sess = tensorbow.TensorBowSession(replicas=REPLICAS)
    sess.run(tf.compat.v1.global_variables_initializer())
    runs = []
    run = sess.run
    sess.run = lambda *a, **k: runs.append(a) or run(*a, **k)
    enqueue_call = sess.make_callable(enqueue)
    size_call = sess.make_callable(queue.size())
    read_call = sess.make_callable(w)  # reads a replicated variable
    assert enqueue_call() is None and size_call() == 40 and not runs
    losses = [sess.run([loss, train])[0] for _ in range(5)]
    np.testing.assert_array_equal(read_call(), sess.run(w))
    assert len(runs) == 5 + 1 + 1  # the waves, the read, the check
    sess.run(queue.close())
    with pytest.raises(tf.errors.CancelledError):
      enqueue_call()
    sess.close()
  waves = sma(batches())
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)


def test_queue_runner_feeds_training_runs_that_wait_for_it():
  with tf.Graph().as_default():
    queue = tf.queue.FIFOQueue(16, [tf.float32, tf.float32],
                               shapes=[[3], [1]])
    runner = tf.compat.v1.train.QueueRunner(
        queue, [queue.enqueue_many((X, Y))])
    x, y = queue.dequeue_up_to(BATCH)
    w, loss, train = model(x, y)
    close = queue.close(cancel_pending_enqueues=True)
    sess = tensorbow.TensorBowSession(replicas=REPLICAS)
    sess.run(tf.compat.v1.global_variables_initializer())
    coord = tf.train.Coordinator()
    threads = runner.create_threads(sess, coord=coord)
    losses = []
    # The first wave waits inside TensorFlow for the runner's enqueues, which
    # are plain runs of the same session.
    trainer = threading.Thread(
        target=lambda: losses.extend(sess.run([loss, train])[0]
                                     for _ in range(10)), daemon=True)
    trainer.start()
    time.sleep(0.5)
    for thread in threads:
      thread.start()
    trainer.join(60)
    finished = not trainer.is_alive()
    coord.request_stop()
    sess.run(close)
    coord.join(threads, stop_grace_period_secs=10)
    final = sess.run(w)
    sess.close()
  assert finished, "the training run blocked the queue runner"
  waves = sma(batches() * 2)
  np.testing.assert_allclose(losses, [l for _, l in waves], rtol=1e-5)
  np.testing.assert_allclose(final, waves[-1][0], rtol=1e-5, atol=1e-6)
