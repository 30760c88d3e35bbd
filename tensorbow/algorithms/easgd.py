"""Elastic averaging SGD (Zhang, Choromanska and LeCun, 2015), synchronous.

On a communication wave (the `period`-th, 2·`period`-th, ... training
run) replica j steps with

    w_j = OPT_j(w_j, g_j) - alpha (w_j - z),    z += alpha sum_j (w_j - z)

(old values on the right); between them the replicas train alone. That is
SMA's update without central momentum, its correction factor alpha on a
communication wave and 0 otherwise; so EASGD is built as SMA, its factor
read from a variable set before each wave when the period is above 1.
"""
import collections

import tensorflow as tf

from tensorbow import hooks
from tensorbow.algorithms import sma
from tensorbow.rewrite import graph_util

# EASGD's state for one model variable: SMA's (sma.State) and `alpha`,
# with a period above 1 the correction factor's (resource handle, value
# read), set before each wave; else None (the factor is a constant).
State = collections.namedtuple("State", sma.State._fields + ("alpha",))


class EASGD(sma.SMA):
  """Elastic averaging, synchronous form.

  Args:
    alpha: the elastic force, in (0, 1]; None means 0.9 / replicas.
    period: the replicas communicate every `period`-th training run.

  Raises:
    ValueError: for an argument out of range.
  """

  name = "easgd"

  def __init__(self, alpha=None, period=1):
    super().__init__(alpha, central_momentum=0.0)
    if isinstance(period, bool) or int(period) != period or period < 1:
      raise ValueError(f"period must be an int >= 1, got {period!r}")
    self.period = int(period)

  def __repr__(self):
    return f"EASGD(alpha={self.alpha!r}, period={self.period!r})"

  def resolved(self, replicas):
    if self.alpha is not None:
      return self
    return EASGD(0.9 / replicas, self.period)

  def variable_state(self, builder, var_op):
    own = super().variable_state(builder, var_op)
    alpha = None
    if self.period > 1:
      dtype, _ = graph_util.dtype_and_shape(var_op)
      handle = graph_util.resource(
          f"{builder.prefix}/easgd/{var_op.name}/alpha", dtype, [])
      alpha = (handle, tf.raw_ops.ReadVariableOp(resource=handle,
                                                 dtype=dtype))
    return State(*own, alpha=alpha)

  def alpha_tensor(self, builder, state, dtype):
    if state.alpha is None:
      return super().alpha_tensor(builder, state, dtype)
    return state.alpha[1]

  def wave_hooks(self, setting):
    own = list(super().wave_hooks(setting))
    return own + ([_Phase(setting, self.alpha, self.period)]
                  if self.period > 1 else [])


class _Phase(hooks.WaveHook):
  """Before each wave, with a period above 1: the correction factor,
  `alpha` on a communication wave and 0 otherwise, set where it changed.

  Args:
    setting: the setting's `hooks.Setting`.
    alpha: the elastic force.
    period: the replicas communicate every `period`-th training run.
  """

  def __init__(self, setting, alpha, period):
    self._session = setting.session
    self._runs = setting.replica_state.runs
    self._alpha = alpha
    self._period = period
    self._set = None  # (ops, value) of the factor's last run

  def before(self, opened):
    value = self._alpha if opened.number % self._period == 0 else 0.0
    run = self._runs.fed_run("easgd_alpha", value, _alpha_ops)
    if run is None or (self._set is not None and self._set[0] is run[0]
                       and self._set[1] == value):
      return
    self._session.run(*run)
    self._set = (run[0], value)


def _alpha_ops(builder, states, value):
  """Ops setting every state's correction factor to `value`."""
  del builder
  return [tf.raw_ops.AssignVariableOp(
      resource=s.alpha[0], value=tf.cast(value, s.alpha[1].dtype))
          for s in states if s.alpha is not None]
