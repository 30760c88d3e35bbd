"""Tests of TensorBow's SMA ops (cc/ops/sma_ops.cc, cc/kernels/sma_ops.cc).

Every op is run in graph mode, in a graph and session of its own, and its
results are compared with a NumPy reference computed with the kernels'
order of operations, in the kernels' arithmetic (float32 for float16 and
bfloat16). Each op is tried on resource variables and on reference
variables, in float16, bfloat16, float32 and float64, on a tiny, a small
and a large shape (the large one is split across the intra-op thread
pool by the kernels' parallelFor), and run twice in a row with different
inputs, so that state carried between runs (var, accum, correction,
central_prev) is checked too.

Two kernel failures would hang or abort the test process, so they are
checked in child processes:

* the reference-variable forms with use_locking=False once deadlocked (the
  ref var's mutex was locked by MaybeLockVariableInputMutexesInOrder and
  then again by mutable_input); test_ref_forms_without_locking_do_not_deadlock
  guards against that, and the other tests of the reference forms without
  locking are skipped if it finds a hang, instead of hanging themselves;
* a resource variable whose dtype differs from the op's T once aborted the
  process (CHECK failure in TensorFlow's PrepareToUpdateVariable) instead of
  raising the kernel's own InvalidArgument error; it runs in a child process.

The resource form of apply_sma_correction has no input from which T can be
inferred: its wrapper takes `dtype`.
"""
import functools
import json
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tensorbow  # noqa: F401  (loads the op library)
from tensorbow import ops as tb_ops

from children import child_env
import graphs

tf1 = tf.compat.v1


BFLOAT16 = tf.bfloat16.as_numpy_dtype
# The fast tier runs each op on float16 and float32 (the kernels' two
# arithmetics), the tiny and the large shape, and every kind of variable
# but the locked resource; the slow tier adds bfloat16 and float64, the
# small shape and the locked resource.
_SLOW = pytest.mark.slow
DTYPES = [np.float16, pytest.param(BFLOAT16, marks=_SLOW), np.float32,
          pytest.param(np.float64, marks=_SLOW)]
DTYPE_IDS = ["f16", "bf16", "f32", "f64"]
SHAPES = [(1,), pytest.param((3, 4), marks=_SLOW), (1000, 300)]
# (variable kind, use_locking).
KINDS = [("resource", False), pytest.param("resource", True, marks=_SLOW),
         ("ref", False), ("ref", True)]
KIND_IDS = ["resource", "resource-locked", "ref", "ref-locked"]


def _wide(dtype):
  """The type the kernels compute `dtype` in: float32 for half precision."""
  return np.float32 if dtype in (np.float16, BFLOAT16) else dtype


def _tol(dtype):
  if dtype == np.float16:  # one rounding apart at most
    return dict(rtol=1e-3, atol=1e-3)
  if dtype == BFLOAT16:
    return dict(rtol=8e-3, atol=8e-3)
  if dtype == np.float32:
    return dict(rtol=1e-6, atol=1e-6)
  return dict(rtol=1e-12, atol=1e-12)


def _assert_close(actual, expected, dtype):
  assert actual.dtype == dtype
  assert actual.shape == expected.shape
  np.testing.assert_allclose(actual.astype(np.float64),
                             expected.astype(np.float64), **_tol(dtype))


def _rand(rng, shape, dtype, low=-1.0, high=1.0):
  return rng.uniform(low, high, size=shape).astype(dtype)


def _scalar(dtype, value):
  return np.asarray(value, dtype=dtype)


def _session(graph):
  return tf1.Session(graph=graph)


def _resource(name, value):
  """A resource variable (correction buffers, central_prev)."""
  v = tf1.get_variable(name, initializer=value, use_resource=True)
  return v, v.handle


def _unshaped_resource(name, value):
  """A resource handle that carries no static shape, and its assign op."""
  h = tf.raw_ops.VarHandleOp(dtype=tf.as_dtype(value.dtype),
                             shape=tf.TensorShape(None), shared_name=name,
                             name=name)
  assign = tf.raw_ops.AssignVariableOp(resource=h, value=value)
  return h, assign


def _apply_sma_correction(var, correction, dtype, use_locking):
  """apply_sma_correction; the raw op for the resource form (wrapper bug)."""
  if var.dtype == tf.resource:
    return tb_ops.library().tensor_bow_resource_apply_sma_correction(
        var, correction, T=tf.as_dtype(dtype), use_locking=use_locking)
  return tb_ops.apply_sma_correction(var, correction, use_locking=use_locking)


def _central_op(kind, central, central_prev, corrections, momentum,
                use_locking):
  if kind == "ref":
    return tb_ops.apply_sma_central(central, central_prev, corrections,
                                    momentum, use_locking=use_locking)
  return tb_ops.resource_apply_sma_central(central, central_prev, corrections,
                                           momentum, use_locking=use_locking)


def _graph_error_message(excinfo):
  return str(excinfo.value)


# ---- NumPy references (the kernels' order of operations, in _wide(dtype),
# rounded to the variable's dtype where the kernels store) -----------------


