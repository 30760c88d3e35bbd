"""Writes in a conditional's branch (issue #63): batch norm's moving
statistics under an `is_training` flag train at any L, atomically; an
optimizer step that is itself conditional is refused, saying so.

The values at L = 1, 2 and 4 are the idiom corpus's
(tests/idioms/test_control_flow.py, `BRANCH_WRITES`); here, what the
corpus cannot see: the error, and a failed wave.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from idioms import harness
from idioms import test_control_flow



def _poisoned_model():
  """The corpus's `is_training` batch-norm model, its input checked by an
  assert that fails the wave when `poison` is fed True."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(harness.SEED)
    poison = tf.compat.v1.placeholder_with_default(False, [], name="poison")

    def checked(x):
      guard = tf.debugging.assert_equal(poison, False, message="poisoned")
      with tf.control_dependencies([guard]):
        return tf.identity(x)

    loss, _, feed = test_control_flow.is_training_batch_norm_model(checked)
    step = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  return graph, (loss, step), feed, poison, init


def test_a_failed_wave_leaves_the_moving_statistics_as_they_were():
  """The branch's writes wait for the whole wave: a wave failing in one
  replica leaves the central statistics and every replica's copy as they
  were (contract 2.8), and the next wave trains."""
  graph, fetches, feed, poison, init = _poisoned_model()
  variables = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    sess.run(fetches, feed(0))
    plan, = sess.plans().values()
    assert plan.atomic is not None  # computation, then commit
    before = sess.run(variables)
    replicas = sess._trainer.replica_state()  # pylint: disable=protected-access
    assert any("moving_mean" in key for key in replicas)
    with pytest.raises(tf.errors.InvalidArgumentError, match="poisoned"):
      sess.run(fetches, {**feed(1), poison: True})
    for v, old, new in zip(variables, before, sess.run(variables)):
      np.testing.assert_array_equal(new, old, err_msg=v.op.name)
    after = sess._trainer.replica_state()  # pylint: disable=protected-access
    assert sorted(after) == sorted(replicas)
    for key, value in replicas.items():
      np.testing.assert_array_equal(after[key], value, err_msg=key)
    sess.run(fetches, feed(1))
    moving = [v for v in variables if "moving_mean" in v.op.name][0]
    assert not np.array_equal(sess.run(moving),
                              before[variables.index(moving)])


def _conditional_step(how):
  """A least-squares model whose optimizer step is taken under
  `tf.cond(placeholder_with_default(True, []), ...)`, as a dynamic loss
  scale takes it: by `minimize` in the branch, or `apply_gradients` of
  gradients taken outside."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
    w = tf.compat.v1.get_variable("w", initializer=[[1.0], [2.0]])
    loss = tf.reduce_mean(tf.matmul(x, w))
    finite = tf.compat.v1.placeholder_with_default(True, [], name="finite")
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    grads = optimizer.compute_gradients(loss)

    def step():
      taken = (optimizer.minimize(loss) if how == "minimize"
               else optimizer.apply_gradients(grads))
      with tf.control_dependencies([taken]):
        return tf.constant(1)

    op = tf.cond(finite, step, lambda: tf.constant(0))
    init = tf.compat.v1.global_variables_initializer()
  return graph, [loss, op], {x: np.ones((4, 2), np.float32)}, init


@pytest.mark.parametrize("how", ["minimize", "apply_gradients"])
def test_a_conditional_optimizer_step_is_refused_saying_so(how):
  graph, fetches, feed, init = _conditional_step(how)
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    with pytest.raises(
        tf.errors.UnimplementedError,
        match=r"update_w/\w*ApplyGradientDescent.*: it is an optimizer step "
        r"of variable 'w', and the step itself is conditional \(under "
        r"tf\.cond"):
      sess.run(fetches, feed)


def test_a_conditional_optimizer_step_is_plain_training_at_one_replica():
  """One replica runs the user's graph as TensorFlow does (contract 2.7)."""
  graph, fetches, feed, init = _conditional_step("minimize")
  expected = []
  for session in (tf.compat.v1.Session, tb.TensorBowSession):
    with session(graph=graph, **({} if session is tf.compat.v1.Session
                                 else {"replicas": 1})) as sess:
      sess.run(init)
      expected.append([sess.run(fetches, feed) for _ in range(2)])
  np.testing.assert_array_equal(np.array(expected[0], np.float64),
                                np.array(expected[1], np.float64))
