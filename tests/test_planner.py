"""The planner (tensorbow/planner.py), below the session.

A replica's commit may run on another stream group than its computation:
the tensors crossing the cut must then be listed in the same order in
every group's calls, whatever order TensorFlow gives each copy's control
inputs in.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import planner
from tensorbow.rewrite import phases


def _split(internal):
  return phases.Split(compute_fetches=[0], commit_fetches=[],
                      compute_targets=[], commit_targets=[0],
                      internal=internal, may_fail=False)


class _Tensor(object):

  def __init__(self, name):
    self.name = name


def _user_name(name):
  return name.split("/", 2)[-1]


def test_internal_tensors_are_aligned_by_the_users_names():
  first = [_Tensor("tb/group_0/a:0"), _Tensor("tb/group_0/b:0"),
           _Tensor("tb/group_0/c:0")]
  second = [_Tensor("tb/group_1/c:0"), _Tensor("tb/group_1/a:0"),
            _Tensor("tb/group_1/b:0")]
  aligned = planner._aligned([_split(first), _split(second)], _user_name)  # pylint: disable=protected-access
  assert [t.name for t in aligned[0].internal] == [t.name for t in first]
  assert [t.name for t in aligned[1].internal] == [
      "tb/group_1/a:0", "tb/group_1/b:0", "tb/group_1/c:0"]


def test_tasks_that_do_not_split_alike_are_not_aligned():
  first = [_Tensor("tb/group_0/a:0")]
  other = [_Tensor("tb/group_1/z:0")]
  assert planner._aligned([_split(first), _split(other)], _user_name) is None  # pylint: disable=protected-access
  assert planner._aligned([None, _split(first)], _user_name) is None  # pylint: disable=protected-access


@pytest.mark.parametrize("use_resource", [True, False])
def test_many_updates_behind_control_dependencies_land_in_their_variables(
    monkeypatch, use_resource):
  """Eight same-shape statistics, each updated from its own share of the
  batch behind the train op's control dependencies (as batch norm's moving
  means are): after every wave each must be the replicas' mean of its own
  update. With the commits' inputs misordered between stream groups, they
  would swap values."""
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  replicas, k, decay = 4, 8, 0.9
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    w = tf.compat.v1.get_variable("w", initializer=np.ones((3, 1), np.float32),
                                  use_resource=use_resource)
    stats, updates = [], []
    for i in range(k):
      s = tf.compat.v1.get_variable(
          f"stat{i}", initializer=np.zeros(3, np.float32), trainable=False,
          use_resource=use_resource)
      mean = tf.reduce_mean(x * float(i + 1), axis=0)
      updates.append(tf.compat.v1.assign(s, decay * s + (1 - decay) * mean))
      stats.append(s)
    loss = tf.reduce_mean(tf.matmul(x, w))
    with tf.control_dependencies(updates):
      train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(3)
  batch = rng.randn(16, 3).astype(np.float32)
  shards = np.array_split(batch, replicas)
  expected = [np.zeros(3) for _ in range(k)]
  replica_stats = [[np.zeros(3) for _ in range(k)] for _ in range(replicas)]
  with tb.TensorBowSession(graph=graph, replicas=replicas) as sess:
    sess.run(init)
    for _ in range(3):
      sess.run(train, {x: batch})
      for r in range(replicas):
        for i in range(k):
          replica_stats[r][i] = (decay * replica_stats[r][i] + (1 - decay) *
                                 np.mean(shards[r] * (i + 1), axis=0))
      expected = [np.mean([replica_stats[r][i] for r in range(replicas)],
                          axis=0) for i in range(k)]
      got = sess.run(stats)
      for i in range(k):
        np.testing.assert_allclose(got[i], expected[i], rtol=1e-5,
                                   atol=1e-6, err_msg=f"stat{i}")