def _widened(*values):
  wide = _wide(values[0].dtype)
  return [np.asarray(v).astype(wide) for v in values]


def _np_gd(w, z, alpha, lr, g):
  dtype = w.dtype
  w, z, alpha, lr, g = _widened(w, z, alpha, lr, g)
  c = (alpha * (w - z)).astype(dtype)
  return (w - lr * g - c.astype(w.dtype)).astype(dtype), c


def _np_momentum(w, a, z, alpha, lr, g, m, nesterov):
  dtype = w.dtype
  w, a, z, alpha, lr, g, m = _widened(w, a, z, alpha, lr, g, m)
  c = (alpha * (w - z)).astype(dtype)
  a = m * a + g
  if nesterov:
    step = lr * g + lr * m * a
  else:
    step = lr * a
  return ((w - step - c.astype(w.dtype)).astype(dtype), a.astype(dtype), c)


def _np_central(z, zp, corrections, m):
  dtype = z.dtype
  z, zp, m = _widened(z, zp, m)
  s = functools.reduce(lambda acc, c: acc + c.astype(z.dtype), corrections,
                       np.zeros_like(z))
  return (z + s + m * (z - zp)).astype(dtype), z.astype(dtype)


# ---- Values ------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_apply_sma_gradient_descent(dtype, kind, use_locking, shape):
  rng = np.random.default_rng(1)
  w0 = _rand(rng, shape, dtype)
  c0 = _rand(rng, shape, dtype)  # non-zero: the op must overwrite, not add
  steps = [dict(z=_rand(rng, shape, dtype), g=_rand(rng, shape, dtype),
                alpha=_scalar(dtype, a), lr=_scalar(dtype, lr))
           for a, lr in [(0.3, 0.05), (0.125, 0.7)]]
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", w0)
    c, c_in = _resource("c", c0)
    z_ph = tf1.placeholder(dtype, shape)
    g_ph = tf1.placeholder(dtype, shape)
    alpha_ph = tf1.placeholder(dtype, [])
    lr_ph = tf1.placeholder(dtype, [])
    op = tb_ops.apply_sma_gradient_descent(
        w_in, c_in, z_ph, alpha_ph, lr_ph, g_ph, use_locking=use_locking)
    init = tf1.global_variables_initializer()
  w_ref = w0
  with _session(g) as sess:
    sess.run(init)
    for s in steps:
      out = sess.run(op, {z_ph: s["z"], g_ph: s["g"], alpha_ph: s["alpha"],
                          lr_ph: s["lr"]})
      w_ref, c_ref = _np_gd(w_ref, s["z"], s["alpha"], s["lr"], s["g"])
      w_val, c_val = sess.run([w, c])
      _assert_close(w_val, w_ref, dtype)
      _assert_close(c_val, c_ref, dtype)
      if kind == "ref":  # the forwarded ref output is the updated var
        _assert_close(out, w_ref, dtype)
      else:
        assert out is None


