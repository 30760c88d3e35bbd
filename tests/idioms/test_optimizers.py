"""Idioms: every optimizer of `tf.compat.v1.train`, with and without a
global step, a var_list, compute_gradients/apply_gradients."""
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
CORPUS = harness.Corpus()


def global_step():
  return train.get_or_create_global_step()


@CORPUS.idiom
def gradient_descent():
  return harness.minimize(train.GradientDescentOptimizer(0.1))


@CORPUS.idiom
def gradient_descent_global_step():
  return harness.minimize(train.GradientDescentOptimizer(0.1),
                          global_step=global_step())


@CORPUS.idiom
def momentum():
  return harness.minimize(train.MomentumOptimizer(0.1, 0.9))


@CORPUS.idiom
def momentum_nesterov_global_step():
  return harness.minimize(
      train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
      global_step=global_step())


@CORPUS.idiom
def adam():
  return harness.minimize(train.AdamOptimizer(0.01))


@CORPUS.idiom
def adam_global_step():
  return harness.minimize(train.AdamOptimizer(0.01, beta1=0.8),
                          global_step=global_step())


@CORPUS.idiom
def adagrad():
  return harness.minimize(train.AdagradOptimizer(0.1))


@CORPUS.idiom
def adagrad_da():
  # AdagradDA needs the global step.
  step = global_step()
  return harness.minimize(
      train.AdagradDAOptimizer(0.1, step, l1_regularization_strength=0.001,
                               l2_regularization_strength=0.01),
      global_step=step)


@CORPUS.idiom
def adadelta():
  return harness.minimize(train.AdadeltaOptimizer(1.0, rho=0.9))


@CORPUS.idiom
def rmsprop():
  return harness.minimize(train.RMSPropOptimizer(0.01))


@CORPUS.idiom
def rmsprop_momentum():
  return harness.minimize(train.RMSPropOptimizer(0.01, momentum=0.9))


@CORPUS.idiom
def rmsprop_centered():
  return harness.minimize(
      train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
      global_step=global_step())


@CORPUS.idiom
def ftrl():
  return harness.minimize(train.FtrlOptimizer(0.1))


@CORPUS.idiom
def ftrl_regularized():
  return harness.minimize(train.FtrlOptimizer(
      0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01,
      l2_shrinkage_regularization_strength=0.01))


@CORPUS.idiom
def proximal_gradient_descent():
  return harness.minimize(train.ProximalGradientDescentOptimizer(
      0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01))


@CORPUS.idiom
def proximal_adagrad():
  return harness.minimize(train.ProximalAdagradOptimizer(
      0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.01))


@CORPUS.idiom
def var_list():
  """Only the output layer trains; the hidden layer stays as initialised."""
  loss, feed = harness.mlp_loss()
  out = tf.compat.v1.get_collection(
      tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES, scope="mlp/out")
  op = train.MomentumOptimizer(0.1, 0.9).minimize(loss, var_list=out)
  return Case([loss, op], feed)


@CORPUS.idiom
def compute_apply_gradients():
  loss, feed = harness.mlp_loss()
  opt = train.AdamOptimizer(0.01)
  grads_and_vars = opt.compute_gradients(loss)
  op = opt.apply_gradients(grads_and_vars, global_step=global_step())
  return Case([loss, op, [g for g, _ in grads_and_vars]], feed)


@CORPUS.idiom
def scaled_gradients():
  """Gradients scaled per variable before apply_gradients."""
  loss, feed = harness.mlp_loss()
  opt = train.GradientDescentOptimizer(0.1)
  grads_and_vars = [(g * (0.5 if "hidden" in v.name else 2.0), v)
                    for g, v in opt.compute_gradients(loss)]
  return Case([loss, opt.apply_gradients(grads_and_vars)], feed)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
