"""Half-precision SMA rounds once (cc/kernels/sma_step.h).

The kernels do a float16 or bfloat16 step in float32 and round each value
they store once. Here two replicas of one variable take SMA's step and the
central model its update, for two waves, through the plain fused step
(TensorBow[Resource]ApplySma{GradientDescent,Momentum}) and through the
fused outer-product step (the *Outer ops, which make the gradient aᵀ·b
themselves): every stored value must equal the float32 NumPy reference
(references.sma_step, references.sma_central) rounded once to the dtype,
bit for bit. A value rounded to the dtype anywhere before it is stored
would show.

The outer gradient's factors are multiples of 2^-8 below 1 in magnitude:
their products and sums are exact in float32, whatever the order the
kernel sums them in, and mostly inexact in float16 and bfloat16.
"""
import numpy as np
import pytest
import tensorflow as tf

from tensorbow import ops as tb_ops

import graphs
import references

tf1 = tf.compat.v1

REPLICAS, WAVES, BATCH = 2, 2, 4
ALPHA, LR, MOMENTUM, MU = 1.0 / REPLICAS, 0.1, 0.9, 0.9
DTYPES = {"f16": np.float16, "bf16": tf.bfloat16.as_numpy_dtype}
# (70, 300): several blocks of the outer gradient, and vector tails.
SHAPES = [(3, 5), (70, 300)]


def _rand(rng, shape, dtype):
  return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def _factor(rng, shape, dtype):
  """Multiples of 2^-8 in (-1, 1): exact in either dtype."""
  return (rng.integers(-255, 256, size=shape) / 256.0).astype(dtype)


def _wide(x):
  return np.asarray(x).astype(np.float32)


class Replicas(object):
  """REPLICAS replicas of one variable, their SMA state and the central
  model, with the ops of one path and update."""

  def __init__(self, dtype, shape, path, update, kind, rng):
    self.dtype, self.shape, self.path, self.update = dtype, shape, path, update
    self.momentum = None if update == "sgd" else MOMENTUM
    self.init = {
        "w": [_rand(rng, shape, dtype) for _ in range(REPLICAS)],
        "accum": [_rand(rng, shape, dtype) for _ in range(REPLICAS)],
        "c": [np.zeros(shape, dtype) for _ in range(REPLICAS)],
        "z": _rand(rng, shape, dtype),
        "z_prev": _rand(rng, shape, dtype),
    }
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.w, w_in = zip(*(graphs.variable_input(kind, f"w{j}", v)
                           for j, v in enumerate(self.init["w"])))
      self.accum, accum_in = zip(*(graphs.variable_input(kind, f"accum{j}", v)
                                   for j, v in enumerate(self.init["accum"])))
      self.c = [tf1.get_variable(f"c{j}", initializer=v, use_resource=True)
                for j, v in enumerate(self.init["c"])]
      self.z = tf1.get_variable("z", initializer=self.init["z"],
                                use_resource=True)
      self.z_prev = tf1.get_variable("z_prev", initializer=self.init["z_prev"],
                                     use_resource=True)
      if path == "plain":
        self.inputs = [tf1.placeholder(dtype, shape)]
      else:
        self.inputs = [tf1.placeholder(dtype, [BATCH, shape[0]]),
                       tf1.placeholder(dtype, [BATCH, shape[1]])]
      self.steps = [self._step(w_in[j], accum_in[j], self.c[j].handle, kind)
                    for j in range(REPLICAS)]
      self.central = tb_ops.resource_apply_sma_central(
          self.z.handle, self.z_prev.handle,
          [c.read_value() for c in self.c], np.asarray(MU, dtype))
      self.init_op = tf1.global_variables_initializer()

  def _step(self, w, accum, c, kind):
    """Replica's step op on `w` (and `accum`), correction into `c`."""
    dtype = self.dtype
    alpha, lr, momentum = (np.asarray(v, dtype) for v in
                           (ALPHA, LR, MOMENTUM))
    z = self.z.read_value()
    nesterov = self.update == "nesterov"
    if self.path == "plain":
      (grad,) = self.inputs
      if self.momentum is None:
        return tb_ops.apply_sma_gradient_descent(w, c, z, alpha, lr, grad)
      return tb_ops.apply_sma_momentum(w, accum, c, z, alpha, lr, grad,
                                       momentum, use_nesterov=nesterov)
    lib = tb_ops.library()
    a, b = self.inputs
    if kind == "resource":
      gd = lib.tensor_bow_resource_apply_sma_gradient_descent_outer
      mom = lib.tensor_bow_resource_apply_sma_momentum_outer
    else:
      gd = lib.tensor_bow_apply_sma_gradient_descent_outer
      mom = lib.tensor_bow_apply_sma_momentum_outer
    if self.momentum is None:
      return gd(w, c, z, alpha, lr, a, b)
    return mom(w, accum, c, z, alpha, lr, a, b, momentum,
               use_nesterov=nesterov)

  def feed(self, rng):
    """A replica's inputs, and its gradient in float32 (exact)."""
    if self.path == "plain":
      grad = _rand(rng, self.shape, self.dtype)
      return [grad], _wide(grad)
    a = _factor(rng, (BATCH, self.shape[0]), self.dtype)
    b = _factor(rng, (BATCH, self.shape[1]), self.dtype)
    return [a, b], _wide(a).T @ _wide(b)


