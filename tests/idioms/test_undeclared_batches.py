"""Idioms: batches fed to placeholders that do not declare a batch
dimension (issue #62): no shape at all (`placeholder("float")`, as older
tutorials write it) or a fixed one (`(100, 784)`, as TensorFlow's
`fully_connected_feed.py` declares it). The graph's data flow makes them
batch feeds (DESIGN.md, "Batch feeds are split"): at L = 4 each replica
trains on its shard, so the model equals the SMA reference of the same
graph built with `[None, ...]`, TensorFlow's folded constants (a mean's
divisor, a sum's tile multiples, `ones_like`'s shape) included."""
import functools
import math

import numpy as np
import pytest
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

CORPUS = harness.Corpus()
ROWS = 100  # fully_connected_feed.py's batch size: 25 rows a replica
PIXELS = 784


def _inputs(fixed, rows=ROWS):
  """fully_connected_feed.py's placeholders: images and labels of `rows`
  rows if `fixed`, else of unknown rows."""
  size = rows if fixed else None
  images = tf.compat.v1.placeholder(tf.float32, (size, PIXELS), name="images")
  labels = tf.compat.v1.placeholder(tf.int32, (size,), name="labels")
  return images, labels, lambda i: {
      images: np.abs(harness.data(i, (rows, PIXELS))),
      labels: np.random.RandomState(i).randint(0, 10, rows)}


def _layer(h, units, name, activation=None):
  """mnist.py's layer: `tf.Variable`s under a name scope."""
  inputs = tf.compat.dimension_value(h.shape[-1])
  with tf.name_scope(name):
    weights = tf.Variable(tf.random.truncated_normal(
        [inputs, units], stddev=1.0 / math.sqrt(float(inputs)),
        seed=harness.SEED), name="weights")
    biases = tf.Variable(tf.zeros([units]), name="biases")
    out = tf.matmul(h, weights) + biases
  return activation(out) if activation else out


def fully_connected_feed(fixed):
  """TensorFlow's `fully_connected_feed.py` (mnist.py's inference, loss,
  training and evaluation), smaller hidden layers."""
  images, labels, feed = _inputs(fixed)
  hidden1 = _layer(images, 16, "hidden1", tf.nn.relu)
  hidden2 = _layer(hidden1, 8, "hidden2", tf.nn.relu)
  logits = _layer(hidden2, 10, "softmax_linear")
  loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(
      labels=tf.cast(labels, tf.int64), logits=logits)
  global_step = tf.Variable(0, name="global_step", trainable=False)
  train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(
      loss, global_step=global_step)
  correct = tf.reduce_sum(tf.cast(
      tf.compat.v1.nn.in_top_k(logits, labels, 1), tf.int32))
  return Case([loss, train, correct], feed, single=("global_step",))


def mean_regression(fixed):
  """A mean squared error over a fixed batch of 8: `_MeanGrad`'s divisor
  and tile multiples are constants of the batch size."""
  size = harness.BATCH if fixed else None
  x = tf.compat.v1.placeholder(tf.float32, (size, 4), name="x")
  y = tf.compat.v1.placeholder(tf.float32, (size,), name="y")
  pred = harness.mlp(x)
  loss = tf.reduce_mean(tf.square(pred - y[:, None]))
  train = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  return Case([loss, train], lambda i: {
      x: harness.data(i, (harness.BATCH, 4)),
      y: harness.data(i, (harness.BATCH,), 1)})


def linear_regression(shapeless):
  """TensorFlow-Examples' linear regression: `placeholder("float")`, a
  scalar weight and bias, a summed squared error over 8 rows."""
  if shapeless:
    x = tf.compat.v1.placeholder("float", name="x")
    y = tf.compat.v1.placeholder("float", name="y")
  else:
    x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None], name="y")
  w = tf.Variable(0.5, name="weight")
  b = tf.Variable(0.1, name="bias")
  pred = x * w + b
  cost = tf.reduce_sum(tf.pow(pred - y, 2)) / (2 * 8)
  train = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(cost)
  return Case([cost, train], lambda i: {
      x: harness.data(i, (8,)), y: 2.0 * harness.data(i, (8,)) + 1.0})


