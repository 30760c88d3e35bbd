"""Adaptive SGD, as Ma, Rusu, Wu and Sim define it ("Adaptive elastic
training for sparse deep learning on heterogeneous multi-GPU servers").

* Dynamic scheduling. A training run's batch is cut into chunks as
  replicas come free: the free replica that has waited longest takes its
  own batch size b_i of rows (the runtime's pool run) and makes one step
  on its own copy of the model. A faster replica makes more updates.
* A mega-batch is `mega_batch` training runs. After each, Algorithm 1
  moves every replica's batch size linearly with the deviation of its
  update count u_i from the mean, counted per training run: b_i <- b_i +
  beta (u_i - mean(u)) / mega_batch, rounded and bounded to [b_min,
  b_max], so that the update counts even out. (The paper's mega-batch is
  100 dispatched batches, one update each; a training run here is cut
  into several, so its raw deviations grow with the chunks per run and
  would throw the sizes from bound to bound.) Learning rates follow the
  linear scaling rule: replica i steps with lr * b_i / b_0, b_0 being the
  batch size it started with.
* Algorithm 2 then merges. The weights are the update counts normalised,
  u_i / sum(u), or the batch sizes, b_i / sum(b), when every count is
  equal. When every replica's change since the last merge has an L2 norm
  below theta for every variable (a plateau), the most-updated replica's
  weight gains delta and the least-updated's loses delta (perturbation).
  The global model moves with momentum, z' = sum_i w_i x_i + mu (z -
  z_prev), and every replica restarts from z'. The optimizers' slots stay
  each replica's.

The functions below are the paper's rules on plain numbers; `Schedule`
keeps a session's batch sizes, counts and history with them.
"""
import math

import numpy as np
import tensorflow as tf

from tensorbow import hooks
from tensorbow import op_nodes
from tensorbow.algorithms import base
from tensorbow.rewrite import builder as tb_builder
from tensorbow.rewrite import graph_util

_FLOAT_TYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
# The learning-rate input of TF's apply ops, by its OpDef name.
_LR_NAMES = ("lr", "alpha")


def next_batch_sizes(sizes, counts, beta, b_min, b_max, runs=1):
  """Algorithm 1: each batch size moved by `beta` per update a training
  run its replica made above the mean count (or below it) over `runs`
  runs, rounded, within [b_min, b_max]."""
  sizes = np.asarray(sizes, np.float64)
  counts = np.asarray(counts, np.float64)
  moved = np.rint(sizes + beta * (counts - counts.mean()) / runs)
  return np.clip(moved, b_min, b_max).astype(np.int64)


def merge_weights(counts, sizes, perturb, delta):
  """Algorithm 2's weights: the update counts normalised (the batch sizes
  when the counts are equal); with `perturb`, the most-updated replica's
  weight plus `delta` and the least-updated's minus `delta` (ties go to
  the larger batch, then the lower index, for the most; the other way
  for the least)."""
  counts = np.asarray(counts, np.float64)
  sizes = np.asarray(sizes, np.float64)
  equal = np.all(counts == counts[0])
  weights = (sizes if equal else counts) / (sizes if equal else counts).sum()
  if perturb and len(counts) > 1:
    order = sorted(range(len(counts)),
                   key=lambda i: (-counts[i], -sizes[i], i))
    weights[order[0]] += delta
    weights[order[-1]] -= delta
  return weights


def perturbs(drift, theta):
  """Whether Algorithm 2 perturbs: every replica's change since the last
  merge (`drift`, L2 norms per variable and replica) is below `theta`."""
  drift = np.asarray(drift, np.float64)
  return bool(drift.size) and bool(np.all(drift < theta))


class _State(object):

  def __init__(self, var_op, dtype, central_prev, scale):
    self.var_op = var_op
    self.dtype = dtype
    self.central_prev = central_prev  # resource handle
    self.scale = scale  # builder.Replicated scalar: the lr factor


