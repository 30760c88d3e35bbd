"""Feed keys other than placeholders in a training run: a variable (its
value replaced for the run, as tf.compat.v1.Session does) and a
SparseTensor (refused with several replicas: its rows cannot be split yet;
trained as TensorFlow would with one), never a silent
plain TensorFlow step."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

tf1 = tf.compat.v1
RNG = np.random.RandomState(5)
X = RNG.randn(16, 3).astype(np.float32)
Y = RNG.randn(16, 1).astype(np.float32)
SCALE = np.full([3, 1], 2.0, np.float32)


def _build(use_resource, scale0):
  """Least squares whose weights are scaled by an untrained variable."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 3])
    y = tf1.placeholder(tf.float32, [None, 1])
    w = tf1.get_variable("w", initializer=np.full([3, 1], 0.5, np.float32),
                         use_resource=use_resource)
    scale = tf1.get_variable("scale", initializer=scale0, trainable=False,
                             use_resource=use_resource)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w * scale) - y))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf1.global_variables_initializer()
  return graph, x, y, w, scale, loss, train, init


def _train(session, use_resource, feed_scale, scale0=SCALE):
  graph, x, y, w, scale, loss, train, init = _build(
      use_resource, np.ones([3, 1], np.float32) if feed_scale else scale0)
  with session(graph) as sess:
    sess.run(init)
    feed = {x: X, y: Y}
    if feed_scale:
      feed[scale] = SCALE
    losses = [sess.run([loss, train], feed)[0] for _ in range(3)]
    timings = getattr(sess, "task_timings", lambda: None)()
    return losses, sess.run([w, scale]), timings


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_variable_as_feed_key_trains_with_the_fed_value(use_resource):
  replicated = lambda replicas: lambda graph: tb.TensorBowSession(
      graph=graph, replicas=replicas)
  fed = _train(replicated(4), use_resource, feed_scale=True)
  # A resource variable as a key feeds its `Read` tensor, which the model's
  # own reads do not use: the fed value changes nothing, as in TensorFlow.
  effective = np.ones([3, 1], np.float32) if use_resource else SCALE
  held = _train(replicated(4), use_resource, feed_scale=False,
                scale0=effective)
  assert fed[2]  # trained by the replicas
  np.testing.assert_allclose(fed[0], held[0], rtol=1e-6)
  np.testing.assert_allclose(fed[1][0], held[1][0], rtol=1e-6)
  # The feed replaced the value for the run only.
  np.testing.assert_array_equal(fed[1][1], np.ones([3, 1], np.float32))
  # At one replica, as tf.compat.v1.Session.
  plain = _train(lambda graph: tf1.Session(graph=graph), use_resource,
                 feed_scale=True)
  one = _train(replicated(1), use_resource, feed_scale=True)
  np.testing.assert_allclose(one[0], plain[0], rtol=1e-6)
  np.testing.assert_allclose(one[1][0], plain[1][0], rtol=1e-6)


def _sparse_model():
  graph = tf.Graph()
  with graph.as_default():
    sparse = tf1.sparse_placeholder(tf.float32, shape=[None, 3])
    y = tf1.placeholder(tf.float32, [None, 1])
    w = tf1.get_variable("w", initializer=np.full([3, 1], 0.5, np.float32))
    pred = tf.sparse.sparse_dense_matmul(sparse, w)
    loss = 0.5 * tf.reduce_mean(tf.square(pred - y))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf1.global_variables_initializer()
  rows, cols = np.nonzero(X > 0)
  value = tf1.SparseTensorValue(np.stack([rows, cols], 1), X[rows, cols],
                                X.shape)
  return graph, {sparse: value, y: Y}, w, loss, train, init


def test_sparse_tensor_feed_is_refused_in_training_and_kept_elsewhere():
  graph, feed, w, loss, train, init = _sparse_model()
  with tf1.Session(graph=graph) as sess:
    sess.run(init)
    expected = sess.run(loss, feed)
  with tb.TensorBowSession(graph=graph, replicas=4) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.UnimplementedError, match="SparseTensor"):
      sess.run([loss, train], feed)
    np.testing.assert_array_equal(sess.run(w),
                                  np.full([3, 1], 0.5, np.float32))
    np.testing.assert_allclose(sess.run(loss, feed), expected, rtol=1e-6)


def test_sparse_tensor_feed_trains_one_replica_as_tensorflow():
  graph, feed, w, loss, train, init = _sparse_model()
  with tf1.Session(graph=graph) as sess:
    sess.run(init)
    expected = [sess.run([loss, train], feed)[0] for _ in range(3)]
    expected_w = sess.run(w)
  with tb.TensorBowSession(graph=graph, replicas=1) as sess:
    sess.run(init)
    losses = [sess.run([loss, train], feed)[0] for _ in range(3)]
    np.testing.assert_allclose(sess.run(w), expected_w, rtol=1e-6)
  np.testing.assert_allclose(losses, expected, rtol=1e-6)
