"""TensorBowSession against NumPy references and tf.compat.v1.Session.

The model is least squares, loss = 0.5 * mean((x w + b - y)^2), whose
gradients NumPy computes exactly, so every wave of SMA can be checked.
"""
import collections
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2

import tensorbow as tb

import references
from graphs import B0, W0, build


RNG = np.random.RandomState(42)
X = RNG.randn(10, 3).astype(np.float32)
Y = RNG.randn(10, 1).astype(np.float32)


def sma_reference(waves, num_replicas, alpha, mu, lr, momentum=None,
                  nesterov=False, z=(W0, B0), adagrad=False, x=X, y=Y):
  """DESIGN.md, "Synchronous model averaging" in NumPy (tests/references.py) on
  the batch (x, y) every wave; returns per wave (z, fetched loss, replicas,
  accumulators)."""
  return references.sma(list(z), [(x, y)] * waves, num_replicas, alpha, mu,
                        lr, momentum, nesterov, adagrad)


def assert_waves_match(m, reference, replicas, alpha, mu, x=X, y=Y,
                       config=None, inspect=None):
  """Trains wave by wave, checking z and the fetched loss against NumPy;
  returns inspect(session) taken before it closes, if given."""
  with tb.TensorBowSession(graph=m.graph, replicas=replicas, alpha=alpha,
                           central_momentum=mu, config=config) as sess:
    sess.run(m.init)
    for z, loss, _, _ in reference:
      # 10 rows over 3 replicas: uneven shards of 4, 3 and 3.
      fetched, _ = sess.run([m.loss, m.train], {m.x: x, m.y: y})
      np.testing.assert_allclose(sess.run(m.w), z[0], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(sess.run(m.b), z[1], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(fetched, loss, rtol=1e-5)
    return inspect(sess) if inspect is not None else None


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer,momentum,nesterov", [
    ("sgd", None, False), ("momentum", 0.7, False), ("momentum", 0.7, True)])
def test_sma_matches_numpy(use_resource, optimizer, momentum, nesterov):
  lr, alpha, mu, replicas = 0.1, 0.25, 0.6, 3
  if optimizer == "sgd":
    opt = lambda: tf.compat.v1.train.GradientDescentOptimizer(lr)
  else:
    opt = lambda: tf.compat.v1.train.MomentumOptimizer(
        lr, momentum, use_nesterov=nesterov)
  m = build(opt, use_resource)
  reference = sma_reference(3, replicas, alpha, mu, lr, momentum, nesterov)
  assert_waves_match(m, reference, replicas, alpha, mu)


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
@pytest.mark.parametrize("replicas", [
    2, 3, pytest.param(4, marks=pytest.mark.slow), 16])