class Adaptive(base.Algorithm):
  """Adaptive SGD; see the module's docstring. Names as in the paper.

  Args:
    mega_batch: training runs between merges.
    batch_size: b_0, every replica's first batch size; None: the first
      training run's rows over the replicas, rounded up.
    b_max: the largest batch size; None: 2 b_0.
    b_min: the smallest; None: b_max / 8, rounded up.
    beta: rows per update of deviation from the mean count; None: b_min
      / 2.
    delta: the perturbation of the merge weights.
    theta: the L2 norm of a replica's change per variable under which the
      merge perturbs.
    momentum: mu, the global model's momentum, in [0, 1).

  Raises:
    ValueError: for an argument out of range.
  """

  name = "adaptive"
  pooled = True

  def __init__(self, mega_batch=100, batch_size=None, b_max=None, b_min=None,
               beta=None, delta=0.1, theta=0.1, momentum=0.9):
    for key, value in (("mega_batch", mega_batch), ("batch_size", batch_size),
                       ("b_max", b_max), ("b_min", b_min)):
      if value is not None and (isinstance(value, bool) or
                                int(value) != value or value < 1):
        raise ValueError(f"{key} must be an int >= 1, got {value!r}")
    if b_min is not None and b_max is not None and b_min > b_max:
      raise ValueError(f"b_min ({b_min}) must not exceed b_max ({b_max})")
    for key, value in (("beta", beta), ("delta", delta), ("theta", theta)):
      if value is not None and not float(value) >= 0.0:
        raise ValueError(f"{key} must be >= 0, got {value!r}")
    if not 0.0 <= float(momentum) < 1.0:
      raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    self.mega_batch = int(mega_batch)
    self.batch_size = None if batch_size is None else int(batch_size)
    self.b_max = None if b_max is None else int(b_max)
    self.b_min = None if b_min is None else int(b_min)
    self.beta = None if beta is None else float(beta)
    self.delta = float(delta)
    self.theta = float(theta)
    self.momentum = float(momentum)

  def schedule(self, replicas):
    return Schedule(self, replicas)

  # ---- The copies --------------------------------------------------------

  def variable_state(self, builder, var_op):
    dtype, shape = graph_util.dtype_and_shape(var_op)
    if dtype not in _FLOAT_TYPES:
      raise tf.errors.UnimplementedError(
          None, var_op, f"TensorBow's adaptive SGD supports floating-point "
          f"model variables; '{var_op.name}' is {dtype.name}")
    scope = f"{builder.prefix}/adaptive/{var_op.name}"
    return _State(var_op, dtype,
                  graph_util.resource(f"{scope}/central_prev", dtype, shape),
                  builder.replicated(f"{scope}/lr_scale", dtype,
                                     tf.TensorShape([])))

  def apply_nodes(self, builder, state, node, var, group, aux):
    del var, group
    inputs = op_nodes.input_names(node)
    lr = next((i for i, name in enumerate(inputs) if name in _LR_NAMES),
              None)
    if lr is None:
      raise tf.errors.UnimplementedError(
          None, None, f"TensorBow's adaptive SGD cannot scale the learning "
          f"rate of '{tb_builder.unflat(node.name)}' (type {node.op}): it "
          "has no lr input")
    handle = builder.replica_variable_node(
        tf.compat.v1.NodeDef(name=node.name + ">tensorbow_lr_scale_var",
                             device=node.device),
        "TensorBowReplicaVarHandle", state.scale, aux)
    read = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_lr_scale",
                                op="ReadVariableOp", device=node.device)
    read.input.append(handle.name + ":0")
    read.attr["dtype"].type = state.dtype.as_datatype_enum
    scaled = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_lr",
                                  op="Mul", device=node.device)
    scaled.input.extend([node.input[lr], read.name + ":0"])
    scaled.attr["T"].type = state.dtype.as_datatype_enum
    node.input[lr] = scaled.name + ":0"
    return [handle, read, scaled, node], state

  # ---- The replicas' life cycle --------------------------------------------

  def seed_ops(self, builder, state, value):
    return [tf.raw_ops.AssignVariableOp(resource=state.central_prev,
                                        value=value),
            state.scale.set(tf.ones([builder.num_replicas], state.dtype),
                            builder.all_replicas(), stacked=True)]

  def wave_hooks(self, setting):
    return [_Pool(setting, self.merge_ops)]

  def merge_ops(self, builder, states, value):
    """Ops merging the replicas into the central model with weights
    `value` (one per replica, float64), with the global momentum."""
    ops = []
    for s in states:
      replicas = builder.variable_replicas(s.var_op)
      weights = tf.cast(value, s.dtype)
      z = graph_util.read(s.var_op)
      if s.var_op.type != "VarHandleOp":
        # A reference variable's read aliases its buffer, which the
        # assignment below writes in place.
        z = tf.raw_ops.Snapshot(input=z)
      z_prev = tf.raw_ops.ReadVariableOp(resource=s.central_prev,
                                         dtype=s.dtype)
      merged = (tf.tensordot(weights, replicas.stacked(), axes=1) +
                self.momentum * (z - z_prev))
      with tf.control_dependencies([merged]):
        ops += [tf.raw_ops.AssignVariableOp(resource=s.central_prev,
                                            value=z),
                graph_util.assign(s.var_op, merged),
                replicas.set(merged, builder.all_replicas())]
    return ops


