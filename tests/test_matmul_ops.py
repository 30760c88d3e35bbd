"""TensorBowMatMul (cc/ops/matmul_ops.cc) against NumPy.

The kernel has four paths, picked from the shapes at run time: few rows of
the product with b as given (the inner dimension split between threads
when it is long), few rows with b transposed (dot products), a small inner
dimension (sums of outer products), and TensorFlow's own MatMul kernel for
the rest. Each is run for every transpose flag, in float32 and float64,
with row counts that leave 1, 2 and 3 rows after the blocks of 4, column
counts that leave a partial tile, and inner dimensions that leave a partial
vector.
"""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from tensorbow import ops as tb_ops

import graphs

tf1 = tf.compat.v1

# (rows, depth, cols) of op(a) · op(b), and the path the kernel takes.
SHAPES = [
    (1, 7, 5),  # few rows; everything smaller than a tile
    (2, 33, 17),  # few rows; a partial tile and a partial vector
    (3, 600, 40),  # few rows; the inner dimension split in two
    (4, 3136, 512),  # LeNet's fc1 forward, at batch 4
    (4, 512, 3136),  # LeNet's fc1 input gradient (transpose_b)
    (7, 64, 48),  # few rows: a block of 4 and 3 more
    (16, 100, 33),  # the most rows the small paths take
    (3136, 4, 512),  # LeNet's fc1 weight gradient: a small inner dimension
    (37, 16, 19),  # the largest small inner dimension, rows 4k+1
    (17, 17, 17),  # neither small: TensorFlow's MatMul kernel
    (64, 100, 70),  # neither small
]
# float64 in the slow tier.
DTYPES = [np.float32, pytest.param(np.float64, marks=pytest.mark.slow)]
FLAGS = list(itertools.product([False, True], [False, True]))


def _operands(rng, rows, depth, cols, transpose_a, transpose_b, dtype):
  a = rng.standard_normal((depth, rows) if transpose_a else (rows, depth))
  b = rng.standard_normal((cols, depth) if transpose_b else (depth, cols))
  return a.astype(dtype), b.astype(dtype)


def _reference(a, b, transpose_a, transpose_b):
  """The product in float64."""
  a = a.astype(np.float64).T if transpose_a else a.astype(np.float64)
  b = b.astype(np.float64).T if transpose_b else b.astype(np.float64)
  return a @ b


def _tolerance(dtype, depth):
  # A sum of `depth` products of standard normals is about sqrt(depth).
  eps = 2e-6 if dtype == np.float32 else 1e-14
  return dict(rtol=eps * 10, atol=eps * 10 * np.sqrt(max(depth, 1)))


def _run(fetches, feed=None):
  with tf1.Session() as sess:
    return sess.run(fetches, feed)


