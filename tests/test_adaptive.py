"""Adaptive SGD (tensorbow/algorithms/adaptive.py) against NumPy.

Algorithm 1 (batch sizes from update counts) and Algorithm 2 (merge
weights, perturbation) are checked on plain numbers; a session with one
stream group, whose pool hands chunks out in a fixed order, against a
float64 reference of the whole algorithm; and with a replica slowed by
the runtime's TENSORBOW_TEST_SLOW_REPLICA, the dynamic schedule and the
update counts converging (the paper's Figure 12(a)).
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.algorithms import adaptive

import graphs
import references

tf1 = tf.compat.v1
LR, MU, MOMENTUM = 0.1, 0.5, 0.9
RNG = np.random.RandomState(31)
BATCHES = [(RNG.randn(18, 3).astype(np.float32),
            RNG.randn(18, 1).astype(np.float32)) for _ in range(6)]
OPTIMIZERS = {
    "sgd": (lambda: tf1.train.GradientDescentOptimizer(LR), None),
    "momentum": (lambda: tf1.train.MomentumOptimizer(LR, MOMENTUM), MOMENTUM),
}


# ---- Algorithm 1 -----------------------------------------------------------


def test_batch_sizes_move_with_the_update_counts():
  # Mean count 10: +4 and -4 updates move by beta = 1.5 rows each.
  sizes = adaptive.next_batch_sizes([8, 8, 8], [14, 6, 10], 1.5, 2, 16)
  np.testing.assert_array_equal(sizes, [14, 2, 8])
  # Bounded on both sides.
  sizes = adaptive.next_batch_sizes([8, 8], [40, 0], 1.0, 3, 16)
  np.testing.assert_array_equal(sizes, [16, 3])
  # Equal counts leave them alone.
  np.testing.assert_array_equal(
      adaptive.next_batch_sizes([5, 9], [7, 7], 2.0, 1, 16), [5, 9])
  # Deviations counted per run: +4 and -4 over 4 runs move by 1 x beta.
  np.testing.assert_array_equal(
      adaptive.next_batch_sizes([8, 8, 8], [14, 6, 10], 3.0, 2, 16, runs=4),
      [11, 5, 8])


def test_the_schedule_takes_the_papers_defaults_from_the_first_batch():
  schedule = adaptive.Adaptive(mega_batch=2).schedule(3)
  # b_0 = ceil(20 / 3) = 7; b_max = 14; b_min = ceil(14 / 8) = 2; beta = 1.
  np.testing.assert_array_equal(schedule.batch_sizes(20), [7, 7, 7])
  np.testing.assert_array_equal(schedule.factors(), [1.0, 1.0, 1.0])
  assert schedule.factors() is None  # unchanged since
  assert not schedule.record([0, 1, 2, 0])
  assert schedule.record([0, 0, 1, 2, 0, 0])
  # Counts 6, 2, 2 over 2 runs (mean 10 / 3): +1.33, -0.67, -0.67 rows.
  schedule.merge(np.zeros([1, 3]))
  np.testing.assert_array_equal(schedule.batch_sizes(20), [8, 6, 6])
  np.testing.assert_allclose(schedule.factors(), [8 / 7, 6 / 7, 6 / 7])
  (entry,) = schedule.history
  assert entry["updates"] == [6, 2, 2] and entry["batch_sizes"] == [7, 7, 7]
  # No drift is below theta: perturbed, the least-updated tie going to the
  # higher index.
  assert entry["perturbed"] is True
  np.testing.assert_allclose(entry["weights"], [0.7, 0.2, 0.1])
  # Given bounds and beta are kept.
  schedule = adaptive.Adaptive(batch_size=4, b_max=6, b_min=3, beta=0.5,
                               mega_batch=1).schedule(2)
  np.testing.assert_array_equal(schedule.batch_sizes(100), [4, 4])
  schedule.record([0] * 9 + [1])
  schedule.merge(np.zeros([1, 2]))
  np.testing.assert_array_equal(schedule.batch_sizes(100), [6, 3])


@pytest.mark.parametrize("kwargs,message", [
    (dict(mega_batch=0), "mega_batch must be an int >= 1"),
    (dict(batch_size=2.5), "batch_size must be an int >= 1"),
    (dict(b_min=9, b_max=8), "b_min"),
    (dict(delta=-0.1), "delta must be >= 0"),
    (dict(momentum=1.0), r"momentum must be in \[0, 1\)"),
])
def test_arguments_out_of_range_are_refused(kwargs, message):
  with pytest.raises(ValueError, match=message):
    tb.algorithms.Adaptive(**kwargs)


def test_a_first_batch_under_b_min_is_refused():
  schedule = tb.algorithms.Adaptive(b_min=8, b_max=8).schedule(2)
  np.testing.assert_array_equal(schedule.batch_sizes(4), [8, 8])
  # b_max by default twice the first batch: 2 x 4 rows is under b_min 9.
  schedule = tb.algorithms.Adaptive(b_min=9).schedule(2)
  with pytest.raises(ValueError, match=r"b_min \(9\) exceeds b_max \(8\)"):
    schedule.batch_sizes(8)
  assert schedule.sizes is None  # nothing kept from the failed call


# ---- Algorithm 2 -----------------------------------------------------------


def test_merge_weights_follow_counts_or_batch_sizes():
  np.testing.assert_allclose(
      adaptive.merge_weights([30, 10, 10], [8, 8, 8], False, 0.1),
      [0.6, 0.2, 0.2])
  # Equal counts: by batch size.
  np.testing.assert_allclose(
      adaptive.merge_weights([10, 10], [12, 4], False, 0.1), [0.75, 0.25])
  # Perturbed: the most-updated gains delta, the least-updated loses it.
  np.testing.assert_allclose(
      adaptive.merge_weights([30, 10, 20], [8, 8, 8], True, 0.1),
      [0.5 + 0.1, 1 / 6 - 0.1, 1 / 3])
  # Equal counts: the larger batch counts as the most-updated.
  np.testing.assert_allclose(
      adaptive.merge_weights([10, 10], [4, 12], True, 0.1), [0.15, 0.85])


def test_perturbation_fires_only_below_theta():
  drift = np.array([[0.05, 0.09], [0.01, 0.02]])
  assert adaptive.perturbs(drift, 0.1)
  assert not adaptive.perturbs(drift, 0.09)  # equal is not below
  assert not adaptive.perturbs(np.array([[0.05, 0.2]]), 0.1)


# ---- The whole algorithm, against NumPy ------------------------------------


def reference(batch_size, mega_batch, momentum, theta, delta, replicas):
  """(Per run (central params, fetched loss), per merge whether it
  perturbed), with one stream group: each
  run's pool hands chunks to replicas 0, 1, ..., L - 1, 0, ... (the free
  replica that waited longest), b_i rows each."""
  z = [graphs.W0.astype(np.float64), graphs.B0.astype(np.float64)]
  z_prev = [p.copy() for p in z]
  models = [[p.copy() for p in z] for _ in range(replicas)]
  accums = [[np.zeros_like(p) for p in z] for _ in range(replicas)]
  sizes = np.full(replicas, batch_size, np.int64)
  b_max = 2 * batch_size
  b_min = int(np.ceil(b_max / 8))
  counts = np.zeros(replicas, np.int64)
  out, perturbed = [], []
  for run, (x, y) in enumerate(BATCHES, 1):
    x, y = x.astype(np.float64), y.astype(np.float64)
    begin, turn, losses, rows = 0, 0, [], []
    while begin < len(x):
      j = turn % replicas
      end = min(len(x), begin + sizes[j])
      grads, loss = references.least_squares(models[j], x[begin:end],
                                              y[begin:end])
      losses.append(loss)
      rows.append(end - begin)
      lr = LR * sizes[j] / batch_size
      for k, g in enumerate(grads):
        models[j][k], accums[j][k] = references.sgd_step(
            models[j][k], accums[j][k], g, lr, momentum)
      counts[j] += 1
      begin, turn = end, turn + 1
    if run % mega_batch == 0:
      drift = [np.linalg.norm(m[k] - z[k]) for m in models
               for k in range(len(z))]
      by = sizes if np.all(counts == counts[0]) else counts
      weights = by / by.sum()
      perturbed.append(all(d < theta for d in drift))
      if perturbed[-1]:
        rank = [(counts[i], sizes[i], -i) for i in range(replicas)]
        weights[rank.index(max(rank))] += delta
        weights[rank.index(min(rank))] -= delta
      merged = [sum(w * m[k] for w, m in zip(weights, models)) +
                MU * (z[k] - z_prev[k]) for k in range(len(z))]
      z_prev, z = z, merged
      models = [[p.copy() for p in z] for _ in range(replicas)]
      deviation = (counts - counts.mean()) / mega_batch
      sizes = np.clip(np.rint(sizes + b_min / 2 * deviation), b_min,
                      b_max).astype(np.int64)
      counts[:] = 0
    out.append(([p.copy() for p in z], np.average(losses, weights=rows)))
  return out, perturbed


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("theta", ["never", "sometimes", "always"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_one_stream_group_matches_the_reference(optimizer, theta,
                                                use_resource, monkeypatch):
  # 18 rows in chunks of 5 over 3 replicas: 5, 5, 5, 3 to replicas 0, 1, 2,
  # 0, so replica 0 makes twice the updates, the merge weighs them and
  # the batch sizes move.
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "1")
  # "sometimes": between the largest changes of the three merges (SGD 0.39,
  # 0.23, 0.23; momentum 0.90, 0.63, 1.15).
  theta = {"never": 0.0, "always": 1e9,
           "sometimes": 0.3 if optimizer == "sgd" else 1.0}[theta]
  make, momentum = OPTIMIZERS[optimizer]
  model = graphs.build(make, use_resource)
  algorithm = tb.algorithms.Adaptive(mega_batch=2, batch_size=5, theta=theta,
                                     delta=0.1, momentum=MU)
  with tb.TensorBowSession(graph=model.graph, replicas=3,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    losses, centrals = [], []
    for x, y in BATCHES:
      losses.append(sess.run([model.loss, model.train],
                             {model.x: x, model.y: y})[0])
      centrals.append(sess.run(model.w))
    history = sess.adaptive_history()
  expected, perturbed = reference(5, 2, momentum, theta, 0.1, 3)
  np.testing.assert_allclose(losses, [e[1] for e in expected], rtol=1e-5)
  for got, want in zip(centrals, expected):
    np.testing.assert_allclose(got, want[0][0], rtol=1e-5, atol=1e-6)
  assert [h["updates"] for h in history][0] == [4, 2, 2]
  assert history[0]["batch_sizes"] == [5, 5, 5]
  assert history[1]["batch_sizes"] != [5, 5, 5]
  assert [h["perturbed"] for h in history] == perturbed
  assert theta != 0.3 or perturbed == [False, True, True]
  assert theta != 1.0 or perturbed == [True, True, False]


@pytest.mark.slow
def test_a_slowed_replica_makes_fewer_updates_until_counts_even_out(
    monkeypatch):
  # Replica 1 takes twice as long a row as replica 0 (delays per row that
  # outweigh the model's own work): at equal batch sizes replica 0 makes
  # about twice the updates of a mega-batch; Algorithm 1 then gives it
  # larger chunks and replica 1 smaller ones until their counts are close
  # (the paper's Figure 12(a)).
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  monkeypatch.setenv("TENSORBOW_TEST_SLOW_REPLICA", "0:3/row,1:6/row")
  model = graphs.build(OPTIMIZERS["sgd"][0])
  rng = np.random.RandomState(5)
  x = rng.randn(96, 3).astype(np.float32)
  y = rng.randn(96, 1).astype(np.float32)
  algorithm = tb.algorithms.Adaptive(mega_batch=4, batch_size=8)
  with tb.TensorBowSession(graph=model.graph, replicas=2,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    for _ in range(32):
      sess.run(model.train, {model.x: x, model.y: y})
    history = sess.adaptive_history()
  updates = [h["updates"] for h in history]
  assert len(history) == 8
  first, last = history[0], history[-1]
  assert first["updates"][0] > 1.5 * first["updates"][1], updates
  assert last["batch_sizes"][0] > last["batch_sizes"][1]
  gap = lambda h: abs(h["updates"][0] - h["updates"][1]) / np.mean(
      h["updates"])
  assert np.mean([gap(h) for h in history[-3:]]) < 0.5 * gap(first), updates
