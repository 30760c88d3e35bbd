"""Several devices in one process: `TensorBowSession(devices=[...])`.

Two logical CPU devices stand in for two GPUs. Each keeps its own copy of
the central model for its replicas; after each wave the copies' moves are
summed, so D devices of L / D replicas train as SMA of L (NumPy,
tests/references.py), and synchronous SGD as TensorFlow on the whole batch.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import references
from graphs import B0, W0, build

LR = 0.1
RNG = np.random.RandomState(7)
# 10 rows over 4 replicas: shards of 3, 3, 2 and 2; one batch per wave.
XS = RNG.randn(4, 10, 3).astype(np.float32)
YS = RNG.randn(4, 10, 1).astype(np.float32)
TWO_CPUS = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
DEVICES = ["/cpu:0", "/cpu:1"]


def _optimizer(name):
  return {"sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(LR),
          "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(LR, 0.8),
          "adam": lambda: tf.compat.v1.train.AdamOptimizer(LR)}[name]


def _train(m, waves, **options):
  """Per wave (w, b, fetched loss) of a TensorBowSession with `options`
  on two CPU devices, and its task timings and execution graph."""
  options = dict(dict(replicas=4, config=TWO_CPUS, devices=DEVICES),
                 **options)
  seen = []
  with tb.TensorBowSession(graph=m.graph, **options) as sess:
    sess.run(m.init)
    for x, y in list(zip(XS, YS))[:waves]:
      loss, _ = sess.run([m.loss, m.train], {m.x: x, m.y: y})
      seen.append(sess.run([m.w, m.b]) + [loss])
    timings = [t for t in sess.task_timings() if t.replica >= 0]
    graph = sess.execution_graph
  return seen, timings, graph


def _assert_matches(seen, reference):
  for (w, b, loss), (z, expected_loss, _, _) in zip(seen, reference):
    np.testing.assert_allclose(w, z[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, z[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)


@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_two_devices_of_two_replicas_are_sma_of_four(use_resource,
                                                     optimizer):
  m = build(_optimizer(optimizer), use_resource)
  seen, timings, graph = _train(m, 4, central_momentum=0.6)
  reference = references.sma(
      [W0, B0], list(zip(XS, YS)), 4, 0.25, 0.6, LR,
      momentum=0.8 if optimizer == "momentum" else None)
  _assert_matches(seen, reference)
  # Replicas 0 and 1 trained on device 0's stream group, 2 and 3 on
  # device 1's, every wave, computation and commit.
  assert {(t.replica, t.stream_group) for t in timings} == {
      (0, 0), (1, 0), (2, 1), (3, 1)}
  # Each group's copy is pinned to its device, and each device has its own
  # copy of the central model.
  copies = [op for op in graph.get_operations()
            if "/group_" in op.name and op.type in (
                "TensorBowReplicaVarHandle", "TensorBowReplicaVariable")]
  assert copies
  for op in copies:
    group = int(op.name.split("/")[1][len("group_"):])
    assert op.device.endswith(f"/device:CPU:{group}"), (op.name, op.device)
  central_copies = {op.name.split("/sma/")[1] for op in graph.get_operations()
                    if op.type == "VarHandleOp" and
                    op.name.endswith("/central")}
  assert central_copies == {"w/device_0/central", "w/device_1/central",
                            "b/device_0/central", "b/device_1/central"}


def test_the_device_sum_is_what_makes_it_sma_of_four():
  """Without the sum across devices the model is not SMA of four (the
  reference test would not tell a broken sum from a missing one)."""
  m = build(_optimizer("sgd"))
  seen, _, _ = _train(m, 3)
  four = references.sma([W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9, LR)
  _assert_matches(seen, four)
  two = references.sma([W0, B0], [(x[:6], y[:6]) for x, y in zip(XS, YS)],
                       2, 0.25, 0.9, LR)
  assert not np.allclose(seen[-1][0], two[-1][0][0], rtol=1e-3)


def test_uneven_replicas_over_two_devices_are_sma_of_three():
  m = build(_optimizer("momentum"), True)
  seen, timings, _ = _train(m, 3, replicas=3)
  _assert_matches(seen, references.sma(
      [W0, B0], list(zip(XS, YS)), 3, 1.0 / 3, 0.9, LR, momentum=0.8))
  # Replica r of L on device r·D // L: 0 and 1 on device 0, 2 on 1.
  assert {(t.replica, t.stream_group) for t in timings} == {
      (0, 0), (1, 0), (2, 1)}


@pytest.mark.parametrize("use_resource", [True, False])
def test_easgd_on_two_devices_is_easgd_of_four(use_resource):
  m = build(_optimizer("sgd"), use_resource)
  seen, _, _ = _train(m, 4, algorithm="easgd")
  # EASGD is SMA without central momentum, alpha 0.9 / replicas.
  _assert_matches(seen, references.sma([W0, B0], list(zip(XS, YS)), 4,
                                       0.9 / 4, 0.0, LR))


@pytest.mark.parametrize("optimizer", ["adam", "momentum"])
def test_ssgd_on_two_devices_is_tensorflow_on_the_whole_batch(optimizer):
  m = build(_optimizer(optimizer))
  seen, timings, _ = _train(m, 4, algorithm="ssgd")
  m2 = build(_optimizer(optimizer))
  with tf.compat.v1.Session(graph=m2.graph) as sess:
    sess.run(m2.init)
    for (w, b, loss), x, y in zip(seen, XS, YS):
      expected_loss, _ = sess.run([m2.loss, m2.train], {m2.x: x, m2.y: y})
      np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
      expected_w, expected_b = sess.run([m2.w, m2.b])
      np.testing.assert_allclose(w, expected_w, rtol=1e-5, atol=1e-6)
      np.testing.assert_allclose(b, expected_b, rtol=1e-5, atol=1e-6)
  assert {(t.replica, t.stream_group) for t in timings} == {
      (0, 0), (1, 0), (2, 1), (3, 1)}


@pytest.mark.parametrize("use_resource", [True, False])
def test_writes_and_checkpoints_between_waves_as_on_one_device(
    tmp_path, use_resource):
  """A plain run's write re-seeds every device's copy, and a checkpoint
  restores every device's state: two devices train as one device of the
  same replicas does through both."""

  def run(devices):
    m = build(_optimizer("momentum"), use_resource)
    with m.graph.as_default():
      saver = tf.compat.v1.train.Saver()
      halve = m.w.assign(m.w * 0.5)
    models = []
    options = dict(replicas=4, config=TWO_CPUS)
    if devices:
      options["devices"] = DEVICES
    with tb.TensorBowSession(graph=m.graph, **options) as sess:
      sess.run(m.init)
      sess.run(m.train, {m.x: XS[0], m.y: YS[0]})
      sess.run(halve)
      sess.run(m.train, {m.x: XS[1], m.y: YS[1]})
      path = saver.save(sess, str(tmp_path / f"model{int(devices)}"))
      sess.run(m.train, {m.x: XS[2], m.y: YS[2]})
      models.append(sess.run([m.w, m.b]))
    with tb.TensorBowSession(graph=m.graph, **options) as sess:
      saver.restore(sess, path)
      sess.run(m.train, {m.x: XS[2], m.y: YS[2]})
      models.append(sess.run([m.w, m.b]))
    return models

  on_two, on_one = run(True), run(False)
  for two, one in zip(on_two, on_one):
    for a, b in zip(two, one):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # The restored run resumed exactly where the first went on.
  for a, b in zip(*on_two):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("options, message", [
    (dict(devices=["/cpu:0", "/cpu:7"]), "'/cpu:7' names no device"),
    (dict(devices=["/gpu:0"]), "'/gpu:0' names no device"),
    (dict(devices=["/cpu:1", "/device:CPU:1"]), "named twice"),
    (dict(devices="/cpu:0"), "must be a list"),
    (dict(devices=[]), "non-empty list"),
    (dict(devices=DEVICES, replicas=1), "at least as many replicas"),
    (dict(devices=DEVICES, replicas="auto"), "replicas='auto'"),
    (dict(devices=DEVICES, nonfinite="skip"), "nonfinite='skip'"),
    (dict(devices=DEVICES, algorithm="asgd"), "'asgd' cannot keep"),
    (dict(devices=DEVICES, algorithm="none"), "'none' cannot keep"),
])
def test_devices_that_cannot_hold_the_replicas_are_refused(options, message):
  m = build(_optimizer("sgd"))
  options = dict(dict(replicas=2, config=TWO_CPUS), **options)
  with pytest.raises(ValueError, match=message):
    tb.TensorBowSession(graph=m.graph, **options)


def test_one_device_named_is_one_device():
  m = build(_optimizer("sgd"))
  seen, _, graph = _train(m, 2, devices=["/cpu:0"])
  _assert_matches(seen, references.sma([W0, B0], list(zip(XS, YS)), 4, 0.25,
                                       0.9, LR))
  assert not [op for op in graph.get_operations()
              if op.name.endswith("/device_0/central")]


def test_the_scaling_model_counts_the_devices_and_their_sum():
  m = build(_optimizer("sgd"))
  with tb.TensorBowSession(graph=m.graph, replicas=4, config=TWO_CPUS,
                           devices=DEVICES) as sess:
    sess.run(m.init)
    for x, y in zip(XS, YS):
      sess.run(m.train, {m.x: x, m.y: y})
    report = sess.scaling_report()
    sums = [t.end - t.start for t in sess.task_timings() if t.replica < 0]
  assert report.workers == 2 and report.waves == 4
  # T_O is the sum across devices, one synchronisation task a wave.
  assert len(sums) == 4
  assert report.sync_seconds == pytest.approx(np.mean(sums), rel=1e-6)
  assert report.compute_seconds > 0


@pytest.mark.parametrize("use_resource", [True, False])
def test_a_global_step_advances_once_a_wave_on_two_devices(use_resource):
  m = build(_optimizer("sgd"), use_resource, global_step=True)
  with tb.TensorBowSession(graph=m.graph, replicas=4, config=TWO_CPUS,
                           devices=DEVICES) as sess:
    sess.run(m.init)
    for wave, (x, y) in enumerate(zip(XS, YS), 1):
      sess.run(m.train, {m.x: x, m.y: y})
      assert sess.run(m.step) == wave
      w = sess.run(m.w)
  np.testing.assert_allclose(w, references.sma(
      [W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9, LR)[-1][0][0],
                             rtol=1e-5, atol=1e-5)
