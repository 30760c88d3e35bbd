"""Pulling the next wave's elements while a wave computes (prefetch.py).

A training run fed by an input pipeline pulls the next wave's elements in
the background. The user must not be able to tell, but for the time: every
scenario here runs with `prefetch=True` and `prefetch=False` (elements
taken only when a wave asks) and must see the same elements, in the same
order, and train the same model, which follows the NumPy reference over
the elements each wave trained on (tests/references.py). Each element
carries its id; a wave fetches the ids it trained on (merged in replica
order, DESIGN.md).
"""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tensorbow
from tensorbow import prefetch

import references

LR, BATCH, ROWS = 0.1, 4, 40  # 10 elements of 4 rows
RNG = np.random.RandomState(3)
X = RNG.randn(ROWS, 3).astype(np.float32)
Y = RNG.randn(ROWS, 1).astype(np.float32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)
# (pipeline, replicas): one element split across the replicas ("batch",
# its first dimension unknown), or one element per replica ("element",
# drop_remainder=True).
PIPELINES = [("batch", 1), ("batch", 2), ("element", 1), ("element", 2)]


def per_wave(pipeline, replicas):
  """Elements a wave takes."""
  return replicas if pipeline == "element" else 1


def dataset(pipeline, rows=ROWS, bad=None):
  """(x, y, id) rows 0 .. rows-1 in elements of BATCH; with `bad`, taking
  the element holding row `bad` fails (InvalidArgumentError)."""
  data = tf.data.Dataset.from_tensor_slices(
      (X[:rows], Y[:rows], np.arange(rows, dtype=np.int64)))
  if bad is not None:
    def check(x, y, i):
      with tf.control_dependencies(
          [tf.debugging.assert_none_equal(i, np.int64(bad))]):
        return tf.identity(x), y, i
    data = data.map(check)
  return data.batch(BATCH, drop_remainder=pipeline == "element")


class Model(object):
  """Least squares on a pipeline's (x, y), by gradient descent."""

  def __init__(self, x, y, ids):
    self.w = tf.compat.v1.get_variable("w", initializer=W0)
    self.loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, self.w) - y))
    self.train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        self.loss)
    self.seen = tf.identity(ids)
    self.ids = ids


def reference(trained, replicas):
  """The central model after waves that trained on rows `trained` (one
  array of ids a wave): SMA, or at L = 1 plain gradient descent."""
  waves = references.sma(
      [W0], [(X[r], Y[r]) for r in trained], replicas, alpha=1.0 / replicas,
      mu=0.9, lr=LR, algorithm="sma" if replicas > 1 else "none")
  return waves[-1][0][0] if waves else W0


def element_ids(first, count=1):
  """The ids of `count` elements from element `first` on."""
  return np.arange(first * BATCH, (first + count) * BATCH)


def train_waves(sess, model, waves, trained):
  for _ in range(waves):
    trained.append(sess.run([model.seen, model.train])[0])


