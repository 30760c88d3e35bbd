"""Builds the execution graph: replicas of the learning part, and SMA.

The user's operations stay as they are: they are the central model, and
plain runs use them. For a training run, every operation of its closure is
copied once per replica under `<prefix>/replica_<r>/`, with the variables it
writes copied too (`<prefix>/replica_<r>/<name>`); placeholders, fed
tensors and read-only variables are shared with the user's graph, so a
learning task feeds the user's own placeholders. In the copies, each
optimizer apply op on a model variable is fused with its SMA correction
(SGD and momentum) or wrapped by the generic correction (any other
optimizer), then followed by a leader op: the last replica of a wave to
reach a model variable updates the central model from every replica's
correction (DESIGN.md section 3), while the others go on. The
synchronisation op, after the wave, refreshes the other written variables;
seed ops copy the central model into the replicas.

Copies are made incrementally: a later training run with a different
closure copies only the operations not yet copied.
"""
import contextlib

import tensorflow as tf

from tensorbow import ops as tb_ops
from tensorbow.rewrite import analysis
from tensorbow.rewrite import kernels

_FLOAT_TYPES = (tf.float32.as_datatype_enum, tf.float64.as_datatype_enum)
# Variables shared by name across sessions must not share replicas.
_SHARED_NAME = "shared_name"


class _Sma(object):
  """TensorBow's own state for one model variable under SMA."""

  def __init__(self, corrections, central_prev, central_value, central_next):
    self.corrections = corrections  # one resource handle per replica
    self.central_prev = central_prev  # resource handle
    self.central_value = central_value  # the central model, read
    # Where the replicas sum the next central model (resource handle), or
    # None for a reference variable (corrections and a leader instead).
    self.central_next = central_next


