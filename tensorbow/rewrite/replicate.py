"""Builds the learning part of the execution graph: one copy per stream
group, whatever the number of replicas.

The user's operations stay as they are: they are the central model, and
plain runs use them. For a training run, every operation of its closure is
copied once per stream group g under `<prefix>/group_<g>/`. In a copy, each
variable the run writes becomes a replica-suffixed variable op
(cc/ops/replica_ops.cc) that resolves, at run time, to the copy of the
replica whose task runs: the runtime feeds the replica's index to
`<prefix>/replica`. Replica state lives in the resource manager, one
resource per replica and variable, so the graph does not grow with L.
Placeholders, fed tensors and read-only variables are shared with the
user's graph, so a learning task feeds the user's own placeholders.

What each optimizer apply op on a model variable becomes, and the state
that needs, is the algorithm's (tensorbow/algorithms/: SMA fuses its
correction into the step and updates the central model in the wave).
The synchronisation op, after the wave, refreshes the other written
variables; seed ops copy the central model into the replicas.

Copies are made incrementally: a later training run with a different
closure copies only the operations not yet copied.
"""
import contextlib
import re

import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow import ops as tb_ops
from tensorbow.rewrite import analysis
from tensorbow.rewrite import substitutes
from tensorbow.rewrite import phases

# The op standing for replica r's copy of a replicated variable, by the
# type of the user's variable op.
_REPLICA_OP = {"VarHandleOp": "TensorBowReplicaVarHandle",
               "VariableV2": "TensorBowReplicaVariable",
               "Variable": "TensorBowReplicaVariable"}


class Replicated(object):
  """A variable with one copy per replica in the resource manager."""

  def __init__(self, name, dtype, shape, num_replicas):
    self.name = name  # the copies' name, before "/replica_<r>"
    self.dtype = dtype  # base dtype
    self.shape = shape
    self.num_replicas = num_replicas

  def attrs(self):
    return dict(var_name=self.name, num_replicas=self.num_replicas)

  def set(self, value, replicas, stacked=False):
    """Op setting the copies of `replicas` (an int32 vector) to `value`."""
    return tb_ops.library().tensor_bow_set_replicas(
        value, replicas, stacked=stacked, **self.attrs())

  def mean(self, source, mean=True):
    """The replicas' mean, or replica `source`'s copy (see ReplicaMean)."""
    return tb_ops.library().tensor_bow_replica_mean(
        source, dtype=self.dtype, shape=self.shape, mean=mean, **self.attrs())

  def stacked(self):
    return tb_ops.library().tensor_bow_stack_replicas(
        dtype=self.dtype, shape=self.shape, **self.attrs())

  def handles(self):
    return tb_ops.library().tensor_bow_replica_handles(
        dtype=self.dtype, shape=self.shape, **self.attrs())