# min_elements=0 runs the small-batch loops on every small shape; the
# default sends the smaller ones to TensorFlow's kernel.
@pytest.mark.parametrize("min_elements", [0, None], ids=["loops", "default"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_product_equals_numpy(dtype, min_elements):
  rng = np.random.default_rng(0)
  cases = []
  with tf.Graph().as_default():
    for (rows, depth, cols), (ta, tb) in itertools.product(SHAPES, FLAGS):
      a, b = _operands(rng, rows, depth, cols, ta, tb, dtype)
      product = tb_ops.mat_mul(a, b, transpose_a=ta, transpose_b=tb,
                               min_elements=min_elements)
      assert product.shape.as_list() == [rows, cols]
      cases.append(((rows, depth, cols, ta, tb), a, b, product))
    results = _run([c[3] for c in cases])
  for (key, a, b, _), got in zip(cases, results):
    rows, depth, cols, ta, tb = key
    assert got.dtype == dtype and got.shape == (rows, cols), key
    np.testing.assert_allclose(got, _reference(a, b, ta, tb),
                               err_msg=str(key), **_tolerance(dtype, depth))


@pytest.mark.parametrize("rows,depth,cols", [(0, 5, 3), (4, 0, 3), (4, 5, 0),
                                             (0, 0, 0), (20, 0, 20)])
def test_empty_dimensions(rows, depth, cols):
  a = np.ones((rows, depth), np.float32)
  b = np.ones((depth, cols), np.float32)
  with tf.Graph().as_default():
    got = _run(tb_ops.mat_mul(a, b, min_elements=0))
  np.testing.assert_array_equal(got, np.zeros((rows, cols), np.float32))


def test_runs_with_shapes_known_only_at_run_time():
  rng = np.random.default_rng(1)
  a = rng.standard_normal((5, 300)).astype(np.float32)
  b = rng.standard_normal((300, 64)).astype(np.float32)
  with tf.Graph().as_default():
    pa = tf1.placeholder(tf.float32, None)
    pb = tf1.placeholder(tf.float32, None)
    product = tb_ops.mat_mul(pa, pb, min_elements=0)
    got = _run(product, {pa: a, pb: b})
  np.testing.assert_allclose(got, _reference(a, b, False, False),
                             **_tolerance(np.float32, 300))


def test_equals_tf_matmul_bit_for_bit_on_integers():
  # Small integers are exact in float32, whatever the order of the sums.
  rng = np.random.default_rng(2)
  a = rng.integers(-4, 5, (4, 3136)).astype(np.float32)
  b = rng.integers(-4, 5, (3136, 512)).astype(np.float32)
  with tf.Graph().as_default():
    ours, theirs = _run([tb_ops.mat_mul(a, b), tf.matmul(a, b)])
  np.testing.assert_array_equal(ours, theirs)


def test_inner_dimensions_must_agree():
  with tf.Graph().as_default():
    pa = tf1.placeholder(tf.float32, None)
    pb = tf1.placeholder(tf.float32, None)
    product = tb_ops.mat_mul(pa, pb, transpose_b=True)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"inner dimensions differ: op\(a\) is \[2, 3\] "
                       r"and op\(b\) is \[4, 5\]"):
      _run(product, {pa: np.ones((2, 3)), pb: np.ones((5, 4))})


@pytest.mark.parametrize("which,shapes", [("a", ((2, 3, 1), (3, 4))),
                                          ("b", ((2, 3), (3,)))])
def test_operands_must_be_matrices(which, shapes):
  with tf.Graph().as_default():
    pa = tf1.placeholder(tf.float32, None)
    pb = tf1.placeholder(tf.float32, None)
    product = tb_ops.mat_mul(pa, pb)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=f"'{which}' must be a matrix, got shape"):
      _run(product, {pa: np.ones(shapes[0]), pb: np.ones(shapes[1])})


def test_static_shapes_are_checked_at_graph_construction():
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="Dimensions must be equal"):
      tb_ops.mat_mul(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))


def test_integer_operands_are_rejected():
  with tf.Graph().as_default():
    with pytest.raises(TypeError, match="not in list of allowed values"):
      tb_ops.mat_mul(np.ones((2, 3), np.int32), np.ones((3, 4), np.int32))


@pytest.mark.parametrize("transpose_a,transpose_b", FLAGS)
def test_gradients_equal_tf_matmuls(transpose_a, transpose_b):
  rng = np.random.default_rng(3)
  a, b = _operands(rng, 3, 20, 6, transpose_a, transpose_b, np.float64)
  upstream = rng.standard_normal((3, 6))
  graph = tf.Graph()
  with graph.as_default():
    a_t, b_t = tf.constant(a), tf.constant(b)
    kwargs = dict(transpose_a=transpose_a, transpose_b=transpose_b)
    ours = tf.gradients(tb_ops.mat_mul(a_t, b_t, **kwargs), [a_t, b_t],
                        grad_ys=tf.constant(upstream))
    theirs = tf.gradients(tf.matmul(a_t, b_t, **kwargs), [a_t, b_t],
                          grad_ys=tf.constant(upstream))
    with tf1.Session(graph=graph) as sess:
      got, expected = sess.run([ours, theirs])
  for g, e in zip(got, expected):
    assert g.shape == e.shape
    np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


# ---- The apply ops taking a weight gradient as its factors -------------------

# (batch, rows, cols) of a: [batch, rows], b: [batch, cols], var [rows, cols]:
# LeNet's fc1 at batch 4; a partial tile and odd rows; a single column (all
# tail); the largest batch the rewrite fuses; an empty batch.
OUTER_SHAPES = [(4, 3136, 512), (3, 37, 19), (5, 6, 1), (16, 9, 40),
                (0, 5, 17)]


