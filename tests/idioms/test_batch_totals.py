"""Idioms: what leaves the replicas is the whole batch's (DESIGN.md, "What
leaves the replicas"; issue #60): streaming metrics updated in the
training run, counters of rows and steps, fetched sums, counts, maxima
and means, `confusion_matrix` and `gather_nd`.

Besides the corpus' L = 1 tiers, two checks at L > 1:
* the first wave at L = 2 and 4, where every replica starts from the
  central model: every fetched value and every variable that is not
  trained equals `tf.compat.v1.Session`'s on the whole batch (floats to
  1e-5 relative, integers exactly);
* five waves of 10 rows at L = 4: each variable that counts rows or
  steps holds what TensorFlow's does, exactly (the weights do not change
  a count).
"""
import numpy as np
import pytest
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
metrics = tf.compat.v1.metrics
CORPUS = harness.Corpus()
CLASSES = 3
ROWS = 10  # a batch: shards of 3, 3, 2 and 2 rows at L = 4
# Per idiom, name parts of the variables that count rows or steps.
COUNTS = {}
WHY_NOT_SMA = ("checked against the contract's first-wave equality and "
               "its counts below: the SMA reference averages every "
               "variable that is not trained")


def _classifier(name="clf"):
  """A linear softmax classifier on [None, 4] rows and CLASSES labels:
  (x, labels, logits, predictions, loss, feed of ROWS rows for run i)."""
  x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
  labels = tf.compat.v1.placeholder(tf.int64, [None], name="labels")
  logits = harness.dense(x, CLASSES, name)
  predictions = tf.argmax(logits, 1)
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits))

  def feed(i):
    rng = np.random.RandomState(i)
    return {x: rng.randn(ROWS, 4).astype(np.float32),
            labels: rng.randint(0, CLASSES, ROWS).astype(np.int64)}

  return x, labels, logits, predictions, loss, feed


def _idiom(counts=()):
  """Registers an idiom whose variables named by `counts` count rows."""
  def register(fn):
    COUNTS[fn.__name__] = tuple(counts)
    return CORPUS.idiom(fn, l4=WHY_NOT_SMA)
  return register


@_idiom(counts=("/count",))
def accuracy_updated_in_training():
  """metrics.accuracy's update op run with the train op, the usual
  TF1 estimator-less loop."""
  _, labels, _, predictions, loss, feed = _classifier()
  _, update = metrics.accuracy(labels, predictions, name="accuracy")
  op = train.GradientDescentOptimizer(0.5).minimize(loss)
  return Case([loss, update, op], feed, runs=5)


@_idiom(counts=("/count",))
def mean_of_a_per_example_loss():
  x, labels, logits, _, _, feed = _classifier()
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                          logits=logits)
  _, update = metrics.mean(losses, name="mean")
  op = train.AdamOptimizer(0.05).minimize(tf.reduce_mean(losses))
  del x
  return Case([update, op], feed, runs=5)


@_idiom()
def precision_recall_true_positives():
  _, labels, _, predictions, loss, feed = _classifier()
  positive = tf.equal(labels, 1)
  predicted = tf.equal(predictions, 1)
  updates = [metrics.precision(positive, predicted, name="precision")[1],
             metrics.recall(positive, predicted, name="recall")[1],
             metrics.true_positives(positive, predicted, name="tp")[1]]
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  return Case(updates + [op], feed, runs=5)


@_idiom()
def mean_iou_through_a_confusion_matrix():
  _, labels, _, predictions, loss, feed = _classifier()
  _, update = metrics.mean_iou(labels, predictions, CLASSES, name="iou")
  matrix = tf.math.confusion_matrix(labels, predictions, CLASSES)
  op = train.GradientDescentOptimizer(0.5).minimize(loss)
  return Case([update, matrix, op], feed, runs=5)