class Replicator(object):
  """Extends an execution graph with the learning part's copies.

  Args:
    graph: the execution graph (holding the user's operations).
    num_replicas: L.
    num_groups: stream groups: the copies of the learning part.
    algorithm: the session's `algorithms.Algorithm`, resolved for L.
    share_variables: replicate no variable: the copies train the user's
      own variables, as plain training does (L = 1, where the one copy
      only brings the faster kernels of `substitutes`; or an algorithm whose
      tasks share the model, `Algorithm.shares_model`).
    devices: per stream group, the device its copy is pinned to, or None
      (all on the session's default device). An op of a copy that takes a
      variable from outside it (or from an op that must stay with one)
      stays unpinned, with that variable.
  """

  def __init__(self, graph, num_replicas, num_groups, algorithm,
               share_variables=False, devices=None):
    self._graph = graph
    self._num_replicas = num_replicas
    self._num_groups = (1 if share_variables and num_replicas == 1 else
                        max(1, num_groups))
    self._devices = (list(devices[:self._num_groups])
                     if devices and not share_variables and
                     len(devices) >= self._num_groups > 1 else None)
    self._share_variables = share_variables
    self._algorithm = algorithm
    with graph.as_default():
      self._prefix = graph.unique_name("tensorbow", mark_as_used=True)
    self._copied = set()  # op names copied into every group's copy
    # replicated variable op name -> "model" | "slot" | "other"
    self._kinds = {}
    self._replicated = {}  # replicated variable op name -> Replicated
    self._states = {}  # model variable op name -> the algorithm's state
    self._seeds = {}  # replicated variable op name -> seed op
    self._pending_seed = set()  # replicated variables to seed before training
    self._pending_replicas = set()  # replicas to seed before training
    self._pending_init = []  # ops to run before training, once
    # Orderings on writes moved off value-only ops (phases.orders_only):
    # op name -> the writes it carries down to the ops that consume it,
    # and -> the writes an op with effects takes over from its inputs.
    self._pushed = {}
    self._taken_over = {}
    self._stubs = {}  # op name -> tensor that carries a control dependency
    self._groups = {}  # (purpose, variable names) -> op, built once
    self._constants = {}
    self._replica = None
    self._histogram_size = None  # made with the first histogram copied
    self._fast_kernels = substitutes.enabled()
    # Times each substitute against TensorFlow's kernel (kernel_choice);
    # None keeps every substitute the rules of `substitutes` pick.
    self.chooser = None

  @property
  def prefix(self):
    return self._prefix

  # ---- What an algorithm may use (algorithms/base.py) ---------------------

  @property
  def graph(self):
    return self._graph

  @property
  def num_groups(self):
    return self._num_groups

  @property
  def num_replicas(self):
    return self._num_replicas

  def replicated(self, name, dtype, shape):
    """State named `name` with one copy per replica."""
    return Replicated(name, dtype, shape, self._num_replicas)

  def is_seeded(self, name):
    """Whether variable `name`'s replicas have a seed op already."""
    return name in self._seeds

  def device_handle(self, name, handle, aux):
    """(input, NodeDefs) naming resource `handle` (a VarHandleOp's, outside
    the copies) in a group's copy: as is, or, with the copies pinned to
    devices, through a node `name` that makes it a handle of the group's
    device (TensorBowDeviceVarHandle)."""
    if self._devices is None:
      return aux(f"__tensorbow__/{name}", handle), []
    op = handle.op
    node = tf.compat.v1.NodeDef(name=name, op="TensorBowDeviceVarHandle")
    node.attr["container"].s = op.get_attr("container")
    node.attr["shared_name"].s = op.get_attr("shared_name") or op.name.encode()
    node.attr["dtype"].type = op.get_attr("dtype").as_datatype_enum
    node.attr["shape"].shape.CopyFrom(
        tf.TensorShape(op.get_attr("shape")).as_proto())
    return name + ":0", [node]

  def run_before_training(self, op):
    """Runs `op` once, before the next training run."""
    self._pending_init.append(op)

  @property
  def replica_input(self):
    """The int32 scalar placeholder a task is fed its replica's index by."""
    if self._replica is None:
      with self._building():
        self._replica = tf.compat.v1.placeholder(tf.int32, [],
                                                 name="replica")
    return self._replica

  @contextlib.contextmanager
  def _building(self):
    """Where TensorBow's ops are made: below the prefix, where no op the
    user adds later (imported under its own name) can want their names."""
    graph = self._graph
    with graph.as_default(), graph.control_dependencies(None), \
        graph.name_scope(self._prefix + "/"):
      yield

  def copy_name(self, group, name):
    """The name of stream group `group`'s copy of op `name`.

    Below the group's scope the user's '/' becomes '>': copies made by
    later runs then never fall inside an earlier copy's name scope, where
    TensorFlow's importer would rename them.
    """
    return f"{self._prefix}/group_{group}/{_flat(name)}"

  def is_copied(self, name):
    return name in self._copied

  def all_replicas(self):
    return self.constant(np.arange(self._num_replicas, dtype=np.int32),
                          tf.int32)

  # ---- Building the copies -------------------------------------------------

  def extend(self, info, fed_names):
    """Copies what `info`'s closure needs into every group (idempotent)."""
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
      for op in new_ops:
        if op.type in analysis.VARIABLE_OPS:
          dtype, shape = dtype_and_shape(op)
          self._replicated[op.name] = Replicated(
              f"{self._prefix}/var/{op.name}", dtype, shape,
              self._num_replicas)
      if not self._share_variables:
        for name in info.model_vars:
          if name not in self._states:
            state = self._algorithm.variable_state(
                self, graph.get_operation_by_name(name))
            if state is not None:
              self._states[name] = state
      local = set(op.name for op in new_ops)
      self._push_orderings(new_ops)
      fused = self._outer_applies(new_ops)
      for g in range(self._num_groups):
        graph_def, input_map = self._group_graph_def(new_ops, local, fused, g)
        scope = f"{self._prefix}/group_{g}/"
        with graph.device(self._devices[g] if self._devices else None):
          tf.compat.v1.import_graph_def(graph_def, input_map=input_map,
                                        name=scope)
        if self._devices:
          _unpin_shared_state([graph.get_operation_by_name(scope + n.name)
                               for n in graph_def.node])
      self._copied.update(local)
      for op in new_ops:
        if op.type in analysis.VARIABLE_OPS:
          self._seeds[op.name] = self._make_seed(op)
          self._pending_seed.add(op.name)

  def _group_graph_def(self, new_ops, local, fused, group):
    graph_def = tf.compat.v1.GraphDef()
    graph_def.versions.CopyFrom(self._graph.graph_def_versions)
    input_map = {}

    def external(name, index):
      key = f"{name}:{index}"
      if key not in input_map:
        input_map[key] = self._group_tensor(name, index, group)
      return key

    def resolve(inp):
      if inp.startswith("^"):
        name = inp[1:]
        if name in local:
          return "^" + _flat(name)
        key = "^" + name
        if key not in input_map:
          input_map[key] = self._control_stub(name, group)
        return inp
      name, _, index = inp.partition(":")
      if name in local:
        return f"{_flat(name)}:{index or 0}"
      return external(name, int(index or 0))

    def aux(key, tensor):
      input_map[key + ":0"] = tensor
      return key + ":0"

    dropped = substitutes.unwaited(fused)
    for op in new_ops:
      node = tf.compat.v1.NodeDef()
      node.CopyFrom(op.node_def)
      node.name = _flat(op.name)
      if "_class" in node.attr:
        del node.attr["_class"]
      if op.type in analysis.VARIABLE_OPS:
        graph_def.node.add().CopyFrom(self.replica_variable_node(
            node, _REPLICA_OP[op.type], self._replicated[op.name], aux))
        continue
      if op.name in self._pushed:
        writes = set(c.name for c in op.control_inputs
                     if phases.is_write_group(c))
        inputs = [i for i in node.input
                  if not (i.startswith("^") and i[1:] in writes)]
      else:
        inputs = list(node.input) + [
            "^" + n for n in sorted(self._taken_over.get(op.name, ()))
            if "^" + n not in node.input]
      inputs = [resolve(i) for i in inputs if i not in dropped]
      del node.input[:]
      node.input.extend(inputs)
      var = (analysis.variable_of(op.inputs[0])
             if analysis.is_apply(op) else None)
      if var is not None and var.name in self._states:
        if any(t.consumers() for t in op.outputs):
          raise tf.errors.UnimplementedError(
              None, op, f"TensorBow cannot train apply op '{op.name}': an "
              "op consumes its output; only control dependencies on it are "
              "supported")
        before = []
        if op.name in fused:
          *before, node = substitutes.outer_apply(node, op, fused[op.name],
                                              dropped, resolve)
        for out in before + self._algorithm.apply_nodes(
            self, self._states[var.name], node, var, group, aux):
          graph_def.node.add().CopyFrom(out)
      elif op.type == "HistogramSummary" and self._num_replicas > 1:
        for out in self._first_replica_only(node, aux):
          graph_def.node.add().CopyFrom(out)
      elif op.name in fused:
        for out in substitutes.outer_apply(node, op, fused[op.name], dropped,
                                       resolve):
          graph_def.node.add().CopyFrom(out)
      else:
        faster = (substitutes.substitute(node, op) if self._fast_kernels
                  else None)
        if faster and self.chooser is not None and not self.chooser.keep(
            node, op, faster):
          faster = None
        for out in faster or [node]:
          graph_def.node.add().CopyFrom(out)
    return graph_def, input_map

  def _outer_applies(self, new_ops):
    """{apply op name: substitutes.Outer} of `substitutes.outer_applies` among
    `new_ops` to fuse: those the algorithm leaves as they are (shared or
    unsynchronised variables) or takes fused (`takes_outer_applies`),
    and, when measured, faster fused. Not where the algorithm averages
    the gradients crossing the cut: the average of the factors is not the
    factors of the average."""
    if not self._fast_kernels or self._algorithm.averages_gradients:
      return {}
    fused = {}
    for name, outer in substitutes.outer_applies(new_ops).items():
      op = self._graph.get_operation_by_name(name)
      var = analysis.variable_of(op.inputs[0])
      if (var is not None and var.name in self._states and
          not self._algorithm.takes_outer_applies):
        continue
      if self.chooser is None or self.chooser.keep_outer(op, outer.matmul):
        fused[name] = outer
    return fused

  def _first_replica_only(self, node, aux):
    """A HistogramSummary NodeDef taking its values from the first replica
    only, the others an empty tensor: a fetched summary keeps the first
    replica's histograms (feeds.merge_summaries), and the others would
    compute theirs for nothing."""
    if self._histogram_size is None:
      with self._building():
        self._histogram_size = tf.where(
            tf.equal(self.replica_input, 0), [-1], [0],
            name="histogram_size")
    dtype = node.attr["T"].type
    flat = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_flat",
                                op="Reshape", device=node.device)
    flat.input.extend([node.input[1], aux(
        "__tensorbow__/minus_one", self.constant(np.array([-1]), tf.int32))])
    flat.attr["T"].type = dtype
    flat.attr["Tshape"].type = tf.int32.as_datatype_enum
    first = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_values",
                                 op="Slice", device=node.device)
    first.input.extend([
        flat.name + ":0",
        aux("__tensorbow__/zero", self.constant(np.array([0]), tf.int32)),
        aux("__tensorbow__/histogram_size", self._histogram_size)])
    first.attr["T"].type = dtype
    first.attr["Index"].type = tf.int32.as_datatype_enum
    node.input[1] = first.name + ":0"
    return [flat, first, node]

  def _push_orderings(self, new_ops):
    """Decides, for ops about to be copied, which waits on writes move.

    A value-only op's control dependencies on writes are taken off it and
    handed down to the first ops with effects that consume it (or to the
    run's targets, see orderings_of): the computation then runs it before
    the writes, and the writes still run, in the same order relative to
    every op that has effects.
    """
    routing = phases.routing_ops(self._graph, new_ops)
    for op in new_ops:  # inputs first
      inherited = set()
      for t in op.inputs:
        inherited |= self._pushed.get(t.op.name, frozenset())
      for c in op.control_inputs:
        inherited |= self._pushed.get(c.name, frozenset())
      if phases.orders_only(op, routing):
        own = set(c.name for c in op.control_inputs
                  if phases.is_write_group(c))
        if own or inherited:
          self._pushed[op.name] = frozenset(inherited | own)
      elif inherited:
        self._taken_over[op.name] = frozenset(inherited)

  def orderings_of(self, name):
    """User op names of the writes that op `name`, copied, no longer waits
    on: a run that fetches or targets it must target them."""
    return sorted(self._pushed.get(name, ()))

  def replica_variable_node(self, node, op_type, replicated, aux):
    """The NodeDef of `replicated` resolved to the task's replica in a
    group's copy: `op_type` named and placed as `node`, reading the
    replica index, which `aux` (of _group_graph_def) names."""
    out = tf.compat.v1.NodeDef(name=node.name, op=op_type, device=node.device)
    out.input.append(aux("__tensorbow__/replica", self.replica_input))
    out.attr["var_name"].s = replicated.name.encode()
    out.attr["dtype"].type = replicated.dtype.as_datatype_enum
    out.attr["shape"].shape.CopyFrom(replicated.shape.as_proto())
    out.attr["num_replicas"].i = replicated.num_replicas
    return out

  def _group_tensor(self, name, index, group):
    if name in self._copied:
      name = self.copy_name(group, name)
    return self._graph.get_tensor_by_name(f"{name}:{index}")

  def _control_stub(self, name, group):
    if name in self._copied:
      name = self.copy_name(group, name)
    if name not in self._stubs:
      op = self._graph.get_operation_by_name(name)
      if op.outputs:
        self._stubs[name] = op.outputs[0]
      else:
        self._stubs[name] = after([op], f"{self._prefix}/control/{name}",
                                  tf.constant(0))
    return self._stubs[name]

  def constant(self, value, dtype):
    key = (value.tobytes() if isinstance(value, np.ndarray) else value, dtype)
    if key not in self._constants:
      with self._building():
        self._constants[key] = tf.constant(value, dtype=dtype,
                                           name="constant")
    return self._constants[key]

  def reset_op(self):
    """Op restarting the algorithm's synchronisation (after a failed
    wave), or None."""
    names = tuple(sorted(self._states))
    ops = self._group("reset", names, lambda: self._algorithm.reset_ops(
        self, [self._states[n] for n in names]))
    return ops or None

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
    value = read(var_op)
    every = self.all_replicas()
    assigns = [self._replicated[var_op.name].set(value, every)]
    state = self._states.get(var_op.name)
    if state is not None:
      assigns += self._algorithm.seed_ops(self, state, value)
    return tf.group(*assigns, name=f"seed/{var_op.name}")

  def seed_run(self):
    """(fetches, feed_dict) seeding the replicas that need it, or None;
    marks them seeded."""
    ops, feeds = list(self._pending_init), {}
    self._pending_init.clear()
    if self._pending_seed:
      names = tuple(sorted(self._pending_seed))
      self._pending_seed.clear()
      ops.append(self._group("seed", names, lambda: after(
          [self._seeds[n] for n in names], "seed/group")))
    if self._pending_replicas:
      replicas, op = self._replica_seed()
      ops.append(op)
      feeds[replicas] = np.array(sorted(self._pending_replicas), np.int32)
      self._pending_replicas.clear()
    return (ops, feeds) if ops else None

  def _replica_seed(self):
    """(replicas placeholder, op) setting the replicas fed alone from the
    central model: their variables from the user's, their slots from the
    mean over the replicas (refreshed first), the algorithm's state
    afresh."""
    names = tuple(sorted(self._seeds))
    refresh = self.refresh_op()

    def build():
      replicas = tf.compat.v1.placeholder(tf.int32, [None],
                                          name="seed/replicas")
      # The reads wait for the refresh, which may have run already.
      ready = (after([refresh], "seed/refreshed", tf.constant(0))
               if refresh is not None else None)
      with self._graph.control_dependencies(
          [ready] if ready is not None else []):
        assigns = []
        for name in names:
          central = read(self._graph.get_operation_by_name(name))
          assigns.append(self._replicated[name].set(central, replicas))
          state = self._states.get(name)
          if state is not None:
            assigns += self._algorithm.reseed_ops(self, state, central,
                                                  replicas)
        return replicas, tf.group(*assigns, name="seed/replicas_op")

    return self._group("seed_replicas", self._state_key(names), build)

  def reseed_replicas(self, replicas):
    """Replicas `replicas` are to be set from the central model before the
    next training run (left out of a wave: see participants_run)."""
    self._pending_replicas.update(replicas)

  def participants_run(self, skipped, remaining):
    """(fetches, feed_dict) leaving replicas `skipped` out of the next
    wave's synchronisation, `remaining` taking part; None if the algorithm
    has nothing to do for it."""
    names = tuple(sorted(self._states))

    def build():
      count = tf.compat.v1.placeholder(tf.int32, [], name="participants")
      replicas = tf.compat.v1.placeholder(tf.int32, [None],
                                          name="skipped_replicas")
      ops = self._algorithm.skip_ops(
          self, [self._states[n] for n in names], count, replicas)
      return count, replicas, ops

    count, replicas, ops = self._group("participants",
                                       self._state_key(names), build)
    if not ops:
      return None
    return ops, {count: remaining,
                 replicas: np.array(sorted(skipped), np.int32)}

  def wave_run(self, wave, sizes):
    """(fetches, feed_dict) preparing training run `wave` (counted from 1),
    whose replicas' shards have `sizes` rows, or None if the algorithm has
    nothing to do for it."""
    return self._algorithm_run(
        "wave", self._algorithm.wave_value(wave, sizes),
        self._algorithm.wave_ops)

  def merge_run(self, wave, sizes):
    """(fetches, feed_dict) to run after training run `wave`, or None."""
    return self._algorithm_run(
        "merge", self._algorithm.merge_value(wave, sizes),
        self._algorithm.merge_ops)

  def _algorithm_run(self, purpose, value, make_ops):
    if value is None or not self._states:
      return None
    names = tuple(sorted(self._states))

    def build():
      fed = tf.compat.v1.placeholder(tf.float64, None,
                                     name=f"{purpose}_value")
      return fed, make_ops(self, [self._states[n] for n in names], fed)

    fed, ops = self._group(purpose, self._state_key(names), build)
    return (ops, {fed: value}) if ops else None

  def user_name(self, name):
    """The user's name of the op or tensor a group's copy `name` copies."""
    head = f"{self._prefix}/group_"
    if not name.startswith(head):
      return name
    _, _, rest = name[len(head):].partition("/")
    return rest.replace(">", "/")

  def user_error(self, error, graph):
    """`error` as TensorFlow's `Session.run` would raise it for the user's
    op: the copies' names made the user's, `op` and `node_def` the user's
    op in `graph`, and the message interpolated with where that op was
    made ("Detected at node ... defined at")."""
    pattern = re.compile(
        re.escape(self._prefix) + r"/group_\d+/([^\s:{}'\"]+)")
    message = pattern.sub(lambda m: m.group(1).replace(">", "/"),
                          error.message)
    op = None
    for name in _NODE_TAG.findall(message):
      try:
        op = graph.get_operation_by_name(name)
        break
      except KeyError:
        continue
    message = compat.interpolate_graph(message, graph)
    return type(error)(op.node_def if op is not None else None, op, message)

  # ---- TensorBow's own state, for checkpoints -------------------------------

  def _state_of(self, name):
    """[(keys, Replicated) or (key, resource handle)] of replicated
    variable `name`'s state: its replicas' copies and the algorithm's
    state for it."""
    n = self._num_replicas
    parts = [([f"{name}/replica_{r}" for r in range(n)],
              self._replicated[name])]
    state = self._states.get(name)
    if state is not None:
      parts += self._algorithm.state_parts(self, state)
    return parts

  def _state_key(self, names):
    """What the state of variables `names` depends on, for _group."""
    return names, tuple(
        self._algorithm.state_signature(self._states[n])
        for n in names if n in self._states)

  def state_keys(self, name):
    """The keys of replicated variable `name`'s state."""
    keys = []
    for k, _ in self._state_of(name):
      keys.extend(k if isinstance(k, list) else [k])
    return keys

  def state_tensors(self):
    """{key: tensor} reading every replica's copy of every replicated
    variable and the algorithm's state for each model variable."""
    names = tuple(sorted(self._seeds))

    def build():
      tensors = {}
      for name in names:
        for keys, part in self._state_of(name):
          if isinstance(keys, list):
            tensors.update(zip(keys, tf.unstack(part.stacked(),
                                                num=len(keys))))
          else:
            tensors[keys] = tf.raw_ops.ReadVariableOp(
                resource=part, dtype=part.op.get_attr("dtype"))
      return tensors

    return self._group("state", self._state_key(names), build)

  def load_state_run(self, names, values):
    """(fetches, feed_dict) setting the state of replicated variables
    `names` from {key: value} `values`."""
    names = tuple(sorted(names))

    def build():
      placeholders, assigns = [], []
      for name in names:
        for keys, part in self._state_of(name):
          if isinstance(keys, list):
            p = tf.compat.v1.placeholder(part.dtype)
            assigns.append(part.set(p, self.all_replicas(), stacked=True))
          else:
            p = tf.compat.v1.placeholder(
                tf.as_dtype(part.op.get_attr("dtype")))
            assigns.append(tf.raw_ops.AssignVariableOp(resource=part,
                                                       value=p))
          placeholders.append((keys, p))
      return placeholders, tf.group(*assigns, name="load")

    placeholders, op = self._group("load", self._state_key(names), build)
    feeds = {}
    for keys, p in placeholders:
      if isinstance(keys, list):
        feeds[p] = np.stack([np.asarray(values[k]) for k in keys])
      else:
        feeds[p] = values[keys]
    return op, feeds

  def snapshot_tensors(self, names):
    """{key: tensor} reading the user's variables `names` and every
    replica's state: what a commit that may fail could change."""
    names = tuple(sorted(names))
    tensors = dict(self._group("snapshot", names, lambda: {
        f"{n}/central": read(self._graph.get_operation_by_name(n))
        for n in names}))
    tensors.update(self.state_tensors())
    return tensors

  def restore_snapshot_run(self, names, snapshot):
    """(fetches, feed_dict) setting back what snapshot_tensors(names)
    read, given as `snapshot`."""
    names = tuple(sorted(names))

    def build():
      placeholders, assigns = {}, []
      for n in names:
        var = self._graph.get_operation_by_name(n)
        p = tf.compat.v1.placeholder(
            tf.as_dtype(var.get_attr("dtype")).base_dtype)
        placeholders[f"{n}/central"] = p
        assigns.append(assign(var, p))
      return placeholders, assigns

    placeholders, assigns = self._group("restore_snapshot", names, build)
    fetches = list(assigns)
    feeds = {p: snapshot[k] for k, p in placeholders.items()}
    replicated = tuple(sorted(self._seeds))
    if replicated:
      load, load_feeds = self.load_state_run(replicated, snapshot)
      fetches.append(load)
      feeds.update(load_feeds)
    return fetches, feeds

  def mark_seeded(self, names):
    """Replicas of `names` were set otherwise: no seed before training."""
    self._pending_seed.difference_update(names)

  def replicated_variables(self):
    return sorted(self._seeds)

  def replicates_any(self, names):
    """Whether any of variable ops `names` has replicas."""
    return any(n in self._seeds for n in names)

  def replicas_of(self, name):
    """The Replicated copies of variable op `name`."""
    return self._replicated[name]

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
    if self._share_variables or not info.other_vars:
      return None
    names = tuple(sorted(info.other_vars))
    batch = tuple(n in info.batch_dependent for n in names)

    def build():
      src = self.constant(source, tf.int32)
      updates = [
          assign(self._graph.get_operation_by_name(name),
                 self._replicated[name].mean(src, mean=mean))
          for name, mean in zip(names, batch)]
      return tf.group(*updates, name="sync")

    return self._group(("sync", source, batch), names, build)

  def refresh_op(self):
    """Op that brings user-named slots (and, for an algorithm whose model is
    a replica's, the model) up to date.

    Slots become the replicas' mean; the model, replica 0's. Returns None
    if there is nothing to refresh.
    """
    names = tuple(sorted(
        n for n, k in self._kinds.items()
        if k == "slot" or (k == "model" and
                            self._algorithm.model_from_replica)))
    if not names:
      return None

    def build():
      first = self.constant(0, tf.int32)
      updates = []
      for name in names:
        var = self._graph.get_operation_by_name(name)
        updates.append(assign(var, self._replicated[name].mean(
            first, mean=self._kinds[name] == "slot")))
      return tf.group(*updates, name="refresh")

    return self._group("refresh", names, build)


