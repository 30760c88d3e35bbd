"""Atomic training waves: a training run that fails changes nothing.

A wave first computes every replica's task (writing nothing), then commits
the writes of all of them. These tests fail tasks the ways user code does
(an assert, a `py_func`, `check_numerics`, a deadline, an interrupt, a
non-finite value) and check, bit for bit, every replica's variables and
slots, SMA's buffers, the central model and the global step; then that
training goes on as in a session that never saw the failed run.
"""
import threading

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import runtime as tb_runtime

import references

RNG = np.random.RandomState(5)
X = RNG.randn(12, 3).astype(np.float32)
Y = RNG.randn(12, 1).astype(np.float32)
IDS = np.arange(12, dtype=np.int32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)
NO_POISON = -1

# Makes the py_func of every replica fail on one row id; -1: none.
_FAIL_PY_FUNC_ON = [NO_POISON]


def _py_check(ids):
  if _FAIL_PY_FUNC_ON[0] in ids:
    raise ValueError(f"py_func refuses row {_FAIL_PY_FUNC_ON[0]}")
  return ids


class Model(object):
  """Least squares trained by `optimizer`, with a global step and three
  ways for one shard's task to fail: an assert on a row id, a py_func and
  check_numerics on the input."""

  def __init__(self, optimizer="momentum", use_resource=True,
               check_numerics=True):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
      self.y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
      self.ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
      self.poison = tf.compat.v1.placeholder_with_default(
          NO_POISON, [], name="poison")
      self.w = tf.compat.v1.get_variable("w", initializer=W0,
                                         use_resource=use_resource)
      self.step_var = tf.compat.v1.train.get_or_create_global_step()
      x = self.x
      if check_numerics:
        x = tf.debugging.check_numerics(x, "bad input")
      checked = tf.compat.v1.py_func(_py_check, [self.ids], tf.int32)
      guard = tf.debugging.assert_none_equal(self.ids, self.poison,
                                             message="poisoned row")
      with tf.control_dependencies([guard, checked]):
        x = tf.identity(x)
      pred = tf.matmul(x, self.w)
      self.loss = 0.5 * tf.reduce_mean(tf.square(pred - self.y))
      make = {
          "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
          "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
          "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.05),
      }[optimizer]
      self.train = make().minimize(self.loss, global_step=self.step_var)
      self.init = tf.compat.v1.global_variables_initializer()
      self.variables = tf.compat.v1.global_variables()

  def session(self, replicas=3, **kwargs):
    sess = tb.TensorBowSession(graph=self.graph, replicas=replicas, **kwargs)
    sess.run(self.init)
    return sess

  def feeds(self, x=X, y=Y, poison=NO_POISON):
    return {self.x: x, self.y: y, self.ids: IDS, self.poison: poison}

  def step(self, sess, **kwargs):
    return sess.run([self.loss, self.train], self.feeds(**kwargs))[0]


def state(sess, model):
  """Every value a wave may write: the user's variables and, per replica,
  its variables, slots and SMA's buffers."""
  values = dict(zip([v.op.name for v in model.variables],
                    sess.run(model.variables)))
  values.update(sess._trainer.replica_state())  # pylint: disable=protected-access
  return values


def assert_same_state(before, after):
  assert sorted(before) == sorted(after)
  for key in before:
    np.testing.assert_array_equal(after[key], before[key], err_msg=key)


def assert_same_training(sess, model, reference, ref_model, waves=3):
  for _ in range(waves):
    np.testing.assert_allclose(model.step(sess), ref_model.step(reference),
                               rtol=1e-6)
  for v, r in zip(model.variables, ref_model.variables):
    np.testing.assert_allclose(sess.run(v), reference.run(r), rtol=1e-6,
                               atol=1e-7, err_msg=v.op.name)


def _shard_rows(replicas, replica):
  return np.array_split(IDS, replicas)[replica]


# ---- Failures inside a task --------------------------------------------------


def _fail_by_assert(model, sess, replica, replicas):
  poison = int(_shard_rows(replicas, replica)[-1])
  with pytest.raises(tf.errors.InvalidArgumentError, match="poisoned row"):
    model.step(sess, poison=poison)