@pytest.mark.parametrize("nesterov", [False, True], ids=["plain", "nesterov"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_apply_sma_momentum(dtype, kind, use_locking, shape, nesterov):
  rng = np.random.default_rng(2)
  w0 = _rand(rng, shape, dtype)
  a0 = _rand(rng, shape, dtype)  # non-zero so nesterov and plain differ
  c0 = _rand(rng, shape, dtype)
  steps = [dict(z=_rand(rng, shape, dtype), g=_rand(rng, shape, dtype),
                alpha=_scalar(dtype, a), lr=_scalar(dtype, lr),
                m=_scalar(dtype, m))
           for a, lr, m in [(0.3, 0.05, 0.9), (0.125, 0.7, 0.5)]]
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", w0)
    a, a_in = graphs.variable_input(kind, "accum", a0)
    c, c_in = _resource("c", c0)
    z_ph = tf1.placeholder(dtype, shape)
    g_ph = tf1.placeholder(dtype, shape)
    alpha_ph = tf1.placeholder(dtype, [])
    lr_ph = tf1.placeholder(dtype, [])
    m_ph = tf1.placeholder(dtype, [])
    op = tb_ops.apply_sma_momentum(
        w_in, a_in, c_in, z_ph, alpha_ph, lr_ph, g_ph, m_ph,
        use_locking=use_locking, use_nesterov=nesterov)
    init = tf1.global_variables_initializer()
  w_ref, a_ref = w0, a0
  with _session(g) as sess:
    sess.run(init)
    for s in steps:
      out = sess.run(op, {z_ph: s["z"], g_ph: s["g"], alpha_ph: s["alpha"],
                          lr_ph: s["lr"], m_ph: s["m"]})
      w_ref, a_ref, c_ref = _np_momentum(w_ref, a_ref, s["z"], s["alpha"],
                                         s["lr"], s["g"], s["m"], nesterov)
      w_val, a_val, c_val = sess.run([w, a, c])
      _assert_close(w_val, w_ref, dtype)
      _assert_close(a_val, a_ref, dtype)
      _assert_close(c_val, c_ref, dtype)
      if kind == "ref":
        _assert_close(out, w_ref, dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sma_correction(dtype, kind, use_locking, shape):
  rng = np.random.default_rng(3)
  w0 = _rand(rng, shape, dtype)
  c0 = _rand(rng, shape, dtype, 5.0, 6.0)
  steps = [(_rand(rng, shape, dtype), _scalar(dtype, 0.3)),
           (_rand(rng, shape, dtype), _scalar(dtype, 0.6))]
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", w0)
    c, c_in = _resource("c", c0)
    z_ph = tf1.placeholder(dtype, shape)
    alpha_ph = tf1.placeholder(dtype, [])
    op = tb_ops.sma_correction(w_in, c_in, z_ph, alpha_ph,
                               use_locking=use_locking)
    init = tf1.global_variables_initializer()
  with _session(g) as sess:
    sess.run(init)
    for z, alpha in steps:
      sess.run(op, {z_ph: z, alpha_ph: alpha})
      w_val, c_val = sess.run([w, c])
      # correction is overwritten each run, var is left alone.
      expected = alpha.astype(_wide(dtype)) * (w0.astype(_wide(dtype)) - z)
      _assert_close(c_val, expected.astype(dtype), dtype)
      np.testing.assert_array_equal(w_val, w0)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_apply_sma_correction(dtype, kind, use_locking, shape):
  rng = np.random.default_rng(4)
  w0 = _rand(rng, shape, dtype)
  c0 = _rand(rng, shape, dtype)
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", w0)
    c, c_in = _resource("c", c0)
    op = _apply_sma_correction(w_in, c_in, dtype, use_locking)
    init = tf1.global_variables_initializer()
  w_ref = w0
  with _session(g) as sess:
    sess.run(init)
    for _ in range(2):
      out = sess.run(op)
      w_ref = (w_ref.astype(_wide(dtype)) - c0).astype(dtype)
      w_val, c_val = sess.run([w, c])
      _assert_close(w_val, w_ref, dtype)
      np.testing.assert_array_equal(c_val, c0)  # correction is only read
      if kind == "ref":
        _assert_close(out, w_ref, dtype)


def test_apply_sma_correction_wrapper_resource_form():
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input("resource", "w",
                                    np.full([3], 2.0, np.float32))
    _, c_in = _resource("c", np.full([3], 0.5, np.float32))
    op = tb_ops.apply_sma_correction(w_in, c_in, dtype=tf.float32)
    init = tf1.global_variables_initializer()
  with _session(g) as sess:
    sess.run(init)
    sess.run(op)
    np.testing.assert_array_equal(sess.run(w), np.full([3], 1.5, np.float32))


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_apply_sma_central(dtype, kind, use_locking, shape, n):
  rng = np.random.default_rng(5)
  z0 = _rand(rng, shape, dtype)
  zp0 = _rand(rng, shape, dtype)
  steps = [([_rand(rng, shape, dtype) for _ in range(n)], _scalar(dtype, m))
           for m in (0.9, 0.25)]
  g = tf.Graph()
  with g.as_default():
    z, z_in = graphs.variable_input(kind, "central", z0)
    zp, zp_in = _resource("central_prev", zp0)
    c_phs = [tf1.placeholder(dtype, shape) for _ in range(n)]
    m_ph = tf1.placeholder(dtype, [])
    op = _central_op(kind, z_in, zp_in, c_phs, m_ph, use_locking)
    init = tf1.global_variables_initializer()
  z_ref, zp_ref = z0, zp0
  with _session(g) as sess:
    sess.run(init)
    for cs, m in steps:
      feed = dict(zip(c_phs, cs))
      feed[m_ph] = m
      out = sess.run(op, feed)
      z_ref, zp_ref = _np_central(z_ref, zp_ref, cs, m)
      z_val, zp_val = sess.run([z, zp])
      _assert_close(z_val, z_ref, dtype)
      np.testing.assert_array_equal(zp_val, zp_ref)  # an exact copy of z
      if kind == "ref":
        _assert_close(out, z_ref, dtype)


@pytest.mark.parametrize("kind", ["resource", "ref"])
@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16], ids=["f16", "bf16"])
def test_half_precision_central_update_sums_in_float32(dtype, kind):
  """A correction smaller than the rounding step of a running sum in the
  variable's dtype survives: the sum is float32's."""
  big = 2048.0  # half's and bfloat16's spacing there is 2 and 16
  corrections = [np.full([5], v, dtype) for v in (big, 0.75, -big)]
  g = tf.Graph()
  with g.as_default():
    z, z_in = graphs.variable_input(kind, "central", np.zeros([5], dtype))
    _, zp_in = _resource("central_prev", np.zeros([5], dtype))
    op = _central_op(kind, z_in, zp_in, [tf.constant(c) for c in corrections],
                     tf.constant(0.0, dtype), False)
    init = tf1.global_variables_initializer()
  with _session(g) as sess:
    sess.run(init)
    sess.run(op)
    np.testing.assert_array_equal(sess.run(z), np.full([5], 0.75, dtype))


@pytest.mark.parametrize("nesterov", [False, True], ids=["plain", "nesterov"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_fused_ops_match_unfused_tensorflow_ops(dtype, nesterov):
  """The fused ops equal sma_correction + TF's own apply op +
  apply_sma_correction, on resource variables."""
  rng = np.random.default_rng(6)
  shape = (3, 4)
  w0, a0, z = (_rand(rng, shape, dtype) for _ in range(3))
  grad = _rand(rng, shape, dtype)
  alpha, lr, m = (_scalar(dtype, x) for x in (0.3, 0.05, 0.9))
  g = tf.Graph()
  with g.as_default():
    w1, w1_in = graphs.variable_input("resource", "w1", w0)
    w2, w2_in = graphs.variable_input("resource", "w2", w0)
    a1, a1_in = graphs.variable_input("resource", "a1", a0)
    a2, a2_in = graphs.variable_input("resource", "a2", a0)
    c1, c1_in = _resource("c1", np.zeros(shape, dtype))
    c2, c2_in = _resource("c2", np.zeros(shape, dtype))
    gd_fused = tb_ops.apply_sma_gradient_descent(w1_in, c1_in, z, alpha, lr,
                                                 grad)
    mom_fused = tb_ops.apply_sma_momentum(w2_in, a1_in, c2_in, z, alpha, lr,
                                          grad, m, use_nesterov=nesterov)
    init = tf1.global_variables_initializer()
  with _session(g) as sess:
    sess.run(init)
    sess.run([gd_fused, mom_fused])
    fused = sess.run([w1, c1, w2, a1, c2])

  g = tf.Graph()
  with g.as_default():
    w1, w1_in = graphs.variable_input("resource", "w1", w0)
    w2, w2_in = graphs.variable_input("resource", "w2", w0)
    a1, a1_in = graphs.variable_input("resource", "a1", a0)
    c1, c1_in = _resource("c1", np.zeros(shape, dtype))
    c2, c2_in = _resource("c2", np.zeros(shape, dtype))
    corr1 = tb_ops.sma_correction(w1_in, c1_in, z, alpha)
    corr2 = tb_ops.sma_correction(w2_in, c2_in, z, alpha)
    with tf.control_dependencies([corr1, corr2]):
      sgd = tf.raw_ops.ResourceApplyGradientDescent(var=w1_in, alpha=lr,
                                                     delta=grad)
      mom = tf.raw_ops.ResourceApplyMomentum(
          var=w2_in, accum=a1_in, lr=lr, grad=grad, momentum=m,
          use_nesterov=nesterov)
    with tf.control_dependencies([sgd, mom]):
      back1 = _apply_sma_correction(w1_in, c1_in, dtype, False)
      back2 = _apply_sma_correction(w2_in, c2_in, dtype, False)
    init = tf1.global_variables_initializer()
  with _session(g) as sess:
    sess.run(init)
    sess.run([back1, back2])
    unfused = sess.run([w1, c1, w2, a1, c2])
  for f, u in zip(fused, unfused):
    _assert_close(f, u, dtype)
  # And the fused results are not trivially the initial values.
  assert not np.allclose(fused[0], w0)
  assert not np.allclose(fused[2], w0)


# ---- Errors ------------------------------------------------------------------


@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
def test_wrong_static_shape_rejected_at_graph_construction(kind, use_locking):
  g = tf.Graph()
  with g.as_default():
    _, w_in = graphs.variable_input(kind, "w", np.zeros([3], np.float32))
    _, c_in = _resource("c", np.zeros([3], np.float32))
    with pytest.raises(ValueError, match="must be equal, but are 3 and 4"):
      tb_ops.apply_sma_gradient_descent(
          w_in, c_in, tf.zeros([3]), 0.1, 0.1, tf.zeros([4]),
          use_locking=use_locking)
    _, c4_in = _resource("c4", np.zeros([4], np.float32))
    with pytest.raises(ValueError, match="must be equal, but are 3 and 4"):
      tb_ops.sma_correction(w_in, c4_in, tf.zeros([3]), 0.1,
                            use_locking=use_locking)
    with pytest.raises(ValueError, match="must be equal, but are 3 and 4"):
      _central_op(kind, w_in, c_in, [tf.zeros([3]), tf.zeros([4])], 0.5,
                  use_locking)


def _build_for_bad_shape(case, kind, use_locking, shape):
  """Graph, op, feed: one input of `case` gets a value of the wrong shape
  through a placeholder of unknown shape, which only the kernel can catch."""
  dtype = np.float32
  good = np.ones(shape, dtype)
  bad = np.ones([4, 3], dtype)
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", np.full(shape, 2.0, dtype))
    _, c_in = _resource("c", np.zeros(shape, dtype))
    ph = tf1.placeholder(dtype, None)
    inits = []
    if case == "gd/delta":
      op = tb_ops.apply_sma_gradient_descent(w_in, c_in, good, 0.1, 0.1, ph,
                                             use_locking=use_locking)
    elif case == "gd/central":
      op = tb_ops.apply_sma_gradient_descent(w_in, c_in, ph, 0.1, 0.1, good,
                                             use_locking=use_locking)
    elif case == "momentum/grad":
      _, a_in = graphs.variable_input(kind, "a", np.zeros(shape, dtype))
      op = tb_ops.apply_sma_momentum(w_in, a_in, c_in, good, 0.1, 0.1, ph,
                                     0.9, use_locking=use_locking)
    elif case == "sma_correction/central":
      op = tb_ops.sma_correction(w_in, c_in, ph, 0.1, use_locking=use_locking)
    elif case == "apply_sma_correction/correction":
      h, assign = _unshaped_resource("c_unshaped", bad)
      inits.append(assign)
      op = _apply_sma_correction(w_in, h, dtype, use_locking)
    elif case == "central/corrections":
      op = _central_op(kind, w_in, c_in, [good, ph, good], 0.5, use_locking)
    else:
      raise AssertionError(case)
    inits.append(tf1.global_variables_initializer())
  return g, w, op, inits, {ph: bad}


BAD_SHAPE_CASES = {
    "gd/delta": "'delta' must have the shape of var",
    "gd/central": "'central' must have the shape of var",
    "momentum/grad": "'grad' must have the shape of var",
    "sma_correction/central": "'central' must have the shape of var",
    "apply_sma_correction/correction":
        "'correction' must have the shape of var",
    "central/corrections": "'corrections' must have the shape of var",
}


@pytest.mark.parametrize("case", sorted(BAD_SHAPE_CASES))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
def test_wrong_runtime_shape_rejected_by_kernel(case, kind, use_locking):
  shape = (3, 4)
  g, w, op, inits, feed = _build_for_bad_shape(case, kind, use_locking, shape)
  with _session(g) as sess:
    sess.run(inits)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
      sess.run(op, feed)
    msg = _graph_error_message(e)
    assert BAD_SHAPE_CASES[case] in msg
    assert "[3,4], got [4,3]" in msg
    # Nothing was written.
    np.testing.assert_array_equal(sess.run(w), np.full(shape, 2.0))


@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
def test_non_scalar_rejected_at_graph_construction(kind, use_locking):
  g = tf.Graph()
  with g.as_default():
    _, w_in = graphs.variable_input(kind, "w", np.zeros([3], np.float32))
    _, c_in = _resource("c", np.zeros([3], np.float32))
    with pytest.raises(ValueError, match="Shape must be rank 0 but is rank 1"):
      tb_ops.apply_sma_gradient_descent(
          w_in, c_in, tf.zeros([3]), 0.1, tf.constant([0.1, 0.2]),
          tf.zeros([3]), use_locking=use_locking)


@pytest.mark.parametrize("which", ["gd/lr", "gd/alpha", "momentum/momentum",
                                   "sma_correction/alpha",
                                   "central/momentum"])
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
def test_non_scalar_rejected_by_kernel(which, kind, use_locking):
  dtype = np.float32
  shape = [3]
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", np.full(shape, 2.0, dtype))
    _, c_in = _resource("c", np.zeros(shape, dtype))
    ph = tf1.placeholder(dtype, None)
    z = np.zeros(shape, dtype)
    if which == "gd/lr":
      op = tb_ops.apply_sma_gradient_descent(w_in, c_in, z, 0.1, ph, z,
                                             use_locking=use_locking)
    elif which == "gd/alpha":
      op = tb_ops.apply_sma_gradient_descent(w_in, c_in, z, ph, 0.1, z,
                                             use_locking=use_locking)
    elif which == "momentum/momentum":
      _, a_in = graphs.variable_input(kind, "a", np.zeros(shape, dtype))
      op = tb_ops.apply_sma_momentum(w_in, a_in, c_in, z, 0.1, 0.1, z, ph,
                                     use_locking=use_locking)
    elif which == "sma_correction/alpha":
      op = tb_ops.sma_correction(w_in, c_in, z, ph, use_locking=use_locking)
    else:
      op = _central_op(kind, w_in, c_in, [z], ph, use_locking)
    init = tf1.global_variables_initializer()
  name = which.split("/")[1]
  with _session(g) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"'{name}' must be a scalar, got shape \\[2\\]"):
      sess.run(op, {ph: np.array([0.1, 0.2], dtype)})
    np.testing.assert_array_equal(sess.run(w), np.full(shape, 2.0))


def _build_uninitialised(op_name, kind, use_locking, uninit):
  """An op whose `uninit` variable ("var" or "correction"/"central_prev") is
  never initialised; the others are."""
  dtype = np.float32
  shape = [3]
  z = np.zeros(shape, dtype)
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", np.full(shape, 2.0, dtype))
    c, c_in = _resource("c", np.zeros(shape, dtype))
    others = []
    if op_name == "gd":
      op = tb_ops.apply_sma_gradient_descent(w_in, c_in, z, 0.1, 0.1, z,
                                             use_locking=use_locking)
    elif op_name == "momentum":
      a, a_in = graphs.variable_input(kind, "a", np.zeros(shape, dtype))
      others.append(a)
      op = tb_ops.apply_sma_momentum(w_in, a_in, c_in, z, 0.1, 0.1, z, 0.9,
                                     use_locking=use_locking)
    elif op_name == "sma_correction":
      op = tb_ops.sma_correction(w_in, c_in, z, 0.1, use_locking=use_locking)
    elif op_name == "apply_sma_correction":
      op = _apply_sma_correction(w_in, c_in, dtype, use_locking)
    else:
      op = _central_op(kind, w_in, c_in, [z], 0.5, use_locking)
    inited = others + ([c] if uninit == "var" else [w])
    init = [v.initializer for v in inited]
  return g, w, op, init


UNINIT_OPS = ["gd", "momentum", "sma_correction", "apply_sma_correction",
              "central"]


@pytest.mark.parametrize("op_name", UNINIT_OPS)
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
def test_uninitialised_correction_variable(op_name, kind, use_locking):
  # For "central" the uninitialised resource is central_prev. The error comes
  # from TF's MaybeLockVariableInputMutexesInOrder, which fails before the
  # kernel's own FailedPrecondition check is reached.
  g, w, op, init = _build_uninitialised(op_name, kind, use_locking,
                                        "correction")
  with _session(g) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.InternalError,
                       match="Invalid variable reference"):
      sess.run(op)
    np.testing.assert_array_equal(sess.run(w), np.full([3], 2.0))


@pytest.mark.parametrize("op_name", UNINIT_OPS)
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
def test_uninitialised_var(op_name, kind, use_locking):
  g, _, op, init = _build_uninitialised(op_name, kind, use_locking, "var")
  with _session(g) as sess:
    sess.run(init)
    if kind == "ref":
      with pytest.raises(tf.errors.FailedPreconditionError,
                         match="Attempting to use uninitialized value w"):
        sess.run(op)
    else:
      with pytest.raises(tf.errors.InternalError,
                         match="Invalid variable reference"):
        sess.run(op)


@pytest.mark.parametrize("bad_dtype", [np.int32, np.complex64])
@pytest.mark.parametrize("kind", ["resource", "ref"])
@pytest.mark.parametrize("op_name", UNINIT_OPS)
def test_unsupported_dtype_rejected_at_graph_construction(op_name, kind,
                                                          bad_dtype):
  shape = [3]
  g = tf.Graph()
  with g.as_default():
    _, w_in = graphs.variable_input(kind, "w", np.zeros(shape, bad_dtype))
    _, a_in = graphs.variable_input(kind, "a", np.zeros(shape, bad_dtype))
    _, c_in = _resource("c", np.zeros(shape, bad_dtype))
    z = tf.zeros(shape, bad_dtype)
    one = tf.constant(1, bad_dtype)
    with pytest.raises(TypeError,
                       match="not in list of allowed values: float16, "
                       "bfloat16, float32, float64"):
      if op_name == "gd":
        tb_ops.apply_sma_gradient_descent(w_in, c_in, z, one, one, z)
      elif op_name == "momentum":
        tb_ops.apply_sma_momentum(w_in, a_in, c_in, z, one, one, z, one)
      elif op_name == "sma_correction":
        tb_ops.sma_correction(w_in, c_in, z, one)
      elif op_name == "apply_sma_correction":
        _apply_sma_correction(w_in, c_in, bad_dtype, False)
      else:
        _central_op(kind, w_in, c_in, [z], one, False)


def test_central_needs_at_least_one_correction():
  g = tf.Graph()
  with g.as_default():
    _, z_in = _resource("z", np.zeros([3], np.float32))
    _, zp_in = _resource("zp", np.zeros([3], np.float32))
    with pytest.raises(ValueError, match="shorter than minimum length 1"):
      tb_ops.resource_apply_sma_central(z_in, zp_in, [], 0.5)


# ---- Kernel bugs that hang or abort: run in child processes ------------------

_DEADLOCK_CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    import numpy as np
    import tensorflow as tf
    from tensorbow import ops as tb
    tf1 = tf.compat.v1
    z = np.zeros([3], np.float32)

    def build(name):
      g = tf.Graph()
      with g.as_default():
        w = tf1.Variable(np.full([3], 2.0, np.float32), use_resource=False)
        a = tf1.Variable(np.zeros([3], np.float32), use_resource=False)
        c = tf1.get_variable("c", initializer=np.full([3], 0.5, np.float32),
                             use_resource=True)
        if name == "gd":
          op = tb.apply_sma_gradient_descent(w._ref(), c.handle, z, 0.1, 0.1, z)
        elif name == "momentum":
          op = tb.apply_sma_momentum(w._ref(), a._ref(), c.handle, z, 0.1,
                                     0.1, z, 0.9)
        elif name == "sma_correction":
          op = tb.sma_correction(w._ref(), c.handle, z, 0.1)
        elif name == "apply_sma_correction":
          op = tb.apply_sma_correction(w._ref(), c.handle)
        else:
          op = tb.apply_sma_central(w._ref(), c.handle, [z], 0.5)
        init = tf1.global_variables_initializer()
      config = tf1.ConfigProto(use_per_session_threads=True,
                               inter_op_parallelism_threads=1)
      sess = tf1.Session(graph=g, config=config)
      sess.run(init)
      return sess, op

    names = ["gd", "momentum", "sma_correction", "apply_sma_correction",
             "central"]
    result = {n: "hung" for n in names}
    def run(n, sess, op):
      try:
        sess.run(op)
        result[n] = "ok"
      except Exception as e:
        result[n] = "error: %s" % e
    threads = [threading.Thread(target=run, args=(n,) + build(n), daemon=True)
               for n in names]
    for t in threads:
      t.start()
    deadline = time.monotonic() + 3.0  # each op takes microseconds
    for t in threads:
      t.join(max(0.0, deadline - time.monotonic()))
    print(json.dumps(result), flush=True)
    os._exit(0)  # the hung kernels hold threads that would block exit
""")

_DTYPE_CHILD = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    from tensorbow import ops as tb
    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
      w = tf1.get_variable("w", initializer=np.ones([3], np.float32),
                           use_resource=True)
      c = tf1.get_variable("c", initializer=np.zeros([3], np.float64),
                           use_resource=True)
      z = np.zeros([3], np.float32)
      op = tb.apply_sma_gradient_descent(w.handle, c.handle, z, 0.1, 0.1, z)
      init = tf1.global_variables_initializer()
    with tf1.Session(graph=g) as sess:
      sess.run(init)
      try:
        sess.run(op)
        print("NO ERROR", flush=True)
      except tf.errors.InvalidArgumentError as e:
        print("InvalidArgumentError", str(e).replace("\\n", " "), flush=True)
""")


