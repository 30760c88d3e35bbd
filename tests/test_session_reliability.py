"""TensorBowSession under a careless or concurrent caller.

Fetched arrays belong to the caller; a failed call changes nothing it did
not execute; runs that block inside TensorFlow do not block the session's
other runs; a closed session refuses runs as TensorFlow's does (failed
training runs and interrupts: test_atomic_waves.py). The model is least
squares on fixed data, as in test_session.py; "the same as a session that
never saw the call" is checked against a second session fed only the good
calls.
"""
import os
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import runtime as tb_runtime

RNG = np.random.RandomState(11)
X = RNG.randn(12, 3).astype(np.float32)
Y = RNG.randn(12, 1).astype(np.float32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)


class Model(object):
  """Least squares with momentum (slots and z_prev matter), in its own
  graph, with a few extra ops the tests fetch."""

  def __init__(self, use_resource=True):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
      self.y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
      self.scale = tf.compat.v1.placeholder_with_default(
          np.ones(3, np.float32), [3], name="scale")  # not a batch feed
      self.w = tf.compat.v1.get_variable("w", initializer=W0,
                                         use_resource=use_resource)
      checked = tf.debugging.check_numerics(self.x, "bad input")
      pred = tf.matmul(checked * self.scale, self.w)
      self.loss = 0.5 * tf.reduce_mean(tf.square(pred - self.y))
      self.train = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(
          self.loss)
      self.x_out = tf.identity(self.x)
      self.scale_out = tf.identity(self.scale)
      self.w_flat = tf.reshape(self.w, [-1])
      self.counter = tf.compat.v1.get_variable(
          "counter", initializer=0, trainable=False,
          use_resource=use_resource)
      self.count = tf.compat.v1.assign_add(self.counter, 1)
      self.init = tf.compat.v1.global_variables_initializer()
      self.slot = [v for v in tf.compat.v1.global_variables()
                   if v.op.name.startswith("w/Momentum")][0]

  def session(self, replicas=3):
    sess = tb.TensorBowSession(graph=self.graph, replicas=replicas)
    sess.run(self.init)
    return sess

  def step(self, sess):
    return sess.run([self.loss, self.train], {self.x: X, self.y: Y})[0]


def aligned(values, alignment=64):
  """A copy of `values` whose data starts on an `alignment`-byte boundary,
  so TensorFlow takes the buffer as it is instead of copying it."""
  buffer = np.empty(values.nbytes + alignment, np.uint8)
  offset = -buffer.ctypes.data % alignment
  out = buffer[offset:offset + values.nbytes].view(values.dtype).reshape(
      values.shape)
  out[...] = values
  return out