def _fail_by_py_func(model, sess, replica, replicas):
  _FAIL_PY_FUNC_ON[0] = int(_shard_rows(replicas, replica)[0])
  try:
    with pytest.raises(tf.errors.OpError, match="py_func refuses"):
      model.step(sess)
  finally:
    _FAIL_PY_FUNC_ON[0] = NO_POISON


def _fail_by_check_numerics(model, sess, replica, replicas):
  bad = X.copy()
  bad[_shard_rows(replicas, replica)[0], 1] = np.inf
  with pytest.raises(tf.errors.InvalidArgumentError, match="bad input"):
    model.step(sess, x=bad)


FAILURES = {"assert": _fail_by_assert, "py_func": _fail_by_py_func,
            "check_numerics": _fail_by_check_numerics}


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", [
    "sgd", pytest.param("momentum", marks=pytest.mark.slow), "adam"])
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_failed_task_changes_nothing(failure, optimizer, use_resource):
  m, ref_model = Model(optimizer, use_resource), Model(optimizer, use_resource)
  with m.session() as sess, ref_model.session() as reference:
    for _ in range(2):
      m.step(sess)
      ref_model.step(reference)
    before = state(sess, m)
    FAILURES[failure](m, sess, 2, 3)  # the last replica: the others finish
    assert_same_state(before, state(sess, m))
    assert_same_training(sess, m, reference, ref_model)


@pytest.mark.parametrize("use_resource", [True, False])
def test_fault_injection_each_replica_at_a_random_wave(use_resource):
  """Fails replica r's task at a random wave, for each r in turn, by each
  kind of failure; the state is bit-exact after every failure, and the
  training equals one that left the failed runs out."""
  replicas = 4
  rng = np.random.RandomState(17)
  m, ref_model = Model("momentum", use_resource), Model("momentum",
                                                          use_resource)
  kinds = sorted(FAILURES)
  with m.session(replicas) as sess, ref_model.session(replicas) as reference:
    for replica in range(replicas):
      fail_at = rng.randint(1, 4)
      for wave in range(4):
        if wave == fail_at:
          before = state(sess, m)
          FAILURES[kinds[replica % len(kinds)]](m, sess, replica, replicas)
          assert_same_state(before, state(sess, m))
        np.testing.assert_allclose(m.step(sess), ref_model.step(reference),
                                   rtol=1e-6)
    assert_same_training(sess, m, reference, ref_model, waves=1)


def test_deadline_commits_nothing():
  m, ref_model = Model(), Model()
  release = threading.Event()
  with m.graph.as_default():
    # A task that outlives the deadline: it waits in a py_func.
    slow = tf.compat.v1.py_func(lambda: release.wait(5) and np.float32(0),
                                [], tf.float32)
    slow_loss = m.loss + 0 * slow
  with m.session() as sess, ref_model.session() as reference:
    m.step(sess)
    ref_model.step(reference)
    train = m.graph.get_operation_by_name(m.train.name)
    before = state(sess, m)
    options = tf.compat.v1.RunOptions(timeout_in_ms=200)
    # The py_funcs are let go after the deadline (TensorFlow waits for them).
    timer = threading.Timer(0.6, release.set)
    timer.start()
    with pytest.raises(tf.errors.DeadlineExceededError):
      sess.run([slow_loss, train], m.feeds(), options=options)
    timer.join()
    assert_same_state(before, state(sess, m))
    assert_same_training(sess, m, reference, ref_model)


def test_failure_after_a_write_puts_the_wave_back():
  """An op that runs after the writes of its task (here an assert on the
  loss, waiting on the train op) fails in the commit; what the wave
  wrote is set back from a snapshot."""
  m, ref_model = Model(), Model()
  with m.graph.as_default():
    limit = tf.compat.v1.placeholder_with_default(1e9, [])
    with tf.control_dependencies([m.train]):
      late = tf.debugging.assert_less(m.loss, limit, message="loss too big")
  with m.session() as sess, ref_model.session() as reference:
    m.step(sess)
    ref_model.step(reference)
    before = state(sess, m)
    feeds = m.feeds()
    feeds[limit] = -1.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="loss too big"):
      sess.run([m.train, late], feeds)
    assert_same_state(before, state(sess, m))
    assert_same_training(sess, m, reference, ref_model)


