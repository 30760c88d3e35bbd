"""Local SGD with an outer optimizer (DiLoCo), and post-local SGD.

Every replica trains alone, on its own shards, with the user's optimizer.
After every `period`-th training run the replicas' moves since the last
exchange are averaged into a pseudo-gradient, the central model takes one
step of an outer SGD (with momentum or Nesterov's) on it, and every
replica restarts from the new central model; its own optimizer slots are
kept. An outer step (a rate other than 1, or momentum) is taken with one
replica too, as Lookahead takes it (period k, rate alpha, no momentum):
the replica trains a copy and plain runs read the central (slow)
weights. During the first `warmup_waves` training runs the replicas are
averaged after every run instead (post-local SGD's synchronous start).
DESIGN.md, "Local SGD", has the update rule.
"""
import tensorflow as tf

from tensorbow import hooks
from tensorbow import ops as tb_ops
from tensorbow.algorithms import base
from tensorbow.rewrite import graph_util

_FLOAT_TYPES = (tf.float32, tf.float64)  # TensorBowLocalSgdExchange's


class _State(object):

  def __init__(self, var_op, dtype, velocity):
    self.var_op = var_op
    self.dtype = dtype
    self.velocity = velocity  # resource handle: the outer momentum


class LocalSGD(base.Algorithm):
  """Local SGD: replicas exchange every `period` training runs.

  Args:
    period: training runs between exchanges (H), an int >= 1.
    outer_learning_rate: the outer step's rate, > 0. With 1 and no outer
      momentum an exchange is plain model averaging.
    outer_momentum: the outer step's momentum, in [0, 1).
    nesterov: Nesterov's momentum for the outer step (DiLoCo: rate 0.7,
      momentum 0.9, Nesterov).
    warmup_waves: training runs at the start averaged after each one,
      without the outer step: with SGD or momentum SGD as the user's
      optimizer that is synchronous SGD (post-local SGD).
    worker_period: on a cluster, training runs between exchanges across
      the workers, a multiple of `period` (None: `period`, one exchange of
      every replica). At the other exchanges each worker exchanges its
      own replicas alone; at these, each worker takes its own outer step
      and then the workers average their central models and velocities
      (weighted by their replicas), as a hierarchical model averager
      does. Between them the workers' central models differ.

  Raises:
    ValueError: for an argument out of range.
  """

  name = "local_sgd"
  # The exchange reads every replica's copy wherever it trained.
  spans_devices = True
  # On a cluster the exchange's mean spans every worker's replicas
  # (worker_merge); between exchanges nothing crosses the workers.
  spans_workers = True

  def __init__(self, period=8, outer_learning_rate=1.0, outer_momentum=0.0,
               nesterov=False, warmup_waves=0, worker_period=None):
    if isinstance(period, bool) or int(period) != period or period < 1:
      raise ValueError(f"period must be an int >= 1, got {period!r}")
    if not outer_learning_rate > 0:
      raise ValueError("outer_learning_rate must be > 0, got "
                       f"{outer_learning_rate!r}")
    if not 0 <= outer_momentum < 1:
      raise ValueError("outer_momentum must be in [0, 1), got "
                       f"{outer_momentum!r}")
    if (isinstance(warmup_waves, bool) or int(warmup_waves) != warmup_waves
        or warmup_waves < 0):
      raise ValueError(f"warmup_waves must be an int >= 0, got "
                       f"{warmup_waves!r}")
    if worker_period is not None and (
        isinstance(worker_period, bool) or
        int(worker_period) != worker_period or worker_period < period or
        worker_period % period):
      raise ValueError(f"worker_period must be None or a multiple of period "
                       f"({period}), got {worker_period!r}")
    self.period = int(period)
    self.worker_period = (None if worker_period in (None, period) else
                          int(worker_period))
    self.outer_learning_rate = float(outer_learning_rate)
    self.outer_momentum = float(outer_momentum)
    self.nesterov = bool(nesterov)
    self.warmup_waves = int(warmup_waves)

  @property
  def steps_central(self):
    """Whether the exchange is an outer step, not plain averaging (a rate
    other than 1, or momentum): then it is taken at any L, one included,
    the one replica stepping alone between exchanges."""
    return self.outer_learning_rate != 1.0 or self.outer_momentum > 0

  def variable_state(self, builder, var_op):
    dtype, shape = graph_util.dtype_and_shape(var_op)
    if dtype not in _FLOAT_TYPES:
      raise tf.errors.UnimplementedError(
          None, var_op, "TensorBow's local SGD averages float32 and float64 "
          f"model variables; '{var_op.name}' is {dtype.name}")
    return _State(var_op, dtype, graph_util.resource(
        f"{builder.prefix}/local_sgd/{var_op.name}/velocity", dtype, shape))

  def apply_nodes(self, builder, state, node, var, group, aux):
    del builder, var, group, aux
    return [node], state  # a replica steps alone between exchanges

  def fuses_outer(self, has_state):
    del has_state
    return True

  def seed_ops(self, builder, state, value):
    del builder
    return [tf.raw_ops.AssignVariableOp(resource=state.velocity,
                                        value=tf.zeros_like(value))]

  def wave_hooks(self, setting):
    return [_Exchange(setting, self)]

  def merge_value(self, wave, sizes):
    """After training run `wave`: what the exchange is fed (merge_ops),
    or None: no exchange after it."""
    del sizes
    if wave <= self.warmup_waves:
      return [1.0, 0.0, 0.0]  # averaging: rate 1, no momentum kept
    if (wave - self.warmup_waves) % self.period:
      return None
    return [self.outer_learning_rate, self.outer_momentum, 1.0]

  def merge_ops(self, builder, states, value):
    """The exchange, fed [outer rate, outer momentum, 1 to keep the
    velocity or 0 (averaging)]: one TensorBowLocalSgdExchange a variable
    (DESIGN.md, "Local SGD"), its result assigned to the central model."""
    ops = []
    for s in states:
      rate, momentum, keep = tf.unstack(tf.cast(value, s.dtype), num=3)
      new = tb_ops.library().tensor_bow_local_sgd_exchange(
          central=graph_util.read(s.var_op), velocity=s.velocity, rate=rate,
          momentum=momentum, keep=keep, nesterov=self.nesterov,
          **builder.variable_replicas(s.var_op).attrs())
      ops.append(graph_util.assign(s.var_op, new))
    return ops

  def worker_merge_kind(self, wave):
    """On a cluster, the exchange after training run `wave` (one is
    due): "sum" (`worker_merge`), "average" (`worker_merge(average=True)`)
    or None (each worker exchanges its own replicas alone)."""
    if self.worker_period is None or wave <= self.warmup_waves:
      return "sum"
    return ("average" if (wave - self.warmup_waves) % self.worker_period == 0
            else None)

  def worker_merge(self, builder, state, average=False):
    """The exchange over a cluster: each worker adds the sum of its
    replicas' copies; from the mean over every worker's replicas, each
    worker (holding the same z and v) takes the same outer step and
    restarts its own replicas from the result. With `average`, each
    worker adds its own outer step's z and v (times its replicas), and
    takes their means."""
    copies = builder.variable_replicas(state.var_op)
    mean = copies.mean(builder.constant(0, tf.int32))
    if average:
      return self._worker_average(builder, state, copies, mean)
    local_sum = tf.cast(mean, tf.float64) * builder.num_replicas

    def apply(total, count, value):
      rate, momentum, keep = tf.unstack(tf.cast(value, state.dtype), num=3)
      v, new = self._outer_step(state, tf.cast(total / count, state.dtype),
                                rate, momentum)
      return tf.group(
          tf.raw_ops.AssignVariableOp(resource=state.velocity, value=keep * v),
          graph_util.assign(state.var_op, new),
          copies.set(new, builder.all_replicas()))

    return local_sum, apply

  def _outer_step(self, state, mean, rate, momentum):
    """(new velocity, new central model) of the outer step from the
    replicas' `mean` (DESIGN.md, "Local SGD")."""
    z = graph_util.read(state.var_op)
    delta = z - mean
    v = momentum * tf.raw_ops.ReadVariableOp(resource=state.velocity,
                                             dtype=state.dtype) + delta
    return v, z - rate * (delta + momentum * v if self.nesterov else v)

  def _worker_average(self, builder, state, copies, mean):
    v, new = self._outer_step(state, mean, self.outer_learning_rate,
                              self.outer_momentum)
    added = tf.cast(tf.concat([tf.reshape(new, [-1]), tf.reshape(v, [-1])],
                              0), tf.float64) * builder.num_replicas
    shape = tf.shape(new)

    def apply(total, count, value):
      del value
      z_mean, v_mean = tf.split(tf.cast(total / count, state.dtype), 2)
      z_mean = tf.reshape(z_mean, shape)
      return tf.group(
          tf.raw_ops.AssignVariableOp(resource=state.velocity,
                                      value=tf.reshape(v_mean, shape)),
          graph_util.assign(state.var_op, z_mean),
          copies.set(z_mean, builder.all_replicas()))

    return added, apply

  def state_parts(self, builder, state):
    del builder
    return [(f"{state.var_op.name}/local_sgd/velocity", state.velocity)]