class _Pool(hooks.WaveHook):
  """A pooled wave's side: before it, the replicas' learning-rate factors
  where the schedule changed them; after it, the schedule counts its
  updates and, at the end of a mega-batch, the replicas merge with the
  weights it chose from their drift.

  Args:
    setting: the setting's `hooks.Setting`.
    merge_ops: `Adaptive`'s merge, (builder, states, weights) -> ops.
  """

  def __init__(self, setting, merge_ops):
    self._session = setting.session
    self._runs = setting.replica_state.runs
    self._merge_ops = merge_ops

  def before(self, opened):
    factors = opened.schedule.factors() if opened.schedule else None
    run = self._runs.fed_run("scale", factors, _scale_ops)
    if run is not None:
      self._session.run(*run)

  def after(self, opened, ran):
    if opened.schedule is None or not opened.schedule.record(ran.updates):
      return
    drift = self._runs.made("drift", _drift_tensor)
    weights = opened.schedule.merge(
        self._session.run(drift) if drift is not None else np.zeros([0]))
    merge = self._runs.fed_run("merge", weights, self._merge_ops)
    if merge is not None:
      self._session.run(*merge)


def _scale_ops(builder, states, value):
  """Ops setting each replica's learning-rate factor to `value` (one per
  replica, float64)."""
  return [s.scale.set(tf.cast(value, s.dtype), builder.all_replicas(),
                      stacked=True) for s in states]


def _drift_tensor(builder, states):
  """A float64 [variables, replicas] tensor: the L2 norm of each
  replica's change since the last merge, per variable."""
  norms = []
  for s in states:
    stacked = builder.variable_replicas(s.var_op).stacked()
    change = stacked - graph_util.read(s.var_op)
    axes = list(range(1, change.shape.rank))
    norms.append(tf.cast(tf.norm(tf.reshape(change, [builder.num_replicas,
                                                      -1]), axis=1)
                         if axes else tf.abs(change), tf.float64))
  return tf.stack(norms)


class Schedule(object):
  """A session's Adaptive SGD schedule: each replica's batch size, its
  updates in the current mega-batch, and per mega-batch what Algorithms 1
  and 2 decided (`history`).

  Args:
    algorithm: the session's `Adaptive`.
    replicas: L.
  """

  def __init__(self, algorithm, replicas):
    self._algorithm = algorithm
    self._replicas = replicas
    self.sizes = None  # per replica, b_i
    self.base = None  # b_0
    self._bounds = None  # (b_min, b_max, beta)
    self._counts = np.zeros(replicas, np.int64)
    self._runs = 0
    self._factors_due = True
    self.history = []

  def batch_sizes(self, rows):
    """Per replica, the rows it takes at a time; the first call, with the
    first training run's `rows`, fixes b_0 and the bounds."""
    if self.sizes is None:
      a = self._algorithm
      base = a.batch_size or max(1, math.ceil(rows / self._replicas))
      b_max = a.b_max or 2 * base
      b_min = a.b_min or max(1, math.ceil(b_max / 8))
      if b_min > b_max:
        raise ValueError(f"adaptive: b_min ({b_min}) exceeds b_max "
                         f"({b_max}) for a first batch of {base} rows")
      beta = a.beta if a.beta is not None else b_min / 2
      self.base, self._bounds = base, (b_min, b_max, beta)
      self.sizes = np.full(self._replicas, min(max(base, b_min), b_max),
                           np.int64)
    return self.sizes

  def factors(self):
    """The learning-rate factors b_i / b_0 when they changed since the
    last call (the first call included), else None."""
    if not self._factors_due:
      return None
    self._factors_due = False
    return self.sizes / float(self.base)

  def record(self, replicas):
    """A training run ended; `replicas`: the replica of each update it
    made. Returns whether the mega-batch is complete."""
    self._counts += np.bincount(np.asarray(replicas, np.int64),
                                minlength=self._replicas)
    self._runs += 1
    return self._runs % self._algorithm.mega_batch == 0

  def merge(self, drift):
    """At the end of a mega-batch whose replicas changed by `drift` (as
    the pooled wave's hooks read it, `_drift_tensor`): the merge weights
    (Algorithm 2); the batch sizes move for the next (Algorithm 1)."""
    a = self._algorithm
    b_min, b_max, beta = self._bounds
    counts = self._counts.copy()
    perturbed = perturbs(drift, a.theta)
    weights = merge_weights(counts, self.sizes, perturbed, a.delta)
    self.history.append(dict(
        mega_batch=len(self.history) + 1, batch_sizes=self.sizes.tolist(),
        updates=counts.tolist(), weights=weights.tolist(),
        perturbed=perturbed, drift=float(np.max(drift)) if np.size(drift)
        else 0.0))
    sizes = next_batch_sizes(self.sizes, counts, beta, b_min, b_max,
                             a.mega_batch)
    self._factors_due = bool(np.any(sizes != self.sizes))
    self.sizes = sizes
    self._counts[:] = 0
    return weights