def in_both_modes(scenario, replicas, **kwargs):
  """Runs `scenario(sess, trained)` with prefetch on and off; returns what
  it returned with prefetch on, after checking it is the same off, and
  that the model is the reference over the waves' rows."""
  results = []
  for ahead in (True, False):
    with tf.Graph().as_default():
      trained = []
      with tensorbow.TensorBowSession(replicas=replicas, prefetch=ahead,
                                      **kwargs) as sess:
        seen, w = scenario(sess, trained)
      results.append((seen, trained, w))
  (seen, trained, w), (seen_off, trained_off, w_off) = results
  assert len(seen) == len(seen_off)
  for a, b in zip(seen, seen_off):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert len(trained) == len(trained_off)
  for a, b in zip(trained, trained_off):
    np.testing.assert_array_equal(a, b)
  # Replicas' corrections may sum in either order: equal to rounding.
  np.testing.assert_allclose(w, w_off, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(w, reference(trained, replicas), rtol=1e-5,
                             atol=1e-6)
  return seen, trained


@pytest.mark.parametrize("pipeline,replicas", PIPELINES)
def test_a_plain_run_after_waves_takes_the_element_pulled_ahead(
    pipeline, replicas):
  k, count = 2, per_wave(pipeline, replicas)

  def scenario(sess, trained):
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset(pipeline)).get_next()
    model = Model(x, y, ids)
    sess.run(tf.compat.v1.global_variables_initializer())
    train_waves(sess, model, k, trained)
    w = sess.run(model.w)
    seen = [sess.run((x, y, ids))[2],  # the element pulled ahead
            sess.run(ids),  # the next, from the pipeline
            sess.run(model.loss)]  # the next, as the central model's loss
    train_waves(sess, model, 1, trained)
    return seen + [w], sess.run(model.w)

  seen, trained = in_both_modes(scenario, replicas)
  np.testing.assert_array_equal(np.concatenate(trained[:k]),
                                element_ids(0, k * count))
  np.testing.assert_array_equal(seen[0], element_ids(k * count))
  np.testing.assert_array_equal(seen[1], element_ids(k * count + 1))
  rows = element_ids(k * count + 2)
  np.testing.assert_allclose(
      seen[2], 0.5 * np.mean((X[rows] @ seen[3] - Y[rows]) ** 2), rtol=1e-5)
  np.testing.assert_array_equal(trained[k], element_ids(k * count + 3, count))


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_plain_run_reading_a_shape_of_unknown_rows_takes_the_element_ahead(
    replicas, caplog):
  # tf.shape of a batch of unknown rows (a partitioned embedding lookup
  # reshapes by its ids' shape) stays a Shape op that the fed element
  # satisfies: the run is fed the element pulled ahead, in the
  # pipeline's order, as TensorFlow's session would take it.
  def scenario(sess, trained):
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset("batch")).get_next()
    model = Model(x, y, ids)
    sess.run(tf.compat.v1.global_variables_initializer())
    train_waves(sess, model, 2, trained)
    seen = list(sess.run((tf.shape(x), ids)))
    train_waves(sess, model, 1, trained)
    return seen, sess.run(model.w)

  seen, trained = in_both_modes(scenario, replicas)
  np.testing.assert_array_equal(seen[0], [BATCH, 3])
  np.testing.assert_array_equal(seen[1], element_ids(2))
  np.testing.assert_array_equal(trained[2], element_ids(3))
  assert "reads the shape" not in caplog.text


@pytest.mark.parametrize("pipeline,replicas", [("batch", 2), ("element", 3)])
def test_the_end_of_an_epoch_commits_nothing_and_loses_nothing(
    pipeline, replicas):
  # 10 elements an epoch; by element, 3 a wave: the wave that meets the
  # end took one, which begins the next epoch.
  count = per_wave(pipeline, replicas)

  def scenario(sess, trained):
    iterator = tf.compat.v1.data.make_initializable_iterator(
        dataset(pipeline))
    model = Model(*iterator.get_next())
    sess.run(tf.compat.v1.global_variables_initializer())
    ends = []
    for _ in range(3):
      sess.run(iterator.initializer)
      while True:
        before = sess.run(model.w)
        try:
          train_waves(sess, model, 1, trained)
        except tf.errors.OutOfRangeError:
          np.testing.assert_array_equal(sess.run(model.w), before)
          ends.append(len(trained))
          break
    return ends, sess.run(model.w)

  ends, trained = in_both_modes(scenario, replicas)
  epochs = 3 * 10 // count
  assert len(trained) == epochs
  order = np.concatenate([np.arange(ROWS)] * 3)[:epochs * count * BATCH]
  np.testing.assert_array_equal(np.concatenate(trained), order)
  assert ends == ([10, 20, 30] if count == 1 else [3, 6, 10])


@pytest.mark.parametrize("pipeline,replicas", [("batch", 1), ("element", 2)])
def test_reinitialising_mid_epoch_drops_what_was_pulled_ahead(
    pipeline, replicas):
  # As TensorFlow would: the iterator starts again, and the elements the
  # next wave would have taken from the old position are never seen.
  count = per_wave(pipeline, replicas)

  def scenario(sess, trained):
    iterator = tf.compat.v1.data.make_initializable_iterator(
        dataset(pipeline))
    model = Model(*iterator.get_next())
    sess.run(tf.compat.v1.global_variables_initializer())
    sess.run(iterator.initializer)
    train_waves(sess, model, 2, trained)
    sess.run(iterator.initializer)
    train_waves(sess, model, 2, trained)
    return [sess.run(model.ids)], sess.run(model.w)

  seen, trained = in_both_modes(scenario, replicas)
  np.testing.assert_array_equal(
      np.concatenate(trained),
      np.concatenate([element_ids(0, 2 * count)] * 2))
  np.testing.assert_array_equal(seen[0], element_ids(2 * count))