def assert_same_training(sess, model, reference, ref_model, waves=3):
  """The next waves of `sess` equal those of `reference`."""
  for _ in range(waves):
    np.testing.assert_allclose(model.step(sess), ref_model.step(reference),
                               rtol=1e-6)
  np.testing.assert_allclose(sess.run(model.w), reference.run(ref_model.w),
                             rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(sess.run(model.slot),
                             reference.run(ref_model.slot), rtol=1e-6,
                             atol=1e-7)


# ---- Fetched arrays belong to the caller -------------------------------------


@pytest.mark.parametrize("replicas", [1, 2])
def test_fetched_arrays_do_not_alias_feeds(replicas):
  m = Model()
  with m.session(replicas) as sess:
    x, scale = aligned(X), aligned(np.full(3, 2.0, np.float32))
    x_out, scale_out, _ = sess.run([m.x_out, m.scale_out, m.train],
                                   {m.x: x, m.y: Y, m.scale: scale})
    x[...] = -7.0
    scale[...] = -7.0
    np.testing.assert_array_equal(x_out, X)
    np.testing.assert_array_equal(scale_out, np.full(3, 2.0, np.float32))


def test_fetched_reshape_of_a_reference_variable_is_a_snapshot():
  m = Model(use_resource=False)
  with m.session(2) as sess:
    w_flat, _ = sess.run([m.w_flat, m.train], {m.x: X, m.y: Y})
    copy = w_flat.copy()
    for _ in range(2):
      m.step(sess)
    np.testing.assert_array_equal(w_flat, copy)


def test_bfloat16_fetch_is_merged_like_other_floats():
  m = Model()
  with m.graph.as_default():
    loss16 = tf.cast(m.loss, tf.bfloat16)
  with m.session(2) as sess:
    got, _ = sess.run([loss16, m.train], {m.x: X, m.y: Y})
  bfloat16 = tf.bfloat16.as_numpy_dtype
  # Each replica's loss at W0 on its shard, in bfloat16, then their
  # shard-weighted mean, as for any float scalar.
  shards = list(zip(np.array_split(X, 2), np.array_split(Y, 2)))
  losses = [bfloat16(0.5 * np.mean((xs @ W0 - ys) ** 2)) for xs, ys in shards]
  expected = bfloat16(np.average(np.float64(losses),
                                 weights=[len(xs) for xs, _ in shards]))
  assert got.dtype == bfloat16
  assert got == expected and losses[0] != expected


def test_unfetchable_dtype_fails_before_the_wave():
  m = Model()
  with m.graph.as_default():
    tensor_list = tf.raw_ops.EmptyTensorList(
        element_shape=tf.constant([], tf.int32), max_num_elements=-1,
        element_dtype=tf.float32,
        name="list")
  with m.session(2) as sess:
    m.step(sess)
    w = sess.run(m.w)
    assert tf.variant.as_datatype_enum not in tb_runtime.fetchable_dtypes()
    with pytest.raises(TypeError, match=r"cannot fetch list:0 \(variant\) in "
                       "a training run"):
      sess.run([tensor_list, m.train], {m.x: X, m.y: Y})
    np.testing.assert_array_equal(sess.run(m.w), w)
    ref_model = Model()
    with ref_model.session(2) as reference:
      ref_model.step(reference)
      assert_same_training(sess, m, reference, ref_model)


# ---- Failed calls change nothing they did not execute ------------------------


@pytest.mark.parametrize("use_resource", [True, False])
def test_failed_plain_runs_leave_training_as_it_was(use_resource):
  m, ref_model = Model(use_resource), Model(use_resource)
  with m.session() as sess, ref_model.session() as reference:
    for _ in range(2):
      m.step(sess)
      ref_model.step(reference)
    with pytest.raises(TypeError):  # a feed key TensorFlow rejects
      sess.run(m.loss, {3: X})
    bad = X.copy()
    bad[0, 0] = np.nan  # fails in check_numerics: executed, wrote nothing
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad input"):
      sess.run(m.loss, {m.x: bad, m.y: Y})
    # Writes only a variable that is not replicated.
    assert sess.run(m.count) == 1
    assert_same_training(sess, m, reference, ref_model)


def test_failed_restore_leaves_training_as_it_was(tmp_path):
  m, ref_model = Model(), Model()
  with m.graph.as_default():
    saver = tf.compat.v1.train.Saver()
  path = str(tmp_path / "model.ckpt")
  with m.session() as sess, ref_model.session() as reference:
    for _ in range(2):
      m.step(sess)
      ref_model.step(reference)
    saver.save(sess, path)
    data = path + ".data-00000-of-00001"
    with open(data, "r+b") as f:  # corrupt every value
      f.write(b"\xff" * os.path.getsize(data))
    with pytest.raises(tf.errors.DataLossError):
      saver.restore(sess, path)
    assert_same_training(sess, m, reference, ref_model)


def test_plain_write_of_a_model_variable_reseeds_it():
  m, ref_model = Model(), Model()
  with m.session() as sess, ref_model.session() as reference:
    m.step(sess)
    sess.run(m.init)  # a write of every variable: back to the start
    assert_same_training(sess, m, reference, ref_model)


# ---- Concurrency and life cycle ----------------------------------------------


def _in_thread(target, timeout=60):
  """Runs `target` in a daemon thread; returns (finished, result or error)."""
  out = {}

  def run():
    try:
      out["result"] = target()
    except Exception as e:  # pylint: disable=broad-except
      out["error"] = e

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  thread.join(timeout)
  return not thread.is_alive(), out


def test_blocked_plain_run_does_not_block_other_runs():
  m = Model()
  with m.graph.as_default():
    queue = tf.queue.FIFOQueue(4, tf.float32, shapes=[[3]])
    enqueue = queue.enqueue([tf.constant([1.0, 2.0, 3.0])])
    dequeue = queue.dequeue()
  sess = m.session(2)
  options = tf.compat.v1.RunOptions(timeout_in_ms=20000)
  results = []
  waiting = threading.Thread(
      target=lambda: results.append(sess.run(dequeue, options=options)),
      daemon=True)
  waiting.start()
  # While the dequeue waits inside TensorFlow, training and the enqueue
  # that releases it go on.
  finished, out = _in_thread(lambda: (m.step(sess), sess.run(enqueue)),
                             timeout=10)
  waiting.join(30)
  _in_thread(sess.close, timeout=30)
  assert finished and "error" not in out, out
  assert not waiting.is_alive()
  np.testing.assert_array_equal(results, [[1.0, 2.0, 3.0]])


def test_queue_runner_pipeline_feeds_a_session():
  m = Model()
  with m.graph.as_default():
    queue = tf.queue.FIFOQueue(8, tf.float32, shapes=[[3]])
    counter = tf.Variable(0.0, trainable=False)
    enqueue = queue.enqueue([tf.fill([3], counter.assign_add(1.0))])
    runner = tf.compat.v1.train.QueueRunner(queue, [enqueue])
    dequeue = queue.dequeue()
    init_counter = counter.initializer
  with m.graph.as_default():
    close_queue = queue.close(cancel_pending_enqueues=True)
  sess = m.session(2)
  sess.run(init_counter)
  coord = tf.train.Coordinator()
  threads = runner.create_threads(sess, coord=coord)
  # The consumer first, as in a training loop that starts before its input
  # pipeline has anything: its dequeue waits inside TensorFlow.
  consumer = threading.Thread(
      target=lambda: out.update(result=[sess.run(dequeue)[0]
                                        for _ in range(5)]),
      daemon=True)
  out = {}
  consumer.start()
  time.sleep(0.5)
  for thread in threads:
    thread.start()
  consumer.join(30)
  finished = not consumer.is_alive()
  coord.request_stop()
  # In threads: a session that deadlocks must fail this test, not hang it.
  stopped, _ = _in_thread(lambda: sess.run(close_queue), timeout=30)
  coord.join(threads, stop_grace_period_secs=10)
  _in_thread(sess.close, timeout=30)
  assert finished and stopped, "a run blocked the others"
  assert out["result"] == [1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_concurrent_first_training_runs_plan_once(use_resource):
  """Four threads make the first run of the same fetches at once: one
  plan; every thread gets a wave's loss, and the waves are those of four
  runs in turn."""
  model, ref_model = Model(use_resource), Model(use_resource)
  with model.session() as sess, ref_model.session() as reference:
    start = threading.Barrier(4)
    losses, errors = [], []

    def step():
      start.wait()
      try:
        losses.append(model.step(sess))
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=step) for _ in range(4)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(120)
    assert not errors and len(losses) == 4
    assert len(sess.plans()) == 1
    expected = [ref_model.step(reference) for _ in range(4)]
    np.testing.assert_allclose(sorted(losses), sorted(expected), rtol=1e-6)
    np.testing.assert_allclose(sess.run(model.w), reference.run(ref_model.w),
                               rtol=1e-6, atol=1e-7)


def test_runs_after_close_raise_tensorflows_error():
  m = Model()
  sess = m.session(2)
  m.step(sess)
  sess.close()
  # The training run that ran before, a new one, and a plain run.
  for run in (lambda: m.step(sess), lambda: sess.run(m.train, {m.x: X}),
              lambda: sess.run(m.w)):
    with pytest.raises(RuntimeError,
                       match=r"^Attempted to use a closed Session\.$"):
      run()


def test_close_during_training_gives_runs_tensorflows_error():
  m = Model()
  sess = m.session(2)
  errors = []
  started = threading.Event()

  def train():
    try:
      while True:
        m.step(sess)
        started.set()
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)
      started.set()

  thread = threading.Thread(target=train, daemon=True)
  thread.start()
  assert started.wait(60)
  sess.close()
  thread.join(60)
  assert not thread.is_alive()
  assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
  assert str(errors[0]) == "Attempted to use a closed Session."


