"""Idioms of input and state: an epoch's short last batch, tf.data
pipelines, a Saver's save and restore between training runs."""
import tempfile

import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
CORPUS = harness.Corpus()

# The reference shards feeds; a pipeline's batch reaches the replicas
# inside the graph (tests/test_input_pipelines.py and
# test_partial_batches.py check pipelines at L > 1 against NumPy).
PIPELINE_L4 = "the L = 4 reference shards feeds only, not a pipeline's batch"


def _rows(i, rows):
  """Inputs x [rows, 4], y [rows, 1] for run i."""
  return harness.data(i, (rows, 4)), harness.data(i, (rows, 1), 1)


def _short_last_batch(optimizer):
  """Runs of 8, 8, 2 (an epoch's end: fewer rows than L = 4) and 8 rows."""
  x, y, _ = harness.regression_inputs()
  loss = tf.reduce_mean(tf.square(harness.mlp(x) - y))
  op = optimizer().minimize(
      loss, global_step=train.get_or_create_global_step())

  def feed(i):
    xs, ys = _rows(i, 2 if i == 2 else harness.BATCH)
    return {x: xs, y: ys}
  return Case([loss, op], feed, runs=4, single=("global_step",))


@CORPUS.idiom
def short_last_batch_momentum():
  return _short_last_batch(lambda: train.MomentumOptimizer(0.1, 0.9))


@CORPUS.idiom
def short_last_batch_decayed_rate():
  """A learning rate decayed by the global step, which a replica sitting
  out a wave must still see advance."""
  def optimizer():
    rate = train.exponential_decay(0.2, train.get_or_create_global_step(),
                                   1, 0.5)
    return train.GradientDescentOptimizer(rate)
  return _short_last_batch(optimizer)


def _dataset(rows):
  xs, ys = _rows(0, rows)
  return tf.compat.v1.data.Dataset.from_tensor_slices((xs, ys))


@CORPUS.idiom(l4=PIPELINE_L4)
def dataset_with_short_last_batch():
  """18 examples in batches of 8: the third run trains on 2."""
  iterator = tf.compat.v1.data.make_one_shot_iterator(
      _dataset(18).batch(harness.BATCH))
  x, y = iterator.get_next()
  loss = tf.reduce_mean(tf.square(harness.mlp(x) - y))
  return Case([loss, train.AdamOptimizer(0.01).minimize(loss)])


@CORPUS.idiom(l4=PIPELINE_L4)
def dataset_shuffled_repeated_initializable():
  """A seeded shuffle, repeated, from an initializable iterator that a
  plain run initializes."""
  dataset = _dataset(12).shuffle(12, seed=3).repeat().batch(harness.BATCH)
  iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
  x, y = iterator.get_next()
  loss = tf.reduce_mean(tf.square(harness.mlp(x) - y))
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case(lambda i: iterator.initializer if i == 0 else [loss, op],
              runs=4, plain=(0,))


@CORPUS.idiom(l4="a restore loads the replicas' own saved state "
              "(.tensorbow.npz), which the reference does not model; "
              "tests/test_session.py checks resuming at L > 1")
def saver_save_and_restore_between_runs():
  """Train, save (a plain run of the Saver's save op), train, restore the
  saved model (a plain run), train again."""
  loss, feed = harness.mlp_loss()
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  saver = train.Saver()
  path = tempfile.mkdtemp(prefix="tensorbow_idiom_") + "/model"
  filename = saver.saver_def.filename_tensor_name
  runs = {1: saver.saver_def.save_tensor_name.split(":")[0],
          3: saver.saver_def.restore_op_name}

  def fetches(i):
    return runs.get(i, [loss, op])

  def feeds(i):
    return {filename: path} if i in runs else feed(i)
  return Case(fetches, feeds, runs=5, plain=(1, 3))


test_one_replica, test_reference_kernels, test_four_replicas = (
    CORPUS.tests())