def test_sma_matches_numpy_for_any_replica_count(use_resource, optimizer,
                                                 replicas):
  # 37 rows: uneven shards at every L (19 + 18, ..., 5 x 3 + 11 x 2).
  rng = np.random.RandomState(replicas)
  x = rng.randn(37, 3).astype(np.float32)
  y = rng.randn(37, 1).astype(np.float32)
  lr, mu = 0.1, 0.9
  momentum = 0.8 if optimizer == "momentum" else None
  if momentum is None:
    opt = lambda: tf.compat.v1.train.GradientDescentOptimizer(lr)
  else:
    opt = lambda: tf.compat.v1.train.MomentumOptimizer(lr, momentum)
  m = build(opt, use_resource)
  reference = sma_reference(3, replicas, 1.0 / replicas, mu, lr, momentum,
                            x=x, y=y)
  assert_waves_match(m, reference, replicas, None, mu, x, y)


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adagrad"])
@pytest.mark.parametrize("devices", [1, 2])
def test_sixteen_replicas_on_two_stream_groups_match_numpy(
    monkeypatch, use_resource, optimizer, devices):
  """The replica pool: 16 replicas' tasks taken by 2 stream groups, each
  running its own copy of the learning part, first come first served;
  with 2 logical CPU devices, each group's copy on its own."""
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  replicas, lr, alpha, mu = 16, 0.1, 0.05, 0.7
  rng = np.random.RandomState(16)
  x = rng.randn(40, 3).astype(np.float32)
  y = rng.randn(40, 1).astype(np.float32)
  momentum = 0.8 if optimizer == "momentum" else None
  make = {"sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(lr),
          "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(
              lr, momentum),
          "adagrad": lambda: tf.compat.v1.train.AdagradOptimizer(
              lr, initial_accumulator_value=0.1)}[optimizer]
  m = build(make, use_resource)
  reference = sma_reference(4, replicas, alpha, mu, lr, momentum,
                            adagrad=optimizer == "adagrad", x=x, y=y)
  config = tf.compat.v1.ConfigProto(device_count={"CPU": devices})
  timings, copies = assert_waves_match(
      m, reference, replicas, alpha, mu, x, y, config,
      inspect=lambda sess: (
          [t for t in sess.task_timings() if t.replica >= 0],
          [op for op in sess.execution_graph.get_operations()
           if op.type in ("TensorBowReplicaVarHandle",
                          "TensorBowReplicaVariable")]))
  for op in copies:
    group = int(op.name.split("/")[1][len("group_"):])
    if devices == 1:
      assert op.device == "", (op.name, op.device)
    else:
      assert op.device.endswith(f"/device:CPU:{group}"), (op.name, op.device)
  copies = [op.name for op in copies]
  assert sorted(set(t.replica for t in timings)) == list(range(replicas))
  assert set(t.stream_group for t in timings) <= {0, 1}
  # One copy of each written variable per stream group, none per replica.
  assert len(copies) == 2 * len(set(n.split("/", 2)[2] for n in copies))
  assert len(copies) < replicas


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_execution_graph_size_does_not_grow_with_replicas(
    monkeypatch, use_resource, optimizer):
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  # Kernels chosen by the rules alone: timed, a replica's rows (16 / L)
  # may choose differently, and the choice may add a node.
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  make = {"sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
          "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.1)}[optimizer]
  sizes = {}
  for replicas in (2, 5, 32):
    m = build(make, use_resource, global_step=True)
    with tb.TensorBowSession(graph=m.graph, replicas=replicas) as sess:
      sess.run(m.init)
      sess.run(m.train, {m.x: np.tile(X, (4, 1)), m.y: np.tile(Y, (4, 1))})
      sess.run(m.w)  # a plain run after training refreshes the slots
      sizes[replicas] = len(sess.execution_graph.get_operations())
  assert sizes[2] == sizes[5] == sizes[32], sizes


@pytest.mark.parametrize("use_resource", [True, False])
def test_sma_through_a_cond_matches_numpy(tf_mode, use_resource):
  """A cond in the learning part: Switch and Merge ops copied into each
  replica under v1 behaviour, an If op (a function) otherwise."""
  lr, alpha, mu, replicas = 0.1, 0.25, 0.6, 3
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    with_bias = tf.compat.v1.placeholder_with_default(True, [])
    w = tf.compat.v1.get_variable("w", initializer=W0,
                                  use_resource=use_resource)
    b = tf.compat.v1.get_variable("b", initializer=B0,
                                  use_resource=use_resource)
    pred = tf.cond(with_bias, lambda: tf.matmul(x, w) + b,
                   lambda: tf.matmul(x, w) - b)
    loss = 0.5 * tf.reduce_mean(tf.square(pred - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(lr).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  control_flow = {op.type for op in graph.get_operations()} & {
      "Switch", "Merge", "If", "StatelessIf"}
  if tf_mode == "v1":
    assert control_flow == {"Switch", "Merge"}, control_flow
  else:
    assert control_flow and control_flow <= {"If", "StatelessIf"}, (
        control_flow)
  reference = sma_reference(3, replicas, alpha, mu, lr)
  with tb.TensorBowSession(graph=graph, replicas=replicas, alpha=alpha,
                           central_momentum=mu) as sess:
    sess.run(init)
    for z, fetched_loss, _, _ in reference:
      fetched, _ = sess.run([loss, train], {x: X, y: Y})
      np.testing.assert_allclose(sess.run(w), z[0], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(sess.run(b), z[1], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(fetched, fetched_loss, rtol=1e-5)


@pytest.mark.parametrize("use_resource", [True, False])
def test_sma_around_any_optimizer_matches_numpy(use_resource):
  # Adagrad has no fused SMA kernel: the generic correction wraps its op.
  lr, alpha, mu, replicas = 0.3, 0.4, 0.8, 3
  m = build(lambda: tf.compat.v1.train.AdagradOptimizer(lr), use_resource)
  reference = sma_reference(3, replicas, alpha, mu, lr, adagrad=True)
  assert_waves_match(m, reference, replicas, alpha, mu)


def test_momentum_slot_is_replica_mean_in_plain_runs():
  lr, replicas = 0.1, 3
  m = build(lambda: tf.compat.v1.train.MomentumOptimizer(lr, 0.5))
  reference = sma_reference(2, replicas, 1.0 / replicas, 0.9, lr, 0.5)
  with m.graph.as_default():
    slot = [v for v in tf.compat.v1.global_variables()
            if "Momentum" in v.op.name and v.op.name.startswith("w")][0]
  with tb.TensorBowSession(graph=m.graph, replicas=replicas) as sess:
    sess.run(m.init)
    for _ in range(2):
      sess.run(m.train, {m.x: X, m.y: Y})
    accums = reference[-1][3]
    expected = np.mean([a[0] for a in accums], axis=0)
    np.testing.assert_allclose(sess.run(slot), expected, rtol=1e-5, atol=1e-7)


def test_algorithm_none_trains_replicas_independently():
  lr, replicas = 0.1, 2
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(lr))
  with tb.TensorBowSession(graph=m.graph, replicas=replicas,
                           algorithm="none") as sess:
    sess.run(m.init)
    for _ in range(3):
      sess.run(m.train, {m.x: X, m.y: Y})
    (w, b), _, _, _ = references.sma([W0, B0], [(X, Y)] * 3, replicas,
                                     None, None, lr, algorithm="none")[-1]
    # Without synchronisation the central model is replica 0's.
    np.testing.assert_allclose(sess.run(m.w), w, rtol=1e-5)
    np.testing.assert_allclose(sess.run(m.b), b, rtol=1e-5)


@pytest.mark.parametrize("use_resource", [True, False])
def test_one_replica_equals_tf_session(use_resource):
  opt = lambda: tf.compat.v1.train.MomentumOptimizer(0.05, 0.9)
  results = []
  for make in (lambda g: tf.compat.v1.Session(graph=g),
               lambda g: tb.TensorBowSession(graph=g, replicas=1)):
    m = build(opt, use_resource, global_step=True)
    with make(m.graph) as sess:
      sess.run(m.init)
      losses = [sess.run([m.loss, m.train], {m.x: X, m.y: Y})[0]
                for _ in range(5)]
      results.append((losses, sess.run([m.w, m.b, m.step])))
  (tf_losses, tf_vars), (tb_losses, tb_vars) = results
  np.testing.assert_allclose(tb_losses, tf_losses, rtol=1e-6)
  for a, b in zip(tb_vars, tf_vars):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert tb_vars[2] == 5


@pytest.mark.parametrize("name,make", [
    ("adam", lambda: tf.compat.v1.train.AdamOptimizer(0.05)),
    ("rmsprop", lambda: tf.compat.v1.train.RMSPropOptimizer(0.02)),
    ("adagrad", lambda: tf.compat.v1.train.AdagradOptimizer(0.3)),
])
def test_other_optimizers_train_under_sma(name, make):
  m = build(make, global_step=True)
  with tb.TensorBowSession(graph=m.graph, replicas=3) as sess:
    sess.run(m.init)
    before = sess.run(m.loss, {m.x: X, m.y: Y})
    for _ in range(40):
      sess.run(m.train, {m.x: X, m.y: Y})
    after = sess.run(m.loss, {m.x: X, m.y: Y})
    assert after < 0.7 * before, (name, before, after)
    assert sess.run(m.step) == 40  # once per wave, not once per replica


def test_global_step_fetched_in_training_run_counts_waves():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
            global_step=True)
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    for expected in (1, 2, 3):
      _, step = sess.run([m.train, m.step], {m.x: X, m.y: Y})
      assert step == expected


def test_batch_feeds_of_different_rows_raise_and_change_nothing():
  # (A batch of fewer rows than replicas trains: tests/test_partial_batches.)
  m = build(lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
  with tb.TensorBowSession(graph=m.graph, replicas=4) as sess:
    sess.run(m.init)
    sess.run(m.train, {m.x: X, m.y: Y})
    w = sess.run(m.w)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"same first dimension; got x:0: 10, y:0: 8"):
      sess.run(m.train, {m.x: X, m.y: Y[:8]})
    np.testing.assert_array_equal(sess.run(m.w), w)
    # The next wave continues exactly as if the failed calls never happened.
    reference = build(lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
    with tb.TensorBowSession(graph=reference.graph, replicas=4) as ref:
      ref.run(reference.init)
      for _ in range(2):
        ref.run(reference.train, {reference.x: X, reference.y: Y})
      sess.run(m.train, {m.x: X, m.y: Y})
      np.testing.assert_allclose(sess.run(m.w), ref.run(reference.w),
                                 rtol=1e-6)


def test_fetch_merging_and_nested_structures():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  Pair = collections.namedtuple("Pair", "pred loss")
  with tb.TensorBowSession(graph=m.graph, replicas=3) as sess:
    sess.run(m.init)
    out = sess.run({"pair": Pair(m.pred, m.loss), "ops": [m.train],
                    "w": (m.w,), "name": "x:0"}, {m.x: X, m.y: Y})
    # Per-example tensors come back whole, in order, from the pre-step model.
    np.testing.assert_allclose(out["pair"].pred, X @ W0 + B0, rtol=1e-5)
    assert out["ops"] == [None]
    np.testing.assert_array_equal(out["name"], X)
    np.testing.assert_array_equal(out["w"][0], sess.run(m.w))
    assert isinstance(out["pair"].loss, np.float32)


def test_ops_created_after_session_and_eval():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  sess = tb.TensorBowSession(graph=m.graph, replicas=2)
  with sess:
    sess.run(m.init)
    sess.run(m.train, {m.x: X, m.y: Y})
    with m.graph.as_default():
      error = tf.reduce_max(tf.abs(m.pred - m.y))
      double_loss = 2.0 * m.loss
    w, b = sess.run([m.w, m.b])
    expected = np.abs(X @ w + b - Y).max()
    np.testing.assert_allclose(error.eval({m.x: X, m.y: Y}), expected,
                               rtol=1e-5)
    # A new training signature, built after the first training run: its
    # loss is the replicas' at their own (not the central) weights.
    loss2, _ = sess.run([double_loss, m.train], {m.x: X, m.y: Y})
    reference = sma_reference(2, 2, 0.5, 0.9, 0.1)
    np.testing.assert_allclose(loss2, 2 * reference[1][1], rtol=1e-5)
    np.testing.assert_allclose(sess.run(m.w), reference[1][0][0], rtol=1e-5)


def test_make_callable():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  reference = sma_reference(2, 2, 0.5, 0.9, 0.1)
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    step = sess.make_callable([m.loss, m.train], feed_list=[m.x, m.y])
    for z, loss, _, _ in reference:
      fetched, none = step(X, Y)
      assert none is None
      np.testing.assert_allclose(fetched, loss, rtol=1e-5)
    np.testing.assert_allclose(sess.run(m.w), reference[-1][0][0], rtol=1e-5)


def test_callable_from_options_trains_and_evaluates():
  # TensorFlow's own code (Keras's backend) builds callables this way.
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  reference = sma_reference(2, 2, 0.5, 0.9, 0.1)
  options = config_pb2.CallableOptions()
  options.feed.extend([m.x.name, m.y.name])
  options.fetch.append(m.loss.name)
  options.target.append(m.train.name)
  config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2)
  with tb.TensorBowSession(graph=m.graph, replicas=2, config=config) as sess:
    assert sess._config is config  # pylint: disable=protected-access
    sess.run(m.init)
    step = sess._make_callable_from_options(options)  # pylint: disable=protected-access
    for z, loss, _, _ in reference:
      fetched = step(X, Y)
      assert len(fetched) == 1
      np.testing.assert_allclose(fetched[0], loss, rtol=1e-5)
    np.testing.assert_allclose(sess.run(m.w), reference[-1][0][0], rtol=1e-5)
    with pytest.raises(TypeError, match="expected 2 feed values, got 1"):
      step(X)


def test_partial_run_refuses_a_training_step_and_runs_plain_ones():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with m.graph.as_default():
    doubled = m.loss * 2.0
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    with pytest.raises(tf.errors.UnimplementedError,
                       match="training step in partial_run: the fetches run "
                       "optimizer op 'GradientDescent/update_w/"):
      sess.partial_run_setup([m.loss, m.train], [m.x, m.y])
    np.testing.assert_array_equal(sess.run(m.w), W0)
    # A plain partial run, in two steps, as with TensorFlow.
    handle = sess.partial_run_setup([m.loss, doubled], [m.x, m.y])
    loss = sess.partial_run(handle, m.loss, {m.x: X, m.y: Y})
    np.testing.assert_allclose(sess.partial_run(handle, doubled), 2 * loss,
                               rtol=1e-6)
    _, expected = references.least_squares([W0, B0], X, Y)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_saver_checkpoint_restores_into_tf_session(tmp_path):
  m = build(lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
  with m.graph.as_default():
    saver = tf.compat.v1.train.Saver()
  path = str(tmp_path / "model.ckpt")
  with tb.TensorBowSession(graph=m.graph, replicas=3) as sess:
    sess.run(m.init)
    for _ in range(3):
      sess.run(m.train, {m.x: X, m.y: Y})
    saved_loss = sess.run(m.loss, {m.x: X, m.y: Y})
    saved_w = sess.run(m.w)
    saver.save(sess, path)
  with tf.compat.v1.Session(graph=m.graph) as plain:
    saver.restore(plain, path)
    np.testing.assert_array_equal(plain.run(m.w), saved_w)
    assert plain.run(m.loss, {m.x: X, m.y: Y}) == saved_loss


@pytest.mark.parametrize("replica_state", [True, False])
def test_restore_resumes_from_the_checkpoint(tmp_path, replica_state):
  """With the replicas' state saved beside the checkpoint, training goes
  on from the save point exactly; without it (a checkpoint of plain
  TensorFlow's), the replicas are re-seeded from the restored central
  model."""
  lr, alpha, mu = 0.1, 0.3, 0.5
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(lr))
  with m.graph.as_default():
    saver = tf.compat.v1.train.Saver()
  path = str(tmp_path / "model.ckpt")
  with tb.TensorBowSession(graph=m.graph, replicas=2, alpha=alpha,
                           central_momentum=mu) as sess:
    sess.run(m.init)
    sess.run(m.train, {m.x: X, m.y: Y})
    saver.save(sess, path)
    z = (sess.run(m.w), sess.run(m.b))
    for _ in range(3):  # the replicas drift away from the checkpoint
      sess.run(m.train, {m.x: X, m.y: Y})
    if replica_state:
      reference = sma_reference(3, 2, alpha, mu, lr)[1:]
    else:
      os.remove(path + ".tensorbow.npz")
      reference = sma_reference(2, 2, alpha, mu, lr, z=z)
    saver.restore(sess, path)
    for expected, _, _, _ in reference:
      sess.run(m.train, {m.x: X, m.y: Y})
      np.testing.assert_allclose(sess.run(m.w), expected[0], rtol=1e-5,
                                 atol=1e-6)


def test_unsupported_write_of_trainable_variable_is_named():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with m.graph.as_default():
    clip = m.b.assign(tf.clip_by_value(m.b, -1.0, 1.0), name="clip_b")
    with tf.control_dependencies([m.train]):
      train = tf.group(clip)
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    with pytest.raises(tf.errors.UnimplementedError,
                       match=r"op 'clip_b' \(type AssignVariableOp\): it "
                       r"writes trainable variable 'b' outside"):
      sess.run(train, {m.x: X, m.y: Y})
    np.testing.assert_array_equal(sess.run(m.b), B0)


def test_constructor_rejects_bad_arguments():
  with pytest.raises(ValueError,
                     match="replicas must be an int >= 1 or 'auto', got 0"):
    tb.TensorBowSession(replicas=0)
  with pytest.raises(ValueError, match="algorithm must be one of"):
    tb.TensorBowSession(algorithm="easgd-typo")
  with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\]"):
    tb.TensorBowSession(alpha=1.5)
  with pytest.raises(ValueError, match=r"central_momentum must be in \[0, 1\)"):
    tb.TensorBowSession(central_momentum=1.0)


@pytest.mark.parametrize("arguments", [
    dict(graph=1), dict(graph=tf.compat.v1.GraphDef()),
    dict(target=tf.compat.v1.ConfigProto()), dict(target=3),
    dict(config="config"), dict(config=tf.compat.v1.GraphOptions())])
def test_bad_session_arguments_raise_as_tensorflow(arguments):
  with pytest.raises(TypeError) as expected:
    tf.compat.v1.Session(**arguments)
  with pytest.raises(TypeError) as got:
    tb.TensorBowSession(**arguments)
  assert str(got.value) == str(expected.value)


def test_config_none_is_tensorflows_default_config():
  with tf.compat.v1.Session() as plain:
    default = plain._config  # pylint: disable=protected-access
  with tb.TensorBowSession() as sess:
    assert sess._config == default  # pylint: disable=protected-access
    assert sess.graph_def is not None


def test_task_timings_record_every_replica():
  # A global step is refreshed by a synchronisation task after each wave.
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
            global_step=True)
  with tb.TensorBowSession(graph=m.graph, replicas=3) as sess:
    sess.run(m.init)
    for _ in range(2):
      sess.run(m.train, {m.x: X, m.y: Y})
    timings = sess.task_timings()
  learning = [t for t in timings if t.replica >= 0 and t.phase == 0]
  assert sorted((t.wave, t.replica, t.rows) for t in learning) == [
      (1, 0, 4), (1, 1, 3), (1, 2, 3), (2, 0, 4), (2, 1, 3), (2, 2, 3)]
  assert all(t.end >= t.start for t in timings)
  syncs = [t for t in timings if t.replica == -1]
  assert len(syncs) == 2 and all(t.rows == -1 for t in syncs)
  # The synchronisation starts after every task of its wave has computed
  # and committed.
  commits = [t for t in timings if t.replica >= 0 and t.phase == 1]
  assert sorted((t.wave, t.replica) for t in commits) == [
      (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
  for s in syncs:
    assert s.start >= max(t.end for t in learning + commits
                          if t.wave == s.wave)


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("replicas,fast_kernels", [
    (1, "0"),  # the user's own graph
    (1, "1"),  # a copy with TensorBow's kernels
    (2, "1"), (4, "1"), (7, "1")])
def test_replicas_see_the_fed_rows_once(monkeypatch, use_resource, replicas,
                                        fast_kernels):
  """Guards against every replica training on the whole batch: the rows
  TensorFlow was given per task, from the runtime, add up to the fed rows,
  split as numpy.array_split splits them."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast_kernels)
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1),
            use_resource)
  with m.graph.as_default():
    # Fetched, the batch's row count is the whole batch's (DESIGN.md, "What
    # leaves the replicas"; until issue #60 it was replica 0's): the task
    # timings below show the split.
    rows = tf.shape(m.x)[0]
  with tb.TensorBowSession(graph=m.graph, replicas=replicas) as sess:
    sess.run(m.init)
    seen = []
    for n in (7, 10):
      seen.append(sess.run([rows, m.train], {m.x: X[:n], m.y: Y[:n]})[0])
    timings = sess.task_timings()
  assert seen == [7, 10]
  for wave, n in ((1, 7), (2, 10)):
    tasks = sorted((t.replica, t.rows) for t in timings
                   if t.wave == wave and t.replica >= 0 and t.phase == 0)
    assert tasks == [(r, len(s)) for r, s in
                     enumerate(np.array_split(np.zeros(n), replicas))]


def test_string_fetches_in_training_run():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with m.graph.as_default():
    scalar = tf.compat.v1.summary.scalar("loss", m.loss)
    histogram = tf.compat.v1.summary.histogram("pred", m.pred)
    merged = tf.compat.v1.summary.merge([scalar, histogram])
    text = tf.strings.as_string(m.pred)
    loss_text = tf.strings.as_string(m.loss)
  with tf.compat.v1.Session(graph=m.graph) as plain:
    plain.run(m.init)
    expected_text = plain.run(text, {m.x: X, m.y: Y})
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    serialized, texts, loss_texts, _ = sess.run(
        [merged, text, loss_text, m.train], {m.x: X, m.y: Y})
  np.testing.assert_array_equal(texts, expected_text)
  # A string scalar is not averaged: it is replica 0's, on its shard.
  _, shard_loss = references.least_squares([W0, B0], X[:5], Y[:5])
  np.testing.assert_allclose(float(loss_texts), shard_loss, rtol=1e-5)
  # A summary's scalars are the shard-weighted mean over the replicas, as a
  # fetched loss is; its histograms, replica 0's.
  loss_value, pred_value = tf.compat.v1.Summary.FromString(serialized).value
  assert (loss_value.tag, pred_value.tag) == ("loss", "pred")
  _, batch_loss = references.least_squares([W0, B0], X, Y)
  np.testing.assert_allclose(loss_value.simple_value, batch_loss, rtol=1e-5)
  assert pred_value.histo.num == 5
  np.testing.assert_allclose(pred_value.histo.sum, np.sum(X[:5] @ W0 + B0),
                             rtol=1e-5)


def test_histogram_summary_in_a_one_replica_training_run():
  """At L = 1 the training run is a copy of the user's graph (with faster
  kernels); its summaries are as tf.compat.v1.Session's."""
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with m.graph.as_default():
    merged = tf.compat.v1.summary.merge(
        [tf.compat.v1.summary.scalar("loss", m.loss),
         tf.compat.v1.summary.histogram("pred", m.pred)])
  protos = []
  for make in (tf.compat.v1.Session,
               lambda graph: tb.TensorBowSession(graph=graph, replicas=1)):
    with make(graph=m.graph) as sess:
      sess.run(m.init)
      protos.append(tf.compat.v1.Summary.FromString(
          sess.run([merged, m.train], {m.x: X, m.y: Y})[0]))
  assert protos[1].value[1].histo.num == protos[0].value[1].histo.num == 10
  np.testing.assert_allclose(protos[1].value[1].histo.sum,
                             protos[0].value[1].histo.sum, rtol=1e-5)


def test_wave_failing_in_one_replica_changes_no_state():
  lr, alpha, mu, replicas = 0.1, 0.25, 0.6, 3
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w = tf.compat.v1.get_variable("w", initializer=W0)
    b = tf.compat.v1.get_variable("b", initializer=B0)
    checked = tf.debugging.check_numerics(x, "bad input")
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(checked, w) + b - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(lr).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  with tb.TensorBowSession(graph=graph, replicas=replicas, alpha=alpha,
                           central_momentum=mu) as sess:
    sess.run(init)
    bad = X.copy()
    bad[-1] = np.nan  # only the last replica's shard: the others step
    with pytest.raises(tf.errors.InvalidArgumentError, match="bad input"):
      sess.run(train, {x: bad, y: Y})
    np.testing.assert_array_equal(sess.run(w), W0)
    # The replicas that stepped are put back, and the leaders' counts
    # restart: training goes on exactly as if the failed wave never ran.
    for z, fetched_loss, _, _ in sma_reference(3, replicas, alpha, mu, lr):
      fetched, _ = sess.run([loss, train], {x: X, y: Y})
      np.testing.assert_allclose(sess.run(w), z[0], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(fetched, fetched_loss, rtol=1e-5)


def test_scalar_feeds_keep_their_shape_in_training_runs():
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with m.graph.as_default():
    scale = tf.compat.v1.placeholder_with_default(1.0, [], name="scale")
    scaled = m.loss * scale
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(scaled)
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    fetched, _ = sess.run([scaled, train], {m.x: X, m.y: Y, scale: 2.0})
    shards = zip(np.array_split(X, 2), np.array_split(Y, 2))
    expected = np.mean([2.0 * references.least_squares([W0, B0], xs, ys)[1]
                         for xs, ys in shards])
    np.testing.assert_allclose(fetched, expected, rtol=1e-5)


def test_repeated_plain_writes_do_not_grow_the_graph():
  m = build(lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9))
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    sizes = []
    for _ in range(3):
      sess.run(m.train, {m.x: X, m.y: Y})
      sess.run(m.init)  # a plain run that writes: replicas are re-seeded
      sizes.append(len(sess.execution_graph.get_operations()))
    assert sizes[1] == sizes[2], sizes
    # Re-seeding really happened: the next wave starts from W0 again.
    reference = sma_reference(1, 2, 0.5, 0.9, 0.1, momentum=0.9)
    sess.run(m.train, {m.x: X, m.y: Y})
    np.testing.assert_allclose(sess.run(m.w), reference[0][0][0], rtol=1e-5)


@pytest.mark.parametrize("use_resource", [True, False])
def test_variables_of_one_shape_keep_their_own_values(use_resource):
  # Batch norm's gamma (ones) and beta (zeros): TensorBow's buffers for
  # variables of one shape must never be shared. The first wave leaves the
  # central model where it was (every replica starts on it); later ones
  # follow NumPy's SMA.
  graph = tf.Graph()
  rng = np.random.RandomState(3)
  xs = rng.rand(8, 4).astype(np.float32)
  ys = (2 * xs + 0.5).astype(np.float32)
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4])
    y = tf.compat.v1.placeholder(tf.float32, [None, 4])
    gamma = tf.compat.v1.get_variable(
        "gamma", initializer=np.ones(4, np.float32), use_resource=use_resource)
    beta = tf.compat.v1.get_variable(
        "beta", initializer=np.zeros(4, np.float32), use_resource=use_resource)
    loss = 0.5 * tf.reduce_mean(tf.reduce_sum(
        tf.square(x * gamma + beta - y), axis=1))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  alpha, mu, lr, replicas = 0.5, 0.9, 0.1, 2
  z = [np.ones(4), np.zeros(4)]
  z_prev = [p.copy() for p in z]
  ws = [[p.copy() for p in z] for _ in range(replicas)]
  shards = list(zip(np.array_split(xs, replicas), np.array_split(ys, replicas)))
  with tb.TensorBowSession(graph=graph, replicas=replicas, alpha=alpha,
                           central_momentum=mu) as sess:
    sess.run(init)
    for _ in range(3):
      sess.run(train, {x: xs, y: ys})
      corrections = [np.zeros(4), np.zeros(4)]
      for j, (sx, sy) in enumerate(shards):
        g, b = ws[j]
        r = sx * g + b - sy
        grads = ((r * sx).sum(axis=0) / len(sx), r.sum(axis=0) / len(sx))
        for k in range(2):
          c = alpha * (ws[j][k] - z[k])
          ws[j][k] = ws[j][k] - lr * grads[k] - c
          corrections[k] += c
      z, z_prev = [z[k] + corrections[k] + mu * (z[k] - z_prev[k])
                   for k in range(2)], z
      got_gamma, got_beta = sess.run([gamma, beta])
      np.testing.assert_allclose(got_gamma, z[0], rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(got_beta, z[1], rtol=1e-5, atol=1e-6)


def test_repeated_runs_check_every_call_and_return_this_calls_values():
  """Runs are classified once per fetch structure and feed keys; what
  depends on the call (fed values, shapes, fetchability) is still per call."""
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with tb.TensorBowSession(graph=m.graph, replicas=2) as sess:
    sess.run(m.init)
    for scale in (1.0, -2.0, 3.0):
      # A fetched fed tensor is this call's value, by Tensor and by name.
      out = sess.run({"x": m.x, "name": "y:0", "op": m.train},
                     {m.x: scale * X, m.y: scale * Y})
      assert sorted(out) == ["name", "op", "x"] and out["op"] is None
      np.testing.assert_array_equal(out["x"], scale * X)
      np.testing.assert_array_equal(out["name"], scale * Y)
    for _ in range(2):
      loss, _ = sess.run([m.loss, m.train], {m.x: X, m.y: Y})
    w = sess.run(m.w)
    with pytest.raises(ValueError, match=r"Cannot feed value of shape "
                       r"\(10, 2\) for Tensor x:0, which has shape"):
      sess.run([m.loss, m.train], {m.x: X[:, :2], m.y: Y})
    m.graph.prevent_fetching(m.loss.op)
    with pytest.raises(ValueError, match="has been marked as not fetchable"):
      sess.run([m.loss, m.train], {m.x: X, m.y: Y})
    np.testing.assert_array_equal(sess.run(m.w), w)
    # Fed by name, in another order: the same training wave, checked
    # against a session fed by Tensor below.
    sess.run([m.train], {"y:0": Y, "x:0": X})
    got = sess.run([m.w, m.b])
  # The same successful runs, fed by Tensor in the graph's order.
  ref = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
  with tb.TensorBowSession(graph=ref.graph, replicas=2) as sess:
    sess.run(ref.init)
    for scale in (1.0, -2.0, 3.0):
      sess.run(ref.train, {ref.x: scale * X, ref.y: scale * Y})
    for _ in range(2):
      ref_loss, _ = sess.run([ref.loss, ref.train], {ref.x: X, ref.y: Y})
    sess.run(ref.train, {ref.x: X, ref.y: Y})
    expected = sess.run([ref.w, ref.b])
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
  for a, b in zip(got, expected):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("by_name,instance", [
    ({"algorithm": "sma", "alpha": 0.3, "central_momentum": 0.5},
     tb.algorithms.SMA(alpha=0.3, central_momentum=0.5)),
    ({"algorithm": "sma"}, tb.algorithms.SMA()),
    ({"algorithm": "none"}, tb.algorithms.Independent()),
])
def test_algorithm_instances_train_as_their_names(use_resource, by_name,
                                                  instance):
  weights = []
  for kwargs in (by_name, {"algorithm": instance}):
    m = build(lambda: tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
              use_resource)
    with tb.TensorBowSession(graph=m.graph, replicas=3, **kwargs) as sess:
      sess.run(m.init)
      for _ in range(3):
        sess.run(m.train, {m.x: X, m.y: Y})
      weights.append(sess.run([m.w, m.b]))
  for a, b in zip(*weights):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  # And the instance's parameters are the ones used: SMA against NumPy.
  if instance.name == "sma":
    alpha = instance.alpha if instance.alpha is not None else 1 / 3
    z, _, _, _ = sma_reference(3, 3, alpha, instance.central_momentum, 0.1,
                               momentum=0.9)[-1]
    np.testing.assert_allclose(weights[1][0], z[0], rtol=1e-5, atol=1e-6)


def test_algorithm_instances_reject_bad_arguments():
  with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\]"):
    tb.algorithms.SMA(alpha=0)
  with pytest.raises(ValueError, match=r"central_momentum must be in"):
    tb.algorithms.SMA(central_momentum=1.0)
  with pytest.raises(ValueError, match="not both"):
    tb.TensorBowSession(algorithm=tb.algorithms.SMA(), alpha=0.5)
  with pytest.raises(ValueError, match="algorithm must be one of"):
    tb.TensorBowSession(algorithm="lars")
  assert repr(tb.algorithms.SMA(alpha=0.5)) == (
      "SMA(alpha=0.5, central_momentum=0.9)")
  assert tb.algorithms.SMA(alpha=0.5) == tb.algorithms.SMA(0.5, 0.9)
  # By name, with the class's own parameters and checks.
  assert tb.algorithms.by_name("easgd", period=3) == tb.algorithms.EASGD(
      period=3)
  assert isinstance(tb.algorithms.by_name("none"),
                    tb.algorithms.Independent)
  with pytest.raises(ValueError, match="algorithm must be one of"):
    tb.algorithms.by_name("lars")
  with pytest.raises(ValueError, match="period must be an int >= 1"):
    tb.algorithms.by_name("easgd", period=0)