class _Exchange(hooks.Merge):
  """The exchange after a wave: on a cluster, over every worker's
  replicas where `worker_merge_kind` says so; else this process's alone.

  Args:
    setting: the setting's `hooks.Setting`.
    algorithm: the setting's `LocalSGD`.
  """

  def __init__(self, setting, algorithm):
    super().__init__(setting, algorithm.merge_value, algorithm.merge_ops)
    self._reduce = setting.job.reduce
    self._algorithm = algorithm

  def _merge(self, number, value):
    run = self._across_workers(number, value)
    if run is None:
      super()._merge(number, value)
      return
    # Every worker's parts summed (the job's reduce), then applied.
    added, sums, apply, fed = run
    totals = self._reduce(number, self._session.run(added))
    self._session.run(apply, {**fed, **dict(zip(sums, totals))})

  def _across_workers(self, number, value):
    """The run merging every worker's replicas after wave `number`, fed
    `value` (AlgorithmRuns.worker_merge_run), or None: one process, no
    such merge due then, or no variable has a part."""
    kind = self._algorithm.worker_merge_kind(number)
    if not kind or self._reduce is None:
      return None
    return self._runs.worker_merge_run(
        kind, value, lambda b, s: self._algorithm.worker_merge(
            b, s, average=kind == "average"))
