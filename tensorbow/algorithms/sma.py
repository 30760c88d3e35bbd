"""Synchronous model averaging (DESIGN.md): what it makes of a replica's
optimizer step, and the state it keeps per model variable.

Each optimizer apply op on a model variable becomes, in the copies:

* for a variable trained by SGD or momentum, one fused op (the step, the
  replica's correction and its share of the central update, summed in
  replica order; the last replica of the wave rotates the central
  buffers);
* otherwise the step fused with the correction (SGD, momentum), or the
  generic correction around any other optimizer's apply op, followed by a
  leader op: the last replica of the wave updates the central model from
  every replica's correction buffer.

SGD and momentum come either as TensorFlow's apply ops or as TensorBow's
taking a dense layer's gradient as its factors xᵀ·dy; each fused op has a
form taking the factors too.

Op types come from the tables below, by the apply op's type and the
variable's kind, never from editing type names.
"""
import collections

import tensorflow as tf

from tensorbow import op_nodes
from tensorbow import ops as tb_ops
from tensorbow.algorithms import base
from tensorbow.algorithms import sma_wave
from tensorbow.rewrite import graph_util

_FLOAT_TYPES = tuple(t.as_datatype_enum for t in (
    tf.float16, tf.bfloat16, tf.float32, tf.float64))
# Half-precision variables are updated in float32 arithmetic (the kernels
# widen on load and round once on store), and their central update sums
# the replicas' corrections in float32, in the leader: the fused ops would
# add each replica's share to a buffer of the variable's own dtype.
_FUSABLE_TYPES = (tf.float32.as_datatype_enum, tf.float64.as_datatype_enum)

# The optimizers' apply ops that SMA fuses with its correction, by type:
# TensorFlow's, and TensorBow's taking a dense layer's gradient as its
# factors (rewrite/substitutes.py's outer_applies).
_FUSED_KINDS = {
    "ApplyGradientDescent": "sgd",
    "ResourceApplyGradientDescent": "sgd",
    "ApplyMomentum": "momentum",
    "ResourceApplyMomentum": "momentum",
    "TensorBowApplyGradientDescentOuter": "sgd_outer",
    "TensorBowResourceApplyGradientDescentOuter": "sgd_outer",
    "TensorBowApplyMomentumOuter": "momentum_outer",
    "TensorBowResourceApplyMomentumOuter": "momentum_outer",
}
# A fused kind's TensorBow ops, each for a reference and for a resource
# variable: the step with the correction; and the step, the correction and
# the replica's share of the central update. Each takes the apply op's
# inputs by their names in the apply op, but for those `renamed`:
# TensorFlow's ApplyGradientDescent (and TensorBow's taking the factors)
# calls its learning rate `alpha`, which in the SMA ops is the correction
# factor.
_Fused = collections.namedtuple("_Fused", ["step", "with_central", "renamed"])
_LEARNING_RATE_ALPHA = {"alpha": "lr"}


def _pair(name):
  return (f"TensorBowApply{name}", f"TensorBowResourceApply{name}")


_FUSED = {
    "sgd": _Fused(_pair("SmaGradientDescent"),
                  _pair("SmaGradientDescentWithCentral"),
                  _LEARNING_RATE_ALPHA),
    "momentum": _Fused(_pair("SmaMomentum"), _pair("SmaMomentumWithCentral"),
                       {}),
    "sgd_outer": _Fused(_pair("SmaGradientDescentOuter"),
                        _pair("SmaGradientDescentOuterWithCentral"),
                        _LEARNING_RATE_ALPHA),
    "momentum_outer": _Fused(_pair("SmaMomentumOuter"),
                             _pair("SmaMomentumOuterWithCentral"), {}),
}
# Around any other optimizer's apply op (for a reference, for a resource
# variable).
_SMA_OPS = {
    "correction": ("TensorBowSmaCorrection",
                   "TensorBowResourceSmaCorrection"),
    "apply_correction": ("TensorBowApplySmaCorrection",
                         "TensorBowResourceApplySmaCorrection"),
    "leader": ("TensorBowApplySmaCentralLeader",
               "TensorBowResourceApplySmaCentralLeader"),
}


