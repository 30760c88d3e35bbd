"""The faster kernel equivalents of tensorbow/rewrite/substitutes.py.

Each substitution must compute what the op it replaces computes (the
replaced TensorFlow op, and NumPy for the products), apply only where it is
meant to, and leave training where it was: the same variables with and
without it, under SMA and with one replica.
"""
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

import tensorbow as tb
from tensorbow.rewrite import substitutes

import graphs
import references

tf1 = tf.compat.v1


def _faster(graph):
  faster = tf.Graph()
  with faster.as_default():
    tf1.import_graph_def(substitutes.faster_graph_def(graph), name="")
  return faster


# ---- MatMul ------------------------------------------------------------------


def matmul_graph(a_shape, b_shape, dtype, **kwargs):
  graph = tf.Graph()
  with graph.as_default():
    a = tf1.placeholder(dtype, a_shape, name="a")
    b = tf1.placeholder(dtype, b_shape, name="b")
    product = tf.matmul(a, b, name="product", **kwargs)
  return graph, product.op


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
# The weight (and the weight gradient) has at least TensorBowMatMul's
# default min_elements (65536) elements, so its own loops run, not the
# TensorFlow kernel it hands small products to.
@pytest.mark.parametrize("a_shape,b_shape,kwargs", [
    ([None, 64], [1030, 64], {"transpose_b": True}),  # dY·Wᵀ
    ([None, 300], [300, 256], {}),  # X·W
    ([None, 300], [None, 256], {"transpose_a": True}),  # Xᵀ·dY
    ([3, 300], [300, 256], {}),  # few rows, known
])
def test_substituted_matmul_equals_numpy(dtype, a_shape, b_shape, kwargs):
  graph, op = matmul_graph(a_shape, b_shape, dtype, **kwargs)
  assert substitutes.applies(op)
  rng = np.random.RandomState(0)
  rows = 3 if a_shape[0] is None else a_shape[0]
  a = rng.randn(rows, a_shape[1]).astype(dtype.as_numpy_dtype)
  b = rng.randn(rows if b_shape[0] is None else b_shape[0],
                b_shape[1]).astype(dtype.as_numpy_dtype)
  faster = _faster(graph)
  product = faster.get_tensor_by_name("product:0")
  assert product.op.type == "TensorBowMatMul"
  with tf1.Session(graph=faster) as sess:
    got = sess.run(product, {"a:0": a, "b:0": b})
  expected = ((a.T if kwargs.get("transpose_a") else a) @
              (b.T if kwargs.get("transpose_b") else b))
  tol = 1e-5 if dtype == tf.float32 else 1e-12
  np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("a_shape,b_shape,kwargs,dtype", [
    ([64, 40], [40, 2048], {}, tf.float32),  # 64 rows, inner 40: no small side
    ([40, 64], [40, 64], {"transpose_a": True}, tf.float32),
    ([None, 40], [40, 30], {}, tf.int32),  # not a float
    ([None, 40], [40, 30], {}, tf.complex64),
])
def test_matmul_substitution_applies_only_to_small_float_products(
    a_shape, b_shape, kwargs, dtype):
  _, op = matmul_graph(a_shape, b_shape, dtype, **kwargs)
  assert not substitutes.applies(op)
  assert substitutes.substitute(op.node_def, op) is None


# ---- Convolution gradients ---------------------------------------------------


def conv_grads_graph(batch, size, channels, filters, kernel, padding="SAME",
                     strides=1):
  """Conv2D's two gradient ops on fixed inputs: (graph, input op, filter op)."""
  rng = np.random.RandomState(kernel)
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(rng.randn(batch, size, size, channels).astype(np.float32))
    w = tf.constant(rng.randn(kernel, kernel, channels, filters).astype(
        np.float32))
    out = size if padding == "SAME" else size - kernel + 1
    out = (out + strides - 1) // strides
    dy = tf.constant(rng.randn(batch, out, out, filters).astype(np.float32))
    dx = tf1.nn.conv2d_backprop_input(tf.shape(x), w, dy,
                                      [1, strides, strides, 1], padding,
                                      name="dx")
    dw = tf1.nn.conv2d_backprop_filter(x, tf.shape(w), dy,
                                       [1, strides, strides, 1], padding,
                                       name="dw")
  return graph, dx.op, dw.op