def after(ops, name, made=None):
  """`made` (an op or tensor; default a new NoOp) named `name`, run after
  `ops`.

  Not by `tf.control_dependencies`: that marks its ops with an attribute,
  a change TensorFlow warns about (and will refuse) for ops a session has
  run. Only the new op is changed here.
  """
  if made is None:
    made = tf.no_op(name=name)
  else:
    made = tf.identity(made, name=name)
  op = made if isinstance(made, tf.Operation) else made.op
  compat.add_control_inputs(op, ops)
  return made


def _unpin_shared_state(ops):
  """Clears the device of the ops of a pinned copy `ops` that take a
  variable (a resource or reference edge) from outside the copy or from an
  op so cleared, or give one to such an op: TensorFlow keeps the two ends
  of such an edge on one device."""
  names = set(op.name for op in ops)
  unpinned = set()

  def stateful(t):
    return t.dtype == tf.resource or compat.is_ref_dtype(t.dtype)

  changed = True
  while changed:
    changed = False
    for op in ops:
      if op.name in unpinned:
        continue
      if (any(stateful(t) and (t.op.name not in names or
                               t.op.name in unpinned) for t in op.inputs) or
          any(stateful(t) and any(c.name in unpinned for c in t.consumers())
              for t in op.outputs)):
        unpinned.add(op.name)
        changed = True
  for op in ops:
    if op.name in unpinned:
      compat.clear_device(op)


# How TensorFlow's error messages name a node.
_NODE_TAG = re.compile(r"\{\{node ([^}]+)\}\}")


def _flat(name):
  return name.replace("/", ">")


def resource(name, dtype, shape):
  """A resource variable of TensorBow's own, named `name`."""
  return tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, shared_name=name,
                                name=name)


def dtype_and_shape(var_op):
  """(base dtype, shape) of variable op `var_op`."""
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
