"""Idioms: control flow and sequence models in the graph, embeddings, and
several train ops in one graph."""
import pytest
import tensorflow as tf

from idioms import harness
from idioms.harness import BATCH, Case

train = tf.compat.v1.train
CORPUS = harness.Corpus()


@CORPUS.idiom
def cond_on_fed_flag():
  """A training flag fed as a scalar bool picks the branch."""
  x, y, feed = harness.regression_inputs()
  training = tf.compat.v1.placeholder(tf.bool, [], name="training")
  h = harness.dense(x, 3, "hidden", tf.tanh)
  h = tf.cond(training, lambda: h * 0.5, lambda: h)
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], lambda i: {**feed(i), training: i != 1})


@CORPUS.idiom
def cond_beside_update_ops():
  """A v1 cond in the model, a flag left at its default, and the train op
  under control_dependencies(UPDATE_OPS) holding a running mean written
  before the cond (issue #63): the gradient's conditional must not hand
  a tensor of the branch not taken from the computation to the commit."""
  x, y, feed = harness.regression_inputs()
  training = tf.compat.v1.placeholder_with_default(True, [], name="training")
  h = harness.dense(x, 3, "hidden", tf.nn.relu)
  mean = tf.compat.v1.get_variable("running_mean", [3], trainable=False,
                                   initializer=tf.zeros_initializer())
  tf.compat.v1.add_to_collection(
      tf.compat.v1.GraphKeys.UPDATE_OPS,
      tf.compat.v1.assign(mean, 0.9 * mean + 0.1 * tf.reduce_mean(h, 0)))
  h = tf.cond(training, lambda: h * 2.0, lambda: h)
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  with tf.control_dependencies(
      tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
    op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], feed)


def batch_norm_switched(h, name, training, decay=0.9):
  """Batch norm under an `is_training` flag, as TF1 scripts write it by
  hand: in the true branch the batch's moments and two assigns of the
  moving statistics (non-trainable variables) the moments wait on; in the
  false branch the moving statistics."""
  with tf.compat.v1.variable_scope(name):
    gamma, beta, moving_mean, moving_var = harness.batch_norm_variables(
        h.shape[-1])

    def batch_moments():
      mean, var = tf.nn.moments(h, [0])
      with tf.control_dependencies([
          tf.compat.v1.assign(moving_mean,
                              decay * moving_mean + (1 - decay) * mean),
          tf.compat.v1.assign(moving_var,
                              decay * moving_var + (1 - decay) * var)]):
        return tf.identity(mean), tf.identity(var)

    mean, var = tf.cond(
        training, batch_moments,
        lambda: (tf.identity(moving_mean), tf.identity(moving_var)))
    return tf.nn.batch_normalization(h, mean, var, beta, gamma, 1e-3)


def is_training_batch_norm_model(checked=tf.identity):
  """A dense layer, batch norm switched by `is_training`
  (placeholder_with_default(True)), a read-out; the input passes through
  `checked` first. Returns (loss, is_training, feed)."""
  x, y, feed = harness.regression_inputs()
  training = tf.compat.v1.placeholder_with_default(True, [],
                                                   name="is_training")
  h = harness.dense(checked(x), 3, "hidden")
  h = tf.nn.relu(batch_norm_switched(h, "bn", training))
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  return loss, training, feed


@CORPUS.idiom
def batch_norm_is_training():
  """Batch norm under an `is_training` flag (issue #63): training runs
  leave the flag at its default, True, and write the moving statistics in
  the cond's branch (each replica its own, the central value their mean);
  evaluation runs, fed False, are plain runs that read them."""
  loss, training, feed = is_training_batch_norm_model()
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)

  def feed_at(i):
    return {**feed(i), training: False} if i in (2, 4) else feed(i)
  return Case(lambda i: loss if i in (2, 4) else [loss, op], feed_at,
              runs=5, plain=(2, 4))


def layers_batch_norm(h, name, training, decay=0.9):
  """Batch norm as TF1's `tf.layers.batch_normalization(training=<tensor>)`
  builds it: the output picks batch or moving moments by one cond, each
  moving statistic's update is a cond of its own (the assign in the true
  branch, the variable in the false) put in UPDATE_OPS."""
  from tensorflow.python.training import moving_averages  # pylint: disable=g-import-not-at-top
  with tf.compat.v1.variable_scope(name):
    gamma, beta, *moving = harness.batch_norm_variables(h.shape[-1])
    moments = tf.nn.moments(h, [0])
    mean, var = tf.cond(training, lambda: list(moments),
                        lambda: [tf.identity(v) for v in moving])
    for variable, value in zip(moving, moments):
      update = tf.cond(
          training,
          lambda v=variable, m=value: moving_averages.assign_moving_average(
              v, m, decay, zero_debias=False),
          lambda v=variable: tf.identity(v))
      tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS,
                                     update)
    return tf.nn.batch_normalization(h, mean, var, beta, gamma, 1e-3)


