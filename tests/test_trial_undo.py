"""replicas="auto"'s trial of L = 2 that does not pay, undone
(tensorbow/trial_undo.py): back at one replica, the training is where
`tf.compat.v1.Session` leaves it; where the undo gives up, the trial's
updates are kept as before.

The tuner is made to try L = 2 at once and to find it never pays (a gain
no setting reaches), so every session here tries L = 2 for three runs and
goes back to L = 1.
"""
import functools

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import autotune
from tensorbow import trial_undo

import graphs

tf1 = tf.compat.v1
BATCHES = graphs.batches(seed=21, count=12, rows=16)


@pytest.fixture
def failing_trial(monkeypatch):
  """Every AutoTuner tries L = 2 after three runs (one warm-up, two
  measured) and never keeps it."""
  monkeypatch.setattr(autotune, "AutoTuner", functools.partial(
      autotune.AutoTuner, warmup=1, measure=2, min_seconds=0, patience=0,
      gain=1e9, cores=1))


def _train(session_maker, use_resource, between=None):
  """Momentum on least squares, with a global step, over BATCHES in a
  session from `session_maker(graph)`; `between(sess, model)`, called
  after the initializer, gives what to call after the third run (in the
  trial). Returns (w, b, step, the session's tuning decisions or
  None)."""
  model = graphs.build(lambda: tf1.train.MomentumOptimizer(0.05, 0.9),
                       use_resource, global_step=True)
  with session_maker(model.graph) as sess:
    sess.run(model.init)
    call = between(sess, model) if between is not None else None
    for i, (x, y) in enumerate(BATCHES):
      sess.run(model.train, {model.x: x, model.y: y})
      if i == 2 and call is not None:
        call()
    decisions = (sess.tuning_decisions()
                 if isinstance(sess, tb.TensorBowSession) else None)
    return sess.run([model.w, model.b, model.step]) + [decisions]


def _auto(graph):
  return tb.TensorBowSession(graph=graph, replicas="auto")


def _tensorflow(graph):
  return tf1.Session(graph=graph)


def _tried_two_and_came_back(decisions):
  return (any(d.replicas == 2 for d in decisions) and
          decisions[-1].next[0] == 1)


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_a_trial_that_does_not_pay_leaves_tensorflows_training(
    failing_trial, use_resource):
  *got, decisions = _train(_auto, use_resource)
  *want, _ = _train(_tensorflow, use_resource)
  assert _tried_two_and_came_back(decisions), decisions
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)
  assert got[2] == want[2] == len(BATCHES)


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_a_trial_kept_without_the_undo_moves_the_training(
    failing_trial, monkeypatch, use_resource):
  # What the undo is for: the same trial, its updates kept, ends elsewhere.
  monkeypatch.setattr(trial_undo, "make", lambda *a: trial_undo.Never())
  *kept, decisions = _train(_auto, use_resource)
  *want, _ = _train(_tensorflow, use_resource)
  assert _tried_two_and_came_back(decisions), decisions
  assert not np.allclose(kept[0], want[0], rtol=1e-4, atol=1e-5)


def _assign(sess, model):
  writes = [model.w.assign(model.w * 2.0), model.b.assign(model.b - 1.0)]
  return lambda: sess.run(writes)


def _assign_by_callable(sess, model):
  # Made at L = 1, before the trial: TensorFlow's own callable there.
  return sess.make_callable(tf.group(model.w.assign(model.w * 2.0),
                                     model.b.assign(model.b - 1.0)))


def _save(sess, model, prefix):
  # A Saver made in the trial, as a script's periodic checkpoint is.
  del model
  saver = tf1.train.Saver()
  return lambda: saver.save(sess, prefix)


def _evaluate(sess, model):
  x, y = BATCHES[0]
  return lambda: sess.run(model.loss, {model.x: x, model.y: y})


@pytest.mark.parametrize("between", [_assign, _assign_by_callable, _save],
                         ids=["run", "callable", "save"])