@pytest.mark.parametrize("pipeline,replicas", PIPELINES)
def test_a_run_of_another_signature_takes_the_next_elements(
    pipeline, replicas):
  count = per_wave(pipeline, replicas)

  def scenario(sess, trained):
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset(pipeline)).get_next()
    model = Model(x, y, ids)
    # A second model on a placeholder: its training runs do not touch the
    # pipeline.
    fed = tf.compat.v1.placeholder(tf.float32, [None, 3])
    v = tf.compat.v1.get_variable("v", initializer=W0)
    other = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        tf.reduce_mean(tf.matmul(fed, v)))
    sess.run(tf.compat.v1.global_variables_initializer())
    train_waves(sess, model, 2, trained)
    sess.run(other, {fed: X[:4]})
    train_waves(sess, model, 1, trained)
    # Another fetch structure over the same pipeline.
    got, _, loss = sess.run([model.seen, model.train, model.loss])
    trained.append(got)
    train_waves(sess, model, 1, trained)
    return [loss, sess.run(v)], sess.run(model.w)

  seen, trained = in_both_modes(scenario, replicas)
  np.testing.assert_array_equal(np.concatenate(trained),
                                element_ids(0, 5 * count))
  assert np.isfinite(seen[0])


def test_another_take_from_the_pipeline_warns_and_loses_nothing(caplog):
  # A second get_next() of the iterator cannot be fed what the first
  # pulled ahead: it takes the element after them, which the next wave
  # trains on later, and says so.
  with tf.Graph().as_default():
    iterator = tf.compat.v1.data.make_one_shot_iterator(dataset("batch"))
    model = Model(*iterator.get_next())
    other = iterator.get_next()[2]
    with tensorbow.TensorBowSession(replicas=2) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      trained = []
      train_waves(sess, model, 1, trained)
      seen = sess.run(other)
      train_waves(sess, model, 2, trained)
  assert "through other ops than the training run" in caplog.text
  np.testing.assert_array_equal(seen, element_ids(2))
  np.testing.assert_array_equal(
      np.concatenate(trained),
      np.concatenate([element_ids(0, 2), element_ids(3)]))


def test_an_error_in_a_pull_ahead_surfaces_at_the_next_training_run():
  # Taking element 3 fails: wave 4 raises, commits nothing, and the
  # iterator goes on with element 4 (as tf.data does after an error).
  def scenario(sess, trained):
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset("batch", bad=13)).get_next()
    model = Model(x, y, ids)
    sess.run(tf.compat.v1.global_variables_initializer())
    train_waves(sess, model, 3, trained)
    before = sess.run(model.w)
    with pytest.raises(tf.errors.InvalidArgumentError, match="assertion"):
      train_waves(sess, model, 1, trained)
    np.testing.assert_array_equal(sess.run(model.w), before)
    train_waves(sess, model, 1, trained)
    return [], sess.run(model.w)

  _, trained = in_both_modes(scenario, 1)
  np.testing.assert_array_equal(
      np.concatenate(trained),
      np.concatenate([element_ids(0, 3), element_ids(4)]))


def test_an_error_pulled_ahead_goes_to_the_plain_run_that_takes_it():
  def scenario(sess, trained):
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset("element", bad=13)).get_next()
    model = Model(x, y, ids)
    sess.run(tf.compat.v1.global_variables_initializer())
    train_waves(sess, model, 1, trained)  # elements 0 and 1
    seen = [sess.run(ids)]  # element 2 was pulled ahead, then the error
    with pytest.raises(tf.errors.InvalidArgumentError, match="assertion"):
      sess.run(ids)
    seen.append(sess.run(ids))
    train_waves(sess, model, 1, trained)
    return seen, sess.run(model.w)

  seen, trained = in_both_modes(scenario, 2)
  np.testing.assert_array_equal(seen[0], element_ids(2))
  np.testing.assert_array_equal(seen[1], element_ids(4))
  np.testing.assert_array_equal(np.concatenate(trained),
                                np.concatenate([element_ids(0, 2),
                                                element_ids(5, 2)]))


def prefetch_threads():
  return [t for t in threading.enumerate() if t.name == "tensorbow-prefetch"]