@CORPUS.idiom
def layers_batch_norm_update_ops():
  """tf.layers' batch norm under `is_training`, the step under
  control_dependencies(UPDATE_OPS): the collection holds the conds whose
  true branches write the moving statistics."""
  x, y, feed = harness.regression_inputs()
  training = tf.compat.v1.placeholder_with_default(True, [],
                                                   name="is_training")
  h = tf.nn.relu(layers_batch_norm(harness.dense(x, 3, "hidden"), "bn",
                                   training))
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  with tf.control_dependencies(
      tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
    op = train.AdamOptimizer(0.01).minimize(loss)

  def feed_at(i):
    return {**feed(i), training: False} if i == 3 else feed(i)
  return Case(lambda i: loss if i == 3 else [loss, op], feed_at, runs=4,
              plain=(3,))


@CORPUS.idiom
def batch_norm_frozen_statistics():
  """Fine-tuning with batch norm frozen: training runs feed `is_training`
  False, so no replica's branch writes the moving statistics, which stay
  the user's; the step trains on them."""
  loss, training, feed = is_training_batch_norm_model()
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], lambda i: {**feed(i), training: i == 0})


@CORPUS.idiom
def cond_on_data():
  """A branch chosen by the batch's values: a Huber-like loss."""
  x, y, feed = harness.regression_inputs()
  err = tf.reduce_mean(tf.abs(harness.mlp(x) - y))
  loss = tf.cond(err < 1.0, lambda: 0.5 * tf.square(err), lambda: err - 0.5)
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def while_loop_layer():
  """One shared layer applied three times by tf.while_loop."""
  x, y, feed = harness.regression_inputs()
  w = tf.compat.v1.get_variable(
      "shared/w", [4, 4],
      initializer=tf.compat.v1.orthogonal_initializer(0.5, seed=1))
  _, h = tf.while_loop(lambda i, h: i < 3,
                       lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w))),
                       [tf.constant(0), x])
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  op = train.AdamOptimizer(0.01).minimize(loss)
  return Case([loss, op], feed)


def sequences(steps=5, depth=3):
  """A batch of sequences [None, steps, depth] and targets [None, 1]."""
  x = tf.compat.v1.placeholder(tf.float32, [None, steps, depth], name="seq")
  y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="target")
  return x, y, lambda i: {x: harness.data(i, (BATCH, steps, depth)),
                          y: harness.data(i, (BATCH, 1), 1)}


class MinimalRNNCell(object):
  """An Elman cell: what tf.compat.v1.nn.dynamic_rnn needs of a cell
  (output_size, state_size, zero_state, __call__), Keras 3 having taken
  tf.nn.rnn_cell's."""

  def __init__(self, units):
    self._units = units

  @property
  def state_size(self):
    return self._units

  @property
  def output_size(self):
    return self._units

  def zero_state(self, batch_size, dtype):
    return tf.zeros([batch_size, self._units], dtype)

  def __call__(self, inputs, state, scope=None):
    with tf.compat.v1.variable_scope(scope or "minimal_rnn_cell",
                                     reuse=tf.compat.v1.AUTO_REUSE):
      w = tf.compat.v1.get_variable(
          "kernel", [inputs.shape[-1] + self._units, self._units],
          initializer=tf.compat.v1.glorot_uniform_initializer(seed=2))
      b = tf.compat.v1.get_variable("bias", [self._units],
                                    initializer=tf.zeros_initializer())
      out = tf.tanh(tf.matmul(tf.concat([inputs, state], 1), w) + b)
    return out, out


@CORPUS.idiom
def dynamic_rnn_cell():
  x, y, feed = sequences()
  _, state = tf.compat.v1.nn.dynamic_rnn(MinimalRNNCell(4), x,
                                         dtype=tf.float32)
  loss = tf.reduce_mean(tf.square(harness.dense(state, 1, "out") - y))
  op = train.AdamOptimizer(0.01).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def scan_rnn():
  """An Elman RNN by tf.scan over time."""
  x, y, feed = sequences()
  w = tf.compat.v1.get_variable(
      "rnn/w", [3 + 4, 4],
      initializer=tf.compat.v1.glorot_uniform_initializer(seed=3))
  states = tf.scan(
      lambda h, xt: tf.tanh(tf.matmul(tf.concat([xt, h], 1), w)),
      tf.transpose(x, [1, 0, 2]), initializer=tf.zeros([tf.shape(x)[0], 4]))
  loss = tf.reduce_mean(tf.square(harness.dense(states[-1], 1, "out") - y))
  op = train.RMSPropOptimizer(0.01).minimize(loss)
  return Case([loss, op], feed)