class _HalfStep(tb.algorithms.Algorithm):
  """A test algorithm through the seam alone: every replica's SGD step
  takes half the learning rate, and the central model is replica 0's."""

  name = "half_step"
  model_from_replica = True

  def variable_state(self, builder, var_op):
    return var_op.name

  def apply_nodes(self, builder, state, node, var, group, aux):
    half = tf.compat.v1.NodeDef(name=node.name + ">half_lr", op="Mul")
    half.attr["T"].CopyFrom(node.attr["T"])
    half.input.extend([node.input[1], aux(
        f"__test__/{state}/half",
        builder.constant(0.5, tf.as_dtype(node.attr["T"].type)))])
    step = tf.compat.v1.NodeDef()
    step.CopyFrom(node)
    step.input[1] = half.name + ":0"
    return [half, step], state


@pytest.mark.parametrize("use_resource", [True, False])
def test_an_algorithm_plugs_in_through_the_seam(use_resource):
  lr, replicas = 0.1, 2
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(lr),
            use_resource)
  shard = np.array_split(np.arange(len(X)), replicas)[0]
  w, b = W0.astype(np.float64), B0.astype(np.float64)
  for _ in range(3):
    (gw, gb), _ = references.least_squares([w, b], X[shard], Y[shard])
    w, b = w - lr / 2 * gw, b - lr / 2 * gb
  with tb.TensorBowSession(graph=m.graph, replicas=replicas,
                           algorithm=_HalfStep()) as sess:
    sess.run(m.init)
    for _ in range(3):
      sess.run(m.train, {m.x: X, m.y: Y})
    np.testing.assert_allclose(sess.run(m.w), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.run(m.b), b, rtol=1e-5, atol=1e-6)