# SMA's own state for one model variable, fixed once made: what a leader
# first needs, apply_nodes returns in a new State.
State = collections.namedtuple("State", [
    "name",  # the model variable's op name
    "correction",  # builder.Replicated: per replica
    # Every replica's correction handle, made when a leader first needs
    # them, or None: the fused ops keep no correction, so then none exists.
    "corrections",
    "central_prev",  # resource handle
    "central_value",  # the central model, read
    # Where the replicas sum the next central model (resource handle), or
    # None where corrections and a leader update it instead.
    "central_next",
    "barrier",  # the name of its count of arrivals
    # With several devices (Builder.placement), per device its _Central:
    # the device's replicas correct against it and update it alone.
    "devices",
])


# The central model that a group's replicas correct against and update:
# the user's variable, or a device's own copy. `key` tells the inputs of
# different copies apart; `var` is a reference or a handle; `value` is its
# value read; `next` its buffer for the fused ops (or None); `replicas` the
# replicas that update it.
_Central = collections.namedtuple("_Central", [
    "key", "var", "prev", "next", "value", "barrier", "replicas"])

# An optimizer's apply op that SMA replaces, and what every op replacing
# it takes: `node` its NodeDef; `dtype` its variable's dtype; `resource`
# whether the variable is a resource variable; `control` the ops it waits
# for; `spec` its _Fused (None: any other optimizer); `inputs` its inputs
# as the fused ops take them; `alpha` and `momentum` the correction factor
# and central momentum as inputs; `ext` the prefix of the variable's inputs'
# keys.
_Apply = collections.namedtuple("_Apply", [
    "node", "dtype", "resource", "control", "spec", "inputs", "alpha",
    "momentum", "ext"])


def _node_def(apply, op_type, name, copied=("use_locking",), **args):
  """The NodeDef of `op_type` placed as `apply`'s apply op, with its
  `copied` attrs: what replaces an apply op runs where it ran."""
  node = apply.node
  return op_nodes.node_def(
      op_type, name, device=node.device, T=apply.dtype,
      **{a: node.attr[a] for a in copied if a in node.attr}, **args)


def _device_centrals(placement, scope, dtype, shape, fused):
  """Per device of `placement` (None: none), the _Central its replicas
  correct against and update, named under `scope`; with the `fused` ops'
  buffer for the next central model."""
  devices = []
  for d in range(placement.num_devices if placement is not None else 0):
    # The user's variable holds the central model between waves; during
    # one, each device's replicas work on the device's copy.
    at = f"{scope}/device_{d}"
    copy = graph_util.resource(f"{at}/central", dtype, shape)
    devices.append(_Central(
        f"/device_{d}", copy,
        graph_util.resource(f"{at}/central_prev", dtype, shape),
        graph_util.resource(f"{at}/central_next", dtype, shape)
        if fused else None,
        tf.raw_ops.ReadVariableOp(resource=copy, dtype=dtype,
                                  name=f"{at}/central_value"),
        f"{at}/barrier", placement.replicas_of(d)))
  return tuple(devices)


