"""Idioms: variables and ops under unusual scopes and names."""
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
CORPUS = harness.Corpus()



def model_in(scope_name, **scope_kwargs):
  """The MLP built inside variable scope `scope_name`."""
  x, y, feed = harness.regression_inputs()
  with tf.compat.v1.variable_scope(scope_name, **scope_kwargs):
    loss = tf.reduce_mean(tf.square(harness.mlp(x) - y))
  return loss, feed


@CORPUS.idiom
def leading_underscore_scope():
  loss, feed = model_in("model")
  # A name part with a leading "_" (a top-level name cannot have one).
  with tf.compat.v1.variable_scope("model/_private"):
    w = tf.compat.v1.get_variable("_w", [], initializer=tf.ones_initializer())
  # Through a Square: a `loss * w` fetched beside the update of `w` races
  # with it (tests/idioms/races.py).
  loss = loss * tf.square(w)
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def leading_underscore_ops():
  """Ops, not variables, under name parts starting with "_"."""
  x, y, feed = harness.regression_inputs()
  with tf.name_scope("loss/_terms/_0"):
    err = tf.subtract(harness.mlp(x), y, name="_err")
  with tf.name_scope("loss"):
    loss = tf.reduce_mean(tf.square(err), name="_mean")
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def dashes_and_dots():
  loss, feed = model_in("layer-1.v2")
  op = train.AdamOptimizer(0.01).minimize(loss, name="train-op.main")
  return Case([loss, op], feed)


@CORPUS.idiom
def angle_bracket_beside_slash():
  """A user name "a>b" beside the scoped name "a/b"."""
  loss, feed = harness.mlp_loss()
  gt = tf.compat.v1.get_variable("a>b", [], initializer=tf.ones_initializer())
  with tf.compat.v1.variable_scope("a"):
    slash = tf.compat.v1.get_variable("b", [],
                                      initializer=tf.constant_initializer(2.))
  loss = loss * tf.square(gt) + 0.1 * tf.square(slash - gt)
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def nested_scopes_reuse():
  """A siamese pair: the same tower built twice, the second with reuse,
  inside nested scopes."""
  x, y, feed = harness.regression_inputs()
  with tf.compat.v1.variable_scope("outer"):
    with tf.compat.v1.variable_scope("tower"):
      left = harness.mlp(x)
    with tf.compat.v1.variable_scope("tower", reuse=True):
      right = harness.mlp(x * 0.5)
  loss = tf.reduce_mean(tf.square(left + right - y))
  op = train.AdagradOptimizer(0.1).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def auto_reuse():
  x, y, feed = harness.regression_inputs()
  outs = []
  for scale in (1.0, 2.0):
    with tf.compat.v1.variable_scope("shared",
                                     reuse=tf.compat.v1.AUTO_REUSE):
      outs.append(harness.mlp(x * scale))
  loss = tf.reduce_mean(tf.square(outs[0] - outs[1] + 0.1 - y))
  op = train.GradientDescentOptimizer(0.1).minimize(loss)
  return Case([loss, op], feed)


@CORPUS.idiom
def uniquified_names():
  """Two optimizers of one kind: TensorFlow makes their slot and op names
  unique ("Momentum_1")."""
  loss, feed = harness.mlp_loss()
  ops = [train.MomentumOptimizer(0.1, 0.9).minimize(
      loss, var_list=tf.compat.v1.trainable_variables(scope))
         for scope in ("mlp/hidden", "mlp/out")]
  return Case(lambda i: [loss, ops[i % 2]], feed, runs=4)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