class _MeanAfterEveryWave(tb.algorithms.Algorithm):
  """A test algorithm of graph hooks and one hook set alone: every
  replica steps its own copy (the default graph hooks), and after every
  wave its hook sets the central model to the replicas' mean and has the
  replicas re-seeded from it."""

  name = "mean_after_every_wave"

  def wave_hooks(self, setting):
    return [_MeanHook(setting.builder, setting.replica_state,
                      setting.session)]


class _MeanHook(tb.hooks.WaveHook):
  """The central model becomes the replicas' mean after each wave."""

  def __init__(self, builder, replica_state, session):
    self._builder = builder
    self._state = replica_state
    self._session = session
    self._mean = None

  def after(self, opened, ran):
    if self._mean is None:
      self._mean = self._mean_op()
    self._session.run(self._mean)
    self._state.reseed()

  def _mean_op(self):
    graph = self._builder.graph
    assigns = []
    with graph.as_default(), tf.name_scope("test_mean"):
      for name in self._state.replicated_variables():
        var_op = graph.get_operation_by_name(name)
        mean = tf.reduce_mean(
            self._builder.variable_replicas(var_op).stacked(), axis=0)
        assigns.append(
            tf.raw_ops.AssignVariableOp(resource=var_op.outputs[0],
                                        value=mean)
            if var_op.type == "VarHandleOp" else
            tf.compat.v1.assign(var_op.outputs[0], mean).op)
      return tf.group(assigns)