@pytest.mark.parametrize("batch,size,channels,filters,kernel,input_grad", [
    (4, 14, 32, 64, 5, True),  # LeNet's conv2
    (3, 28, 1, 32, 5, False),  # LeNet's conv1: one input channel
    (2, 32, 8, 8, 3, True),  # a block of ResNet's first stage
    (2, 16, 8, 8, 3, False),  # its second stage: too small a window
    (2, 15, 3, 4, 1, False),  # 1x1
])
def test_substituted_conv_gradients_equal_tensorflows(batch, size, channels,
                                                       filters, kernel,
                                                       input_grad):
  graph, dx, dw = conv_grads_graph(batch, size, channels, filters, kernel)
  assert substitutes.applies(dw)
  assert substitutes.applies(dx) == input_grad
  with tf1.Session(graph=graph) as sess:
    expected = sess.run([dx.outputs[0], dw.outputs[0]])
  faster = _faster(graph)
  fetches = [faster.get_tensor_by_name("dx:0"),
             faster.get_tensor_by_name("dw:0")]
  assert fetches[1].op.type == "Transpose"
  with tf1.Session(graph=faster) as sess:
    got = sess.run(fetches)
  for g, e in zip(got, expected):
    assert g.shape == e.shape
    np.testing.assert_allclose(g, e, rtol=1e-4,
                               atol=1e-4 * np.abs(e).max())


def test_conv_filter_gradient_equals_numpy():
  graph, _, dw = conv_grads_graph(2, 6, 3, 4, 3)
  faster = _faster(graph)
  with tf1.Session(graph=faster) as sess:
    got, x, dy = sess.run([faster.get_tensor_by_name("dw:0")] + [
        faster.get_tensor_by_name(t.name) for t in (dw.inputs[0],
                                                   dw.inputs[2])])
  padded = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)])
  expected = np.zeros((3, 3, 3, 4))
  for i in range(3):
    for j in range(3):
      expected[i, j] = np.einsum("byxc,byxo->co",
                                 padded[:, i:i + 6, j:j + 6, :], dy)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel,padding,strides", [
    (4, "SAME", 1),  # even kernel: asymmetric padding
    (3, "VALID", 1),  # VALID with a kernel larger than 1
    (3, "SAME", 2),  # strided
])
def test_conv_substitutions_skip_other_convolutions(kernel, padding, strides):
  _, dx, dw = conv_grads_graph(2, 16, 3, 4, kernel, padding, strides)
  assert not substitutes.applies(dx) and not substitutes.applies(dw)


@pytest.mark.parametrize("size,channels,kernel", [
    (8, 16, 3),  # 8 x 8 x 3 x 3 pixels of window
    (14, 4, 5),  # too few input channels
])
def test_conv_input_gradient_skipped_where_tensorflow_is_faster(
    size, channels, kernel):
  _, dx, dw = conv_grads_graph(2, size, channels, 16, kernel)
  assert not substitutes.applies(dx) and substitutes.applies(dw)


def test_conv_substitutions_skip_ops_inside_a_while_loop(monkeypatch):
  # A TF1 while loop (v2 control flow would move the body into a function).
  monkeypatch.setattr(control_flow_util, "ENABLE_CONTROL_FLOW_V2", False)
  graph = tf.Graph()
  with graph.as_default():
    w = tf.ones([3, 3, 8, 8])
    dy = tf.ones([2, 32, 32, 8])

    def body(i, x):
      dw = tf1.nn.conv2d_backprop_filter(x, tf.shape(w), dy, [1, 1, 1, 1],
                                         "SAME", name="dw")
      return i + 1, x + tf.reduce_sum(dw)

    tf.while_loop(lambda i, _: i < 2, body, [0, tf.ones([2, 32, 32, 8])])
  dw = [op for op in graph.get_operations()
        if op.type == "Conv2DBackpropFilter"]
  assert len(dw) == 1 and not substitutes.applies(dw[0])


# ---- Training with and without the substitutions -----------------------------


