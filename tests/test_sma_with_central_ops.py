"""The SMA ops fused with the central update (ResourceApplySma*WithCentral).

L replicas' ops are run for several waves, concurrently (one TensorFlow run
of all of them) and one after another in a shuffled order, and compared
with a NumPy implementation of DESIGN.md section 3. The large shape spans
several of the kernel's chunks, so replicas meet in the chunk locks and the
buffer rotation at the end of a wave is checked on a split variable.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow  # noqa: F401  (loads the op library)
from tensorbow import ops as tb_ops

tf1 = tf.compat.v1
L = 3
ALPHA, MU, LR, MOMENTUM = 0.3, 0.6, 0.1, 0.7


def _tol(dtype):
  return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(
      rtol=1e-12, atol=1e-12)


class Wave(object):
  """L replicas of one variable and their fused ops, in a graph of its own."""

  def __init__(self, optimizer, dtype, shape, use_locking=False, seed=0):
    self.optimizer = optimizer
    self.dtype = dtype
    rng = np.random.RandomState(seed)
    self.z0 = rng.uniform(-1, 1, shape).astype(dtype)
    # Replicas start away from z, so every correction is non-zero.
    self.w0 = [(self.z0 + rng.uniform(-0.5, 0.5, shape)).astype(dtype)
               for _ in range(L)]
    self.graph = tf.Graph()
    with self.graph.as_default():
      var = lambda name, value: tf1.get_variable(name, initializer=value,
                                                 use_resource=True)
      self.z = var("z", self.z0)
      self.zp = var("z_prev", self.z0)
      self.next = var("next", np.zeros(shape, dtype))
      self.w = [var(f"w{r}", w) for r, w in enumerate(self.w0)]
      self.a = [var(f"a{r}", np.zeros(shape, dtype)) for r in range(L)]
      self.g = [tf1.placeholder(dtype, None, name=f"g{r}") for r in range(L)]
      self.ops = [self._op(r, use_locking) for r in range(L)]
      self.all = tf.group(*self.ops)
      self.init = tf1.global_variables_initializer()
      self.read_z = tf.identity(self.z.read_value())

  def _op(self, r, use_locking):
    c = lambda v: tf.constant(v, self.dtype)
    central = (self.z.handle, self.zp.handle, self.next.handle)
    if self.optimizer == "sgd":
      return tb_ops.resource_apply_sma_gradient_descent_with_central(
          self.w[r].handle, *central, c(ALPHA), c(LR), self.g[r], c(MU),
          replica=r, num_replicas=L, barrier="b", use_locking=use_locking)
    return tb_ops.resource_apply_sma_momentum_with_central(
        self.w[r].handle, self.a[r].handle, *central, c(ALPHA), c(LR),
        self.g[r], c(MOMENTUM), c(MU), replica=r, num_replicas=L,
        barrier="b", use_locking=use_locking,
        use_nesterov=self.optimizer == "nesterov")


def reference_wave(optimizer, z, zp, ws, accums, grads):
  """One wave of DESIGN.md section 3 in NumPy; returns the new state."""
  corrections, new_ws, new_accums = [], [], []
  for w, a, g in zip(ws, accums, grads):
    c = ALPHA * (w - z)
    if optimizer == "sgd":
      step = LR * g
    else:
      a = MOMENTUM * a + g
      step = LR * g + LR * MOMENTUM * a if optimizer == "nesterov" else LR * a
    new_ws.append(w - step - c)
    new_accums.append(a)
    corrections.append(c)
  z_new = z + sum(corrections) + MU * (z - zp)
  return z_new, z, new_ws, new_accums


@pytest.mark.parametrize("concurrent", [True, False],
                         ids=["one-run", "one-by-one"])
@pytest.mark.parametrize("use_locking", [False, True],
                         ids=["unlocked", "locked"])
@pytest.mark.parametrize("shape", [(3,), (200, 300)], ids=["3", "200x300"])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "nesterov"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64],
                         ids=["f32", "f64"])
def test_waves_match_numpy(dtype, optimizer, shape, use_locking, concurrent):
  wave = Wave(optimizer, dtype, shape, use_locking)
  rng = np.random.RandomState(1)
  z, zp = wave.z0.astype(np.float64), wave.z0.astype(np.float64)
  ws = [w.astype(np.float64) for w in wave.w0]
  accums = [np.zeros(shape) for _ in range(L)]
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    for _ in range(3):
      grads = [rng.uniform(-1, 1, shape).astype(dtype) for _ in range(L)]
      feed = dict(zip(wave.g, grads))
      if concurrent:
        sess.run(wave.all, feed)
      else:
        for r in rng.permutation(L):
          sess.run(wave.ops[r], {wave.g[r]: grads[r]})
      z, zp, ws, accums = reference_wave(optimizer, z, zp, ws, accums, grads)
      got_z, got_zp = sess.run([wave.z, wave.zp])
      np.testing.assert_allclose(got_z, z, **_tol(dtype))
      np.testing.assert_allclose(got_zp, zp, **_tol(dtype))
      for r in range(L):
        np.testing.assert_allclose(sess.run(wave.w[r]), ws[r], **_tol(dtype))
        if optimizer != "sgd":
          np.testing.assert_allclose(sess.run(wave.a[r]), accums[r],
                                     **_tol(dtype))


def test_central_model_moves_only_when_every_replica_has_passed():
  wave = Wave("sgd", np.float32, (200, 300))
  grads = [np.ones((200, 300), np.float32)] * L
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    for r in range(L - 1):
      sess.run(wave.ops[r], {wave.g[r]: grads[r]})
      np.testing.assert_array_equal(sess.run(wave.z), wave.z0)
    sess.run(wave.ops[L - 1], {wave.g[L - 1]: grads[L - 1]})
    np.testing.assert_array_equal(sess.run(wave.zp), wave.z0)
    assert not np.allclose(sess.run(wave.z), wave.z0)


def test_fetched_central_value_is_never_overwritten():
  # A fetched value may share the variable's buffer; the rotation makes
  # that buffer z_prev, then `next`, which the kernel must not write into.
  wave = Wave("momentum", np.float32, (200, 300))
  rng = np.random.RandomState(2)
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    fetched = sess.run(wave.read_z)
    snapshot = fetched.copy()
    for _ in range(4):
      sess.run(wave.all, {g: rng.uniform(-1, 1, (200, 300)).astype(
          np.float32) for g in wave.g})
    np.testing.assert_array_equal(fetched, snapshot)


def test_wrong_gradient_shape_is_an_error():
  wave = Wave("momentum", np.float32, (3,))
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"'grad' must have the shape of var \[3\], "
                       r"got \[4\]"):
      sess.run(wave.ops[0], {wave.g[0]: np.ones(4, np.float32)})


def test_non_scalar_central_momentum_is_an_error():
  wave = Wave("sgd", np.float32, (3,))
  with wave.graph.as_default():
    m = tf1.placeholder(tf.float32, None)
    op = tb_ops.resource_apply_sma_gradient_descent_with_central(
        wave.w[0].handle, wave.z.handle, wave.zp.handle, wave.next.handle,
        0.5, 0.1, wave.g[0], m, replica=0, num_replicas=L, barrier="x")
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"'central_momentum' must be a scalar, got "
                       r"shape \[2\]"):
      sess.run(op, {m: [0.1, 0.2], wave.g[0]: np.ones(3, np.float32)})


def test_replica_out_of_range_is_an_error():
  wave = Wave("sgd", np.float32, (3,))
  with wave.graph.as_default():
    op = tb_ops.resource_apply_sma_gradient_descent_with_central(
        wave.w[0].handle, wave.z.handle, wave.zp.handle, wave.next.handle,
        0.5, 0.1, wave.g[0], 0.9, replica=3, num_replicas=3, barrier="x")
  with tf1.Session(graph=wave.graph) as sess:
    sess.run(wave.init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"replica 3 is not in \[0, 3\)"):
      sess.run(op, {wave.g[0]: np.ones(3, np.float32)})


def test_uninitialised_next_buffer_is_an_error():
  wave = Wave("sgd", np.float32, (3,))
  with tf1.Session(graph=wave.graph) as sess:
    sess.run([v.initializer for v in [wave.z, wave.zp] + wave.w])
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="uninitialized variable 'next'"):
      sess.run(wave.ops[0], {wave.g[0]: np.ones(3, np.float32)})
