"""Idioms: state beside the model that a training run writes or reads:
moving averages, batch norm's statistics, assignments, regularization
collections, summaries, dropout."""
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
GraphKeys = tf.compat.v1.GraphKeys
CORPUS = harness.Corpus()

@CORPUS.idiom
def moving_average_before_step():
  loss, feed = harness.mlp_loss()
  ema = train.ExponentialMovingAverage(0.5)
  average = ema.apply(tf.compat.v1.trainable_variables())
  with tf.control_dependencies([average]):
    op = train.GradientDescentOptimizer(0.1).minimize(loss)
  # The shadows average weights from before the step: no batch feed.
  return Case([loss, op], feed, single=("ExponentialMovingAverage",))


@CORPUS.idiom
def moving_average_after_step():
  """ExponentialMovingAverage's docstring: the average after the step."""
  loss, feed = harness.mlp_loss()
  step = train.GradientDescentOptimizer(0.1).minimize(loss)
  ema = train.ExponentialMovingAverage(0.5)
  with tf.control_dependencies([step]):
    op = ema.apply(tf.compat.v1.trainable_variables())
  return Case([loss, op], feed, step=[loss, step])


@CORPUS.idiom
def moving_average_num_updates_group():
  """The average after an Adam step, its decay from the global step, the
  two grouped into one train op."""
  loss, feed = harness.mlp_loss()
  step = train.get_or_create_global_step()
  minimize = train.AdamOptimizer(0.01).minimize(loss, global_step=step)
  ema = train.ExponentialMovingAverage(0.9, num_updates=step)
  with tf.control_dependencies([minimize]):
    op = tf.group(ema.apply(tf.compat.v1.trainable_variables()))
  return Case([loss, op], feed, step=[loss, minimize])


def batch_norm(h, name, decay=0.9):
  """Batch norm written by hand: batch moments in training, moving
  statistics kept by ops in UPDATE_OPS."""
  with tf.compat.v1.variable_scope(name):
    gamma, beta, moving_mean, moving_var = harness.batch_norm_variables(
        h.shape[-1])
    mean, var = tf.nn.moments(h, [0])
    from tensorflow.python.training import moving_averages  # pylint: disable=g-import-not-at-top
    for update in (
        moving_averages.assign_moving_average(moving_mean, mean, decay),
        moving_averages.assign_moving_average(moving_var, var, decay)):
      tf.compat.v1.add_to_collection(GraphKeys.UPDATE_OPS, update)
    return tf.nn.batch_normalization(h, mean, var, beta, gamma, 1e-3)


@CORPUS.idiom
def batch_norm_update_ops():
  x, y, feed = harness.regression_inputs()
  h = tf.nn.relu(batch_norm(harness.dense(x, 3, "hidden"), "bn"))
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  with tf.control_dependencies(
      tf.compat.v1.get_collection(GraphKeys.UPDATE_OPS)):
    op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def counter_assign_add():
  """A counter of examples seen, added to in every training run."""
  loss, feed = harness.mlp_loss()
  seen = tf.compat.v1.get_variable(
      "examples_seen", [], tf.int64, initializer=tf.zeros_initializer(),
      trainable=False)
  op = tf.group(train.GradientDescentOptimizer(0.1).minimize(loss),
                tf.compat.v1.assign_add(seen, 8))
  return Case([loss, op], feed)


@CORPUS.idiom
def weight_clip_after_step():
  """WGAN's critic: weights clipped by an assign after every step."""
  loss, feed = harness.mlp_loss()
  step = train.RMSPropOptimizer(0.05).minimize(loss)
  with tf.control_dependencies([step]):
    op = tf.group([tf.compat.v1.assign(v, tf.clip_by_value(v, -0.3, 0.3))
                   for v in tf.compat.v1.trainable_variables()])
  return Case([loss, op], feed, step=[loss, step])


@CORPUS.idiom
def assign_between_training_runs():
  """A plain run assigns the output bias between training runs."""
  loss, feed = harness.mlp_loss()
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  bias = [v for v in tf.compat.v1.trainable_variables()
          if v.op.name == "mlp/out/b"][0]
  reset = tf.compat.v1.assign(bias, [0.25])
  return Case(lambda i: reset if i == 1 else [loss, op], feed, runs=4,
              plain=(1,))


@CORPUS.idiom
def regularizer_collection():
  """l2 through get_variable(regularizer=) and get_regularization_loss."""
  loss, feed = harness.mlp_loss(
      regularizer=lambda w: 0.01 * tf.nn.l2_loss(w))
  total = loss + tf.compat.v1.losses.get_regularization_loss()
  op = train.AdamOptimizer(0.01).minimize(total)
  return Case([total, op], feed)


@CORPUS.idiom
def regularization_losses_added():
  """l2 of every weight added to REGULARIZATION_LOSSES by hand."""
  loss, feed = harness.mlp_loss()
  for v in tf.compat.v1.trainable_variables():
    if v.op.name.endswith("/w"):
      tf.compat.v1.add_to_collection(GraphKeys.REGULARIZATION_LOSSES,
                                     0.01 * tf.nn.l2_loss(v))
  total = tf.add_n(
      [loss] + tf.compat.v1.get_collection(GraphKeys.REGULARIZATION_LOSSES))
  op = train.GradientDescentOptimizer(0.1).minimize(total)
  return Case([total, op], feed)


@CORPUS.idiom
def summaries_with_training():
  x, y, feed = harness.regression_inputs()
  h = harness.dense(x, 3, "hidden", tf.tanh)
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  tf.compat.v1.summary.scalar("loss", loss)
  # Of an activation: a histogram of a weight the run updates would race
  # with the step in TensorFlow too.
  tf.compat.v1.summary.histogram("hidden", h)
  summary = tf.compat.v1.summary.merge_all()
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op, summary], feed)


def dropout_loss(seed):
  x, y, feed = harness.regression_inputs()
  h = harness.dense(x, 6, "hidden", tf.nn.relu)
  h = tf.nn.dropout(h, rate=0.5, seed=seed)
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  return loss, feed


@CORPUS.idiom(l4="replicas draw their own dropout masks")
def dropout_seeded():
  loss, feed = dropout_loss(seed=3)
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom(seeded=False, l4="unseeded: no reference")
def dropout_unseeded():
  loss, feed = dropout_loss(seed=None)
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], feed)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