def _assert_same_bits(got, want):
  """0 ulp apart: the same dtype, shape and bits (both dtypes are 16-bit)."""
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _scalar(value, dtype):
  """A scalar input as the kernels read it: rounded to the dtype, widened."""
  return np.float32(np.asarray(value, dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind", ["resource", "ref"])
@pytest.mark.parametrize("update", ["sgd", "momentum", "nesterov"])
@pytest.mark.parametrize("path", ["plain", "outer"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_half_precision_sma_rounds_once(dtype, path, update, kind, shape):
  dtype = DTYPES[dtype]
  rng = np.random.default_rng(7)
  model = Replicas(dtype, shape, path, update, kind, rng)
  alpha, lr = _scalar(ALPHA, dtype), _scalar(LR, dtype)
  momentum = None if model.momentum is None else _scalar(MOMENTUM, dtype)
  w, accum = list(model.init["w"]), list(model.init["accum"])
  z, z_prev = model.init["z"], model.init["z_prev"]
  c = [None] * REPLICAS
  with tf1.Session(graph=model.graph) as sess:
    sess.run(model.init_op)
    for _ in range(WAVES):
      for j in range(REPLICAS):
        inputs, grad = model.feed(rng)
        sess.run(model.steps[j], dict(zip(model.inputs, inputs)))
        want_w, want_accum, want_c = references.sma_step(
            _wide(w[j]), _wide(accum[j]), _wide(z), grad, alpha, lr,
            momentum, update == "nesterov")
        w[j] = want_w.astype(dtype)
        c[j] = want_c.astype(dtype)
        if momentum is not None:
          accum[j] = want_accum.astype(dtype)
        got_w, got_accum, got_c = sess.run(
            [model.w[j], model.accum[j], model.c[j]])
        _assert_same_bits(got_w, w[j])
        _assert_same_bits(got_accum, accum[j])
        _assert_same_bits(got_c, c[j])
      sess.run(model.central)
      want_z = references.sma_central(_wide(z), _wide(z_prev),
                                      [_wide(cj) for cj in c],
                                      _scalar(MU, dtype))
      z, z_prev = want_z.astype(dtype), z
      got_z, got_z_prev = sess.run([model.z, model.z_prev])
      _assert_same_bits(got_z, z)
      _assert_same_bits(got_z_prev, z_prev)
  # The replicas moved, and not by equal steps.
  assert not np.array_equal(w[0], model.init["w"][0])
  assert not np.array_equal(w[0], w[1])