class Replicator(object):
  """Extends a user's graph with replicas of its learning part.

  Args:
    graph: the user's `tf.Graph`.
    num_replicas: L.
    algorithm: "sma" or "none".
    alpha: the SMA correction factor.
    central_momentum: the SMA central momentum.
    share_variables: copy no variable: the one copy trains the user's own
      variables, as plain training does (L = 1, where the copy only brings
      the faster kernels of `kernels`).
  """

  def __init__(self, graph, num_replicas, algorithm, alpha, central_momentum,
               share_variables=False):
    if share_variables and num_replicas != 1:
      raise ValueError("share_variables needs exactly one replica")
    self._graph = graph
    self._num_replicas = num_replicas
    self._share_variables = share_variables
    self._algorithm = algorithm
    self._alpha = alpha
    self._central_momentum = central_momentum
    with graph.as_default():
      self._prefix = graph.unique_name("tensorbow", mark_as_used=True)
    self._copied = set()  # op names copied into every replica
    self._kinds = {}  # replicated variable op name -> "model" | "slot" | "other"
    self._sma = {}  # model variable op name -> _Sma
    self._seeds = {}  # replicated variable op name -> seed op
    self._pending_seed = set()  # replicated variables to seed before training
    self._pending_replicas = set()  # replicas to seed before training
    self._stubs = {}  # op name -> tensor that carries a control dependency
    self._groups = {}  # (purpose, variable names) -> op, built once
    self._constants = {}
    self._fast_kernels = kernels.enabled()

  @property
  def prefix(self):
    return self._prefix

  @contextlib.contextmanager
  def _building(self):
    """Where TensorBow's ops are made: below the prefix, where no op the
    user adds later (imported under its own name) can want their names."""
    graph = self._graph
    with graph.as_default(), graph.control_dependencies(None), \
        graph.name_scope(self._prefix + "/"):
      yield

  def replica_name(self, replica, name):
    """The name of replica `replica`'s copy of op `name`.

    Below the replica's scope the user's '/' becomes '>': copies made by
    later runs then never fall inside an earlier copy's name scope, where
    TensorFlow's importer would rename them.
    """
    return f"{self._prefix}/replica_{replica}/{_flat(name)}"

  def is_copied(self, name):
    return name in self._copied

  # ---- Building replicas ---------------------------------------------------

  def extend(self, info, fed_names):
    """Copies what `info`'s closure needs into every replica (idempotent)."""
    graph = self._graph
    replicated = set() if self._share_variables else set(info.written)
    for name in replicated:
      if name not in self._kinds:
        if name in info.model_vars:
          self._kinds[name] = "model"
        elif name in info.slot_vars:
          self._kinds[name] = "slot"
        else:
          self._kinds[name] = "other"
    new_ops = []
    for op in info.ops:
      if op.name in self._copied:
        continue
      if op.type in ("Placeholder", "PlaceholderV2"):
        continue
      if any(t.name in fed_names for t in op.outputs):
        continue
      if op.type in analysis.VARIABLE_OPS and op.name not in replicated:
        continue
      new_ops.append(op)
    if not new_ops:
      return
    with self._building():
      if self._algorithm == "sma" and not self._share_variables:
        for name in info.model_vars:
          if name not in self._sma:
            self._sma[name] = self._make_sma_state(graph.get_operation_by_name(name))
      local = set(op.name for op in new_ops)
      for r in range(self._num_replicas):
        graph_def, input_map = self._replica_graph_def(new_ops, local, r)
        tf.compat.v1.import_graph_def(
            graph_def, input_map=input_map,
            name=f"{self._prefix}/replica_{r}/")
      self._copied.update(local)
      for op in new_ops:
        if op.type in analysis.VARIABLE_OPS:
          self._seeds[op.name] = self._make_seed(op)
          self._pending_seed.add(op.name)

  def _replica_graph_def(self, new_ops, local, replica):
    graph_def = tf.compat.v1.GraphDef()
    graph_def.versions.CopyFrom(self._graph.graph_def_versions)
    input_map = {}

    def external(name, index):
      key = f"{name}:{index}"
      if key not in input_map:
        input_map[key] = self._replica_tensor(name, index, replica)
      return key

    def resolve(inp):
      if inp.startswith("^"):
        name = inp[1:]
        if name in local:
          return "^" + _flat(name)
        key = "^" + name
        if key not in input_map:
          input_map[key] = self._control_stub(name, replica)
        return inp
      name, _, index = inp.partition(":")
      if name in local:
        return f"{_flat(name)}:{index or 0}"
      return external(name, int(index or 0))

    def aux(key, tensor):
      input_map[key + ":0"] = tensor
      return key + ":0"

    for op in new_ops:
      node = tf.compat.v1.NodeDef()
      node.CopyFrom(op.node_def)
      node.name = _flat(op.name)
      if "_class" in node.attr:
        del node.attr["_class"]
      if op.type in analysis.VARIABLE_OPS and _SHARED_NAME in node.attr:
        node.attr[_SHARED_NAME].s = (
            self.replica_name(replica, op.name).encode()
            if op.type == "VarHandleOp" else b"")
      inputs = [resolve(i) for i in node.input]
      del node.input[:]
      node.input.extend(inputs)
      var = (analysis.variable_of(op.inputs[0])
             if analysis.is_apply(op) else None)
      if var is not None and var.name in self._sma:
        if any(t.consumers() for t in op.outputs):
          raise tf.errors.UnimplementedError(
              None, op, f"TensorBow cannot train apply op '{op.name}': an "
              "op consumes its output; only control dependencies on it are "
              "supported")
        for extra in self._sma_nodes(node, var, replica, aux):
          graph_def.node.add().CopyFrom(extra)
      else:
        faster = kernels.substitute(node, op) if self._fast_kernels else None
        for out in faster or [node]:
          graph_def.node.add().CopyFrom(out)
    return graph_def, input_map

  def _replica_tensor(self, name, index, replica):
    if name in self._copied:
      name = self.replica_name(replica, name)
    return self._graph.get_tensor_by_name(f"{name}:{index}")

  def _control_stub(self, name, replica):
    if name in self._copied:
      name = self.replica_name(replica, name)
    if name not in self._stubs:
      op = self._graph.get_operation_by_name(name)
      if op.outputs:
        self._stubs[name] = op.outputs[0]
      else:
        with self._graph.control_dependencies([op]):
          self._stubs[name] = tf.constant(
              0, name=f"{self._prefix}/control/{name}")
    return self._stubs[name]

  # ---- SMA in the replicas -------------------------------------------------

  def _make_sma_state(self, var_op):
    dtype, shape = _dtype_and_shape(var_op)
    if dtype.as_datatype_enum not in _FLOAT_TYPES:
      raise tf.errors.UnimplementedError(
          None, var_op,
          f"TensorBow's SMA supports float32 and float64 model variables; "
          f"'{var_op.name}' is {dtype.name}")
    scope = f"{self._prefix}/sma/{var_op.name}"
    corrections = [
        _resource(f"{scope}/correction_{r}", dtype, shape)
        for r in range(self._num_replicas)]
    central_prev = _resource(f"{scope}/central_prev", dtype, shape)
    central_value = tf.identity(read(var_op), name=f"{scope}/central")
    central_next = (_resource(f"{scope}/central_next", dtype, shape)
                    if var_op.type == "VarHandleOp" else None)
    return _Sma(corrections, central_prev, central_value, central_next)

  def _constant(self, value, dtype):
    key = (value, dtype)
    if key not in self._constants:
      self._constants[key] = tf.constant(
          value, dtype=dtype, name=f"{self._prefix}/constant")
    return self._constants[key]

  def _sma_nodes(self, node, var, replica, aux):
    """The NodeDefs that replace apply op `node` on model variable `var`."""
    state = self._sma[var.name]
    dtype = tf.as_dtype(node.attr["T"].type)
    data = [i for i in node.input if not i.startswith("^")]
    control = [i for i in node.input if i.startswith("^")]
    resource = var.type == "VarHandleOp"
    kind = _FUSED_KINDS.get(node.op)  # None: any other optimizer
    ext = f"__tensorbow__/{var.name}"
    alpha = aux(f"{ext}/alpha", self._constant(self._alpha, dtype))

    def make(name, op_type, inputs, attrs=("T", "use_locking")):
      out = tf.compat.v1.NodeDef(name=name, op=op_type, device=node.device)
      out.input.extend(inputs)
      for a in attrs:
        if a in node.attr:
          out.attr[a].CopyFrom(node.attr[a])
      return out

    central_var = self._graph.get_operation_by_name(var.name).outputs[0]
    if state.central_next is not None and kind is not None:
      # One op: the step, the correction and this replica's share of the
      # central update, under the apply op's name.
      op_type, arrange = _WITH_CENTRAL[kind]
      inputs = arrange(data, [
          aux(f"{ext}/central_var", central_var),
          aux(f"{ext}/central_prev", state.central_prev),
          aux(f"{ext}/central_next", state.central_next)], alpha)
      fused = make(node.name, op_type,
                   inputs + [aux(f"{ext}/momentum", self._constant(
                       self._central_momentum, dtype))] + control,
                   attrs=("T", "use_locking", "use_nesterov"))
      fused.attr["replica"].i = replica
      fused.attr["num_replicas"].i = self._num_replicas
      fused.attr["barrier"].s = self._barrier(var.name).encode()
      return [fused]
    correction = aux(f"{ext}/correction", state.corrections[replica])
    central = aux(f"{ext}/central", state.central_value)
    step = node.name + ">tensorbow_step"
    if kind == "sgd":
      var_in, lr, delta = data
      nodes = [make(step, _SMA_OPS["sgd_step"][resource],
                    [var_in, correction, central, alpha, lr, delta] + control)]
    elif kind == "momentum":
      var_in, accum, lr, grad, momentum = data
      nodes = [make(step, _SMA_OPS["momentum_step"][resource],
                    [var_in, accum, correction, central, alpha, lr, grad,
                     momentum] + control,
                    attrs=("T", "use_locking", "use_nesterov"))]
    else:
      # Any other optimizer: the correction before its apply op, applied
      # after it.
      before = make(node.name + ">tensorbow_correction",
                    _SMA_OPS["correction"][resource],
                    [data[0], correction, central, alpha] + control)
      inner = tf.compat.v1.NodeDef()
      inner.CopyFrom(node)
      inner.name = node.name + ">tensorbow_apply"
      inner.input.append("^" + before.name)
      nodes = [before, inner,
               make(step, _SMA_OPS["apply_correction"][resource],
                    [data[0], correction, "^" + inner.name])]
    # The leader takes the apply op's name, so what waited for the apply op
    # (the user's train op, a global step) waits for the central update.
    leader = make(node.name, _SMA_OPS["leader"][resource], [
        aux(f"{ext}/central_var", central_var),
        aux(f"{ext}/central_prev", state.central_prev)
    ] + [aux(f"{ext}/corrections_{i}", c)
         for i, c in enumerate(state.corrections)] + [
             aux(f"{ext}/momentum",
                 self._constant(self._central_momentum, dtype)),
             "^" + step])
    leader.attr["N"].i = self._num_replicas
    leader.attr["barrier"].s = self._barrier(var.name).encode()
    return nodes + [leader]

  def _barrier(self, var_name):
    return f"{self._prefix}/sma/{var_name}/barrier"

  def reset_barriers_op(self):
    """Op restarting the leaders' counts (after a failed wave), or None."""
    names = tuple(sorted(self._sma))
    if not names:
      return None
    return self._group("reset_barriers", names, lambda: (
        tb_ops.library().tensor_bow_reset_sma_barriers(
            barriers=[self._barrier(n) for n in names],
            name=f"{self._prefix}/reset_barriers")))

  def _group(self, purpose, names, build):
    """The op `build()` makes for `purpose` over `names`, made only once.

    Seeding, refreshing and resetting recur with the same variables; making
    their ops once keeps the graph from growing with every plain run.
    """
    key = (purpose, names)
    if key not in self._groups:
      with self._building():
        self._groups[key] = build()
    return self._groups[key]

  # ---- Seeding, synchronisation, refresh -----------------------------------

  def _make_seed(self, var_op):
    """Op that sets every replica of `var_op` from the central model."""
    graph = self._graph
    value = read(var_op)
    assigns = []
    for r in range(self._num_replicas):
      replica = graph.get_operation_by_name(self.replica_name(r, var_op.name))
      assigns.append(assign(replica, value))
    state = self._sma.get(var_op.name)
    if state is not None:
      assigns.append(tf.raw_ops.AssignVariableOp(
          resource=state.central_prev, value=value))
      zeros = tf.zeros_like(value)
      for c in state.corrections:
        assigns.append(tf.raw_ops.AssignVariableOp(resource=c, value=zeros))
      if state.central_next is not None:
        assigns.append(tf.raw_ops.AssignVariableOp(
            resource=state.central_next, value=zeros))
    return tf.group(*assigns, name=f"{self._prefix}/seed/{var_op.name}")

  def seed_op(self):
    """Op seeding the replicas that need it, or None; marks them seeded."""
    ops = []
    if self._pending_seed:
      names = tuple(sorted(self._pending_seed))
      self._pending_seed.clear()
      ops.append(self._group("seed", names, lambda: tf.group(
          *[self._seeds[n] for n in names],
          name=f"{self._prefix}/seed/group")))
    for r in sorted(self._pending_replicas):
      ops.append(self._replica_seed(r))
    self._pending_replicas.clear()
    if not ops:
      return None
    return ops[0] if len(ops) == 1 else ops

  def _replica_seed(self, replica):
    """Op setting replica `replica` alone from the central model: its
    variables from the user's, its slots from their mean over the replicas
    (refreshed first), its SMA correction to zero."""
    names = tuple(sorted(self._seeds))
    refresh = self.refresh_op()

    def build():
      with self._graph.control_dependencies(
          [refresh] if refresh is not None else []):
        assigns = []
        for name in names:
          central = read(self._graph.get_operation_by_name(name))
          assigns.append(assign(self._replica_vars(name)[replica], central))
          sma = self._sma.get(name)
          if sma is not None:
            assigns.append(tf.raw_ops.AssignVariableOp(
                resource=sma.corrections[replica],
                value=tf.zeros_like(central)))
        return tf.group(*assigns,
                        name=f"{self._prefix}/seed/replica_{replica}")

    return self._group(("seed_replica", replica), names, build)

  def reseed_replicas(self, replicas):
    """Replicas `replicas` are to be set from the central model before the
    next training run (left out of a wave: see participants_ops)."""
    self._pending_replicas.update(replicas)

  def participants_ops(self, skipped):
    """(ops, count placeholder) leaving replicas `skipped` out of the next
    wave's central update: SMA's barriers then wait for the count fed, and
    the skipped replicas' corrections are zero. ([], None) without SMA."""
    names = tuple(sorted(self._sma))
    if not names:
      return [], None

    def build_count():
      count = tf.compat.v1.placeholder(tf.int32, [],
                                       name=f"{self._prefix}/participants")
      return count, tb_ops.library().tensor_bow_set_sma_participants(
          count, barriers=[self._barrier(n) for n in names],
          name=f"{self._prefix}/set_participants")

    count, op = self._group("participants", names, build_count)
    ops = [op]
    for r in skipped:
      ops.append(self._group(("zero_correction", r), names, lambda r=r: tf.group(
          *[tf.raw_ops.AssignVariableOp(
              resource=self._sma[n].corrections[r],
              value=tf.zeros_like(self._sma[n].central_value))
            for n in names],
          name=f"{self._prefix}/zero_correction_{r}")))
    return ops, count

  def user_name(self, name):
    """The user's name of the op or tensor a replica's copy `name` copies."""
    head = f"{self._prefix}/replica_"
    if not name.startswith(head):
      return name
    _, _, rest = name[len(head):].partition("/")
    return rest.replace(">", "/")

  # ---- TensorBow's own state, for checkpoints -------------------------------

  def state_tensors(self):
    """{key: tensor} reading every replica's copy of every replicated
    variable and, under SMA, each model variable's own buffers."""
    names = tuple(sorted(self._seeds))
    return self._group("state", names, lambda: {
        key: read(var) for name in names
        for key, var in self._state_of(name).items()})

  def state_keys(self, name):
    """The keys of replicated variable `name`'s state."""
    return list(self._state_of(name))

  def _state_of(self, name):
    """{key: variable op} of replicated variable `name`'s state."""
    state = {f"{name}/replica_{r}": var
             for r, var in enumerate(self._replica_vars(name))}
    sma = self._sma.get(name)
    if sma is not None:
      state.update((f"{name}/sma/{key}", handle.op)
                   for key, handle in _sma_buffers(sma))
    return state

  def load_state_op(self, names):
    """(placeholders by key, op assigning them): sets the state of
    replicated variables `names`."""
    names = tuple(sorted(names))

    def build():
      placeholders, assigns = {}, []
      for name in names:
        for key, var in self._state_of(name).items():
          p = tf.compat.v1.placeholder(
              tf.as_dtype(var.get_attr("dtype")).base_dtype)
          placeholders[key] = p
          assigns.append(assign(var, p))
      return placeholders, tf.group(*assigns, name=f"{self._prefix}/load")

    return self._group("load", names, build)

  def snapshot_tensors(self, names):
    """{key: tensor} reading the user's variables `names` and every
    replica's state: what a commit that may fail could change."""
    names = tuple(sorted(names))
    tensors = dict(self._group("snapshot", names, lambda: {
        f"{n}/central": read(self._graph.get_operation_by_name(n))
        for n in names}))
    tensors.update(self.state_tensors())
    return tensors

  def restore_snapshot_op(self, names):
    """(placeholders by key, op) setting back what snapshot_tensors(names)
    read."""
    names = tuple(sorted(names))
    replicated = tuple(sorted(self._seeds))

    def build():
      placeholders, assigns = {}, []
      for n in names:
        var = self._graph.get_operation_by_name(n)
        p = tf.compat.v1.placeholder(
            tf.as_dtype(var.get_attr("dtype")).base_dtype)
        placeholders[f"{n}/central"] = p
        assigns.append(assign(var, p))
      return placeholders, assigns

    placeholders, assigns = self._group("restore_snapshot",
                                        (names, replicated), build)
    ops = list(assigns)
    placeholders = dict(placeholders)
    if replicated:
      state_placeholders, load = self.load_state_op(replicated)
      placeholders.update(state_placeholders)
      ops.append(load)
    return placeholders, ops

  def mark_seeded(self, names):
    """Replicas of `names` were set otherwise: no seed before training."""
    self._pending_seed.difference_update(names)

  def replicated_variables(self):
    return sorted(self._seeds)

  def reseed(self, names=None):
    """Replicas of variables `names` (None: all) are to be re-seeded from
    the central model before the next training run."""
    if names is None:
      self._pending_seed.update(self._seeds)
    else:
      self._pending_seed.update(n for n in names if n in self._seeds)

  def sync_op(self, info, source=0):
    """The synchronisation op of a training run with `info`, or None.

    Single variables (a global step) are taken from replica `source`.
    """
    graph = self._graph
    updates = []
    if self._share_variables:
      return None
    with self._building():
      for name in info.other_vars:
        var = graph.get_operation_by_name(name)
        replicas = self._replica_vars(name)
        if name in info.batch_dependent:
          updates.append(assign(var, _mean([read(v) for v in replicas],
                                           source)))
        else:
          updates.append(assign(var, read(replicas[source])))
      if not updates:
        return None
      return tf.group(*updates, name=f"{self._prefix}/sync")

  def _replica_vars(self, name):
    return [self._graph.get_operation_by_name(self.replica_name(r, name))
            for r in range(self._num_replicas)]

  def refresh_op(self):
    """Op that brings user-named slots (and, without SMA, the model) up to date.

    Slots become the replicas' mean; with algorithm "none" the central
    model is replica 0's. Returns None if there is nothing to refresh.
    """
    names = tuple(sorted(
        n for n, k in self._kinds.items()
        if k == "slot" or (k == "model" and self._algorithm == "none")))
    if not names:
      return None

    def build():
      updates = []
      for name in names:
        var = self._graph.get_operation_by_name(name)
        replicas = self._replica_vars(name)
        if self._kinds[name] == "slot":
          updates.append(assign(var, _mean([read(v) for v in replicas])))
        else:
          updates.append(assign(var, read(replicas[0])))
      return tf.group(*updates, name=f"{self._prefix}/refresh")

    return self._group("refresh", names, build)


