"""Adaptive SGD for replicas of unequal speed (after Ma et al., SGD on
heterogeneous multi-GPU systems).

* Shards follow speed: after each wave a replica's share of the batch
  moves `step` of the way toward its share of the wave's throughput
  (rows / task time), within [min_fraction / L, 1 - (L - 1) min_fraction
  / L], so that the replicas' task times even out.
* The learning rate of a replica's step scales linearly with its shard
  size over the mean shard size (its optimizer's `lr` input, times a
  per-replica factor set before each wave).
* Between merges the replicas train alone. Every `merge_period`-th
  training run the central model becomes the shard-weighted mean of the
  replicas, with central momentum: z' = sum_j (n_j / N) w_j + mu (z -
  z_prev); the replicas are set to z', and when the merged update's
  relative L2 norm ||z' - z|| / ||z|| falls below `threshold` they are
  perturbed by up to `perturbation` of that update (uniform per element),
  to leave a plateau. The optimizers' slots stay each replica's.
"""
import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow.algorithms import base
from tensorbow.rewrite import graph_util

_FLOAT_TYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
# The learning-rate input of TF's apply ops, by its OpDef name.
_LR_NAMES = ("lr", "alpha")


class _State(object):

  def __init__(self, var_op, dtype, central_prev, scale):
    self.var_op = var_op
    self.dtype = dtype
    self.central_prev = central_prev  # resource handle
    self.scale = scale  # builder.Replicated scalar: the lr factor


class Adaptive(base.Algorithm):
  """Adaptive SGD; see the module's docstring.

  Args:
    merge_period: merge every `merge_period`-th training run.
    min_fraction: a replica's smallest share, as a fraction of 1 / L.
    step: how far a share moves toward its target per wave, in [0, 1].
    perturbation: the perturbation's bound, relative to the update.
    threshold: the relative update norm under which replicas are
      perturbed.
    central_momentum: mu, in [0, 1).

  Raises:
    ValueError: for an argument out of range.
  """

  name = "adaptive"

  def __init__(self, merge_period=1, min_fraction=1 / 8, step=1 / 2,
               perturbation=0.1, threshold=0.1, central_momentum=0.9):
    if isinstance(merge_period, bool) or int(merge_period) != merge_period \
        or merge_period < 1:
      raise ValueError(f"merge_period must be an int >= 1, got "
                       f"{merge_period!r}")
    checks = {"min_fraction": (min_fraction, 0.0, 1.0),
              "step": (step, 0.0, 1.0),
              "perturbation": (perturbation, 0.0, float("inf")),
              "threshold": (threshold, 0.0, float("inf"))}
    for name, (value, low, high) in checks.items():
      if not low <= float(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    if not 0.0 <= float(central_momentum) < 1.0:
      raise ValueError(f"central_momentum must be in [0, 1), got "
                       f"{central_momentum!r}")
    self.merge_period = int(merge_period)
    self.min_fraction = float(min_fraction)
    self.step = float(step)
    self.perturbation = float(perturbation)
    self.threshold = float(threshold)
    self.central_momentum = float(central_momentum)

  # ---- Shards --------------------------------------------------------------

  def first_shares(self, replicas):
    return np.full(replicas, 1.0 / replicas)

  def next_shares(self, shares, times):
    shares = np.asarray(shares, np.float64)
    speed = shares / np.maximum(np.asarray(times, np.float64), 1e-9)
    target = speed / speed.sum()
    moved = shares + self.step * (target - shares)
    n = len(shares)
    return _bounded(moved / moved.sum(), self.min_fraction / n,
                    1.0 - (n - 1) * self.min_fraction / n)

  def wave_value(self, wave, sizes):
    del wave
    sizes = np.asarray(sizes, np.float64)
    return sizes / sizes.mean()

  def merge_value(self, wave, sizes):
    if wave % self.merge_period:
      return None
    sizes = np.asarray(sizes, np.float64)
    return sizes / sizes.sum()

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
    inputs = [a.name for a in compat.op_def(node.op).input_arg]
    lr = next((i for i, name in enumerate(inputs) if name in _LR_NAMES),
              None)
    if lr is None:
      raise tf.errors.UnimplementedError(
          None, None, f"TensorBow's adaptive SGD cannot scale the learning "
          f"rate of '{node.name}' (type {node.op}): it has no lr input")
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
    return [handle, read, scaled, node]

  # ---- The replicas' life cycle --------------------------------------------

  def seed_ops(self, builder, state, value):
    return [tf.raw_ops.AssignVariableOp(resource=state.central_prev,
                                        value=value),
            state.scale.set(tf.ones([builder.num_replicas], state.dtype),
                            builder.all_replicas(), stacked=True)]

  def wave_ops(self, builder, states, value):
    return [s.scale.set(tf.cast(value, s.dtype), builder.all_replicas(),
                        stacked=True) for s in states]

  def merge_ops(self, builder, states, value):
    ops = []
    for s in states:
      replicas = builder.variable_replicas(s.var_op)
      stacked = replicas.stacked()
      weights = tf.cast(value, s.dtype)
      z = graph_util.read(s.var_op)
      if s.var_op.type != "VarHandleOp":
        # A reference variable's read aliases its buffer, which the
        # assignment below writes in place.
        z = tf.raw_ops.Snapshot(input=z)
      z_prev = tf.raw_ops.ReadVariableOp(resource=s.central_prev,
                                         dtype=s.dtype)
      merged = (tf.tensordot(weights, stacked, axes=1) +
                self.central_momentum * (z - z_prev))
      update = merged - z
      relative = tf.norm(update) / tf.maximum(tf.norm(z),
                                              tf.constant(1e-12, s.dtype))
      noise = (tf.random.uniform(tf.shape(stacked), -1.0, 1.0, s.dtype) *
               self.perturbation * update)
      noise = tf.where(relative < self.threshold, noise, tf.zeros_like(noise))
      with tf.control_dependencies([merged, update]):
        ops += [tf.raw_ops.AssignVariableOp(resource=s.central_prev,
                                            value=z),
                graph_util.assign(s.var_op, merged),
                replicas.set(merged + noise, builder.all_replicas(),
                             stacked=True)]
    return ops


def _bounded(shares, low, high):
  """`shares` (summing to 1) moved into [low, high], still summing to 1:
  what clipping takes from or gives to some is spread over the others in
  proportion."""
  shares = np.clip(shares, low, high)
  for _ in range(len(shares)):
    excess = shares.sum() - 1.0
    free = (shares > low) if excess > 0 else (shares < high)
    if abs(excess) < 1e-12 or not free.any():
      break
    shares[free] -= excess * shares[free] / shares[free].sum()
    shares = np.clip(shares, low, high)
  return shares
