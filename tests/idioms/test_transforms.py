"""Idioms: gradient transforms between compute_gradients and
apply_gradients, accumulation over runs, learning-rate schedules."""
import tensorflow as tf

from idioms import harness
from idioms.harness import Case

train = tf.compat.v1.train
CORPUS = harness.Corpus()



def transformed(transform, optimizer=None, **kwargs):
  """A Case applying transform(grads, vars) -> grads before the step."""
  loss, feed = harness.mlp_loss()
  opt = optimizer or train.GradientDescentOptimizer(0.1)
  grads, variables = zip(*opt.compute_gradients(loss))
  grads = transform(list(grads), list(variables))
  return Case([loss, opt.apply_gradients(zip(grads, variables), **kwargs)],
              feed)


@CORPUS.idiom
def clip_by_global_norm():
  return transformed(lambda g, v: tf.clip_by_global_norm(g, 0.5)[0])


@CORPUS.idiom
def clip_by_global_norm_adam_decay():
  """The RNN/Transformer script's step: clipped gradients, Adam, a decayed
  rate on the global step."""
  step = train.get_or_create_global_step()
  lr = train.exponential_decay(0.01, step, 2, 0.5)
  return transformed(lambda g, v: tf.clip_by_global_norm(g, 0.5)[0],
                     train.AdamOptimizer(lr), global_step=step)


@CORPUS.idiom
def clip_by_norm():
  return transformed(lambda g, v: [tf.clip_by_norm(x, 0.3) for x in g],
                     train.MomentumOptimizer(0.1, 0.9))


@CORPUS.idiom
def clip_by_value():
  return transformed(
      lambda g, v: [tf.clip_by_value(x, -0.1, 0.1) for x in g])


@CORPUS.idiom(l4="replicas draw their own noise")
def gradient_noise():
  """Seeded Gaussian noise on every gradient."""
  return transformed(lambda g, v: [
      x + tf.random.normal(tf.shape(x), stddev=0.01, seed=i)
      for i, x in enumerate(g)])


@CORPUS.idiom
def accumulated_gradients():
  """Gradients summed into variables over two runs, then applied (and the
  sums zeroed) in a third; the accumulating runs are plain runs."""
  loss, feed = harness.mlp_loss()
  variables = tf.compat.v1.trainable_variables()
  sums = [tf.compat.v1.get_variable(
      v.op.name + "_sum", v.shape, initializer=tf.zeros_initializer(),
      trainable=False) for v in variables]
  accumulate = tf.group([s.assign_add(g) for s, g in
                         zip(sums, tf.gradients(loss, variables))])
  apply = train.MomentumOptimizer(0.1, 0.9).apply_gradients(
      [(s / 2.0, v) for s, v in zip(sums, variables)])
  with tf.control_dependencies([apply]):
    zero = tf.group([s.assign(tf.zeros_like(s)) for s in sums])
  # The loss is not fetched with `zero`: it would race with the step.
  return Case(lambda i: zero if i % 3 == 2 else [loss, accumulate], feed,
              runs=6, plain=(0, 1, 3, 4))


@CORPUS.idiom
def exponential_decay():
  step = train.get_or_create_global_step()
  lr = train.exponential_decay(0.1, step, 1, 0.5)
  return harness.minimize(train.GradientDescentOptimizer(lr),
                          global_step=step)


@CORPUS.idiom
def piecewise_constant():
  step = train.get_or_create_global_step()
  lr = train.piecewise_constant(step, [1, 2], [0.1, 0.05, 0.01])
  return harness.minimize(train.MomentumOptimizer(lr, 0.9),
                          global_step=step)


@CORPUS.idiom
def polynomial_decay():
  step = train.get_or_create_global_step()
  lr = train.polynomial_decay(0.1, step, 3, 0.01, power=2.0)
  case = harness.minimize(train.GradientDescentOptimizer(lr),
                          global_step=step)
  case.runs = 4
  return case


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