def _outer_reference(var, accum, lr, a, b, momentum, nesterov):
  """TensorFlow's Apply{Momentum,GradientDescent} on grad = aᵀ·b, in
  float64: (var, accum) after one step."""
  grad = a.astype(np.float64).T @ b.astype(np.float64)
  var = var.astype(np.float64)
  if momentum is None:
    return var - lr * grad, None
  accum = momentum * accum.astype(np.float64) + grad
  if nesterov:
    return var - lr * grad - lr * momentum * accum, accum
  return var - lr * accum, accum


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["ref", "resource"])
@pytest.mark.parametrize("update", ["sgd", "momentum", "nesterov"])
def test_apply_outer_equals_numpy(update, kind, dtype):
  rng = np.random.default_rng(3)
  momentum = None if update == "sgd" else 0.9
  for i, (batch, rows, cols) in enumerate(OUTER_SHAPES):
    var0 = rng.standard_normal((rows, cols)).astype(dtype)
    accum0 = rng.standard_normal((rows, cols)).astype(dtype)
    a = rng.standard_normal((batch, rows)).astype(dtype)
    b = rng.standard_normal((batch, cols)).astype(dtype)
    with tf.Graph().as_default():
      var, var_in = graphs.variable_input(kind, f"var{i}", var0)
      accum, accum_in = graphs.variable_input(kind, f"accum{i}", accum0)
      a_in = tf1.placeholder(dtype, [None, rows])
      b_in = tf1.placeholder(dtype, [None, cols])
      step = tb_ops.apply_outer(
          var_in, accum_in if momentum else None, tf.constant(0.05, dtype),
          a_in, b_in, None if momentum is None else tf.constant(
              momentum, dtype), use_nesterov=update == "nesterov")
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        # Two steps: the second starts from the first's accum.
        expected_var, expected_accum = var0, accum0
        for _ in range(2):
          sess.run(step, {a_in: a, b_in: b})
          expected_var, expected_accum = _outer_reference(
              expected_var, expected_accum, 0.05, a, b, momentum,
              update == "nesterov")
        got_var, got_accum = sess.run([var, accum])
    tol = _tolerance(dtype, batch)
    np.testing.assert_allclose(got_var, expected_var, **tol)
    np.testing.assert_allclose(
        got_accum, accum0 if momentum is None else expected_accum, **tol)


def test_apply_outer_equals_tensorflows_apply_of_the_matmul():
  """Against TensorFlow's own kernels on LeNet's fc1 at batch 4, to the
  rounding of a sum of four products."""
  rng = np.random.default_rng(4)
  var0 = rng.standard_normal((3136, 512)).astype(np.float32)
  a = rng.standard_normal((4, 3136)).astype(np.float32)
  b = rng.standard_normal((4, 512)).astype(np.float32)
  results = []
  for fused in (False, True):
    with tf.Graph().as_default():
      var, handle = graphs.variable_input("resource", "var", var0)
      accum, accum_handle = graphs.variable_input("resource", "accum",
                                      np.zeros_like(var0))
      lr, momentum = tf.constant(0.01), tf.constant(0.9)
      if fused:
        step = tb_ops.apply_outer(handle, accum_handle, lr, a, b, momentum)
      else:
        step = tf.raw_ops.ResourceApplyMomentum(
            var=handle, accum=accum_handle, lr=lr, momentum=momentum,
            grad=tf.matmul(a, b, transpose_a=True))
      with tf1.Session() as sess:
        sess.run(tf1.global_variables_initializer())
        for _ in range(3):
          sess.run(step)
        results.append(sess.run([var, accum]))
  for got, expected in zip(results[1], results[0]):
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape, var_shape, message", [
    ([4, 6], [3, 5], [6, 5], "as many rows"),
    ([4, 6], [4, 5], [5, 6], "shape of aᵀ·b"),
    ([4, 6, 1], [4, 5], [6, 5], "matrices"),
])
def test_apply_outer_rejects_mismatched_shapes_and_changes_nothing(
    a_shape, b_shape, var_shape, message):
  with tf.Graph().as_default():
    var0 = np.ones(var_shape, np.float32)
    var, handle = graphs.variable_input("resource", "var", var0)
    accum, accum_handle = graphs.variable_input("resource", "accum", var0)
    # Shapes known only at run time: the kernel's own checks.
    a = tf1.placeholder(tf.float32)
    b = tf1.placeholder(tf.float32)
    step = tb_ops.apply_outer(handle, accum_handle, 0.1, a, b, 0.9)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        sess.run(step, {a: np.ones(a_shape, np.float32),
                        b: np.ones(b_shape, np.float32)})
      np.testing.assert_array_equal(sess.run(var), var0)
      np.testing.assert_array_equal(sess.run(accum), var0)


def test_apply_outer_checks_static_shapes_at_graph_construction():
  with tf.Graph().as_default():
    _, handle = graphs.variable_input("ref", "var", np.ones([6, 5], np.float32))
    with pytest.raises(ValueError):
      tb_ops.apply_outer(handle, None, 0.1, np.ones([4, 6], np.float32),
                         np.ones([4, 4], np.float32))