def small_cnn():
  """x [None, 14, 14, 2] -> conv 3x3x8 -> dense 1568 x 48 -> 3 classes.

  Its replicas substitute every kind: both convolution gradients and the
  dense layers' products (forward, input and weight gradients). The first
  dense weight has more than TensorBowMatMul's default min_elements
  (65536), so its products run the op's own loops."""
  graph = tf.Graph()
  rng = np.random.RandomState(0)
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 14, 14, 2], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    w1 = tf1.get_variable("w1", initializer=(0.3 * rng.randn(3, 3, 2, 8))
                          .astype(np.float32))
    h = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
    h = tf.reshape(h, [-1, 14 * 14 * 8])
    w2 = tf1.get_variable("w2", initializer=(0.05 * rng.randn(1568, 48))
                          .astype(np.float32))
    w3 = tf1.get_variable("w3", initializer=(0.2 * rng.randn(48, 3))
                          .astype(np.float32))
    logits = tf.matmul(tf.tanh(tf.matmul(h, w2)), w3)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    init = tf1.global_variables_initializer()
  xs = rng.randn(12, 14, 14, 2).astype(np.float32)
  ys = rng.randint(0, 3, 12)
  return graph, (x, y, [w1, w2, w3], loss, train, init), xs, ys


def train_model(session_factory, waves=3):
  graph, (x, y, weights, loss, train, init), xs, ys = small_cnn()
  with session_factory(graph) as sess:
    sess.run(init)
    losses = [sess.run([loss, train], {x: xs, y: ys})[0]
              for _ in range(waves)]
    values = sess.run(weights)
    # A plain TensorFlow session executes the user's graph itself.
    executed = getattr(sess, "execution_graph", graph).get_operations()
  # The kernels' ops; with reference variables the SMA step is also named
  # `<apply op>>tensorbow_step`, with a TensorBow type of its own.
  substituted = sorted({op.type for op in executed
                        if op.type == "TensorBowMatMul" or
                        op.type.endswith("Outer") or
                        (">tensorbow_" in op.name and
                         not op.type.startswith("TensorBow"))})
  return losses, values, substituted


@pytest.mark.parametrize("replicas", [1, 3])
def test_training_with_and_without_substitution_agree(monkeypatch, replicas):
  make = lambda g: tb.TensorBowSession(graph=g, replicas=replicas)
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
  slow_losses, slow_values, slow_substituted = train_model(make)
  # Every substitute the rules pick, whatever timing them would choose.
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  fast_losses, fast_values, fast_substituted = train_model(make)
  assert not slow_substituted
  assert {"TensorBowMatMul", "Conv2D", "Pad", "Transpose"} <= set(
      fast_substituted)
  np.testing.assert_allclose(fast_losses, slow_losses, rtol=1e-5)
  for fast, slow in zip(fast_values, slow_values):
    np.testing.assert_allclose(fast, slow, rtol=1e-5, atol=1e-6)


def test_one_replica_with_substitution_equals_tf_session(monkeypatch):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  tf_losses, tf_values, _ = train_model(lambda g: tf1.Session(graph=g))
  tb_losses, tb_values, substituted = train_model(
      lambda g: tb.TensorBowSession(graph=g, replicas=1))
  assert "TensorBowMatMul" in substituted
  # Both dense weights' momentum updates take their gradients' factors.
  assert {"TensorBowApplyMomentumOuter",
          "TensorBowResourceApplyMomentumOuter"} & set(substituted)
  np.testing.assert_allclose(tb_losses, tf_losses, rtol=1e-5)
  for a, b in zip(tb_values, tf_values):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- A dense weight's update from its gradient's factors ---------------------


def dense_model(optimizer, gate=tf1.train.Optimizer.GATE_OP):
  """x [None, 30] -> dense 30 x 20 (tanh) -> dense 20 x 1, squared error.

  Both weights' gradients are products with the batch as inner dimension,
  so both updates can take them as factors."""
  graph = tf.Graph()
  rng = np.random.RandomState(5)
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 30], name="x")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    w1 = tf1.get_variable("w1", initializer=(0.3 * rng.randn(30, 20))
                          .astype(np.float32))
    w2 = tf1.get_variable("w2", initializer=(0.3 * rng.randn(20, 1))
                          .astype(np.float32))
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.matmul(x, w1)), w2)
                                    - y))
    grads = tf1.gradients(loss, [w1, w2], gate_gradients=gate)
    train = optimizer.apply_gradients(zip(grads, [w1, w2]))
    init = tf1.global_variables_initializer()
  xs = rng.randn(8, 30).astype(np.float32)
  ys = rng.randn(8, 1).astype(np.float32)
  return graph, (x, y, [w1, w2], grads, loss, train, init), xs, ys


