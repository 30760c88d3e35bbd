"""Adaptive SGD (tensorbow/algorithms/adaptive.py).

With its shards held equal (step=0) and no perturbation it is checked
against a NumPy reference of its weighted merge: replicas step alone with
their learning rate scaled by shard size over the mean, and every
merge_period-th wave the central model becomes the shard-weighted mean
of the replicas with central momentum. With one replica slowed by a
fixed delay (the runtime's TENSORBOW_TEST_SLOW_REPLICA) its shards adapt
until the replicas' task times are within 20 % of each other.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import feeds

import graphs
import references

tf1 = tf.compat.v1
LR, MU, MOMENTUM, REPLICAS, WAVES = 0.1, 0.5, 0.9, 4, 4
RNG = np.random.RandomState(31)
BATCHES = [(RNG.randn(18, 3).astype(np.float32),
            RNG.randn(18, 1).astype(np.float32)) for _ in range(WAVES)]
OPTIMIZERS = {
    "sgd": (lambda: tf1.train.GradientDescentOptimizer(LR), None),
    "momentum": (lambda: tf1.train.MomentumOptimizer(LR, MOMENTUM), MOMENTUM),
}


def reference(merge_period, momentum):
  """Per wave (central params, fetched loss)."""
  z = [graphs.W0.astype(np.float64), graphs.B0.astype(np.float64)]
  z_prev = [p.copy() for p in z]
  models = [[p.copy() for p in z] for _ in range(REPLICAS)]
  accums = [[np.zeros_like(p) for p in z] for _ in range(REPLICAS)]
  out = []
  for wave, (x, y) in enumerate(BATCHES, 1):
    xs = np.array_split(x.astype(np.float64), REPLICAS)
    ys = np.array_split(y.astype(np.float64), REPLICAS)
    sizes = np.array([len(s) for s in xs], np.float64)
    losses = []
    for j in range(REPLICAS):
      grads, loss = references.least_squares(models[j], xs[j], ys[j])
      losses.append(loss)
      lr = LR * sizes[j] / sizes.mean()
      for k, g in enumerate(grads):
        if momentum is None:
          step = lr * g
        else:
          accums[j][k] = momentum * accums[j][k] + g
          step = lr * accums[j][k]
        models[j][k] = models[j][k] - step
    if wave % merge_period == 0:
      weights = sizes / sizes.sum()
      merged = [sum(w * m[k] for w, m in zip(weights, models)) +
                MU * (z[k] - z_prev[k]) for k in range(len(z))]
      z_prev, z = z, merged
      models = [[p.copy() for p in z] for _ in range(REPLICAS)]
    out.append(([p.copy() for p in z], np.average(losses, weights=sizes)))
  return out


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("merge_period", [1, 2])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_equal_speeds_match_the_weighted_merge(optimizer, merge_period,
                                               use_resource):
  make, momentum = OPTIMIZERS[optimizer]
  model = graphs.build(make, use_resource)
  algorithm = tb.algorithms.Adaptive(merge_period=merge_period, step=0.0,
                                     perturbation=0.0, central_momentum=MU)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    losses = []
    for x, y in BATCHES:
      losses.append(sess.run([model.loss, model.train],
                             {model.x: x, model.y: y})[0])
    params = sess.run([model.w, model.b])
  expected = reference(merge_period, momentum)
  np.testing.assert_allclose(losses, [e[1] for e in expected], rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_shares_move_toward_the_faster_replicas():
  algorithm = tb.algorithms.Adaptive(step=0.5, min_fraction=0.5)
  shares = np.full(4, 0.25)
  # Replica 0 takes twice as long for the same rows: half the speed.
  shares = algorithm.next_shares(shares, [2.0, 1.0, 1.0, 1.0])
  target = np.array([1, 2, 2, 2]) / 7
  np.testing.assert_allclose(shares, 0.25 + 0.5 * (target - 0.25))
  # Never under min_fraction / L.
  for _ in range(20):
    shares = algorithm.next_shares(shares, [100.0, 1.0, 1.0, 1.0])
  assert shares.min() >= 0.5 / 4 - 1e-12
  np.testing.assert_allclose(shares.sum(), 1.0)
  assert feeds.shard_sizes(18, np.full(4, 0.25)) == [5, 5, 4, 4]
  assert sum(feeds.shard_sizes(257, shares)) == 257


@pytest.mark.slow
def test_a_slowed_replica_gets_fewer_rows_until_times_even_out(monkeypatch):
  # One stream group: tasks do not share the cores, so their times measure
  # their work (with two, they vary by tens of percent on two cores).
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "1")
  monkeypatch.setenv("TENSORBOW_TEST_SLOW_REPLICA", "0:3")
  rng = np.random.RandomState(3)
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 256])
    y = tf1.placeholder(tf.float32, [None, 1])
    h = tf.nn.relu(tf.matmul(x, tf1.get_variable(
        "w1", initializer=rng.randn(256, 1024).astype(np.float32) * 0.05)))
    pred = tf.matmul(h, tf1.get_variable(
        "w2", initializer=rng.randn(1024, 1).astype(np.float32) * 0.05))
    loss = tf.reduce_mean(tf.square(pred - y))
    train = tf1.train.GradientDescentOptimizer(1e-4).minimize(loss)
    init = tf1.global_variables_initializer()
  batch = (rng.randn(4096, 256).astype(np.float32),
           rng.randn(4096, 1).astype(np.float32))
  with tb.TensorBowSession(graph=graph, replicas=4,
                           algorithm="adaptive") as sess:
    sess.run(init)
    times, rows = [], []
    for _ in range(20):
      sess.clear_task_timings()
      sess.run(train, {x: batch[0], y: batch[1]})
      wave = np.zeros(4)
      for t in sess.task_timings():
        if t.replica >= 0:
          wave[t.replica] += t.end - t.start
          if t.phase == 0:
            rows.append((t.replica, t.rows))
      times.append(wave)
  first = dict(rows[:4])
  last = dict(rows[-4:])
  assert first[0] == 1024 and last[0] < min(last[r] for r in (1, 2, 3))
  # Evened out by wave 20: over the last 5 waves (averaging the timer's
  # noise), the slowest replica's task time within 20 % of the fastest's.
  mean = np.mean(times[-5:], axis=0)
  assert mean.max() / mean.min() - 1 < 0.2, times
  assert (times[0].max() / times[0].min() - 1) > 0.2  # uneven at first


@pytest.mark.parametrize("threshold", [0.0, 1e9], ids=["never", "always"])
def test_replicas_are_perturbed_only_under_the_threshold(threshold):
  model = graphs.build(OPTIMIZERS["sgd"][0])
  algorithm = tb.algorithms.Adaptive(step=0.0, perturbation=0.5,
                                     threshold=threshold, central_momentum=MU)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    x, y = BATCHES[0]
    sess.run(model.train, {model.x: x, model.y: y})
    central = sess.run(model.w)
    # The replicas' copies, as a checkpoint holds them.
    state = sess._trainer.replica_state()  # pylint: disable=protected-access
  replicas = np.stack([state[f"w/replica_{r}"] for r in range(REPLICAS)])
  update = np.abs(central - graphs.W0)
  np.testing.assert_allclose(central, reference(1, None)[0][0][0], rtol=1e-5)
  offsets = np.abs(replicas - central)
  if threshold == 0.0:
    np.testing.assert_array_equal(offsets, 0.0)
  else:
    assert (offsets <= 0.5 * update + 1e-6).all()
    assert offsets.max() > 0.05 * update.max()
