"""EASGD (tensorbow/algorithms/easgd.py) against its NumPy reference.

The synchronous form of elastic averaging is SMA without central momentum
whose correction factor is alpha on a communication wave (every
`period`-th training run) and 0 between them: tests/references.py's SMA
with one alpha per wave. Uneven shards (18 rows over 4 replicas), 4
replicas on 2 stream groups, resource and reference variables, SGD,
momentum and Adagrad.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import graphs
import references

tf1 = tf.compat.v1
LR, MOMENTUM, REPLICAS, WAVES = 0.1, 0.9, 4, 6
RNG = np.random.RandomState(8)
BATCHES = [(RNG.randn(18, 3).astype(np.float32),
            RNG.randn(18, 1).astype(np.float32)) for _ in range(WAVES)]
OPTIMIZERS = {
    "sgd": (lambda: tf1.train.GradientDescentOptimizer(LR), {}),
    "momentum": (lambda: tf1.train.MomentumOptimizer(LR, MOMENTUM),
                 {"momentum": MOMENTUM}),
    "adagrad": (lambda: tf1.train.AdagradOptimizer(LR), {"adagrad": True}),
}


def _train(model, algorithm):
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in BATCHES]
    assert sess.task_timings()
    return losses, sess.run([model.w, model.b])


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("period", [1, 2, 3])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_easgd_trains_as_the_numpy_reference(optimizer, period, use_resource):
  make, options = OPTIMIZERS[optimizer]
  alpha = 0.2
  model = graphs.build(make, use_resource)
  losses, params = _train(model, tb.algorithms.EASGD(alpha, period))
  alphas = [alpha if k % period == 0 else 0.0 for k in range(1, WAVES + 1)]
  expected = references.sma([graphs.W0, graphs.B0], BATCHES, REPLICAS,
                            alphas, 0.0, LR, **options)
  for (z, loss, _, _), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum"])
def test_easgd_with_fused_dense_updates_trains_as_the_numpy_reference(
    monkeypatch, optimizer, use_resource):
  """EASGD inherits SMA's steps taking w's gradient as x and dy; its alpha
  of 0 between communication waves goes through them too."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  make, options = OPTIMIZERS[optimizer]
  model = graphs.build(make, use_resource)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=tb.algorithms.EASGD(0.2, 2)) as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in BATCHES]
    params = sess.run([model.w, model.b])
    types = {op.type for op in sess.execution_graph.get_operations()}
  assert any(t.startswith(("TensorBowApplySma", "TensorBowResourceApplySma"))
             and "Outer" in t for t in types), types
  alphas = [0.2 if k % 2 == 0 else 0.0 for k in range(1, WAVES + 1)]
  expected = references.sma([graphs.W0, graphs.B0], BATCHES, REPLICAS,
                            alphas, 0.0, LR, **options)
  for (_, loss, _, _), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_easgd_by_name_takes_the_session_alpha_and_its_default():
  model = graphs.build(OPTIMIZERS["sgd"][0])
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm="easgd") as sess:
    sess.run(model.init)
    for x, y in BATCHES[:3]:
      sess.run(model.train, {model.x: x, model.y: y})
    params = sess.run([model.w, model.b])
  expected = references.sma([graphs.W0, graphs.B0], BATCHES[:3], REPLICAS,
                            0.9 / REPLICAS, 0.0, LR)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert tb.algorithms.EASGD().resolved(3) == tb.algorithms.EASGD(0.3, 1)


@pytest.mark.parametrize("kwargs,message", [
    (dict(period=0), "period"), (dict(period=1.5), "period"),
    (dict(alpha=0.0), "alpha"), (dict(alpha=1.5), "alpha")])
def test_easgd_rejects_arguments_out_of_range(kwargs, message):
  with pytest.raises(ValueError, match=message):
    tb.algorithms.EASGD(**kwargs)


def test_easgd_by_name_has_no_central_momentum():
  with pytest.raises(ValueError, match="central momentum"):
    tb.TensorBowSession(algorithm="easgd", central_momentum=0.5)


def test_easgd_factor_holds_through_a_wave_that_fails_after_it_is_set():
  """The factor is set before a wave only when it changes. A wave that
  fails after the factor was set (a non-finite loss, nothing committed)
  is trained again with the factor it set; the rest follow the
  reference without the failed batch."""
  model = graphs.build(OPTIMIZERS["momentum"][0])
  bad_x = np.full_like(BATCHES[1][0], np.nan)
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS,
                           algorithm=tb.algorithms.EASGD(0.2, 2),
                           nonfinite="raise") as sess:
    sess.run(model.init)
    losses = []
    for k, (x, y) in enumerate(BATCHES):
      if k in (1, 2):  # the first try of a wave with and without the pull
        with pytest.raises(tf.errors.InvalidArgumentError, match="non-finite"):
          sess.run(model.train, {model.x: bad_x, model.y: y})
      losses.append(sess.run([model.loss, model.train],
                             {model.x: x, model.y: y})[0])
    params = sess.run([model.w, model.b])
  alphas = [0.2 if k % 2 == 0 else 0.0 for k in range(1, WAVES + 1)]
  expected = references.sma([graphs.W0, graphs.B0], BATCHES, REPLICAS,
                            alphas, 0.0, LR, momentum=MOMENTUM)
  for (_, loss, _, _), got in zip(expected, losses):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(params, expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_easgd_period_resumes_in_step_from_a_checkpoint(tmp_path):
  """Saved after run 3 of exchanges every 2, restored into a new session:
  the count of runs comes back with the replicas, so the next exchange is
  run 4, as in the session that went on."""
  path = str(tmp_path / "model.ckpt")

  def session():
    model = graphs.build(OPTIMIZERS["momentum"][0])
    with model.graph.as_default():
      saver = tf1.train.Saver()
    return model, saver, tb.TensorBowSession(
        graph=model.graph, replicas=REPLICAS,
        algorithm=tb.algorithms.EASGD(0.2, 2))

  model, saver, sess = session()
  with sess:
    sess.run(model.init)
    for x, y in BATCHES[:3]:
      sess.run(model.train, {model.x: x, model.y: y})
    saver.save(sess, path)
    for x, y in BATCHES[3:]:
      sess.run(model.train, {model.x: x, model.y: y})
    went_on = sess.run([model.w, model.b])
  model, saver, sess = session()
  with sess:
    saver.restore(sess, path)
    for x, y in BATCHES[3:]:
      sess.run(model.train, {model.x: x, model.y: y})
    resumed = sess.run([model.w, model.b])
  for got, want in zip(resumed, went_on):
    np.testing.assert_array_equal(got, want)
