"""The planner (tensorbow/planner.py), below the session.

A replica's commit may run on another stream group than its computation:
the tensors crossing the cut must then be listed in the same order in
every group's calls, whatever order TensorFlow gives each copy's control
inputs in.
"""
import numpy as np
import pytest
import tensorflow as tf

import references
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


def _batch_norm_like_model(use_resource):
  """Least squares whose optimizer is built under
  tf.control_dependencies(update_ops), as batch-norm models train."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w = tf.compat.v1.get_variable("w", initializer=np.ones((3, 1), np.float32),
                                  use_resource=use_resource)
    h = tf.nn.relu(tf.matmul(x, w))
    moving = tf.compat.v1.get_variable(
        "moving", initializer=np.zeros(1, np.float32), trainable=False,
        use_resource=use_resource)
    update = tf.compat.v1.assign(
        moving, 0.9 * moving + 0.1 * tf.reduce_mean(h, axis=0))
    loss = 0.5 * tf.reduce_mean(tf.square(h - y))
    with tf.control_dependencies([update]):
      train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, w, moving, loss, train, init


@pytest.mark.parametrize("use_resource", [True, False])
def test_the_backward_pass_behind_update_ops_runs_before_the_commit(
    use_resource):
  """Only what the writes consume (gradients, the statistics) is kept from
  a task's computation for its commit, not the forward pass's
  activations, which the backward pass needs: it runs in the
  computation, though the user's graph orders it after the updates."""
  graph, x, y, _, _, _, train, init = _batch_norm_like_model(use_resource)
  rng = np.random.RandomState(0)
  feed = {x: rng.randn(12, 3).astype(np.float32),
          y: rng.randn(12, 1).astype(np.float32)}
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    sess.run(train, feed)
    (plan,) = sess.plans().values()
  assert plan.atomic is not None
  assert plan.atomic.internal
  for t in plan.atomic.internal:
    # A dense weight's update taking its gradient's factors (x, dy) shares
    # them with the backward pass: each is still read by a write.
    assert any(phases.writes_state(c) for c in t.consumers()), (
        t.name, [c.type for c in t.consumers()])


def _conditional_model(use_resource):
  """Least squares through a TF1 conditional on a fed `training` flag, its
  optimizer built under tf.control_dependencies(update_ops): how a TF1
  script's batch norm switches statistics. The backward pass then holds
  the conditional's Switch and Merge, waiting on the update."""
  v2 = tf.compat.v1.control_flow_v2_enabled()
  tf.compat.v1.disable_control_flow_v2()
  try:
    graph = tf.Graph()
    with graph.as_default():
      x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
      y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
      training = tf.compat.v1.placeholder_with_default(True, [], "training")
      w = tf.compat.v1.get_variable("w", initializer=W0,
                                    use_resource=use_resource)
      moving = tf.compat.v1.get_variable(
          "moving", initializer=np.zeros(1, np.float32), trainable=False,
          use_resource=use_resource)
      h = tf.matmul(x, w)
      out = tf.compat.v1.cond(training, lambda: tf.identity(h),
                              lambda: h + tf.stop_gradient(moving))
      update = tf.compat.v1.assign(
          moving, 0.9 * moving + 0.1 * tf.reduce_mean(h, axis=0))
      loss = 0.5 * tf.reduce_mean(tf.square(out - y))
      with tf.control_dependencies([update]):
        train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
            loss)
      init = tf.compat.v1.global_variables_initializer()
  finally:
    if v2:
      tf.compat.v1.enable_control_flow_v2()
  assert any(op.type == "Switch" for op in graph.get_operations())
  return graph, x, y, w, loss, train, init