# ---- What a session keeps ----------------------------------------------------


def test_cached_routes_keep_no_feed_alive():
  import weakref  # pylint: disable=g-import-not-at-top

  class Batch(np.ndarray):
    pass  # an ndarray that takes weak references

  m = Model()
  with m.session(2) as sess:
    x = X.copy().view(Batch)
    ref = weakref.ref(x)
    sess.run([m.loss, m.train], {m.x: x, m.y: Y})
    sess.run(m.loss, {m.x: x, m.y: Y})
    del x
    assert ref() is None


# ---- Exact resume from a checkpoint ------------------------------------------


OPTIMIZERS = {
    "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.05),
}


def _saved_model(optimizer, use_resource):
  """Least squares with `optimizer` and a Saver, in a new graph."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w = tf.compat.v1.get_variable("w", initializer=W0,
                                  use_resource=use_resource)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = OPTIMIZERS[optimizer]().minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
    saver = tf.compat.v1.train.Saver()
  return graph, x, y, w, train, init, saver


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_restore_resumes_exactly(tmp_path, optimizer, use_resource):
  path = str(tmp_path / "model.ckpt")
  graph, x, y, w, train, init, saver = _saved_model(optimizer, use_resource)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    for _ in range(3):
      sess.run(train, {x: X, y: Y})
    saver.save(sess, path)
    for _ in range(5):
      sess.run(train, {x: X, y: Y})
    continued = sess.run(w)
  graph, x, y, w, train, init, saver = _saved_model(optimizer, use_resource)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    saver.restore(sess, path)
    for _ in range(5):
      sess.run(train, {x: X, y: Y})
    np.testing.assert_allclose(sess.run(w), continued, rtol=1e-6, atol=1e-7)
  # The checkpoint itself is plain TensorFlow's.
  with tf.compat.v1.Session(graph=graph) as plain:
    saver.restore(plain, path)


def test_write_after_restore_wins_over_the_restored_replicas(tmp_path):
  path = str(tmp_path / "model.ckpt")
  graph, x, y, w, train, init, saver = _saved_model("momentum", True)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    for _ in range(3):
      sess.run(train, {x: X, y: Y})
    saver.save(sess, path)
    saver.restore(sess, path)
    sess.run(init)  # back to the start, replicas included
    for _ in range(2):
      sess.run(train, {x: X, y: Y})
    got = sess.run(w)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    for _ in range(2):
      sess.run(train, {x: X, y: Y})
    np.testing.assert_allclose(got, sess.run(w), rtol=1e-6, atol=1e-7)


def test_restore_into_another_configuration_reseeds(tmp_path, caplog):
  path = str(tmp_path / "model.ckpt")
  graph, x, y, w, train, init, saver = _saved_model("momentum", True)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    sess.run(train, {x: X, y: Y})
    saver.save(sess, path)
    saved = sess.run(w)
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    with caplog.at_level("WARNING", logger="tensorbow"):
      saver.restore(sess, path)
    assert "re-seeded from the restored central model" in caplog.text
    np.testing.assert_array_equal(sess.run(w), saved)
    sess.run(train, {x: X, y: Y})
    got = sess.run(w)
  # The same as restoring a checkpoint with no replica state beside it.
  os.remove(path + ".tensorbow.npz")
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    with caplog.at_level("INFO", logger="tensorbow"):
      saver.restore(sess, path)
    assert "no " + path + ".tensorbow.npz" in caplog.text
    sess.run(train, {x: X, y: Y})
    np.testing.assert_array_equal(sess.run(w), got)