# The optimizers' apply ops that SMA fuses with its correction, by type.
_FUSED_KINDS = {
    "ApplyGradientDescent": "sgd",
    "ResourceApplyGradientDescent": "sgd",
    "ApplyMomentum": "momentum",
    "ResourceApplyMomentum": "momentum",
}
# TensorBow's SMA op types by role: (for a reference, for a resource
# variable).
_SMA_OPS = {
    "sgd_step": ("TensorBowApplySmaGradientDescent",
                 "TensorBowResourceApplySmaGradientDescent"),
    "momentum_step": ("TensorBowApplySmaMomentum",
                      "TensorBowResourceApplySmaMomentum"),
    "correction": ("TensorBowSmaCorrection",
                   "TensorBowResourceSmaCorrection"),
    "apply_correction": ("TensorBowApplySmaCorrection",
                         "TensorBowResourceApplySmaCorrection"),
    "leader": ("TensorBowApplySmaCentralLeader",
               "TensorBowResourceApplySmaCentralLeader"),
}
# Resource variables only: fused kind -> (op type doing the step, the
# correction and the replica's share of the central update; its inputs
# from the apply op's data inputs, the central model's three handles and
# alpha).
_WITH_CENTRAL = {
    "sgd": ("TensorBowResourceApplySmaGradientDescentWithCentral",
            lambda data, central, alpha: [data[0]] + central + [alpha] +
            data[1:]),
    "momentum": ("TensorBowResourceApplySmaMomentumWithCentral",
                 lambda data, central, alpha: data[:2] + central + [alpha] +
                 data[2:]),
}


