"""Idioms: optimizers users write themselves, as `tf.compat.v1.train.
Optimizer` subclasses whose `_apply_dense` and `_resource_apply_dense`
take the step with `assign` or `assign_sub` (issue #63): a training step
is what an optimizer's `apply_gradients` writes, whatever op writes it
(DESIGN.md, "Two kinds of run")."""
import tensorflow as tf

from idioms import harness

CORPUS = harness.Corpus()


class _UserOptimizer(tf.compat.v1.train.Optimizer):
  """SGD, with momentum if `momentum` is set, written the way TF1 users
  write an optimizer: slots made in `_create_slots`, the rate converted in
  `_prepare`, and the step written by `how` ("assign": `var.assign(var -
  step)`; "assign_sub": `var.assign_sub(step)`)."""

  def __init__(self, rate, how, momentum=None, name="UserOptimizer"):
    super().__init__(False, name)
    self._rate, self._how, self._momentum = rate, how, momentum
    self._rate_t = None

  def _create_slots(self, var_list):
    if self._momentum is not None:
      for v in var_list:
        self._zeros_slot(v, "velocity", self._name)

  def _prepare(self):
    self._rate_t = tf.convert_to_tensor(self._rate, name="rate")

  def _step(self, var, grad):
    rate = tf.cast(self._rate_t, var.dtype.base_dtype)
    if self._momentum is not None:
      velocity = self.get_slot(var, "velocity")
      grad = velocity.assign(self._momentum * velocity + grad)
    if self._how == "assign":
      return var.assign(var - rate * grad)
    return var.assign_sub(rate * grad)

  def _apply_dense(self, grad, var):
    return self._step(var, grad)

  def _resource_apply_dense(self, grad, handle):
    return self._step(handle, grad)


@CORPUS.idiom
def user_optimizer_stepping_by_assign():
  return harness.minimize(_UserOptimizer(0.1, "assign"))


@CORPUS.idiom
def user_optimizer_stepping_by_assign_sub():
  return harness.minimize(_UserOptimizer(0.1, "assign_sub"))


@CORPUS.idiom
def user_momentum_stepping_by_assign():
  return harness.minimize(_UserOptimizer(0.05, "assign", momentum=0.9))


@CORPUS.idiom
def user_optimizer_by_assign_on_resource_variables():
  loss, feed = harness.mlp_loss(use_resource=True)
  return harness.Case([loss, _UserOptimizer(0.1, "assign").minimize(loss)],
                      feed)


test_one_replica, test_reference_kernels, test_four_replicas = CORPUS.tests()