def embedding_model(optimizer):
  """Ids [None, 3] looked up in a 10 x 4 table (IndexedSlices gradients),
  summed, then a linear read-out."""
  ids = tf.compat.v1.placeholder(tf.int32, [None, 3], name="ids")
  y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
  table = tf.compat.v1.get_variable(
      "embedding", [10, 4],
      initializer=tf.compat.v1.random_normal_initializer(seed=4))
  h = tf.reduce_sum(tf.nn.embedding_lookup(table, ids), 1)
  loss = tf.reduce_mean(tf.square(harness.dense(h, 1, "out") - y))
  op = optimizer.minimize(loss)

  def feed(i):
    rng = harness.np.random.RandomState(i)
    return {ids: rng.randint(0, 10, (BATCH, 3)).astype("int32"),
            y: harness.data(i, (BATCH, 1), 1)}
  return Case([loss, op], feed)


@CORPUS.idiom
def embedding_sgd():
  return embedding_model(train.GradientDescentOptimizer(0.1))


@CORPUS.idiom
def embedding_adam():
  return embedding_model(train.AdamOptimizer(0.01))


@CORPUS.idiom
def embedding_adagrad():
  return embedding_model(train.AdagradOptimizer(0.1))


@CORPUS.idiom
def two_optimizers_alternating():
  """Disjoint var lists, each with its own optimizer, run in turn."""
  loss, feed = harness.mlp_loss()
  hidden = tf.compat.v1.trainable_variables("mlp/hidden")
  out = tf.compat.v1.trainable_variables("mlp/out")
  first = train.AdamOptimizer(0.01).minimize(loss, var_list=hidden)
  second = train.GradientDescentOptimizer(0.1).minimize(loss, var_list=out)
  return Case(lambda i: [loss, second if i % 2 else first], feed, runs=4)


@CORPUS.idiom
def two_train_ops_one_run():
  """Two optimizers' steps grouped into one run, every gradient taken
  before either step: with `tf.group(a.minimize(l), b.minimize(l))` alone
  one step's backward pass races with the other's update (TensorFlow's
  own results then vary from session to session)."""
  loss, feed = harness.mlp_loss()
  hidden = tf.compat.v1.trainable_variables("mlp/hidden")
  out = tf.compat.v1.trainable_variables("mlp/out")
  first = train.MomentumOptimizer(0.1, 0.9)
  second = train.GradientDescentOptimizer(0.1)
  grads = [first.compute_gradients(loss, hidden),
           second.compute_gradients(loss, out)]
  with tf.control_dependencies([g for pairs in grads for g, _ in pairs]):
    op = tf.group(first.apply_gradients(grads[0]),
                  second.apply_gradients(grads[1]))
  return Case([loss, op], feed)


@CORPUS.idiom
def gan_pair():
  """A generator and a discriminator, each with its own Adam, the
  discriminator step then the generator step."""
  x, _, feed_x = harness.regression_inputs()
  z = tf.compat.v1.placeholder(tf.float32, [None, 2], name="z")
  fake = harness.dense(z, 4, "generator")
  real_logit = harness.mlp(x, "discriminator")
  with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                   reuse=True):
    fake_logit = harness.mlp(fake, "discriminator")
  xent = tf.nn.sigmoid_cross_entropy_with_logits
  d_loss = tf.reduce_mean(
      xent(labels=tf.ones_like(real_logit), logits=real_logit)
      + xent(labels=tf.zeros_like(fake_logit), logits=fake_logit))
  g_loss = tf.reduce_mean(
      xent(labels=tf.ones_like(fake_logit), logits=fake_logit))
  d_step = train.AdamOptimizer(0.01, beta1=0.5).minimize(
      d_loss, var_list=tf.compat.v1.trainable_variables("discriminator"))
  g_step = train.AdamOptimizer(0.01, beta1=0.5).minimize(
      g_loss, var_list=tf.compat.v1.trainable_variables("generator"))

  def feed(i):
    return {**feed_x(i // 2), z: harness.data(i // 2, (BATCH, 2), 2)}
  return Case(lambda i: [g_loss, g_step] if i % 2 else [d_loss, d_step],
              feed, runs=4)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()

# Writes in a conditional's branch (issue #63): the moving statistics'
# central value is the replicas' mean at every L, whichever kernels.
BRANCH_WRITES = ("batch_norm_is_training", "layers_batch_norm_update_ops",
                 "batch_norm_frozen_statistics")


@pytest.mark.slow
@pytest.mark.parametrize("fast_kernels", ["1", "0"])
@pytest.mark.parametrize("replicas", [2, 4])
@pytest.mark.parametrize("name", BRANCH_WRITES)
def test_branch_writes_match_the_sma_reference(name, replicas, fast_kernels,
                                               monkeypatch):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast_kernels)
  harness.assert_replicas_match_reference(CORPUS.named(name), replicas)
