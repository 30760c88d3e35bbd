"""Copies the learning part of a training run into the execution graph at
plan time: one copy per stream group, whatever the number of replicas.

The user's operations stay as they are: they are the central model, and
plain runs use them. For a training run, every operation of its closure is
copied once per stream group g under `<prefix>/group_<g>/`. In a copy, each
variable the run writes becomes a replica-suffixed variable op
(cc/ops/replica_ops.cc) that resolves, at run time, to the copy of the
replica whose task runs: the runtime feeds the replica's index to
`<prefix>/replica`. Replica state lives in the resource manager, one
resource per replica and variable, so the graph does not grow with L;
`replicas.ReplicaState` keeps track of it. Placeholders, fed tensors and
read-only variables are shared with the user's graph, so a learning task
feeds the user's own placeholders.

What each optimizer apply op on a model variable becomes, and the state
that needs, is the algorithm's (tensorbow/algorithms/: SMA fuses its
correction into the step and updates the central model in the wave).

Copies are made incrementally: a later training run with a different
closure copies only the operations not yet copied.

What a copy reads depends on which tensors the run feeds: a fed tensor's
op is not copied, its consumers read the fed tensor instead. So the
copies are kept per *cut*, the fed tensors other than placeholders (and
than `placeholder_with_default`s of a fixed default, shared as
placeholders are) and the pipeline outputs read through stand-ins. Runs
with the same cut share one set of copies, `<prefix>/group_<g>/` for the
first cut seen, `<prefix>/group_<g>_<k>/` for the k-th after it; a script
whose runs feed alike (the usual case) has one.
"""
import collections

import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import analysis
from tensorbow.rewrite import batch_sizes
from tensorbow.rewrite import builder as tb_builder
from tensorbow.rewrite import graph_util
from tensorbow.rewrite import phases
from tensorbow.rewrite import random_streams
from tensorbow.rewrite import substitutes

# The op standing for replica r's copy of a replicated variable, by the
# type of the user's variable op.
_REPLICA_OP = {"VarHandleOp": "TensorBowReplicaVarHandle",
               "VariableV2": "TensorBowReplicaVariable",
               "Variable": "TensorBowReplicaVariable"}


# What one `Copier.extend` made that the replica state is to keep (the
# planner hands it on: replicas.ReplicaState.copied).
Copied = collections.namedtuple("Copied", [
    "variables",  # variable ops given replicas: to be seeded before the
                  # next training run
    "reseeded",  # names of variables seeded already whose seeds were made
                 # afresh (ReplicaState.add_variables): seeded again
    "before_training",  # ops to run once before the next training run
    # {model variable op name: the algorithm's state from now on}, of those
    # whose state apply_nodes made more of
    "states",
])