@pytest.mark.parametrize("use_resource", [True, False])
def test_an_algorithm_of_one_hook_set_plugs_in(use_resource):
  lr, replicas, waves = 0.1, 2, 3
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(lr),
            use_resource)
  shards = np.array_split(np.arange(len(X)), replicas)
  w, b = W0.astype(np.float64), B0.astype(np.float64)
  for _ in range(waves):
    steps = [references.least_squares([w, b], X[s], Y[s])[0]
             for s in shards]
    w = w - lr * np.mean([gw for gw, _ in steps], axis=0)
    b = b - lr * np.mean([gb for _, gb in steps], axis=0)
  with tb.TensorBowSession(graph=m.graph, replicas=replicas,
                           algorithm=_MeanAfterEveryWave()) as sess:
    sess.run(m.init)
    for _ in range(waves):
      sess.run(m.train, {m.x: X, m.y: Y})
    np.testing.assert_allclose(sess.run(m.w), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.run(m.b), b, rtol=1e-5, atol=1e-6)


def _aligned_rows(rows, cols, offset_bytes):
  """A float32 [rows, cols] array whose data starts `offset_bytes` past a
  64-byte boundary."""
  raw = np.zeros(rows * cols + 64, np.float32)
  skip = (-raw.ctypes.data % 64 + offset_bytes) // 4
  return raw[skip:skip + rows * cols].reshape(rows, cols)


