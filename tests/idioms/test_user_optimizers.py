"""Idioms: optimizers users write themselves, as `tf.compat.v1.train.
Optimizer` subclasses whose `_apply_dense` and `_resource_apply_dense`
take the step with `assign` or `assign_sub` (issue #63): a training step
is what an optimizer's `apply_gradients` writes, whatever op writes it
(DESIGN.md, "Two kinds of run")."""
from idioms import harness

CORPUS = harness.Corpus()


@CORPUS.idiom
def user_optimizer_stepping_by_assign():
  return harness.minimize(harness.UserOptimizer(0.1, "assign"))


@CORPUS.idiom
def user_optimizer_stepping_by_assign_sub():
  return harness.minimize(harness.UserOptimizer(0.1, "assign_sub"))


@CORPUS.idiom
def user_momentum_stepping_by_assign():
  return harness.minimize(harness.UserOptimizer(0.05, "assign", momentum=0.9))


@CORPUS.idiom
def user_optimizer_by_assign_on_resource_variables():
  loss, feed = harness.mlp_loss(use_resource=True)
  step = harness.UserOptimizer(0.1, "assign").minimize(loss)
  return harness.Case([loss, step], feed)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
