"""Half-precision model variables and mixed precision.

float16 and bfloat16 variables are trained by every replica in their own
dtype; SMA's arithmetic on them is float32's (the kernels widen on load and
round once on store; tests/test_sma_ops.py checks the kernels to the
rounding). Here whole sessions are checked against the float64 NumPy
reference, within the dtype's precision, and at one replica against
tf.compat.v1.Session, exactly. Mixed precision (float32 variables, float16
arithmetic) with a fixed loss scale trains as without it; a dynamic loss
scale's conditional step is refused, naming it, with nothing changed.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import graphs
import references

tf1 = tf.compat.v1
LR, MU, MOMENTUM, REPLICAS = 0.1, 0.9, 0.9, 4
RNG = np.random.RandomState(21)
# Uneven shards: 18 rows over 4 replicas.
BATCHES = [(RNG.randn(18, 3), RNG.randn(18, 1)) for _ in range(3)]
HALF = {"f16": tf.float16, "bf16": tf.bfloat16}
# How far a run in the dtype may be from the float64 reference after three
# waves (inputs rounded to the dtype first): a few of the dtype's roundings.
TOLERANCE = {"f16": 5e-3, "bf16": 4e-2}
OPTIMIZERS = {
    "sgd": lambda: tf1.train.GradientDescentOptimizer(LR),
    "momentum": lambda: tf1.train.MomentumOptimizer(LR, MOMENTUM),
}


def _rounded(batches, dtype):
  return [(x.astype(dtype.as_numpy_dtype), y.astype(dtype.as_numpy_dtype))
          for x, y in batches]


def _train(sess, model, batches):
  sess.run(model.init)
  losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
            for x, y in batches]
  return losses, sess.run([model.w, model.b])


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", sorted(HALF))
def test_half_precision_model_trains_as_the_reference(dtype, optimizer,
                                                       use_resource):
  model = graphs.build(OPTIMIZERS[optimizer], use_resource, dtype=HALF[dtype])
  batches = _rounded(BATCHES, HALF[dtype])
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS) as sess:
    losses, params = _train(sess, model, batches)
    assert sess.task_timings()  # the replicas trained
  expected = references.sma(
      [graphs.W0, graphs.B0],
      [(x.astype(np.float64), y.astype(np.float64)) for x, y in batches],
      REPLICAS, 1.0 / REPLICAS, MU, LR,
      momentum=MOMENTUM if optimizer == "momentum" else None)
  tol = TOLERANCE[dtype]
  for got, want in zip(params, expected[-1][0]):
    assert got.dtype == HALF[dtype].as_numpy_dtype
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol,
                               atol=tol)
  np.testing.assert_allclose(np.float64(losses[-1]), expected[-1][1],
                             rtol=tol, atol=tol)


# Not bfloat16: TensorFlow's own Adam diverges on this model in bfloat16
# (tf.compat.v1.Session alike: 1 - beta2 rounds to 0 there).
@pytest.mark.parametrize("dtype", ["f16"])
def test_half_precision_adam_trains_as_in_float32(dtype):
  """Adam, SMA's generic path (correction around TF's own apply op)."""
  adam = lambda: tf1.train.AdamOptimizer(0.01)
  results = {}
  for name, tf_dtype in (("half", HALF[dtype]), ("float32", tf.float32)):
    model = graphs.build(adam, dtype=tf_dtype)
    with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS) as sess:
      results[name] = _train(sess, model,
                             _rounded(BATCHES, HALF[dtype]))[1]
  for got, want in zip(results["half"], results["float32"]):
    np.testing.assert_allclose(got.astype(np.float32), want,
                               rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
  assert not np.allclose(results["float32"][0], graphs.W0)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", sorted(HALF))
def test_one_replica_equals_tensorflow_exactly(dtype, optimizer):
  results = []
  for make in (tf1.Session, lambda graph: tb.TensorBowSession(
      graph=graph, replicas=1)):
    model = graphs.build(OPTIMIZERS[optimizer], dtype=HALF[dtype])
    with make(graph=model.graph) as sess:
      results.append(_train(sess, model, _rounded(BATCHES, HALF[dtype])))
  (tf_losses, tf_params), (tb_losses, tb_params) = results
  np.testing.assert_array_equal(np.asarray(tb_losses), np.asarray(tf_losses))
  for got, want in zip(tb_params, tf_params):
    np.testing.assert_array_equal(got, want)


def _mixed_precision(loss_scale):
  """float32 variables, float16 arithmetic, the loss scaled as TF1's
  MixedPrecisionLossScaleOptimizer does (None: no loss scale)."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 3])
    y = tf1.placeholder(tf.float32, [None, 1])
    w = tf1.get_variable("w", initializer=graphs.W0)
    b = tf1.get_variable("b", initializer=graphs.B0)
    pred = tf.matmul(tf.cast(x, tf.float16), tf.cast(w, tf.float16))
    pred = tf.cast(pred, tf.float32) + b
    loss = 0.5 * tf.reduce_mean(tf.square(pred - y))
    opt = tf1.train.GradientDescentOptimizer(LR)
    if loss_scale is not None:
      opt = tf1.mixed_precision.MixedPrecisionLossScaleOptimizer(
          opt, loss_scale=loss_scale)
    train = opt.minimize(loss)
    init = tf1.global_variables_initializer()
  return graphs.Model(graph, x, y, w, b, pred, loss, train, init, None)


def test_fixed_loss_scale_trains_as_the_reference():
  batches = _rounded(BATCHES, tf.float16)
  expected = references.sma(
      [graphs.W0, graphs.B0],
      [(x.astype(np.float64), y.astype(np.float64)) for x, y in batches],
      REPLICAS, 1.0 / REPLICAS, MU, LR)
  results = {}
  for scale in (None, 128.0):
    model = _mixed_precision(scale)
    with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS) as sess:
      results[scale] = _train(sess, model, batches)[1]
      assert sess.task_timings()
  for got, unscaled, want in zip(results[128.0], results[None],
                                 expected[-1][0]):
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, unscaled, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3)


def test_dynamic_loss_scale_is_refused_with_nothing_changed():
  model = _mixed_precision("dynamic")
  x, y = _rounded(BATCHES, tf.float16)[0]
  with tb.TensorBowSession(graph=model.graph, replicas=REPLICAS) as sess:
    sess.run(model.init)
    before = sess.run(tf1.global_variables())
    with pytest.raises(tf.errors.UnimplementedError,
                       match="fixed loss scale"):
      sess.run(model.train, {model.x: x, model.y: y})
    for got, want in zip(sess.run(tf1.global_variables()), before):
      np.testing.assert_array_equal(got, want)
    # The session still evaluates.
    assert np.isfinite(sess.run(model.loss, {model.x: x, model.y: y}))
