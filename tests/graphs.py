"""TF1 graphs the tests train: least squares, in both TF1 modes."""
import collections

import numpy as np
import tensorflow as tf

W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)
B0 = np.array([0.1], np.float32)

Model = collections.namedtuple(
    "Model", "graph x y w b pred loss train init step")


def build(optimizer, use_resource=True, global_step=False,
          dtype=tf.float32):
  """Least squares (weights W0, bias B0) trained by `optimizer()`, in a new
  graph, in `dtype`; returns a Model of its tensors and ops (step: the
  global step, or None)."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(dtype, [None, 3], name="x")
    y = tf.compat.v1.placeholder(dtype, [None, 1], name="y")
    w = tf.compat.v1.get_variable(
        "w", initializer=W0.astype(dtype.as_numpy_dtype),
        use_resource=use_resource)
    b = tf.compat.v1.get_variable(
        "b", initializer=B0.astype(dtype.as_numpy_dtype),
        use_resource=use_resource)
    pred = tf.matmul(x, w) + b
    loss = 0.5 * tf.reduce_mean(tf.square(pred - y))
    step = (tf.compat.v1.train.get_or_create_global_step()
            if global_step else None)
    train = optimizer().minimize(loss, global_step=step)
    init = tf.compat.v1.global_variables_initializer()
  return Model(graph, x, y, w, b, pred, loss, train, init, step)


def batches(seed, count, rows=18):
  """`count` (x, y) float32 batches of `rows` rows for least squares,
  drawn from np.random.RandomState(seed)."""
  rng = np.random.RandomState(seed)
  return [(rng.randn(rows, 3).astype(np.float32),
           rng.randn(rows, 1).astype(np.float32)) for _ in range(count)]


def optimizers(lr, momentum):
  """{"sgd", "momentum"}: (a maker of the TF1 optimizer at rate `lr`, its
  momentum or None), for the NumPy references' sgd_step."""
  return {
      "sgd": (lambda: tf.compat.v1.train.GradientDescentOptimizer(lr), None),
      "momentum": (lambda: tf.compat.v1.train.MomentumOptimizer(
          lr, momentum), momentum),
  }


def variable_input(kind, name, value):
  """A new variable of `kind` ("ref" or "resource") holding `value`, and
  what an op takes for it: (variable, ref tensor or resource handle)."""
  if kind == "ref":
    v = tf.compat.v1.Variable(value, name=name, use_resource=False)
    return v, v._ref()  # pylint: disable=protected-access
  v = tf.compat.v1.get_variable(name, initializer=value, use_resource=True)
  return v, v.handle