@_idiom(counts=("seen_", "steps"))
def counters_of_rows_and_steps():
  """Counters of rows in four dtypes and of steps, grouped with the
  train op."""
  x, _, _, _, loss, feed = _classifier()
  adds = []
  for dtype in (tf.int32, tf.int64, tf.float32, tf.float64):
    seen = tf.compat.v1.get_variable(
        f"seen_{dtype.name}", [], dtype, trainable=False,
        initializer=tf.zeros_initializer())
    adds.append(seen.assign_add(tf.cast(tf.shape(x)[0], dtype)))
  steps = tf.compat.v1.get_variable("steps", [], tf.int64, trainable=False,
                                    initializer=tf.zeros_initializer())
  adds.append(steps.assign_add(1))
  op = tf.group(train.GradientDescentOptimizer(0.5).minimize(loss), *adds)
  return Case([loss, op], feed, runs=5)


@_idiom(counts=("seen", "steps"))
def counters_a_user_optimizers_step_waits_for():
  """Counters under `tf.control_dependencies` around a user optimizer's
  minimize: its `assign_sub` steps wait for them, yet they are no slots
  of it (they counted 1/L when taken for its slots)."""
  x, _, _, _, loss, feed = _classifier()
  seen = tf.compat.v1.get_variable("seen", [], tf.int64, trainable=False,
                                   initializer=tf.zeros_initializer())
  steps = tf.compat.v1.get_variable("steps", [], tf.float32,
                                    trainable=False,
                                    initializer=tf.zeros_initializer())
  adds = [seen.assign_add(tf.cast(tf.shape(x)[0], tf.int64)),
          steps.assign_add(1.0)]
  with tf.control_dependencies(adds):
    op = harness.UserOptimizer(0.5, "assign_sub").minimize(loss)
  return Case([loss, op], feed, runs=5)


@_idiom(counts=("/count",))
def counts_through_a_while_loop():
  """A classifier whose features pass a tf.while_loop applying a weight
  twice, fetching a count of correct rows and updating a mean: under
  control flow v2 the loop's gradient adds its accumulators to the
  forward loop, which made the loop's outputs look like a gradient's
  (counts were replica 0's)."""
  x, labels, _, _, _, feed = _classifier()
  h = harness.looped(x, 4)
  logits = harness.dense(h, CLASSES, "out")
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                          logits=logits)
  correct = tf.reduce_sum(tf.cast(
      tf.equal(tf.argmax(logits, 1), labels), tf.int32))
  _, update = metrics.mean(losses, name="mean")
  op = train.GradientDescentOptimizer(0.5).minimize(tf.reduce_mean(losses))
  return Case([correct, update, op], feed, runs=5)


@_idiom()
def hand_written_sum_of_losses():
  """A running total of the batch's summed loss, by assign_add."""
  _, labels, logits, _, loss, feed = _classifier()
  total = tf.compat.v1.get_variable("total_loss", [], trainable=False,
                                    initializer=tf.zeros_initializer())
  summed = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits))
  op = tf.group(train.GradientDescentOptimizer(0.5).minimize(loss),
                total.assign_add(summed))
  return Case([loss, op], feed, runs=5)


@_idiom()
def fetched_sums_counts_maxima_and_means():
  x, labels, logits, predictions, loss, feed = _classifier()
  correct = tf.equal(predictions, labels)
  fetches = {
      "correct": tf.reduce_sum(tf.cast(correct, tf.int32)),
      "correct_float": tf.reduce_sum(tf.cast(correct, tf.float32)),
      "rows": tf.size(labels),
      "count_nonzero": tf.math.count_nonzero(predictions),
      "max": tf.reduce_max(logits),
      "min_per_class": tf.reduce_min(logits, axis=0),
      "summed_rows": tf.reduce_sum(x, axis=0),
      "accuracy": tf.reduce_mean(tf.cast(correct, tf.float32)),
      "loss": loss,
      "correct_rows": tf.where(correct)}
  op = train.GradientDescentOptimizer(0.5).minimize(loss)
  return Case([fetches, op], feed, runs=5)