W0 = np.array([[0.5], [-1.0], [2.0]], np.float32)
LR = 0.1


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_a_tf1_conditional_in_the_backward_pass_runs_before_the_commit(
    use_resource):
  """The conditional's Switch and Merge route values and order nothing:
  the backward pass through them is computed before the commit, which
  receives only the gradient; the replicas train as DESIGN.md's SMA."""
  graph, x, y, w, loss, train, init = _conditional_model(use_resource)
  rng = np.random.RandomState(1)
  batches = [(rng.randn(7, 3).astype(np.float32),
              rng.randn(7, 1).astype(np.float32)) for _ in range(3)]
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    losses = [sess.run([train, loss], {x: bx, y: by})[1]
              for bx, by in batches]
    got = sess.run(w)
    (plan,) = sess.plans().values()
  assert plan.atomic is not None
  assert plan.atomic.internal
  for t in plan.atomic.internal:
    assert any(phases.writes_state(c) for c in t.consumers()), (
        t.name, [c.type for c in t.consumers()])
  expected = references.sma([W0], batches, 3, 1 / 3, 0.9, LR)
  for (_, want_loss, _, _), got_loss in zip(expected, losses):
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
  np.testing.assert_allclose(got, expected[-1][0][0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nonfinite", ["propagate", "raise"])
def test_one_replica_with_a_kernel_copy_runs_as_tensorflow(nonfinite,
                                                           monkeypatch):
  """With one replica a training run is TensorFlow's single run (DESIGN.md,
  "L = 1 is plain training"), also when a copy with faster kernels is
  trained; only a check for non-finite values splits it in two."""
  # The copy is the point: every substitute, whatever the run's setting.
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  graph, x, y, w, loss, train, init = _conditional_model(True)
  rng = np.random.RandomState(2)
  bx = rng.randn(5, 3).astype(np.float32)
  by = rng.randn(5, 1).astype(np.float32)
  with tb.TensorBowSession(graph=graph, replicas=1,
                           nonfinite=nonfinite) as sess:
    sess.run(init)
    sess.run(train, {x: bx, y: by})
    got = sess.run(w)
    (plan,) = sess.plans().values()
    copied = any("/group_0/" in op.name
                 for op in sess.execution_graph.get_operations())
  assert copied, "no kernel copy: MatMul should have a substitute"
  assert len(plan.calls) == 1
  assert (plan.atomic is None) == (nonfinite == "propagate")
  with tf.compat.v1.Session(graph=graph) as ref:
    ref.run(init)
    ref.run(train, {x: bx, y: by})
    np.testing.assert_allclose(got, ref.run(w), rtol=1e-6)


@pytest.mark.parametrize("use_resource", [True, False])
def test_a_fetch_ordered_after_the_train_op_still_trains(use_resource):
  """The TF1 idiom `with tf.control_dependencies([train]): out =
  tf.identity(loss)`, then `sess.run(out)`: a value-only op whose only
  path to the writes is the ordering that the copies move."""
  graph, x, y, w, moving, loss, train, init = _batch_norm_like_model(
      use_resource)
  with graph.as_default():
    with tf.control_dependencies([train]):
      out = tf.identity(loss)
  rng = np.random.RandomState(1)
  feed = {x: rng.randn(12, 3).astype(np.float32),
          y: rng.randn(12, 1).astype(np.float32)}
  results = {}
  for name, make in (("tf", tf.compat.v1.Session),
                     ("tb", lambda graph: tb.TensorBowSession(
                         graph=graph, replicas=1))):
    with make(graph=graph) as sess:
      sess.run(init)
      fetched = [sess.run(out, feed) for _ in range(3)]
      results[name] = (fetched, sess.run(w), sess.run(moving))
  np.testing.assert_allclose(results["tb"][0], results["tf"][0], rtol=1e-5)
  np.testing.assert_allclose(results["tb"][1], results["tf"][1], rtol=1e-5)
  np.testing.assert_allclose(results["tb"][2], results["tf"][2], rtol=1e-5)
  with tb.TensorBowSession(graph=graph, replicas=3) as sess:
    sess.run(init)
    before = sess.run(w)
    sess.run(out, feed)
    sess.run(out, feed)
    assert not np.allclose(sess.run(w), before)
    assert sess.run(moving)[0] != 0.0