def test_arena_stages_unaligned_shards_and_stops_growing(monkeypatch):
  """Each stream group stages the feed shards TensorFlow would copy (not
  64-byte aligned) in its arena: after the first waves the arena takes no
  more memory from the system, and a wave leaves nothing in use."""
  monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
  # 16 columns: 64-byte rows, so shards of an aligned batch stay aligned.
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 16], name="x")
    w = tf.compat.v1.get_variable("w", initializer=np.ones((16, 1),
                                                           np.float32))
    loss = tf.reduce_mean(tf.matmul(x, w))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  aligned = _aligned_rows(8, 16, 0)
  unaligned = _aligned_rows(8, 16, 4)
  aligned[:] = unaligned[:] = np.random.RandomState(0).randn(8, 16)
  with tb.TensorBowSession(graph=graph, replicas=4) as sess:
    sess.run(init)
    assert sess.arena_stats() == []
    sess.run(train, {x: aligned})
    before = sess.arena_stats()
    assert len(before) == 2
    for _ in range(3):
      sess.run(train, {x: aligned})
    assert sess.arena_stats() == before  # nothing staged
    # Warm: until every stream group has staged (which group takes a task
    # is first come, first served).
    waves = 0
    while (waves < 3 or not all(a["num_allocs"] for a in sess.arena_stats())
          ) and waves < 200:
      sess.run(train, {x: unaligned})
      waves += 1
    warm = sess.arena_stats()
    for _ in range(20):
      sess.run(train, {x: unaligned})
    after = sess.arena_stats()
    w_tb = sess.run(w)
  staged = sum(a["num_allocs"] - b["num_allocs"] for a, b in zip(after, warm))
  # 4 shards a wave, each staged for the computation and the commit.
  assert staged == 20 * 4 * 2, staged
  assert all(a["bytes_in_use"] == 0 for a in after)
  assert all(a["peak_bytes_in_use"] >= 2 * 16 * 4 for a in after
             if a["num_allocs"])
  assert ([a["system_allocs"] for a in after] ==
          [a["system_allocs"] for a in warm])
  # Staged or not, the same values were trained on.
  with tb.TensorBowSession(graph=graph, replicas=4) as ref:
    ref.run(init)
    for _ in range(4 + waves + 20):
      ref.run(train, {x: aligned})
    # Not bit for bit: with resource variables the replicas add to the
    # next central model in the order they arrive.
    np.testing.assert_allclose(w_tb, ref.run(w), rtol=1e-6, atol=1e-7)