OPTIMIZERS = {
    "sgd": lambda: tf1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf1.train.MomentumOptimizer(0.1, 0.9),
    "nesterov": lambda: tf1.train.MomentumOptimizer(0.1, 0.9,
                                                    use_nesterov=True),
}


def train_dense(session_factory, optimizer, fetch_grads=False, waves=4):
  graph, (x, y, weights, grads, loss, train, init), xs, ys = dense_model(
      OPTIMIZERS[optimizer]())
  with graph.as_default():
    with session_factory(graph) as sess:
      sess.run(init)
      fetches = [loss, train] + (grads if fetch_grads else [])
      results = [sess.run(fetches, {x: xs, y: ys}) for _ in range(waves)]
      values = sess.run(weights)
      executed = getattr(sess, "execution_graph", graph).get_operations()
  fused = sorted(op.type for op in executed if "Outer" in op.type)
  losses = [r[0] for r in results]
  fetched = [r[2:] for r in results]
  return losses, values, fetched, fused


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_fused_dense_updates_equal_tf_session(monkeypatch, optimizer):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  tf_losses, tf_values, _, _ = train_dense(
      lambda g: tf1.Session(graph=g), optimizer)
  tb_losses, tb_values, _, fused = train_dense(
      lambda g: tb.TensorBowSession(graph=g, replicas=1), optimizer)
  assert len(fused) == 2, fused  # both weights
  np.testing.assert_allclose(tb_losses, tf_losses, rtol=1e-5)
  for a, b in zip(tb_values, tf_values):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_fetched_gradient_is_still_computed(monkeypatch):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  _, tf_values, tf_grads, _ = train_dense(
      lambda g: tf1.Session(graph=g), "momentum", fetch_grads=True)
  _, tb_values, tb_grads, fused = train_dense(
      lambda g: tb.TensorBowSession(graph=g, replicas=1), "momentum",
      fetch_grads=True)
  assert fused
  for tb_wave, tf_wave in zip(tb_grads, tf_grads):
    for a, b in zip(tb_wave, tf_wave):
      assert np.abs(b).max() > 0
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for a, b in zip(tb_values, tf_values):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_outer_applies_only_where_the_gradient_is_the_products():
  graph, (_, _, weights, grads, _, _, _), _, _ = dense_model(
      OPTIMIZERS["momentum"]())
  ops = graph.get_operations()
  found = substitutes.outer_applies(ops)
  assert sorted(found) == sorted(
      op.name for op in ops if op.type.endswith("ApplyMomentum"))
  for outer in found.values():
    assert outer.matmul.type == "MatMul"
    assert outer.matmul.get_attr("transpose_a")
    # tf.gradients' gating: the fused op waits for the input gradient.
    assert outer.waits
  # A gradient also read by another op (a clip, a summary) is left alone.
  with graph.as_default():
    tf.identity(grads[0], name="reads_the_gradient")
    found = substitutes.outer_applies(graph.get_operations())
  assert [o.matmul.outputs[0].shape.as_list() for o in found.values()] == [
      weights[1].shape.as_list()]
  # Without gating the gradient feeds the apply op directly.
  graph, _, _, _ = dense_model(OPTIMIZERS["sgd"](),
                               gate=tf1.train.Optimizer.GATE_NONE)
  found = substitutes.outer_applies(graph.get_operations())
  assert len(found) == 2 and all(not o.waits for o in found.values())


def test_the_fused_update_waits_for_what_the_gradient_waited_for():
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 3])
    w = tf1.get_variable("w", [3, 2])
    steps = tf1.get_variable("steps", [], tf.int32, trainable=False,
                             initializer=tf1.zeros_initializer())
    dy = tf1.placeholder(tf.float32, [None, 2])
    count = tf1.assign_add(steps, 1)
    # A gradient made by hand, inside a control dependency.
    with tf.control_dependencies([count]):
      grad = tf.matmul(x, dy, transpose_a=True)
    tf1.train.GradientDescentOptimizer(0.1).apply_gradients([(grad, w)])
  found = substitutes.outer_applies(graph.get_operations())
  assert len(found) == 1
  outer, = found.values()
  assert "^" + count.op.name in outer.waits


