"""ASGD (tensorbow/algorithms/asgd.py): asynchronous SGD over the shared
central model. With one stream group the tasks run in replica order, so a
wave equals L consecutive tf.compat.v1.Session steps on the shards; with
two, tasks overlap and their staleness is measured from their timings."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.algorithms import asgd
from tensorbow.runtime import TaskTiming

import graphs
import references

tf1 = tf.compat.v1
REPLICAS, WAVES = 4, 3
RNG = np.random.RandomState(17)
BATCHES = [(RNG.randn(18, 3).astype(np.float32),
            RNG.randn(18, 1).astype(np.float32)) for _ in range(WAVES)]
OPTIMIZERS = {
    "gd": lambda: tf1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf1.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tf1.train.AdamOptimizer(0.1),
}


def _tf_consecutive_steps(model):
  """L tf.compat.v1.Session steps per batch, one per shard in replica
  order; per batch the shard-weighted mean of the steps' losses."""
  with tf1.Session(graph=model.graph) as sess:
    sess.run(model.init)
    losses = []
    for x, y in BATCHES:
      shards = list(zip(np.array_split(x, REPLICAS),
                        np.array_split(y, REPLICAS)))
      step_losses = [sess.run([model.loss, model.train],
                              {model.x: xs, model.y: ys})[0]
                     for xs, ys in shards]
      losses.append(np.average(step_losses,
                               weights=[len(xs) for xs, _ in shards]))
    return losses, sess.run([model.w, model.b, model.step])


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_one_stream_group_equals_consecutive_tf_steps(monkeypatch, optimizer,
                                                      use_resource):
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "1")
  model = graphs.build(OPTIMIZERS[optimizer], use_resource, global_step=True)
  expected_losses, expected = _tf_consecutive_steps(model)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm="asgd") as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in BATCHES]
    got = sess.run([model.w, model.b, model.step])
    timings = sess.task_timings()
  np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
  for g, e in zip(got[:2], expected[:2]):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
  # Each task applies the optimizer: the global step counts tasks.
  assert got[2] == expected[2] == REPLICAS * WAVES
  assert [t.replica for t in timings] == list(range(REPLICAS)) * WAVES
  assert asgd.staleness(timings) == [0] * (REPLICAS * WAVES)


def test_two_stream_groups_train_and_measure_staleness(monkeypatch):
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  model = graphs.build(OPTIMIZERS["gd"])
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=tb.algorithms.ASGD()) as sess:
    sess.run(model.init)
    before = sess.run(model.loss, {model.x: BATCHES[0][0],
                                   model.y: BATCHES[0][1]})
    for _ in range(20):
      for x, y in BATCHES:
        sess.run(model.train, {model.x: x, model.y: y})
    after = sess.run(model.loss, {model.x: BATCHES[0][0],
                                  model.y: BATCHES[0][1]})
    timings = sess.task_timings()
  assert after < before
  stale = asgd.staleness(timings)
  assert len(stale) == 20 * WAVES * REPLICAS
  assert all(0 <= s < REPLICAS for s in stale)
  assert {t.stream_group for t in timings} == {0, 1}


def test_staleness_counts_updates_landing_between_read_and_write():
  def task(replica, start, end):
    return TaskTiming(1, replica, 0, 5, 0, start, end)
  timings = [task(0, 0.0, 4.0), task(1, 1.0, 2.0), task(2, 1.5, 3.0),
             task(3, 3.5, 5.0), task(-1, 5.0, 5.5)]
  # Task 0 sees tasks 1 and 2 land; task 2 sees task 1; task 3 sees task 0.
  assert asgd.staleness(timings) == [2, 0, 1, 1]


def test_asgd_needs_nonfinite_propagate():
  with pytest.raises(ValueError, match="nonfinite"):
    tb.TensorBowSession(algorithm="asgd", nonfinite="skip")


def _numpy_communication_interval(interval, momentum, batches):
  """GaDei's communication interval in float64: each replica steps on its
  shard with its own optimizer; every `interval`-th wave each pushes its
  change since its last pull and all pull. Per wave: (the central model,
  the shard-weighted mean loss)."""
  z = [graphs.W0.astype(np.float64), graphs.B0.astype(np.float64)]
  models = [[p.copy() for p in z] for _ in range(REPLICAS)]
  accums = [[np.zeros_like(p) for p in z] for _ in range(REPLICAS)]
  out = []
  for wave, (x, y) in enumerate(batches, 1):
    losses = []
    for j, (xs, ys) in enumerate(zip(
        np.array_split(x.astype(np.float64), REPLICAS),
        np.array_split(y.astype(np.float64), REPLICAS))):
      grads, loss = references.least_squares(models[j], xs, ys)
      losses.append((loss, len(xs)))
      for k, g in enumerate(grads):
        accums[j][k] = momentum * accums[j][k] + g
        models[j][k] = models[j][k] - 0.1 * (accums[j][k] if momentum
                                             else g)
    if wave % interval == 0:
      z = [z[k] + sum(m[k] - z[k] for m in models) for k in range(len(z))]
      models = [[p.copy() for p in z] for _ in range(REPLICAS)]
    out.append(([p.copy() for p in z],
                sum(l * n for l, n in losses) / sum(n for _, n in losses)))
  return out


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("optimizer,interval", [("gd", 2), ("momentum", 3)])
def test_communication_interval_pushes_and_pulls_as_the_numpy_reference(
    monkeypatch, optimizer, interval, use_resource):
  """Replicas on their own copies between exchanges; the central model
  (what a plain run reads) moves only on every `interval`-th wave."""
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  rng = np.random.RandomState(interval)
  batches = [(rng.randn(18, 3).astype(np.float32),
              rng.randn(18, 1).astype(np.float32)) for _ in range(7)]
  model = graphs.build(OPTIMIZERS[optimizer], use_resource)
  with tb.TensorBowSession(
      graph=model.graph, replicas=REPLICAS,
      algorithm=tb.algorithms.ASGD(communication_interval=interval)) as sess:
    sess.run(model.init)
    got = []
    for x, y in batches:
      loss = sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
      got.append((sess.run([model.w, model.b]), loss))
  expected = _numpy_communication_interval(
      interval, 0.9 if optimizer == "momentum" else 0.0, batches)
  for (params, loss), (want, want_loss) in zip(got, expected):
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    for g, w in zip(params, want):
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("interval", [0, 1.5, True, "8"])
def test_communication_interval_out_of_range_is_refused(interval):
  with pytest.raises(ValueError, match="communication_interval"):
    tb.algorithms.ASGD(communication_interval=interval)


def test_only_an_interval_of_one_shares_the_model():
  assert tb.algorithms.ASGD().shares_model
  assert not tb.algorithms.ASGD(communication_interval=8).shares_model
  assert tb.algorithms.by_name("asgd", communication_interval=8) == (
      tb.algorithms.ASGD(8))
  assert tb.algorithms.ASGD(8) != tb.algorithms.ASGD(1)