@pytest.fixture(autouse=True)
def _skip_if_ref_forms_deadlock(request):
  """Tests of a reference form without locking run only if the child process
  saw the reference forms without locking finish (else they would hang)."""
  params = getattr(request.node, "callspec", None)
  params = params.params if params else {}
  if params.get("kind") == "ref" and params.get("use_locking") is False:
    results = request.getfixturevalue("deadlock_results")
    hung = sorted(k for k, v in results.items() if v == "hung")
    if hung:
      pytest.skip(f"reference forms without locking deadlock ({hung}); see "
                  "test_ref_forms_without_locking_do_not_deadlock")


@pytest.fixture(scope="module", autouse=True)
def children():
  """Starts both child processes when the module's first test starts, so
  they run alongside the other tests; their tests collect the results."""
  # The children import the tensorbow this process imported (installed or
  # in the source tree), from a directory that holds no other copy.
  procs = {
      name: subprocess.Popen([sys.executable, "-c", src],
                             cwd=tempfile.gettempdir(), env=child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
      for name, src in [("deadlock", _DEADLOCK_CHILD),
                        ("dtype", _DTYPE_CHILD)]
  }
  results = {}

  def get(name):
    if name not in results:
      p = procs[name]
      try:
        out, err = p.communicate(timeout=120)
      except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
      results[name] = (p.returncode, out, err)
    return results[name]

  yield get
  for p in procs.values():
    if p.poll() is None:
      p.kill()
      p.wait()


@pytest.fixture(scope="module")
def deadlock_results(children):
  rc, out, err = children("deadlock")
  assert rc == 0, err[-2000:]
  return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("op_name", UNINIT_OPS)
def test_ref_forms_without_locking_do_not_deadlock(deadlock_results, op_name):
  # Regression: MaybeLockVariableInputMutexesInOrder locks every variable's
  # mutex, the ref var's included, whenever any input is a resource (and
  # correction / central_prev always are); reading the ref var with
  # ctx->mutable_input(i, lock_held=false) then locks it again: deadlock.
  assert deadlock_results[op_name] == "ok"


def test_resource_dtype_mismatch_is_an_error_not_an_abort(children):
  rc, out, err = children("dtype")
  assert rc == 0, f"child died with {rc}: {err[-1500:]}"
  assert "InvalidArgumentError" in out
  assert "variable 'correction' has dtype double but the op computes in " \
         "float" in out


def test_the_rewrite_uses_registered_op_types():
  """The op types SMA substitutes (algorithms/sma.py) come from its tables;
  each is an op of the library."""
  from tensorflow.python.framework import op_def_registry  # pylint: disable=g-import-not-at-top
  from tensorbow.algorithms import sma  # pylint: disable=g-import-not-at-top
  tb_ops.library()
  types = [t for pair in sma._SMA_OPS.values() for t in pair]  # pylint: disable=protected-access
  for fused in sma._FUSED.values():  # pylint: disable=protected-access
    types += list(fused.step) + list(fused.with_central)
  types += list(sma._FUSED_KINDS)  # pylint: disable=protected-access
  assert len(types) == 6 + 4 * 4 + 8
  for op_type in types:
    assert op_def_registry.get(op_type) is not None, op_type
  assert set(sma._FUSED_KINDS.values()) == set(sma._FUSED)  # pylint: disable=protected-access


# ---- The steps with the gradient given as its factors (dense layers) ------

OUTER_SHAPES = [(3, 5), (70, 300)]  # (70, 300): two blocks, a vector tail


@pytest.mark.parametrize("batch", [4, 0], ids=["batch4", "empty-batch"])
@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "nesterov"])
@pytest.mark.parametrize("shape", OUTER_SHAPES,
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kind,use_locking", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64],
                         ids=["f32", "f64"])