class Copier(object):
  """Extends an execution graph with the learning part's copies.

  Args:
    builder: the setting's `builder.Builder` (the graph, L, the copies).
    replica_state: the setting's `replicas.ReplicaState`, which gives the
      variables their replicas and the algorithm's state.
    algorithm: the session's `algorithms.Algorithm`, resolved for L.
    chooser: a `kernel_choice.Chooser` timing each substitute against
      TensorFlow's kernel, or None: every substitute `substitutes` picks.
  """

  def __init__(self, builder, replica_state, algorithm, chooser=None):
    self._builder = builder
    self._graph = builder.graph
    self._replica_state = replica_state
    self._algorithm = algorithm
    self._copies = {}  # cut (see Copies) -> Copies
    self._variables = set()  # names of the variable ops given replicas
    self._stubs = {}  # op name -> tensor that carries a control dependency
    self._histogram_size = None  # made with the first histogram copied
    self._fast_kernels = substitutes.enabled()
    self._chooser = chooser
    # Random ops draw one stream per replica (random_streams.py), unless
    # the one replica of the whole run draws TensorFlow's stream anyway.
    self._streams = builder.num_replicas > 1 or builder.first_replica > 0
    self._stream_states = {}  # random op name -> its Replicated state
    self._frames = {}  # op name -> its while frames (while_frames)

  def extend(self, info, fed_names, stand_ins=None, folds=None):
    """Copies what `info`'s closure needs into every group (idempotent),
    for a run feeding the tensors named in `fed_names`; the copies read
    `stand_ins[name]` for the tensor named `name`, and compute the
    constants of `folds` ({Const op name: batch_sizes.Fold}) from their
    own tensors.

    Returns:
      (the `Copies` the run's tasks use, the `Copied`: what these copies
      need of the replica state, for the caller to hand it on).
    """
    graph, builder = self._graph, self._builder
    stand_ins = dict(stand_ins or {})
    copies = self._copies_for(info.ops, fed_names, stand_ins)
    new_ops = self._new_ops(info, copies, fed_names)
    if not new_ops:
      return copies, Copied([], (), [], {})
    # Variables an earlier cut's copies gave replicas keep them, seeded.
    var_ops = [op for op in new_ops if op.type in analysis.VARIABLE_OPS
               and op.name not in self._variables]
    reseeded = self._replica_state.add_variables(var_ops, info.model_vars)
    with builder.building():
      local = set(op.name for op in new_ops)
      self._push_orderings(copies, new_ops)
      before = self._add_streams(new_ops) if self._streams else []
      fused = self._outer_applies(new_ops)
      states = {}  # model variable op name -> its state as the copies left it
      for g in range(builder.num_groups):
        graph_def, input_map = self._group_graph_def(
            copies, new_ops, local, fused, g, folds or {}, states)
        scope = builder.copy_name(g, "", copies.index)
        with graph.device(builder.device(g)):
          tf.compat.v1.import_graph_def(graph_def, input_map=input_map,
                                        name=scope)
        if builder.device(g):
          _unpin_shared_state([graph.get_operation_by_name(scope + n.name)
                               for n in graph_def.node])
      copies.copied.update(local)
      grown = {name: states[name] for name in sorted(states)
               if states[name] is not self._replica_state.algorithm_state(name)}
      for name, state in grown.items():
        before += self._algorithm.after_copy(
            builder, state, self._replica_state.is_seeded(name))
    self._variables.update(op.name for op in var_ops)
    return copies, Copied(var_ops, reseeded, before, grown)

  def _new_ops(self, info, copies, fed_names):
    """The ops of `info`'s closure that `copies` are still to copy for a
    run feeding the tensors named in `fed_names`: not the placeholders,
    the fed tensors' ops, nor the variables without replicas."""
    replicated = self._replica_state.replicated_by(info)
    return [op for op in info.ops
            if op.name not in copies.copied and
            op.type not in ("Placeholder", "PlaceholderV2") and
            not analysis.is_fixed_default(op) and
            not any(t.name in fed_names for t in op.outputs) and
            not (op.type in analysis.VARIABLE_OPS and
                 op.name not in replicated)]

  def _copies_for(self, ops, fed_names, stand_ins):
    """The `Copies` of the cut of a run over closure `ops` feeding
    `fed_names` and reading `stand_ins`, made if new."""
    cut = frozenset(
        t.name for op in ops
        if op.type not in ("Placeholder", "PlaceholderV2") and
        not analysis.is_fixed_default(op)
        for t in op.outputs if t.name in fed_names or t.name in stand_ins)
    key = (cut, frozenset(stand_ins))
    if key not in self._copies:
      self._copies[key] = Copies(self._builder, len(self._copies), stand_ins)
    return self._copies[key]

  def _group_graph_def(self, copies, new_ops, local, fused, group, folds,
                       states):
    graph_def = tf.compat.v1.GraphDef()
    graph_def.versions.CopyFrom(self._graph.graph_def_versions)
    input_map = {}

    def external(name, index):
      key = f"{name}:{index}"
      if key not in input_map:
        input_map[key] = (copies.stand_ins[key] if key in copies.stand_ins
                          else copies.group_tensor(name, index, group))
      return key

    def resolve(inp):
      if inp.startswith("^"):
        name = inp[1:]
        if name in local:
          return "^" + tb_builder.flat(name)
        key = "^" + name
        if key not in input_map:
          input_map[key] = self._control_stub(copies, name, group)
        return inp
      name, _, index = inp.partition(":")
      if name in local:
        return f"{tb_builder.flat(name)}:{index or 0}"
      return external(name, int(index or 0))

    def aux(key, tensor):
      input_map[key + ":0"] = tensor
      return key + ":0"

    dropped = substitutes.unwaited(fused)
    for op in new_ops:
      node = tf.compat.v1.NodeDef()
      node.CopyFrom(op.node_def)
      node.name = tb_builder.flat(op.name)
      graph_util.without_colocation(node)
      if op.name in folds:
        graph_def.node.extend(batch_sizes.fold_nodes(
            node, folds[op.name], [self._graph.get_tensor_by_name(n).dtype
                                   for n in folds[op.name].sources],
            resolve))
        continue
      if op.type in analysis.VARIABLE_OPS:
        graph_def.node.add().CopyFrom(self._builder.replica_variable_node(
            node, _REPLICA_OP[op.type],
            self._replica_state.replicas_of(op.name), aux))
        continue
      self._set_inputs(node, op, copies, dropped, resolve)
      graph_def.node.extend(
          self._computing_nodes(node, op, group, fused, dropped, resolve,
                                aux, states))
    return graph_def, input_map

  def _set_inputs(self, node, op, copies, dropped, resolve):
    """Gives `node`, a group's copy of `op`, its inputs in the copy: the
    waits on writes `copies` moved (pushed) dropped, the writes it took
    over waited for, the inputs of `dropped` left out, each `resolve`d."""
    if op.name in copies.pushed:
      writes = set(c.name for c in op.control_inputs
                   if phases.is_write_group(c))
      inputs = [i for i in node.input
                if not (i.startswith("^") and i[1:] in writes)]
    else:
      inputs = list(node.input) + [
          "^" + n for n in sorted(copies.taken_over.get(op.name, ()))
          if "^" + n not in node.input]
    inputs = [resolve(i) for i in inputs if i not in dropped]
    del node.input[:]
    node.input.extend(inputs)

  def _computing_nodes(self, node, op, group, fused, dropped, resolve,
                       aux, states):
    """The NodeDefs computing `op` in stream group `group`'s copy, its
    copy `node` given its inputs: the algorithm's step for an optimizer's
    apply op, replica 0's histogram, a random op's replica stream, a fused
    outer product (`fused`), or a faster substitute or `node` itself.
    `states` keeps the algorithm's states as apply_nodes returns them."""
    var = (analysis.variable_of(op.inputs[0])
           if analysis.is_apply(op) else None)
    state = (states.get(var.name, self._replica_state.algorithm_state(var.name))
             if var is not None else None)
    if state is not None:
      if any(t.consumers() for t in op.outputs):
        raise tf.errors.UnimplementedError(
            None, op, f"TensorBow cannot train apply op '{op.name}': an "
            "op consumes its output; only control dependencies on it are "
            "supported")
      before = []
      if op.name in fused:
        *before, node = substitutes.outer_apply(
            node, op, fused[op.name], dropped, resolve)
      nodes, states[var.name] = self._algorithm.apply_nodes(
          self._builder, state, node, var, group, aux)
      return before + nodes
    if op.type == "HistogramSummary" and self._builder.num_replicas > 1:
      return self._first_replica_only(node, aux)
    if op.name in self._stream_states:
      return self._stream_nodes(node, op, aux)
    if op.name in fused:
      return substitutes.outer_apply(node, op, fused[op.name], dropped,
                                     resolve)
    faster = (substitutes.substitute(node, op) if self._fast_kernels
              else None)
    if faster and self._chooser is not None and not self._chooser.keep(
        node, op, faster):
      faster = None
    return faster or [node]

  def _add_streams(self, new_ops):
    """Gives the random ops among `new_ops` a state per replica, and warns
    of those it cannot; returns the ops setting the states, to run before
    the next training run."""
    builder = self._builder
    random_streams.warn_uncovered(new_ops)
    setting = []
    for op in new_ops:
      if (op.type not in random_streams.STATEFUL or
          op.name in self._stream_states):  # an earlier cut's copies drew
        continue
      state = builder.replicated(f"{builder.prefix}/stream/{op.name}",
                                 tf.int64, tf.TensorShape([3]))
      values = random_streams.state_values(op, builder.first_replica,
                                           builder.num_replicas)
      setting.append(state.set(builder.constant(values, tf.int64),
                               builder.all_replicas(), stacked=True))
      self._stream_states[op.name] = state
    return setting

  def _stream_nodes(self, node, op, aux):
    """NodeDefs drawing random op `op` (NodeDef `node`, its copy) from the
    task's replica's state, in `op`'s while loops if any."""
    builder = self._builder
    replica = aux("__tensorbow__/replica", builder.replica_input)
    algorithm = aux("__tensorbow__/philox", builder.constant(
        np.array(random_streams.PHILOX, np.int64), tf.int64))
    frames = random_streams.while_frames(op, self._frames)
    entered = []
    if frames:
      for suffix, dtype in ((">tensorbow_replica", tf.int32),
                            (">tensorbow_philox", tf.int64)):
        entered += random_streams.enter_nodes(
            node.name + suffix, replica if dtype == tf.int32 else algorithm,
            dtype, frames, node.device)
      replica = node.name + ">tensorbow_replica:0"
      algorithm = node.name + ">tensorbow_philox:0"
    handle, out = random_streams.stream_nodes(node, op, replica, algorithm,
                                              self._stream_states[op.name])
    return entered + [handle, out]

  def _outer_applies(self, new_ops):
    """{apply op name: substitutes.Outer} of `substitutes.outer_applies`
    among `new_ops` to fuse: those the algorithm allows (fuses_outer) and,
    when measured, faster fused."""
    if not self._fast_kernels:
      return {}
    fused = {}
    for name, outer in substitutes.outer_applies(new_ops).items():
      op = self._graph.get_operation_by_name(name)
      var = analysis.variable_of(op.inputs[0])
      has_state = (var is not None and
                   self._replica_state.algorithm_state(var.name) is not None)
      if not self._algorithm.fuses_outer(has_state):
        continue
      if self._chooser is None or self._chooser.keep_outer(op, outer.matmul):
        fused[name] = outer
    return fused

  def _first_replica_only(self, node, aux):
    """A HistogramSummary NodeDef taking its values from the first replica
    only, the others an empty tensor: a fetched summary keeps the first
    replica's histograms (fetches.merge_summaries), and the others would
    compute theirs for nothing."""
    if self._histogram_size is None:
      with self._builder.building():
        self._histogram_size = tf.where(
            tf.equal(self._builder.replica_input, 0), [-1], [0],
            name="histogram_size")
    dtype = node.attr["T"].type
    flat = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_flat",
                                op="Reshape", device=node.device)
    flat.input.extend([node.input[1], aux(
        "__tensorbow__/minus_one",
        self._builder.constant(np.array([-1]), tf.int32))])
    flat.attr["T"].type = dtype
    flat.attr["Tshape"].type = tf.int32.as_datatype_enum
    first = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_values",
                                 op="Slice", device=node.device)
    first.input.extend([
        flat.name + ":0",
        aux("__tensorbow__/zero",
            self._builder.constant(np.array([0]), tf.int32)),
        aux("__tensorbow__/histogram_size", self._histogram_size)])
    first.attr["T"].type = dtype
    first.attr["Index"].type = tf.int32.as_datatype_enum
    node.input[1] = first.name + ":0"
    return [flat, first, node]

  def _push_orderings(self, copies, new_ops):
    """Decides, for ops about to be copied, which waits on writes move.

    A value-only op's control dependencies on writes are taken off it and
    handed down to the first ops with effects that consume it (or to the
    run's targets, see orderings_of): the computation then runs it before
    the writes, and the writes still run, in the same order relative to
    every op that has effects.
    """
    routing = phases.routing_ops(self._graph, new_ops)
    written = {}  # write op name -> the variables it writes
    for op in new_ops:  # inputs first
      inherited = set()
      for t in op.inputs:
        inherited |= copies.pushed.get(t.op.name, frozenset())
      for c in op.control_inputs:
        inherited |= copies.pushed.get(c.name, frozenset())
      own = set(c.name for c in op.control_inputs
                if phases.is_write_group(c))
      writes = [self._graph.get_operation_by_name(n)
                for n in sorted(own | inherited)]
      if phases.orders_only(op, routing, writes, written):
        if own or inherited:
          copies.pushed[op.name] = frozenset(inherited | own)
      elif inherited:
        copies.taken_over[op.name] = frozenset(inherited)

  def _control_stub(self, copies, name, group):
    name = copies.group_name(name, group)
    return graph_util.control_stub(
        self._graph, name, self._stubs,
        f"{self._builder.prefix}/control/{name}")


