"""Fetch merging in training runs (DESIGN.md, "Fetches are merged"), through the
session.

A softmax classifier whose weight is [4, 10], trained at L = 4 on 16 rows:
the weight's gradient has the shards' first dimension (4) by coincidence
and must be the shard-weighted mean, not concatenated; the logits, their
flattened [16 * 10] form and the predictions are per-example and
concatenated; an int count of correct predictions is the batch's, the
sum of the shards' (DESIGN.md, "What leaves the replicas"; until issue
#60 it was replica 0's, and this test said so). The references are
`tf.compat.v1.Session` runs of the same graph on each shard: in a first
wave every replica computes at the initial weights.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

tf1 = tf.compat.v1
LR, REPLICAS, ELEMENT = 0.1, 4, 4
RNG = np.random.RandomState(3)
X = RNG.randn(16, 4).astype(np.float32)
Y = RNG.randint(0, 10, 16).astype(np.int64)
W0 = (0.5 * RNG.randn(4, 10)).astype(np.float32)
B0 = (0.1 * RNG.randn(10)).astype(np.float32)
# How each fetch merges.
CONCATENATED = ("logits", "flat", "predictions")
MEANS = ("weight_grad", "bias_grad", "loss")
SUMMED = ("correct",)


def _model(x, y, hard_coded=False):
  """(fetches by name, train op) of the classifier on rows `x`, labels `y`;
  `hard_coded`: the model reshapes with the element's batch size written
  in, as fixed-batch scripts do."""
  if hard_coded:
    x = tf.reshape(tf.reshape(x, [ELEMENT, 2, 2]), [ELEMENT, -1])
  w = tf1.get_variable("w", initializer=W0)
  b = tf1.get_variable("b", initializer=B0)
  logits = tf.matmul(x, w) + b
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  optimizer = tf1.train.GradientDescentOptimizer(LR)
  grads = optimizer.compute_gradients(loss, [w, b])
  predictions = tf.argmax(logits, 1)
  fetches = {
      "logits": logits, "flat": tf.reshape(logits, [-1]),
      "predictions": predictions,
      "weight_grad": grads[0][0], "bias_grad": grads[1][0], "loss": loss,
      "correct": tf.reduce_sum(tf.cast(tf.equal(predictions, y), tf.int32))}
  return fetches, optimizer.apply_gradients(grads)


def _per_shard(shards, hard_coded=False):
  """Per shard of (rows, labels), the fetches as tf.compat.v1.Session
  computes them at the initial weights."""
  with tf.Graph().as_default():
    rows = None if not hard_coded else ELEMENT
    x = tf1.placeholder(tf.float32, [rows, 4])
    y = tf1.placeholder(tf.int64, [rows])
    fetches, _ = _model(x, y, hard_coded)
    with tf1.Session() as sess:
      sess.run(tf1.global_variables_initializer())
      return [sess.run(fetches, {x: xs, y: ys}) for xs, ys in shards]


def _expected(per_shard, sizes):
  expected = {}
  for name in CONCATENATED:
    expected[name] = np.concatenate([s[name] for s in per_shard])
  for name in MEANS:
    expected[name] = np.average(
        np.asarray([s[name] for s in per_shard], np.float64), axis=0,
        weights=sizes)
  for name in SUMMED:
    expected[name] = np.sum([s[name] for s in per_shard], dtype=np.int32)
  return expected


def _assert_merged(got, expected, rows):
  assert got["logits"].shape == (rows, 10)
  assert got["flat"].shape == (rows * 10,)
  assert got["predictions"].shape == (rows,)
  assert got["weight_grad"].shape == (4, 10)
  assert got["bias_grad"].shape == (10,)
  assert np.shape(got["loss"]) == ()
  for name in CONCATENATED + SUMMED:
    np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    assert got[name].dtype == expected[name].dtype, name
  for name in MEANS:
    np.testing.assert_allclose(got[name], expected[name], rtol=1e-5,
                               atol=1e-6, err_msg=name)
    assert got[name].dtype == np.float32, name


@pytest.mark.parametrize("rows", [16, 10])
def test_fed_batch_fetches_merge_by_the_graph_not_by_their_sizes(rows):
  # 16 rows: shards of 4, the weight's first dimension; 10 rows: uneven
  # shards of 3, 3, 2, 2.
  shards = [(X[s], Y[s]) for s in np.array_split(np.arange(rows), REPLICAS)]
  sizes = [len(s[0]) for s in shards]
  assert sizes == ([4] * 4 if rows == 16 else [3, 3, 2, 2])
  expected = _expected(_per_shard(shards), sizes)
  with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 4])
    y = tf1.placeholder(tf.int64, [None])
    fetches, train = _model(x, y)
    with tb.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf1.global_variables_initializer())
      got, _ = sess.run([fetches, train], {x: X[:rows], y: Y[:rows]})
  _assert_merged(got, expected, rows)
  # With a mean loss, the shard-weighted mean is the whole batch's value.
  whole = _per_shard([(X[:rows], Y[:rows])])[0]
  for name in MEANS:
    np.testing.assert_allclose(got[name], whole[name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("hard_coded", [False, True])
def test_pipeline_elements_concatenate_per_example_fetches(hard_coded):
  # A fixed-batch pipeline: each replica takes an element of 4 rows of its
  # own, the weight's first dimension again.
  elements = [(X[i:i + ELEMENT], Y[i:i + ELEMENT])
              for i in range(0, 16, ELEMENT)]
  expected = _expected(_per_shard(elements, hard_coded), [ELEMENT] * 4)
  with tf.Graph().as_default():
    data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(
        ELEMENT, drop_remainder=True)
    x, y = tf1.data.make_one_shot_iterator(data).get_next()
    assert x.shape.as_list() == [ELEMENT, 4]
    fetches, train = _model(x, y, hard_coded)
    with tb.TensorBowSession(replicas=REPLICAS) as sess:
      sess.run(tf1.global_variables_initializer())
      got, rows, _ = sess.run([fetches, x, train])
  # The wave's elements, fetched whole: in replica order.
  np.testing.assert_array_equal(rows, X)
  _assert_merged(got, expected, 16)


def test_one_replica_fetches_what_tensorflow_fetches():
  batches = [(X[i:i + 6], Y[i:i + 6]) for i in (0, 5, 10)]
  with tf.Graph().as_default() as graph:
    x = tf1.placeholder(tf.float32, [None, 4])
    y = tf1.placeholder(tf.int64, [None])
    fetches, train = _model(x, y)
    init = tf1.global_variables_initializer()
    variables = tf1.global_variables()
  results = []
  for session in (tf1.Session(graph=graph),
                  tb.TensorBowSession(graph=graph, replicas=1)):
    with session as sess:
      sess.run(init)
      runs = [sess.run([fetches, train], {x: xs, y: ys})[0]
              for xs, ys in batches]
      results.append((runs, sess.run(variables)))
  (want_runs, want_vars), (got_runs, got_vars) = results
  for want, got in zip(want_runs, got_runs):
    for name in want:
      assert np.shape(got[name]) == np.shape(want[name]), name
      assert np.asarray(got[name]).dtype == np.asarray(want[name]).dtype
      np.testing.assert_allclose(got[name], want[name], rtol=1e-6,
                                 atol=1e-7, err_msg=name)
  for want, got in zip(want_vars, got_vars):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
