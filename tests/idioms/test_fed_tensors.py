"""Idioms: tensors a script feeds in some training runs and not in others
(issue #59): `placeholder_with_default` hyper-parameters, a fed
intermediate tensor, a default that is itself an input. What a run reads
must follow what it feeds, whatever earlier runs fed."""
import numpy as np
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
CORPUS = harness.Corpus()
RUNS = 6


def _sometimes(feed, extra, runs):
  """`feed(i)` plus `extra(i)` in the runs of `runs`."""
  return lambda i: {**feed(i), **(extra(i) if i in runs else {})}


@CORPUS.idiom
def fed_default_loss_scale():
  """A loss scale with a default, fed 0 in some runs: those take no step
  (the issue's first case)."""
  loss, feed = harness.mlp_loss()
  scale = tf.compat.v1.placeholder_with_default(1.0, [], name="scale")
  scaled = scale * loss
  op = train.GradientDescentOptimizer(0.1).minimize(scaled)
  return Case([scaled, op], _sometimes(feed, lambda i: {scale: 0.0}, (1, 3)),
              runs=RUNS)


@CORPUS.idiom
def fed_default_learning_rate():
  """A learning rate with a default, fed in some runs (0, then a larger
  one), as schedules written by hand do."""
  loss, feed = harness.mlp_loss()
  rate = tf.compat.v1.placeholder_with_default(0.05, [], name="rate")
  op = train.MomentumOptimizer(rate, 0.9).minimize(loss)
  rates = {2: 0.0, 3: 0.0, 5: 0.2}
  return Case([loss, op],
              _sometimes(feed, lambda i: {rate: rates[i]}, rates), runs=RUNS)


@CORPUS.idiom
def fed_default_first_then_not():
  """The default fed in the first run, left alone after it: the copy made
  for the first run must not keep reading the feed."""
  loss, feed = harness.mlp_loss()
  keep = tf.compat.v1.placeholder_with_default(1.0, [], name="keep")
  op = train.AdamOptimizer(0.01).minimize(keep * loss)
  return Case([loss, op], _sometimes(feed, lambda i: {keep: 0.5}, (0, 4)),
              runs=RUNS)


@CORPUS.idiom
def fed_hidden_layer():
  """A hidden layer's output fed in some training runs (its layer then
  gets the gradient at the fed values): a fed tensor that is no
  placeholder."""
  x, y, feed = harness.regression_inputs()
  hidden = harness.dense(x, 3, "hidden", tf.tanh)
  loss = tf.reduce_mean(tf.square(harness.dense(hidden, 1, "out") - y))
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  fed = lambda i: {hidden: np.tanh(harness.data(i, (harness.BATCH, 3), 2))}
  return Case([loss, op], _sometimes(feed, fed, (1, 2, 4)), runs=RUNS)


@CORPUS.idiom
def fed_default_over_an_input():
  """Inputs read through `placeholder_with_default(x)`: some runs feed the
  default's own placeholder, others the defaulted tensor."""
  x_in = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x_in")
  x = tf.compat.v1.placeholder_with_default(x_in, [None, 4], name="x")
  y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
  loss = tf.reduce_mean(tf.square(harness.mlp(x) - y))
  op = train.GradientDescentOptimizer(0.1).minimize(loss)

  def feed(i):
    rows = harness.data(i, (harness.BATCH, 4))
    return {x if i % 2 else x_in: rows,
            y: harness.data(i, (harness.BATCH, 1), 1)}

  return Case([loss, op], feed, runs=RUNS)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