class Copies(object):
  """The copies made for the runs of one cut: the fed tensors whose ops
  are not copied, the copies reading them instead (see the module's
  docstring).

  Args:
    builder: the setting's `builder.Builder`.
    index: the cut's index among the copier's, in the copies' scope.
    stand_ins: {tensor name: what the copies read for it}.
  """

  def __init__(self, builder, index, stand_ins):
    self._builder = builder
    self.index = index
    self.stand_ins = stand_ins
    self.copied = set()  # user op names copied into every group's copy
    # Orderings on writes moved off value-only ops (phases.orders_only):
    # op name -> the writes it carries down to the ops that consume it,
    # and -> the writes an op with effects takes over from its inputs.
    self.pushed = {}
    self.taken_over = {}

  def orderings_of(self, name):
    """User op names of the writes that op `name`, copied, no longer waits
    on: a run that fetches or targets it must target them."""
    return sorted(self.pushed.get(name, ()))

  def group_name(self, name, group):
    """The name of op `name` in stream group `group`'s copy: its copy's,
    or its own if it is not copied."""
    if name in self.copied:
      return self._builder.copy_name(group, name, self.index)
    return name

  def group_tensor(self, name, index, group):
    """Output `index` of op `name`'s copy in stream group `group`."""
    return self._builder.graph.get_tensor_by_name(
        f"{self.group_name(name, group)}:{index}")


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
