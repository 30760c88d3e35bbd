"""Asynchronous small-batch SGD over a shared model (GaDei).

A learning task reads the central model when it starts, computes its
gradient on its shard and applies the user's optimizer to the central
model itself (its one set of slots) as soon as it finishes, without
waiting for the other tasks; the wave ends when all have. Nothing is
replicated: the stream groups' copies of the learning part all train the
user's variables.

Updates to one variable are kept from tearing exactly as the user's
optimizer asks: TensorFlow's apply ops lock the variable with
`use_locking=True` and, as in TensorFlow, run without a lock otherwise
(updates by concurrent tasks may then interleave element-wise). With one
stream group the tasks run one after another, in replica order.
"""
from tensorbow.algorithms import base


class ASGD(base.Algorithm):
  """Asynchronous SGD over the central model (no parameters)."""

  name = "asgd"
  shares_model = True


def staleness(timings):
  """Per learning task of `timings` (`TensorBowSession.task_timings()`),
  in their order: how many other tasks' updates landed between its read
  of the model (its start) and its write (its end)."""
  tasks = [t for t in timings if t.replica >= 0]
  return [sum(1 for other in tasks
              if other is not task and task.start < other.end <= task.end)
          for task in tasks]