@pytest.mark.parametrize("use_resource", [True, False])
def test_failing_write_in_one_replica_puts_the_wave_back(use_resource):
  """A scatter into a non-trainable variable with an index out of range in
  the last replica's shard fails there while the others commit."""
  m, ref_model = Model("momentum", use_resource), Model("momentum",
                                                        use_resource)
  for model in (m, ref_model):
    with model.graph.as_default():
      seen = tf.compat.v1.get_variable(
          "seen", initializer=np.zeros(12, np.float32), trainable=False,
          use_resource=use_resource)
      model.count = tf.compat.v1.scatter_add(
          seen, model.ids, tf.ones_like(model.ids, tf.float32))
      model.variables.append(seen)
      model.init = tf.compat.v1.global_variables_initializer()
  with m.session() as sess, ref_model.session() as reference:
    for model, s in ((m, sess), (ref_model, reference)):
      s.run([model.train, model.count], model.feeds())
    before = state(sess, m)
    feeds = m.feeds()
    ids = IDS.copy()
    ids[-1] = 99  # the last replica's shard
    feeds[m.ids] = ids
    with pytest.raises(tf.errors.InvalidArgumentError):
      sess.run([m.train, m.count], feeds)
    assert_same_state(before, state(sess, m))
    for model, s in ((m, sess), (ref_model, reference)):
      s.run([model.train, model.count], model.feeds())
    for v, r in zip(m.variables, ref_model.variables):
      np.testing.assert_allclose(sess.run(v), reference.run(r), rtol=1e-6,
                                 atol=1e-7, err_msg=v.op.name)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_standard_optimizers_commit_without_a_snapshot(optimizer):
  m = Model(optimizer)
  with m.session() as sess:
    m.step(sess)
    plans = list(sess.plans().values())
  assert len(plans) == 1
  assert plans[0].atomic is not None and plans[0].snapshot is None


# ---- Interrupts --------------------------------------------------------------


def _interrupt_after(monkeypatch, method):
  """Makes Runtime.`method` raise KeyboardInterrupt once it has run, as a
  Ctrl-C during it does (Python sees the signal when the call returns)."""
  original = getattr(tb_runtime.Runtime, method)

  def interrupted(self, *args, **kwargs):
    monkeypatch.setattr(tb_runtime.Runtime, method, original)
    original(self, *args, **kwargs)
    raise KeyboardInterrupt()

  monkeypatch.setattr(tb_runtime.Runtime, method, interrupted)


def test_interrupt_between_computation_and_commit_changes_nothing(
    monkeypatch):
  m, ref_model = Model(), Model()
  with m.session() as sess, ref_model.session() as reference:
    m.step(sess)
    ref_model.step(reference)
    before = state(sess, m)
    _interrupt_after(monkeypatch, "compute")
    with pytest.raises(KeyboardInterrupt):
      m.step(sess)
    assert_same_state(before, state(sess, m))
    assert_same_training(sess, m, reference, ref_model)


def test_interrupt_after_the_commit_keeps_the_whole_wave(monkeypatch):
  m, ref_model = Model(), Model()
  with m.session() as sess, ref_model.session() as reference:
    m.step(sess)
    ref_model.step(reference)
    sess.run(m.variables)  # the slots refreshed: none is pending
    _interrupt_after(monkeypatch, "commit")
    with pytest.raises(KeyboardInterrupt):
      m.step(sess)
    ref_model.step(reference)
    # What a Saver in `except KeyboardInterrupt:` reads: the whole wave.
    for v, r in zip(m.variables, ref_model.variables):
      np.testing.assert_allclose(sess.run(v), reference.run(r), rtol=1e-6,
                                 atol=1e-7, err_msg=v.op.name)
    assert_same_training(sess, m, reference, ref_model)


