"""Local SGD with an outer optimizer (tensorbow/algorithms/local_sgd.py)
against its NumPy reference (DESIGN.md, "Local SGD").

4 replicas on 2 stream groups (the default on 2 cores), uneven shards
(18 rows over 4 replicas), resource and reference variables, SGD and
momentum as the user's optimizer; periods 1, 3 and 4, the outer step
plain, with momentum and with Nesterov's, and a synchronous warm-up;
exact resume from a checkpoint.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import graphs
import references

tf1 = tf.compat.v1
LR, MOMENTUM, REPLICAS, WAVES = 0.1, 0.9, 4, 9
BATCHES = graphs.batches(5, WAVES)
OPTIMIZERS = graphs.optimizers(LR, MOMENTUM)


def _train(model, algorithm, batches=BATCHES):
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in batches]
    return losses, sess.run([model.w, model.b])


OUTER = {
    "average": dict(outer_learning_rate=1.0),
    "momentum": dict(outer_learning_rate=0.7, outer_momentum=0.9),
    "nesterov": dict(outer_learning_rate=0.7, outer_momentum=0.9,
                     nesterov=True),
}


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("period,outer,warmup", [
    (1, "average", 0), (3, "nesterov", 0), (4, "momentum", 0),
    (3, "nesterov", 2)])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_local_sgd_trains_as_the_numpy_reference(optimizer, period, outer,
                                                 warmup, use_resource):
  make, momentum = OPTIMIZERS[optimizer]
  model = graphs.build(make, use_resource)
  algorithm = tb.algorithms.LocalSGD(period=period, warmup_waves=warmup,
                                     **OUTER[outer])
  losses, params = _train(model, algorithm)
  options = dict(outer_lr=1.0, outer_momentum=0.0, nesterov=False)
  options.update({k.replace("outer_learning_rate", "outer_lr"): v
                  for k, v in OUTER[outer].items()})
  expected = references.local_sgd(
      [graphs.W0, graphs.B0], BATCHES, REPLICAS, LR, momentum, period,
      warmup=warmup, **options)
  for (_, loss), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_local_sgd_warm_up_is_synchronous_sgd():
  """Averaged after every run, replicas of momentum SGD train as one
  model on the whole batch (TensorFlow's session, 18 rows a step) as
  long as the shards are even."""
  make, _ = OPTIMIZERS["momentum"]
  batches = [(x[:16], y[:16]) for x, y in BATCHES[:4]]
  model = graphs.build(make)
  _, params = _train(model, tb.algorithms.LocalSGD(period=5,
                                                   warmup_waves=4), batches)
  model = graphs.build(make)
  with tf1.Session(graph=model.graph) as sess:
    sess.run(model.init)
    for x, y in batches:
      sess.run(model.train, {model.x: x, model.y: y})
    want = sess.run([model.w, model.b])
  for got, w in zip(params, want):
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_local_sgd_by_name_averages_every_eighth_run():
  assert tb.algorithms.by_name("local_sgd") == tb.algorithms.LocalSGD(8)
  model = graphs.build(OPTIMIZERS["sgd"][0])
  losses, params = _train(model, "local_sgd", BATCHES[:8])
  expected = references.local_sgd(
      [graphs.W0, graphs.B0], BATCHES[:8], REPLICAS, LR, None, 8, 1.0, 0.0,
      False, 0)
  for (_, loss), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,message", [
    (dict(period=0), "period"), (dict(period=2.5), "period"),
    (dict(outer_learning_rate=0.0), "outer_learning_rate"),
    (dict(outer_momentum=1.0), "outer_momentum"),
    (dict(warmup_waves=-1), "warmup_waves"),
    (dict(period=2, worker_period=3), "worker_period"),
    (dict(period=4, worker_period=2), "worker_period"),
    (dict(worker_period=True), "worker_period")])
def test_local_sgd_rejects_arguments_out_of_range(kwargs, message):
  with pytest.raises(ValueError, match=message):
    tb.algorithms.LocalSGD(**kwargs)


@pytest.mark.mode_independent
def test_local_sgd_merges_across_workers_at_its_worker_period():
  one = tb.algorithms.LocalSGD(period=2, worker_period=2, warmup_waves=1)
  assert one.worker_period is None  # one period for both levels
  assert [one.worker_merge_kind(w) for w in (1, 3, 5)] == ["sum"] * 3
  two = tb.algorithms.LocalSGD(period=2, worker_period=4, warmup_waves=1)
  assert [two.worker_merge_kind(w) for w in (1, 3, 5, 7, 9)] == [
      "sum", None, "average", None, "average"]


def _saved(optimizer, use_resource):
  model = graphs.build(OPTIMIZERS[optimizer][0], use_resource)
  with model.graph.as_default():
    saver = tf1.train.Saver()
  return model, saver


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_local_sgd_resumes_exactly_from_a_checkpoint(tmp_path, optimizer,
                                                     use_resource):
  """Saved at run 5 of exchanges every 3 (after two with Nesterov's
  momentum), restored into a new session: the outer velocity and the run
  within the period come back, and the next 4 runs (an exchange at run 6
  and 9) equal those of the session that went on."""
  path = str(tmp_path / "model.ckpt")
  algorithm = tb.algorithms.LocalSGD(period=3, **OUTER["nesterov"])
  model, saver = _saved(optimizer, use_resource)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    for x, y in BATCHES[:5]:
      sess.run(model.train, {model.x: x, model.y: y})
    saver.save(sess, path)
    went_on = [sess.run([model.loss, model.train],
                        {model.x: x, model.y: y})[0] for x, y in BATCHES[5:]]
    went_on.append(sess.run([model.w, model.b]))
  model, saver = _saved(optimizer, use_resource)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    saver.restore(sess, path)
    resumed = [sess.run([model.loss, model.train],
                        {model.x: x, model.y: y})[0] for x, y in BATCHES[5:]]
    resumed.append(sess.run([model.w, model.b]))
  for got, want in zip(resumed[:-1], went_on[:-1]):
    assert got == want
  for got, want in zip(resumed[-1], went_on[-1]):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_local_sgd_over_two_devices_is_local_sgd_of_all_replicas(
    use_resource):
  """Two logical CPU devices of two replicas each: the exchange averages
  all four, whatever device trained them."""
  make, momentum = OPTIMIZERS["momentum"]
  model = graphs.build(make, use_resource)
  with tb.TensorBowSession(
      graph=model.graph, replicas=REPLICAS,
      config=tf1.ConfigProto(device_count={"CPU": 2}),
      devices=["/cpu:0", "/cpu:1"],
      algorithm=tb.algorithms.LocalSGD(period=2, **OUTER["nesterov"])) as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in BATCHES[:5]]
    params = sess.run([model.w, model.b])
    groups = {(t.replica, t.stream_group) for t in sess.task_timings()
              if t.replica >= 0}
  assert groups == {(0, 0), (1, 0), (2, 1), (3, 1)}
  expected = references.local_sgd(
      [graphs.W0, graphs.B0], BATCHES[:5], REPLICAS, LR, momentum, 2, 0.7,
      0.9, True, 0)
  for (_, loss), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast", ["0", "all"])
def test_local_sgd_with_fused_dense_updates_trains_as_the_numpy_reference(
    monkeypatch, fast):
  """The replicas' apply ops are copied as they are, including the dense
  updates that take their gradient as factors (fast kernels "all")."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast)
  make, momentum = OPTIMIZERS["momentum"]
  model = graphs.build(make)
  algorithm = tb.algorithms.LocalSGD(period=3, **OUTER["nesterov"])
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in BATCHES]
    params = sess.run([model.w, model.b])
    types = {op.type for op in sess.execution_graph.get_operations()}
  assert any("Outer" in t for t in types) == (fast == "all"), types
  expected = references.local_sgd(
      [graphs.W0, graphs.B0], BATCHES, REPLICAS, LR, momentum, 3, 0.7, 0.9,
      True, 0)
  for (_, loss), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast", ["default", "0"])
@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_local_sgd_at_one_replica_equals_tf_session(monkeypatch, use_resource,
                                                   fast):
  """L = 1 trains the user's own variables: tf.compat.v1.Session's steps,
  with no exchange; bit-equal on TensorFlow's kernels, to rounding on the
  default (timed) ones, as the idiom corpus holds every algorithm."""
  if fast == "0":
    monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
  make, _ = OPTIMIZERS["momentum"]
  got = []
  for session in ("tensorbow", "tf"):
    model = graphs.build(make, use_resource)
    sess = (tb.TensorBowSession(graph=model.graph, replicas=1,
                                algorithm=tb.algorithms.LocalSGD(period=2))
            if session == "tensorbow" else tf1.Session(graph=model.graph))
    with sess:
      sess.run(model.init)
      losses = [sess.run([model.loss, model.train],
                         {model.x: x, model.y: y})[0] for x, y in BATCHES]
      got.append((losses, sess.run([model.w, model.b])))
  (tb_losses, tb_params), (tf_losses, tf_params) = got
  tol = dict(rtol=0, atol=0) if fast == "0" else dict(rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(tb_losses, tf_losses, **tol)
  for a, b in zip(tb_params, tf_params):
    np.testing.assert_allclose(a, b, **tol)
