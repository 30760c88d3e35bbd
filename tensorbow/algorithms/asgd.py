"""Asynchronous small-batch SGD over a shared model (GaDei).

With a communication interval of 1 (GaDei's conservative setting, and
the default) a learning task reads the central model when it starts,
computes its gradient on its shard and applies the user's optimizer to
the central model itself (its one set of slots) as soon as it finishes,
without waiting for the other tasks; the wave ends when all have.
Nothing is replicated: the stream groups' copies of the learning part all
train the user's variables.

Updates to one variable are kept from tearing exactly as the user's
optimizer asks: TensorFlow's apply ops lock the variable with
`use_locking=True` and, as in TensorFlow, run without a lock otherwise
(updates by concurrent tasks may then interleave element-wise). With one
stream group the tasks run one after another, in replica order.

With a communication interval k > 1 each replica trains a copy of its
own (with its own slots) for k training runs, then pushes the change it
accumulated since its last pull and pulls the central model:

    z <- z + sum_j (w_j - z),    w_j <- z

Every replica makes its k-th step in the same wave, so the pushes land
together after that wave, in replica order, and every replica pulls the
model with all of them in; between those waves the central model (what a
plain run reads) does not move.
"""
import tensorflow as tf

from tensorbow import hooks
from tensorbow.algorithms import base
from tensorbow.rewrite import graph_util

_FLOAT_TYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


class _State(object):

  def __init__(self, var_op):
    self.var_op = var_op


class ASGD(base.Algorithm):
  """Asynchronous SGD over the central model.

  Args:
    communication_interval: GaDei's CI, the training runs between a
      replica's exchanges with the central model; 1 applies every task's
      step to the central model as the task ends.

  Raises:
    ValueError: for an interval that is not an int >= 1.
  """

  name = "asgd"

  def __init__(self, communication_interval=1):
    k = communication_interval
    if isinstance(k, bool) or not isinstance(k, (int, float)) or (
        int(k) != k or k < 1):
      raise ValueError(f"communication_interval must be an int >= 1, got "
                       f"{communication_interval!r}")
    self.communication_interval = int(k)

  @property
  def shares_model(self):
    return self.communication_interval == 1

  def variable_state(self, builder, var_op):
    dtype, _ = graph_util.dtype_and_shape(var_op)
    if dtype not in _FLOAT_TYPES:
      raise tf.errors.UnimplementedError(
          None, var_op, f"TensorBow's ASGD with a communication interval "
          f"supports floating-point model variables; '{var_op.name}' is "
          f"{dtype.name}")
    return _State(var_op)

  def apply_nodes(self, builder, state, node, var, group, aux):
    del builder, var, group, aux
    return [node], state

  def wave_hooks(self, setting):
    return [hooks.Merge(setting, self.merge_value, self.merge_ops)]

  def merge_value(self, wave, sizes):
    """After training run `wave`: 1.0 if the replicas' moves are pushed
    to the central model after it, else None."""
    del sizes
    if wave % self.communication_interval:
      return None
    return 1.0

  def merge_ops(self, builder, states, value):
    """Ops pushing every replica's move since the last push to the
    central model, and restarting the replicas from it."""
    del value
    ops = []
    for s in states:
      replicas = builder.variable_replicas(s.var_op)
      z = graph_util.read(s.var_op)
      if s.var_op.type != "VarHandleOp":
        # A reference variable's read aliases its buffer, which the
        # assignment below writes in place.
        z = tf.raw_ops.Snapshot(input=z)
      pushed = z + tf.reduce_sum(replicas.stacked() - z, axis=0)
      ops += [graph_util.assign(s.var_op, pushed),
              replicas.set(pushed, builder.all_replicas())]
    return ops


def staleness(timings):
  """Per learning task of `timings` (`TensorBowSession.task_timings()`),
  in their order: how many other tasks' updates landed between its read
  of the model (its start) and its write (its end)."""
  tasks = [t for t in timings if t.replica >= 0]
  return [sum(1 for other in tasks
              if other is not task and task.start < other.end <= task.end)
          for task in tasks]