def test_a_write_in_the_trial_keeps_its_updates(failing_trial, monkeypatch,
                                               tmp_path, between):
  # A plain run that writes a variable, which a put-back would undo, or a
  # checkpoint, which would then hold the trial's state: the undo gives
  # up, and the training is what it was without the undo.
  if between is _save:
    between = functools.partial(_save, prefix=str(tmp_path / "trial"))
  *got, decisions = _train(_auto, True, between)
  monkeypatch.setattr(trial_undo, "make", lambda *a: trial_undo.Never())
  *kept, _ = _train(_auto, True, between)
  assert _tried_two_and_came_back(decisions), decisions
  for g, k in zip(got, kept):
    np.testing.assert_array_equal(g, k)


def test_an_evaluation_in_the_trial_leaves_tensorflows_training(
    failing_trial):
  # A plain run that writes nothing (the main job's evaluations) does not
  # stop the undo.
  *got, decisions = _train(_auto, True, _evaluate)
  *want, _ = _train(_tensorflow, True, _evaluate)
  assert _tried_two_and_came_back(decisions), decisions
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def test_the_trials_feeds_are_copied(failing_trial):
  # A script that fills one feed buffer in place for every run.
  model = graphs.build(lambda: tf1.train.MomentumOptimizer(0.05, 0.9))
  x_buffer = np.zeros_like(BATCHES[0][0])
  y_buffer = np.zeros_like(BATCHES[0][1])
  results = []
  for maker in (_auto, _tensorflow):
    with maker(model.graph) as sess:
      sess.run(model.init)
      for x, y in BATCHES:
        x_buffer[...], y_buffer[...] = x, y
        sess.run(model.train, {model.x: x_buffer, model.y: y_buffer})
      results.append(sess.run([model.w, model.b]))
      if maker is _auto:
        decisions = sess.tuning_decisions()
  assert _tried_two_and_came_back(decisions), decisions
  for got, want in zip(*results):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_feeds_past_the_cap_keep_the_trials_updates(failing_trial,
                                                     monkeypatch):
  # A trial whose copied feeds outgrow MAX_KEPT_BYTES (here, one batch's):
  # the undo gives up, as without it.
  monkeypatch.setattr(trial_undo, "MAX_KEPT_BYTES", BATCHES[0][0].nbytes)
  *got, decisions = _train(_auto, True)
  monkeypatch.setattr(trial_undo, "make", lambda *a: trial_undo.Never())
  *kept, _ = _train(_auto, True)
  assert _tried_two_and_came_back(decisions), decisions
  for g, k in zip(got, kept):
    np.testing.assert_array_equal(g, k)


class _Backup(object):
  """rollback.Backup's calls, counted."""

  def __init__(self):
    self.calls = []

  def save(self):
    self.calls.append("save")

  def restore(self):
    self.calls.append("restore")

  def forget(self):
    self.calls.append("forget")


class _Route(object):
  pulled = ()


def test_a_replay_that_raises_reaches_the_caller_and_ends_the_trial():
  # The run that brings the session back raises the replay's error (as
  # the run would have at L = 1), and the trial's later runs are not
  # trained; the next trial is kept and undone afresh.
  backup, trained = _Backup(), []
  undo = trial_undo.Undo(backup)
  one, two = (1, None, False), (2, None, False)

  def train(route, values):
    del route
    trained.append(float(values[0][0]))
    if trained[-1] == 1.0:
      raise tf.errors.InvalidArgumentError(None, None, "not finite")

  def trial(values):
    undo.follow(one, two, lambda *s: None, train, False)
    for v in values:
      undo.trained(_Route(), [np.full(2, v)])
    undo.follow(two, one, lambda *s: None, train, False)

  with pytest.raises(tf.errors.InvalidArgumentError, match="not finite"):
    trial([0.0, 1.0, 2.0])
  assert trained == [0.0, 1.0]
  assert backup.calls[-2:] == ["save", "restore"]
  trial([7.0])
  assert trained == [0.0, 1.0, 7.0]
  assert backup.calls[-2:] == ["save", "restore"]
