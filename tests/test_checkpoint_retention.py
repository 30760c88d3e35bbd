"""TensorBow's state beside a checkpoint follows the Saver's retention
(tensorbow/checkpoint.py): when a `Saver` deletes a checkpoint past
`max_to_keep`, the `.tensorbow.npz` beside it goes too, every worker's
included; checkpoints it keeps keep theirs."""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import checkpoint
from tensorbow.scaleout import cluster as tb_cluster
from tensorbow.cli import chief

tf1 = tf.compat.v1
RNG = np.random.RandomState(5)
X = RNG.randn(12, 3).astype(np.float32)
Y = RNG.randn(12, 1).astype(np.float32)
W0 = np.full([3, 1], 0.5, np.float32)


def _model(use_resource, **saver_args):
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 3])
    y = tf1.placeholder(tf.float32, [None, 1])
    w = tf1.get_variable("w", initializer=W0, use_resource=use_resource)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    init = tf1.global_variables_initializer()
    saver = tf1.train.Saver(**saver_args)
  return graph, x, y, w, train, init, saver


def _states(tmp_path):
  return sorted(os.path.basename(p)
                for p in glob.glob(str(tmp_path / "*.npz")))


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_dropped_checkpoints_lose_their_state_and_the_newest_resumes(
    tmp_path, use_resource):
  prefix = str(tmp_path / "model")
  graph, x, y, w, train, init, saver = _model(use_resource, max_to_keep=2)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    for i in range(5):
      sess.run(train, {x: X, y: Y})
      path = saver.save(sess, prefix, global_step=i)
      # What a worker of a cluster sharing the folder keeps beside it.
      checkpoint.save(path, {}, {}, worker=1)
    for _ in range(4):
      sess.run(train, {x: X, y: Y})
    continued = sess.run(w)
  assert _states(tmp_path) == [
      "model-3.tensorbow-worker1.npz", "model-3.tensorbow.npz",
      "model-4.tensorbow-worker1.npz", "model-4.tensorbow.npz"]
  assert sorted(glob.glob(prefix + "-*.index")) == [
      prefix + "-3.index", prefix + "-4.index"]
  graph, x, y, w, train, init, saver = _model(use_resource, max_to_keep=2)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    saver.restore(sess, tf1.train.latest_checkpoint(str(tmp_path)))
    for _ in range(4):
      sess.run(train, {x: X, y: Y})
    np.testing.assert_array_equal(sess.run(w), continued)


def test_checkpoints_kept_every_n_hours_keep_their_state(tmp_path):
  prefix = str(tmp_path / "model")
  # Every checkpoint is older than the last kept one by more than this.
  graph, x, y, _, train, init, saver = _model(
      True, max_to_keep=2, keep_checkpoint_every_n_hours=1e-9)
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    for i in range(4):
      sess.run(train, {x: X, y: Y})
      saver.save(sess, prefix, global_step=i)
  assert _states(tmp_path) == [f"model-{i}.tensorbow.npz" for i in range(4)]
  assert len(glob.glob(prefix + "-*.index")) == 4


def test_a_workers_state_follows_the_chiefs_retention(tmp_path):
  prefix = str(tmp_path / "model")
  patches = chief.patches(tb_cluster.Cluster(["h:1", "h:2"], 1))
  graph, _, _, _, _, _, saver = _model(True, max_to_keep=2)

  class Session(object):
    """Saves as a worker's TensorBowSession does: its replicas' state
    only; the chief's state is there as in a shared folder."""

    def run(self, fetches, feed_dict):
      del fetches
      path, = feed_dict.values()
      checkpoint.save(path, {}, {}, worker=1)
      checkpoint.save(path, {}, {}, worker=0)

  try:
    for owner, name, _, new in patches:
      setattr(owner, name, new)
    for i in range(5):
      saver.save(Session(), prefix, global_step=i)
  finally:
    for owner, name, old, _ in patches:
      setattr(owner, name, old)
  # This worker's files follow max_to_keep; the chief's are the chief's.
  assert _states(tmp_path) == sorted(
      [f"model-{i}.tensorbow-worker0.npz" for i in range(5)] +
      ["model-3.tensorbow-worker1.npz", "model-4.tensorbow-worker1.npz"])
