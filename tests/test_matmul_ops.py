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
DTYPES = [np.float32, np.float64]
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