class SMA(base.Algorithm):
  """Synchronous model averaging (DESIGN.md).

  Args:
    alpha: the correction factor, in (0, 1]; None means 1 / replicas.
    central_momentum: the momentum of the central model, in [0, 1).

  Raises:
    ValueError: for an argument out of range.
  """

  name = "sma"
  spans_workers = True
  spans_devices = True

  def __init__(self, alpha=None, central_momentum=0.9):
    if alpha is not None and not 0.0 < float(alpha) <= 1.0:
      raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    if not 0.0 <= float(central_momentum) < 1.0:
      raise ValueError(
          f"central_momentum must be in [0, 1), got {central_momentum!r}")
    self.alpha = None if alpha is None else float(alpha)
    self.central_momentum = float(central_momentum)

  def resolved(self, replicas):
    if self.alpha is not None:
      return self
    return SMA(1.0 / replicas, self.central_momentum)

  # ---- The copies --------------------------------------------------------

  def alpha_tensor(self, builder, state, dtype):
    """The correction factor the replicas' steps on `state`'s variable
    read."""
    del state
    return builder.constant(self.alpha, dtype)

  def fuses_outer(self, has_state):
    # Its fused step takes a dense layer's gradient as its factors.
    del has_state
    return True

  def variable_state(self, builder, var_op):
    dtype, shape = graph_util.dtype_and_shape(var_op)
    if dtype.as_datatype_enum not in _FLOAT_TYPES:
      raise tf.errors.UnimplementedError(
          None, var_op,
          f"TensorBow's SMA supports floating-point model variables; "
          f"'{var_op.name}' is {dtype.name}")
    scope = f"{builder.prefix}/sma/{var_op.name}"
    placement = builder.placement
    # A fused op takes the central model as the replicas' variables come. A
    # reference is used where it lives, so not by copies pinned to other
    # devices, and a device's copy is a resource variable.
    fused = (dtype.as_datatype_enum in _FUSABLE_TYPES and
             (var_op.type == "VarHandleOp" or builder.device(0) is None))
    return State(
        name=var_op.name,
        correction=builder.replicated(f"{scope}/correction", dtype, shape),
        corrections=None,
        central_prev=graph_util.resource(f"{scope}/central_prev", dtype,
                                         shape),
        central_value=tf.identity(graph_util.read(var_op),
                                  name=f"{scope}/central"),
        # With devices, only the devices' copies take the fused ops' sums.
        central_next=(graph_util.resource(f"{scope}/central_next", dtype,
                                          shape)
                      if fused and placement is None else None),
        barrier=f"{scope}/barrier",
        devices=_device_centrals(placement, scope, dtype, shape, fused))

  def _central(self, builder, state, var, group):
    """The _Central that stream group `group`'s copy updates."""
    if state.devices:
      return state.devices[builder.placement.group_device[group]]
    user = builder.graph.get_operation_by_name(var.name)
    return _Central("", user.outputs[0],
                    state.central_prev, state.central_next,
                    state.central_value, state.barrier,
                    list(range(builder.num_replicas)))

  def apply_nodes(self, builder, state, node, var, group, aux):
    apply = self._apply(builder, state, node, var, aux)
    target = self._central(builder, state, var, group)
    if target.next is not None and apply.spec is not None:
      return (self._fused_with_central(builder, apply, target, group, aux),
              state)
    # This task's replica's correction buffer.
    handle = builder.replica_variable_node(
        tf.compat.v1.NodeDef(name=node.name + ">tensorbow_correction_var",
                             device=node.device),
        "TensorBowReplicaVarHandle", state.correction, aux)
    central = aux(f"{apply.ext}{target.key}/central", target.value)
    if state.corrections is None:  # the first leader needs them
      state = state._replace(corrections=state.correction.handles())
    step = node.name + ">tensorbow_step"
    nodes = self._step_nodes(apply, step, handle.name + ":0", central)
    leader = self._leader(apply, target, state.corrections, step, aux)
    return [handle] + nodes + [leader], state

  def _apply(self, builder, state, node, var, aux):
    """The _Apply of apply op `node` on model variable op `var`: what
    every op replacing it takes, the correction factor and the central
    momentum named as inputs of the group's copy by `aux`."""
    # "T" for the apply ops; "dtype" for the resource writes of sparse
    # updates (analysis.is_apply).
    dtype = tf.as_dtype(node.attr["T" if "T" in node.attr else "dtype"].type)
    ext = f"__tensorbow__/{var.name}"
    alpha = aux(f"{ext}/alpha", self.alpha_tensor(builder, state, dtype))
    momentum = aux(f"{ext}/momentum",
                   builder.constant(self.central_momentum, dtype))
    spec = _FUSED.get(_FUSED_KINDS.get(node.op))  # None: any other optimizer
    # A fused op takes the apply op's inputs by their names there.
    inputs = {} if spec is None else {
        spec.renamed.get(arg, arg): tensor
        for arg, tensor in op_nodes.named_inputs(node).items()}
    return _Apply(node, dtype, var.type == "VarHandleOp",
                  op_nodes.control_names(node), spec, inputs, alpha,
                  momentum, ext)

  def _fused_with_central(self, builder, apply, target, group, aux):
    """The NodeDefs of one op: the step, the correction and this
    replica's share of the central update, under the apply op's name;
    the central model's buffers as handles of the group's device (first
    the NodeDefs that make them so, if any)."""
    node = apply.node
    handles, extra = {}, []
    for arg, role, handle in (("central", "central_var", target.var),
                              ("central_prev", "central_prev", target.prev),
                              ("next", "central_next", target.next)):
      handles[arg], nodes = builder.device_handle(
          f"{node.name}>tensorbow_{role}", handle, aux)
      extra += nodes
    replica = aux("__tensorbow__/replica", builder.replica_input)
    fused = _node_def(
        apply, apply.spec.with_central[apply.resource], node.name,
        copied=("use_locking", "use_nesterov"), control=apply.control,
        **apply.inputs, **handles, alpha=apply.alpha,
        central_momentum=apply.momentum, replica_index=replica,
        replica=group, stagger=builder.num_groups,
        num_replicas=len(target.replicas), first_replica=target.replicas[0],
        barrier=target.barrier)
    return extra + [fused]

  def _step_nodes(self, apply, step, correction, central):
    """The NodeDefs of the replica's step corrected against `central`
    through its correction buffer `correction`, the last named `step`:
    the step fused with the correction (SGD, momentum), or the generic
    correction around any other optimizer's apply op."""
    if apply.spec is not None:
      return [_node_def(apply, apply.spec.step[apply.resource], step,
                        copied=("use_locking", "use_nesterov"),
                        control=apply.control, **apply.inputs,
                        correction=correction, central=central,
                        alpha=apply.alpha)]
    # Any other optimizer: the correction before its apply op, applied
    # after it. Its variable is its first input (analysis.variable_of).
    node = apply.node
    var_input = next(i for i in node.input if not i.startswith("^"))
    before = _node_def(apply, _SMA_OPS["correction"][apply.resource],
                       node.name + ">tensorbow_correction",
                       control=apply.control, var=var_input,
                       correction=correction, central=central,
                       alpha=apply.alpha)
    inner = tf.compat.v1.NodeDef()
    inner.CopyFrom(node)
    inner.name = node.name + ">tensorbow_apply"
    inner.input.append("^" + before.name)
    return [before, inner,
            _node_def(apply, _SMA_OPS["apply_correction"][apply.resource],
                      step, control=[inner.name], var=var_input,
                      correction=correction)]

  def _leader(self, apply, target, corrections, step, aux):
    """The NodeDef of the leader op after op `step`: the last replica of
    the wave updates `target`'s central model from the correction buffer
    (`corrections`, by replica) of each replica updating it."""
    # The leader takes the apply op's name, so what waited for the apply op
    # (the user's train op, a global step) waits for the central update.
    ext = apply.ext
    by_handle = target.var.dtype == tf.resource
    return _node_def(
        apply, _SMA_OPS["leader"][by_handle], apply.node.name,
        control=[step],
        central=aux(f"{ext}{target.key}/central_var", target.var),
        central_prev=aux(f"{ext}{target.key}/central_prev", target.prev),
        corrections=[aux(f"{ext}/corrections_{r}", corrections[r])
                     for r in target.replicas],
        momentum=apply.momentum, barrier=target.barrier)

  def device_sync(self, builder, state):
    # Each device's wave moved its copy from the same base (the central
    # model and its momentum term) by the sum of its replicas'
    # corrections; the moves summed are the move of all L replicas.
    if not state.devices:
      return None
    var = builder.graph.get_operation_by_name(state.name)
    dtype, _ = graph_util.dtype_and_shape(var)
    op = (tb_ops.library().tensor_bow_resource_sum_device_copies
          if var.type == "VarHandleOp" else
          tb_ops.library().tensor_bow_sum_device_copies)
    out = op(central=var.outputs[0], central_prev=state.central_prev,
             copies=[c.var for c in state.devices],
             momentum=builder.constant(self.central_momentum, dtype),
             name=f"device_sum/{state.name}")
    return out if isinstance(out, tf.Operation) else out.op

  def worker_part(self, builder, state):
    """Over a job's workers, the variable of `state`: (op run before each
    wave, the tensor each worker adds to the sum after it, a function
    from a tensor of that sum to the op applying it)."""
    # Every worker's wave moved its central model from the same `base`
    # (the central model and its momentum term) by the sum of its own
    # replicas' corrections; the sum over the workers of those moves is
    # the move of one wave of all their replicas.
    var = builder.graph.get_operation_by_name(state.name)
    dtype, shape = graph_util.dtype_and_shape(var)
    handle = graph_util.resource(
        f"{builder.prefix}/sma/{state.name}/worker_base", dtype, shape)
    central = graph_util.read(var)
    prev = tf.raw_ops.ReadVariableOp(resource=state.central_prev,
                                     dtype=dtype)
    momentum = builder.constant(self.central_momentum, dtype)
    before = tf.raw_ops.AssignVariableOp(
        resource=handle, value=central + momentum * (central - prev))
    base = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)

    def apply(total):
      # With devices, the wave's device sum came first and set every
      # device's copy to this worker's model: they take the workers' too.
      assign = graph_util.assign(var, base + total)
      if not state.devices:
        return assign
      with tf.control_dependencies([assign]):
        new = graph_util.read(var)
      return tf.group(assign, *[
          tf.raw_ops.AssignVariableOp(resource=c.var, value=new)
          for c in state.devices])

    return before, graph_util.read(var) - base, apply

  # ---- The replicas' life cycle --------------------------------------------

  def after_copy(self, builder, state, seeded):
    # apply_nodes made the corrections (all it adds to a state) after the
    # variable was seeded, whose seed ops do not set them: set now, at zero.
    if not seeded or state.corrections is None:
      return []
    return [state.correction.set(tf.zeros_like(state.central_value),
                                 builder.all_replicas())]

  def seed_ops(self, builder, state, value):
    zeros = tf.zeros_like(value)
    ops = [tf.raw_ops.AssignVariableOp(resource=state.central_prev,
                                       value=value)]
    if state.corrections is not None:
      ops.append(state.correction.set(zeros, builder.all_replicas()))
    if state.central_next is not None:
      ops.append(tf.raw_ops.AssignVariableOp(resource=state.central_next,
                                             value=zeros))
    for c in state.devices:
      ops += [tf.raw_ops.AssignVariableOp(resource=c.var, value=value),
              tf.raw_ops.AssignVariableOp(resource=c.prev, value=value)]
      if c.next is not None:
        ops.append(tf.raw_ops.AssignVariableOp(resource=c.next, value=zeros))
    return ops

  def reseed_ops(self, builder, state, central, replicas):
    if state.corrections is None:
      return []
    return [state.correction.set(tf.zeros_like(central), replicas)]

  def wave_hooks(self, setting):
    own = [sma_wave.Participants(setting, self.central_momentum)]
    if setting.job.reduce is None:
      return own
    return own + [sma_wave.AcrossWorkers(setting, self.worker_part)]

  def state_parts(self, builder, state):
    name = state.name
    parts = [(f"{name}/sma/central_prev", state.central_prev)]
    if state.central_next is not None:
      parts.append((f"{name}/sma/central_next", state.central_next))
    for d, c in enumerate(state.devices):
      parts += [(f"{name}/sma/device_{d}/central", c.var),
                (f"{name}/sma/device_{d}/central_prev", c.prev)]
      if c.next is not None:
        parts.append((f"{name}/sma/device_{d}/central_next", c.next))
    if state.corrections is not None:
      parts.append(([f"{name}/sma/correction_{r}"
                     for r in range(builder.num_replicas)], state.correction))
    return parts