def partitioned_lookup(fixed):
  """A fixed batch of 8 rows of ids looked up in a table of two
  partitions, its logits fetched: the lookup reshapes its stitched rows
  to the ids' folded shape, and the logits are still per-example."""
  size = harness.BATCH if fixed else None
  ids = tf.compat.v1.placeholder(tf.int32, (size, 3), name="ids")
  labels = tf.compat.v1.placeholder(tf.int64, (size,), name="labels")
  table = tf.compat.v1.get_variable(
      "table", [10, 4], partitioner=tf.compat.v1.fixed_size_partitioner(2),
      initializer=tf.compat.v1.random_uniform_initializer(seed=harness.SEED))
  logits = harness.dense(
      tf.reduce_mean(tf.nn.embedding_lookup(table, ids), 1), 3, "out")
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits))
  train = tf.compat.v1.train.AdagradOptimizer(0.2).minimize(loss)

  def feed(i):
    rng = np.random.RandomState(i)
    return {ids: rng.randint(0, 10, (harness.BATCH, 3)),
            labels: rng.randint(0, 3, harness.BATCH)}

  return Case([loss, train, logits], feed)


def looped_classifier(undeclared, shapeless=False):
  """A batch of 8 rows fed to placeholders of fixed size (or of no
  shape) through a tf.while_loop applying a weight twice: under control
  flow v2 the loop's outputs state the batch's size and its gradient
  accumulates them in lists of that element shape."""
  if undeclared and shapeless:
    x = tf.compat.v1.placeholder(tf.float32, name="x")
    labels = tf.compat.v1.placeholder(tf.int64, name="labels")
  else:
    size = harness.BATCH if undeclared else None
    x = tf.compat.v1.placeholder(tf.float32, (size, 4), name="x")
    labels = tf.compat.v1.placeholder(tf.int64, (size,), name="labels")
  h = harness.looped(x, 4)
  w_out = tf.compat.v1.get_variable(
      "out_w", [4, 3],
      initializer=tf.compat.v1.glorot_uniform_initializer(seed=harness.SEED))
  logits = tf.matmul(h, w_out)
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits))
  train = tf.compat.v1.train.GradientDescentOptimizer(0.3).minimize(loss)

  def feed(i):
    return {x: harness.data(i, (harness.BATCH, 4)),
            labels: np.random.RandomState(i).randint(0, 3, harness.BATCH)}

  return Case([loss, train, logits], feed)


def looped_classifier_shapeless(undeclared):
  return looped_classifier(undeclared, shapeless=True)


VARIANTS = {
    "fully_connected_feed": (fully_connected_feed, 4),
    "looped_classifier": (looped_classifier, 4),
    "looped_classifier_shapeless": (looped_classifier_shapeless, 4),
    "partitioned_lookup": (partitioned_lookup, 4),
    "mean_regression": (mean_regression, 4),
    "linear_regression": (linear_regression, 2),
}
for _name, (_build, _) in VARIANTS.items():
  CORPUS.idiom(functools.wraps(_build)(functools.partial(_build, True)),
               l4="compared with the declared graph's reference below")

test_one_replica, test_reference_kernels, _ = CORPUS.tests()


def _idiom(name, undeclared):
  build, _ = VARIANTS[name]
  return harness.Idiom(name, functools.partial(build, undeclared))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_undeclared_batch_trains_as_the_declared_reference(name):
  """At L = 4 (L = 2 for the 8-row regression) the replicas each train on
  their shard: the model equals the SMA reference of the same graph built
  with an unknown first dimension, and the first run's fetches (every
  replica starting from the central model) TensorFlow's on the whole
  batch (DESIGN.md, "What leaves the replicas")."""
  replicas = VARIANTS[name][1]
  _, expected = harness.sma_reference(_idiom(name, False), replicas=replicas)
  whole, _ = harness.train(_idiom(name, False), harness.tf_session)
  actual_runs, actual = harness.train(_idiom(name, True),
                                      harness.tb_session(replicas))
  for k, (a, e) in enumerate(zip(actual_runs[0], whole[0])):
    if e is not None:
      np.testing.assert_allclose(a, e, rtol=harness.L4_RTOL,
                                 atol=harness.L4_ATOL, err_msg=f"fetch {k}")
  for var, value in expected.items():
    np.testing.assert_allclose(actual[var], value, rtol=harness.L4_RTOL,
                               atol=harness.L4_ATOL, err_msg=var)


@pytest.mark.parametrize("replicas", [1, 4])
def test_sixty_rows_to_a_hundred_row_placeholder_is_tensorflows_error(
    replicas):
  graph, case, init = harness.build(harness.Idiom(
      "fully_connected_feed", functools.partial(fully_connected_feed, True)))
  feed = {t: v[:60] for t, v in case.feed_at(0).items()}
  with harness.tb_session(replicas)(graph) as sess:
    sess.run(init)
    with pytest.raises(ValueError, match=r"Cannot feed value of shape "
                       r"\(60, 784\) for Tensor images:0, which has shape "
                       r"\(100, 784\)"):
      sess.run(case.fetches_at(0), feed)