def test_apply_sma_outer(dtype, kind, use_locking, shape, optimizer, batch):
  """The *Outer steps equal the NumPy step with the gradient aᵀ·b."""
  rng = np.random.default_rng(3)
  w0, a0, c0 = (_rand(rng, shape, dtype) for _ in range(3))
  steps = [dict(z=_rand(rng, shape, dtype),
                x=_rand(rng, (batch, shape[0]), dtype),
                dy=_rand(rng, (batch, shape[1]), dtype),
                alpha=_scalar(dtype, al), lr=_scalar(dtype, lr),
                m=_scalar(dtype, m))
           for al, lr, m in [(0.3, 0.05, 0.9), (0.125, 0.7, 0.5)]]
  lib = tb_ops.library()
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", w0)
    a, a_in = graphs.variable_input(kind, "accum", a0)
    c, c_in = _resource("c", c0)
    z_ph, x_ph, dy_ph = (tf1.placeholder(dtype, None) for _ in range(3))
    alpha_ph, lr_ph, m_ph = (tf1.placeholder(dtype, []) for _ in range(3))
    prefix = "resource_" if kind == "resource" else ""
    if optimizer == "sgd":
      op = getattr(lib, f"tensor_bow_{prefix}apply_sma_gradient_descent_outer")(
          w_in, c_in, z_ph, alpha_ph, lr_ph, x_ph, dy_ph,
          use_locking=use_locking)
    else:
      op = getattr(lib, f"tensor_bow_{prefix}apply_sma_momentum_outer")(
          w_in, a_in, c_in, z_ph, alpha_ph, lr_ph, x_ph, dy_ph, m_ph,
          use_locking=use_locking, use_nesterov=optimizer == "nesterov")
    init = tf1.global_variables_initializer()
  w_ref, a_ref = w0, a0
  with _session(g) as sess:
    sess.run(init)
    for s in steps:
      out = sess.run(op, {z_ph: s["z"], x_ph: s["x"], dy_ph: s["dy"],
                          alpha_ph: s["alpha"], lr_ph: s["lr"],
                          m_ph: s["m"]})
      grad = s["x"].T @ s["dy"]
      if optimizer == "sgd":
        w_ref, c_ref = _np_gd(w_ref, s["z"], s["alpha"], s["lr"], grad)
      else:
        w_ref, a_ref, c_ref = _np_momentum(
            w_ref, a_ref, s["z"], s["alpha"], s["lr"], grad, s["m"],
            optimizer == "nesterov")
      w_val, a_val, c_val = sess.run([w, a, c])
      _assert_close(w_val, w_ref, dtype)
      _assert_close(a_val, a_ref, dtype)
      _assert_close(c_val, c_ref, dtype)
      if kind == "ref":
        _assert_close(out, w_ref, dtype)