@_idiom()
def summaries_of_a_mean_and_a_count():
  """A merged summary of the loss and of the count of correct rows."""
  _, labels, _, predictions, loss, feed = _classifier()
  correct = tf.reduce_sum(tf.cast(tf.equal(predictions, labels), tf.float32))
  summary = tf.compat.v1.summary.merge([
      tf.compat.v1.summary.scalar("loss", loss),
      tf.compat.v1.summary.scalar("correct", correct)])
  op = train.GradientDescentOptimizer(0.5).minimize(loss)
  return Case([summary, op], feed, runs=5)


@_idiom()
def gather_nd_of_the_labels_logits():
  """The loss picks each row's logit with gather_nd, whose gradient is
  a ScatterNd (a pure op: no write)."""
  x, labels, logits, _, _, feed = _classifier()
  rows = tf.range(tf.shape(labels, out_type=tf.int64)[0])
  picked = tf.gather_nd(logits, tf.stack([rows, labels], 1))
  loss = tf.reduce_mean(tf.reduce_logsumexp(logits, 1) - picked)
  op = train.GradientDescentOptimizer(0.5).minimize(loss)
  del x
  return Case([loss, op], feed, runs=5)


test_one_replica, test_reference_kernels, _ = CORPUS.tests()


def _is_optimizers(name, trainable):
  """Whether variable `name` is an optimizer's: a slot (named below its
  variable) or its per-step state (Adam's beta powers), which the
  contract leaves out (the replicas' mean, as their gradients are)."""
  return (any(name.startswith(t[:-len(":0")] + "/") for t in trainable) or
          "_power" in name)


def _run(idiom, make_session, runs):
  """(fetched values of each of `runs` runs, {variable: value} of the
  variables that are neither trainable nor an optimizer's, at the end)."""
  graph, case, init = harness.build(idiom)
  with graph.as_default():
    trainable = set(v.name for v in tf.compat.v1.trainable_variables())
    others = [v for v in (tf.compat.v1.global_variables() +
                          tf.compat.v1.local_variables())
              if v.name not in trainable and
              not _is_optimizers(v.name, trainable)]
  with make_session(graph) as sess:
    sess.run(init)
    fetched = [sess.run(case.fetches_at(i), case.feed_at(i))
               for i in range(runs)]
    values = sess.run([v.value() for v in others])
  return fetched, dict(zip([v.name for v in others], values))


def _assert_equal(actual, expected, what):
  if isinstance(expected, bytes):  # a Summary: its numbers, to tolerance
    actual = harness.summary_values(actual)
    expected = harness.summary_values(expected)
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
  assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
  if np.issubdtype(expected.dtype, np.inexact):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6,
                               err_msg=what)
  else:
    np.testing.assert_array_equal(actual, expected, err_msg=what)


@pytest.mark.slow
@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("idiom", CORPUS.params("first_wave"))
def test_the_first_wave_at_two_and_four_replicas_is_the_whole_batchs(
    idiom, replicas):
  expected_runs, expected_vars = _run(idiom, harness.tf_session, 1)
  actual_runs, actual_vars = _run(idiom, harness.tb_session(replicas), 1)
  for k, (a, e) in enumerate(zip(tf.nest.flatten(actual_runs[0]),
                                 tf.nest.flatten(expected_runs[0]))):
    if e is None:  # an operation
      assert a is None
      continue
    _assert_equal(a, e, f"fetch {k}")
  assert sorted(actual_vars) == sorted(expected_vars)
  for name, value in expected_vars.items():
    _assert_equal(actual_vars[name], value, f"variable {name}")


@pytest.mark.parametrize("idiom", [
    i for i in CORPUS.params("counts") if COUNTS[i.values[0].name]])
def test_counts_over_waves_at_four_replicas_count_every_row(idiom):
  _, expected = _run(idiom, harness.tf_session, 5)
  _, actual = _run(idiom, harness.tb_session(4), 5)
  parts = COUNTS[idiom.name]
  counted = [n for n in expected if any(p in n for p in parts)]
  assert counted, parts
  for name in counted:
    _assert_equal(actual[name], expected[name], f"variable {name}")