def queue_model(replicas):
  """A queue of (x, y, id) rows dequeued BATCH at a time (an element per
  replica), its enqueue of the rows fed, and the model."""
  queue = tf.queue.FIFOQueue(ROWS, [tf.float32, tf.float32, tf.int64],
                             shapes=[[3], [1], []])
  rows = tf.compat.v1.placeholder(tf.int64, [None])
  enqueue = queue.enqueue_many((tf.gather(X, rows), tf.gather(Y, rows), rows))
  model = Model(*queue.dequeue_many(BATCH))
  sess = tensorbow.TensorBowSession(replicas=replicas)
  sess.run(tf.compat.v1.global_variables_initializer())
  return queue, rows, enqueue, model, sess


def wait_for(predicate, seconds=10):
  deadline = time.time() + seconds
  while not predicate():
    assert time.time() < deadline, "timed out"
    time.sleep(0.01)


def run_in_thread(fn, seconds=20):
  """fn() on a thread of its own; its result, if it returns in time."""
  out = []
  thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
  thread.start()
  thread.join(seconds)
  assert not thread.is_alive(), "blocked"
  return out[0]


def test_runs_that_do_not_take_from_the_queue_do_not_wait_for_its_pull():
  others = set(prefetch_threads())  # other tests' unclosed sessions
  with tf.Graph().as_default():
    queue, rows, enqueue, model, sess = queue_model(2)
    size = queue.size()
    sess.run(enqueue, {rows: np.arange(8)})
    trained = [sess.run([model.seen, model.train])[0]]
    # The next wave's pull waits on the empty queue; an enqueue, the
    # queue's size and an evaluation on a feed go on meanwhile.
    wait_for(lambda: set(prefetch_threads()) - others)
    assert run_in_thread(lambda: sess.run(size)) == 0
    run_in_thread(lambda: sess.run(enqueue, {rows: np.arange(8, 16)}))
    loss = run_in_thread(lambda: sess.run(
        model.loss, {model.ids.op.outputs[0]: X[:4],
                     model.ids.op.outputs[1]: Y[:4],
                     model.ids.op.outputs[2]: np.arange(4)}))
    assert np.isfinite(loss)
    trained.append(run_in_thread(
        lambda: sess.run([model.seen, model.train])[0]))
    sess.close()
  np.testing.assert_array_equal(np.concatenate(trained), np.arange(16))
  assert not set(prefetch_threads()) - others


def test_closing_the_session_ends_a_pull_in_flight():
  others = set(prefetch_threads())
  with tf.Graph().as_default():
    _, rows, enqueue, model, sess = queue_model(2)
    sess.run(enqueue, {rows: np.arange(8)})
    np.testing.assert_array_equal(
        sess.run([model.seen, model.train])[0], np.arange(8))
    wait_for(lambda: set(prefetch_threads()) - others)
    time.sleep(0.2)  # its pull waits on the empty queue
    start = time.time()
    sess.close()
    assert time.time() - start < 10
    assert not set(prefetch_threads()) - others
    with pytest.raises(RuntimeError, match="closed Session"):
      sess.run(model.train)


def test_closing_the_session_ends_every_pull_of_a_dataset():
  others = set(prefetch_threads())
  with tf.Graph().as_default():
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset("element").repeat()).get_next()
    model = Model(x, y, ids)
    for _ in range(3):
      sess = tensorbow.TensorBowSession(replicas=2)
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(3):
        sess.run(model.train)
      sess.close()
      assert not set(prefetch_threads()) - others


def test_an_idle_thread_ends_and_a_pull_starts_it_again(monkeypatch):
  # A session left unclosed is not kept alive by its thread.
  monkeypatch.setattr(prefetch, "_IDLE_SECONDS", 0.2)
  others = set(prefetch_threads())
  with tf.Graph().as_default():
    x, y, ids = tf.compat.v1.data.make_one_shot_iterator(
        dataset("element")).get_next()
    model = Model(x, y, ids)
    sess = tensorbow.TensorBowSession(replicas=2)
    sess.run(tf.compat.v1.global_variables_initializer())
    trained = []
    for _ in range(2):
      train_waves(sess, model, 1, trained)
      wait_for(lambda: not set(prefetch_threads()) - others)
    sess.close()
  np.testing.assert_array_equal(np.concatenate(trained), element_ids(0, 4))


def test_prefetch_must_be_a_bool():
  with pytest.raises(ValueError, match="prefetch must be True or False, got "
                     "'no'"):
    tensorbow.TensorBowSession(prefetch="no")