@pytest.mark.parametrize("kind", ["ref", "resource"])
@pytest.mark.parametrize("x_shape,dy_shape,message", [
    ((4, 3), (5, 5), r"'a' and 'b' must be matrices with as many rows, got "
     r"\[4,3\] and \[5,5\]"),
    ((4, 5), (4, 3), r"var must have the shape of aᵀ·b \[5, 3\], got \[3,5\]"),
    ((4, 3, 1), (4, 5), r"'a' and 'b' must be matrices"),
], ids=["batches", "var", "rank"])
def test_apply_sma_outer_bad_factors_change_nothing(kind, x_shape, dy_shape,
                                                    message):
  w0 = np.arange(15, dtype=np.float32).reshape(3, 5)
  lib = tb_ops.library()
  g = tf.Graph()
  with g.as_default():
    w, w_in = graphs.variable_input(kind, "w", w0)
    a, a_in = graphs.variable_input(kind, "accum", w0 + 1)
    c, c_in = _resource("c", w0 + 2)
    x_ph, dy_ph = (tf1.placeholder(tf.float32, None) for _ in range(2))
    prefix = "resource_" if kind == "resource" else ""
    op = getattr(lib, f"tensor_bow_{prefix}apply_sma_momentum_outer")(
        w_in, a_in, c_in, w0 - 1, 0.5, 0.1, x_ph, dy_ph, 0.9)
    init = tf1.global_variables_initializer()
  with _session(g) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      sess.run(op, {x_ph: np.ones(x_shape, np.float32),
                    dy_ph: np.ones(dy_shape, np.float32)})
    for v, expected in [(w, w0), (a, w0 + 1), (c, w0 + 2)]:
      np.testing.assert_array_equal(sess.run(v), expected)


def test_outer_factor_shapes_checked_at_graph_construction():
  with tf.Graph().as_default():
    w, w_in = graphs.variable_input("resource", "w",
                                    np.zeros((3, 5), np.float32))
    c, c_in = _resource("c", np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="Dimension 1 in both shapes must be "
                       "equal, but are 6 and 5"):
      tb_ops.library().tensor_bow_resource_apply_sma_gradient_descent_outer(
          w_in, c_in, np.zeros((3, 5), np.float32), 0.5, 0.1,
          np.zeros((4, 3), np.float32), np.zeros((4, 6), np.float32))
