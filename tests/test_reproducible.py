"""Two runs with the same seeds, feeds and configuration give the same
model to the bit, whatever order the replicas' tasks finish in.

Each synchronous algorithm trains L = 4 replicas on 2 stream groups twice.
The runtime delays one replica's commits (TENSORBOW_TEST_SLOW_REPLICA's
phase 1, where SMA's ops run): replica 3's in the first run and replica
0's in the second, so each wave's updates arrive in different orders.
The delay is a sleep, and on a loaded machine the other commits may now
and then take longer than it, so each run need only end with its delayed
replica in all but one of the waves after the first. The central model
(the user's variables) and every replica's state (the checkpoint's
TensorBow part) are compared byte for byte.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

tf1 = tf.compat.v1
REPLICAS = 4
WAVES = 5


def _model(use_resource):
  """A two-layer classifier whose first weights span two of the fused SMA
  kernel's chunks."""
  rng = np.random.RandomState(0)
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 256])
    y = tf1.placeholder(tf.int32, [None])
    var = lambda name, value: tf1.get_variable(
        name, initializer=value.astype(np.float32), use_resource=use_resource)
    w1 = var("w1", rng.randn(256, 128) * 0.05)
    b1 = var("b1", np.zeros(128))
    w2 = var("w2", rng.randn(128, 10) * 0.05)
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
    loss = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                       logits=logits))
    train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    init = tf1.global_variables_initializer()
    saver = tf1.train.Saver()
  return graph, (x, y), [w1, b1, w2], train, init, saver


def _batches():
  rng = np.random.RandomState(1)
  return [(rng.randn(32, 256).astype(np.float32),
           rng.randint(0, 10, 32).astype(np.int32)) for _ in range(WAVES)]


def _train(monkeypatch, prefix, algorithm, use_resource, slow):
  """(central model, replicas' state, the replica whose commit ended last
  in each wave), replica `slow`'s commits delayed."""
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  monkeypatch.setenv("TENSORBOW_TEST_SLOW_REPLICA", f"{slow}:50:1")
  graph, (x, y), weights, train, init, saver = _model(use_resource)
  with tb.TensorBowSession(graph=graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(init)
    for xs, ys in _batches():
      sess.run(train, {x: xs, y: ys})
    central = sess.run(weights)
    saver.save(sess, prefix)
    ends = {}  # per wave, per replica, when its commit ended
    for t in sess.task_timings():
      if t.replica >= 0 and t.phase == 1:
        ends.setdefault(t.wave, {})[t.replica] = t.end
  last = [max(e, key=e.get) for _, e in sorted(ends.items())]
  with np.load(prefix + ".tensorbow.npz") as state:
    replicas = {k: state[k] for k in state.files if k != "__config__"}
  return central, replicas, last


@pytest.mark.parametrize("use_resource", [False, True],
                         ids=["ref", "resource"])
# SMA in the fast tier; every other algorithm in the slow tier.
@pytest.mark.parametrize("algorithm", [
    "sma",
    *(pytest.param(algorithm, id=name, marks=pytest.mark.slow)
      for name, algorithm in [
          ("easgd", "easgd"), ("ssgd", "ssgd"), ("none", "none"),
          ("asgd_ci2", tb.algorithms.ASGD(communication_interval=2)),
          ("local_sgd_h2", tb.algorithms.LocalSGD(
              period=2, outer_learning_rate=0.7, outer_momentum=0.9,
              nesterov=True))])])
def test_two_runs_give_the_same_model_to_the_bit(monkeypatch, tmp_path,
                                                 algorithm, use_resource):
  runs = [_train(monkeypatch, str(tmp_path / f"run{slow}"), algorithm,
                 use_resource, slow) for slow in (REPLICAS - 1, 0)]
  (central, replicas, last), (slow_central, slow_replicas, slow_last) = runs
  # After the first wave, whose first runs of each task may take longer:
  for slow, ends in ((REPLICAS - 1, last), (0, slow_last)):
    assert ends[1:].count(slow) >= WAVES - 2, (slow, ends)
  for got, want in zip(slow_central, central):
    assert got.tobytes() == want.tobytes()
  assert sorted(slow_replicas) == sorted(replicas)
  assert any("replica" in k for k in replicas), sorted(replicas)
  for key, want in replicas.items():
    assert slow_replicas[key].tobytes() == want.tobytes(), key
  # The model trained: the central model moved from where it started.
  start = _model(use_resource)
  with tf1.Session(graph=start[0]) as sess:
    sess.run(start[4])
    assert not np.array_equal(sess.run(start[2])[0], central[0])