# ---- Non-finite values -------------------------------------------------------


def _nan_in_shard(replicas, replica):
  y = Y.copy()
  y[_shard_rows(replicas, replica)[0]] = np.nan
  return y


@pytest.mark.parametrize("use_resource", [True, False])
def test_nonfinite_propagate_spreads_nan_as_tensorflow(use_resource):
  m = Model("sgd", use_resource, check_numerics=False)
  with m.session(3, nonfinite="propagate") as sess:
    assert np.isnan(m.step(sess, y=_nan_in_shard(3, 1)))
    # The central model takes the replicas' corrections a wave later.
    m.step(sess)
    assert np.isnan(sess.run(m.w)).all()


def _fused_sma_update(sess):
  return any(op.type.startswith(("TensorBowApplySma",
                                 "TensorBowResourceApplySma")) and
             "Outer" in op.type
             for op in sess.execution_graph.get_operations())


# TensorFlow's kernels, or every substitute: then w's SMA step takes its
# gradient's factors (x, dy), and those are what is checked.
KERNELS = ["0", "all"]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("use_resource", [True, False])
def test_nonfinite_raise_names_the_replica_and_commits_nothing(
    monkeypatch, use_resource, kernels):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", kernels)
  m = Model("momentum", use_resource, check_numerics=False)
  ref_model = Model("momentum", use_resource, check_numerics=False)
  with m.session(3, nonfinite="raise") as sess, ref_model.session(
      3) as reference:
    m.step(sess)
    ref_model.step(reference)
    before = state(sess, m)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
      m.step(sess, y=_nan_in_shard(3, 1))
    message = str(info.value)
    assert "replica 1:" in message and "replica 0" not in message
    assert "applied to w)" in message and "nothing was committed" in message
    assert_same_state(before, state(sess, m))
    assert_same_training(sess, m, reference, ref_model)
    assert _fused_sma_update(sess) == (kernels == "all")


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("use_resource", [True, False])
def test_nonfinite_skip_leaves_the_replica_out_and_reseeds_it(
    monkeypatch, use_resource, kernels, caplog):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", kernels)
  replicas, lr, alpha, mu = 3, 0.1, 0.3, 0.5
  m = Model("sgd", use_resource, check_numerics=False)
  waves = [Y, _nan_in_shard(replicas, 1), Y, _nan_in_shard(replicas, 2), Y,
           _nan_in_shard(replicas, 0), Y]
  with m.session(replicas, nonfinite="skip", alpha=alpha,
                 central_momentum=mu) as sess:
    for y in waves:
      loss = m.step(sess, y=y)
      assert np.isfinite(loss)
    z, _, _, _ = references.sma([W0], [(X, y) for y in waves], replicas,
                                alpha, mu, lr)[-1]
    np.testing.assert_allclose(sess.run(m.w), z[0], rtol=1e-5, atol=1e-6)
    # The global step counts every wave, replica 0 skipped or not.
    assert sess.run(m.step_var) == len(waves)
    assert _fused_sma_update(sess) == (kernels == "all")
  for r in range(replicas):
    assert f"replica {r}:" in caplog.text


def test_nonfinite_rejects_an_unknown_mode():
  with pytest.raises(ValueError, match="nonfinite must be one of"):
    tb.TensorBowSession(nonfinite="ignore")


# ---- The two phases ----------------------------------------------------------


def test_commits_start_after_every_computation():
  m = Model()
  with m.session(3) as sess:
    for _ in range(2):
      m.step(sess)
    timings = sess.task_timings()
  for wave in (1, 2):
    tasks = [t for t in timings if t.wave == wave]
    computed = [t for t in tasks if t.phase == 0]
    commits = [t for t in tasks if t.phase == 1 and t.replica >= 0]
    assert sorted(t.replica for t in computed) == [0, 1, 2]
    assert sorted(t.replica for t in commits) == [0, 1, 2]
    assert min(t.start for t in commits) >= max(t.end for t in computed)
