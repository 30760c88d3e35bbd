"""SMA's side of a wave (hooks.py): the replicas that take part in a
wave's central update, the barriers restarted after a wave that did not
finish, and the workers' central models kept one.

SMA's central update waits at a barrier for every replica's correction
(sma.py). A replica that sits a wave out, or whose values were not
finite, sends none: before the writes the barriers are told how many
replicas arrive, those left out restart from the central model with no
correction, and a device none of whose replicas train moves its copy by
the central momentum alone. A wave whose writes failed leaves the
barriers part-way: they restart.

Over a job of several processes, every worker's wave moves its central
model from the same base by its own replicas' corrections; after the
wave the moves are summed over the workers (the job's reduce) and each
worker's central model becomes the base plus that sum: one wave of all
their replicas.
"""
import numpy as np
import tensorflow as tf

from tensorbow import hooks
from tensorbow import ops as tb_ops


class Participants(hooks.WaveHook):
  """SMA's hooks: who takes part in the central update, and barriers
  restarted.

  Args:
    setting: the setting's `hooks.Setting`.
    central_momentum: SMA's central momentum (its idle devices' move).
  """

  def __init__(self, setting, central_momentum):
    self._session = setting.session
    self._runs = setting.replica_state.runs
    self._central_momentum = central_momentum

  def leave_out(self, skipped, remaining):
    run = self._runs.participants_run(skipped, remaining, self.skip_ops)
    if run is not None:
      self._session.run(*run)

  def failed(self):
    self._reset()

  def undo(self):
    self._reset()

  def _reset(self):
    """Restarts the barriers of every variable's central update."""
    reset = self._runs.made("reset", _reset_ops)
    if reset:
      self._session.run(reset)

  def skip_ops(self, builder, states, count, replicas):
    """Ops leaving the replicas fed to `replicas` out of the coming
    wave's central update, `count` (an int32 scalar) taking part."""
    if not states:
      return []
    ops = [tb_ops.library().tensor_bow_set_sma_participants(
        count=count, barriers=[s.barrier for s in states])] + [
            s.correction.set(tf.zeros_like(s.central_value), replicas)
            for s in states if s.corrections is not None]
    for d, first in enumerate(states[0].devices):
      # Each device's replicas update its copy and count their own
      # arrivals.
      on_device = builder.constant(np.array(first.replicas, np.int32),
                                   tf.int32)
      left = tf.reduce_sum(tf.cast(tf.equal(
          tf.expand_dims(replicas, 1), tf.expand_dims(on_device, 0)),
                                   tf.int32))
      taking = len(first.replicas) - left
      ops.append(tb_ops.library().tensor_bow_set_sma_participants(
          count=taking, barriers=[s.devices[d].barrier for s in states]))
      ops += [op for s in states
              for op in self._idle_device_ops(builder, s.devices[d],
                                              tf.equal(taking, 0))]
    return ops

  def _idle_device_ops(self, builder, central, idle):
    """Ops moving device copy `central` as its replicas' wave would with
    no corrections, if `idle` (a bool scalar): by the central momentum
    alone, so that the device sum adds nothing from a device none of
    whose replicas train."""
    dtype = central.value.dtype
    z = tf.raw_ops.ReadVariableOp(resource=central.var, dtype=dtype)
    prev = tf.raw_ops.ReadVariableOp(resource=central.prev, dtype=dtype)
    momentum = builder.constant(self._central_momentum, dtype)
    moved = tf.raw_ops.SelectV2(condition=idle, t=z + momentum * (z - prev),
                                e=z)
    rotated = tf.raw_ops.SelectV2(condition=idle, t=z, e=prev)
    with tf.control_dependencies([moved, rotated]):
      return [tf.raw_ops.AssignVariableOp(resource=central.var, value=moved),
              tf.raw_ops.AssignVariableOp(resource=central.prev,
                                          value=rotated)]


def _reset_ops(builder, states):
  """Ops restarting the barriers of `states`' central updates."""
  del builder
  if not states:
    return []
  return [tb_ops.library().tensor_bow_reset_sma_barriers(
      barriers=[b for s in states
                for b in [s.barrier] + [c.barrier for c in s.devices]])]


class AcrossWorkers(hooks.WaveHook):
  """SMA's central models of a job's workers kept one: the base kept
  before each wave, the moves summed over the workers by the job's
  `reduce` when the replicas merge.

  Args:
    setting: the setting's `hooks.Setting` (its job's `reduce` not None).
    part: (builder, state) -> (op run before each wave, the tensor each
      worker adds to the sum, function from a tensor of that sum to the
      op applying it), or None (SMA.worker_part).
  """

  def __init__(self, setting, part):
    self._session = setting.session
    self._runs = setting.replica_state.runs
    self._reduce = setting.job.reduce
    self._part = part

  def before(self, opened):
    made = self._made()
    if made is not None:
      self._session.run(made[0])

  def merge(self, opened, ran):
    made = self._made()
    if made is None:
      return
    _, added, sums, apply = made
    totals = self._reduce(opened.number, self._session.run(added))
    self._session.run(apply, dict(zip(sums, totals)))

  def _made(self):
    """(base op, tensors added, placeholders of their sums, op applying
    them) over the variables' states (AlgorithmRuns.summed_run)."""
    return self._runs.summed_run("sma_across_workers", self._part)