def _sma_buffers(state):
  """(key, resource handle) of an _Sma's buffers that carry over waves."""
  buffers = [("central_prev", state.central_prev)]
  if state.central_next is not None:
    buffers.append(("central_next", state.central_next))
  buffers += [(f"correction_{r}", c) for r, c in enumerate(state.corrections)]
  return buffers


def _flat(name):
  return name.replace("/", ">")


def _resource(name, dtype, shape):
  return tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, shared_name=name,
                                name=name)


def _dtype_and_shape(var_op):
  dtype = tf.as_dtype(var_op.get_attr("dtype"))
  shape = tf.TensorShape(var_op.get_attr("shape"))
  return dtype.base_dtype, shape


def read(var_op):
  """The value of variable op `var_op` (ref or resource)."""
  if var_op.type == "VarHandleOp":
    return tf.raw_ops.ReadVariableOp(resource=var_op.outputs[0],
                                     dtype=var_op.get_attr("dtype"))
  return tf.identity(var_op.outputs[0])


def assign(var_op, value):
  """Op assigning `value` to variable op `var_op` (ref or resource)."""
  if var_op.type == "VarHandleOp":
    return tf.raw_ops.AssignVariableOp(resource=var_op.outputs[0], value=value)
  return tf.raw_ops.Assign(ref=var_op.outputs[0], value=value).op


def _mean(values, source=0):
  """The replicas' mean; replica `source`'s value where a mean is not
  defined."""
  if len(values) == 1 or not values[0].dtype.is_floating:
    return values[source]
  return tf.math.add_n(values) / tf.cast(len(values), values[0].dtype)