def test_with_tensorflows_kernel_timed_faster_nothing_is_fused(
    monkeypatch, tmp_path):
  from tensorbow.rewrite import kernel_choice  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv("TENSORBOW_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "1")  # timed, the default
  timed = []

  def outer_timer(fused, op_type, a_shape, b_shape, dtype, nesterov):
    timed.append((fused, op_type, a_shape, b_shape))
    return 1.0 if fused else 0.5

  monkeypatch.setattr(kernel_choice, "_timed_outer", outer_timer)
  _, values, _, fused = train_dense(
      lambda g: tb.TensorBowSession(graph=g, replicas=1), "momentum")
  assert fused == []
  # Timed on the session's shapes: 8 rows, the weights' sizes.
  assert sorted(t[2:] for t in timed if t[0]) == [([8, 20], [8, 1]),
                                                  ([8, 30], [8, 20])]
  assert all(t[1] == "ResourceApplyMomentum" for t in timed)
  _, tf_values, _, _ = train_dense(lambda g: tf1.Session(graph=g), "momentum")
  for a, b in zip(values, tf_values):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_faster_graph_def_fuses_as_the_replicas_do():
  graph, (x, y, weights, _, loss, train, init), xs, ys = dense_model(
      OPTIMIZERS["momentum"]())
  faster = _faster(graph)
  assert sum(op.type.endswith("Outer") for op in faster.get_operations()) == 2
  losses = []
  for g in (graph, faster):
    with tf1.Session(graph=g) as sess:
      sess.run(g.get_operation_by_name(init.name))
      feed = {g.get_tensor_by_name(x.name): xs,
              g.get_tensor_by_name(y.name): ys}
      losses.append([sess.run([g.get_tensor_by_name(loss.name),
                               g.get_operation_by_name(train.name)],
                              feed)[0] for _ in range(4)])
  assert losses[0][-1] < losses[0][0]
  np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
  del weights


# ---- Under SMA: the step and the correction from the gradient's factors ------

SMA_X = np.random.RandomState(9).randn(8, 3).astype(np.float32)
SMA_Y = np.random.RandomState(10).randn(8, 1).astype(np.float32)
SMA_OPTIMIZERS = {
    "sgd": (lambda: tf1.train.GradientDescentOptimizer(0.1), {}),
    "momentum": (lambda: tf1.train.MomentumOptimizer(0.1, 0.9),
                 {"momentum": 0.9}),
    "nesterov": (lambda: tf1.train.MomentumOptimizer(0.1, 0.9,
                                                     use_nesterov=True),
                 {"momentum": 0.9, "nesterov": True}),
}


@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("use_resource", [True, False])
@pytest.mark.parametrize("optimizer", sorted(SMA_OPTIMIZERS))
def test_sma_with_fused_dense_updates_equals_numpy(monkeypatch, optimizer,
                                                   use_resource, replicas):
  """The weight's update takes x and the residual's gradient (a resource
  variable's as one op with its share of the central update; a reference
  variable's as the SMA step and the leader), the bias's its gradient: both
  follow DESIGN.md's SMA wave by wave."""
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "all")
  make, kwargs = SMA_OPTIMIZERS[optimizer]
  m = graphs.build(make, use_resource)
  expected = references.sma([graphs.W0, graphs.B0], [(SMA_X, SMA_Y)] * 4,
                            replicas, 0.5, 0.8, 0.1, **kwargs)
  with tb.TensorBowSession(graph=m.graph, replicas=replicas, alpha=0.5,
                           central_momentum=0.8) as sess:
    sess.run(m.init)
    for z, loss, _, _ in expected:
      fetched, _ = sess.run([m.loss, m.train], {m.x: SMA_X, m.y: SMA_Y})
      np.testing.assert_allclose(fetched, loss, rtol=1e-5)
      for value, want in zip(sess.run([m.w, m.b]), z):
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    types = set(op.type for op in sess.execution_graph.get_operations())
  name = "GradientDescent" if optimizer == "sgd" else "Momentum"
  fused = (f"TensorBow{'Resource' if use_resource else ''}ApplySma{name}"
           "OuterWithCentral")
  assert fused in types
  assert not any(t.endswith(f"Apply{name}Outer") for t in types), types