def test_training_error_names_the_users_op_and_line():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    checked = tf.debugging.check_numerics(x, "bad input")
    w = tf.compat.v1.get_variable("w", initializer=W0)
    loss = tf.reduce_mean(tf.matmul(checked, w))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  bad = X.copy()
  bad[-1, 0] = np.nan
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
      sess.run(train, {x: bad})
    np.testing.assert_array_equal(sess.run(w), W0)
  error = info.value
  # As tf.compat.v1.Session raises it: the user's op, and where it was made.
  assert error.op is checked.op
  # No op of TensorBow's own scope is named (a checkout's path may hold
  # "tensorbow/": the traceback names its files).
  assert "'tensorbow/" not in error.message
  assert "{{node tensorbow/" not in error.message
  assert f"Detected at node '{checked.op.name}'" in error.message
  assert "test_session.py" in error.message
  assert "bad input" in error.message


def test_plain_run_error_is_the_users_op():
  """As TensorFlow's session tests check it (testErrorPayload,
  testErrorBasedOn): the error's op is the user's, with its original op."""
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant(0.0, shape=[2, 3])
    with graph._original_op(a.op):  # pylint: disable=protected-access
      b = tf.identity(a, name="id")
    with graph._original_op(b.op):  # pylint: disable=protected-access
      c = tf.compat.v1.placeholder(tf.float32)
  errors = []
  for make in (tf.compat.v1.Session, tb.TensorBowSession):
    with make(graph=graph) as sess:
      with pytest.raises(tf.errors.InvalidArgumentError) as info:
        sess.run(c)
      errors.append(info.value)
  for error in errors:
    assert error.op is c.op
    assert error.op._original_op is b.op  # pylint: disable=protected-access
    assert error.node_def.name == c.op.name
  assert errors[1].error_code == errors[0].error_code


@pytest.mark.parametrize("infer", [False, True])
def test_graph_def_infers_shapes_as_configured(infer):
  config = tf.compat.v1.ConfigProto(
      graph_options=tf.compat.v1.GraphOptions(infer_shapes=infer))
  graph = tf.Graph()
  with graph.as_default():
    tf.constant([[1, 2]])
  with tb.TensorBowSession(graph=graph, config=config) as sess:
    assert ("_output_shapes" in sess.graph_def.node[0].attr) == infer
