"""Splits a learning task into a computation that writes nothing and a commit.

A training wave is atomic (DESIGN.md, "Atomic waves"): every replica first
runs the ops of its task that depend on no write (the forward and backward
passes, where user code fails: asserts, label checks, `py_func`s, a
deadline), and only when every replica has succeeded do the writes run
(optimizer steps, SMA's corrections and central update, assignments). The
tensors the writes consume from the computation are fetched in the first
run and fed, without a copy, to the second, so nothing is computed twice.
"""
import collections

import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import analysis
from tensorbow.rewrite import graph_util

# Ops whose outputs a commit may compute again instead of being fed: they
# only name or read state that the computation does not change.
_REREADABLE = frozenset(["Const", "Identity", "RefIdentity", "ReadVariableOp"])
# TensorBow's own ops that write nothing.
_PURE_TENSORBOW = frozenset(["TensorBowMatMul"]) | (
    analysis.REPLICA_VARIABLE_OPS)
# Ops of a commit that cannot fail once the computation succeeded: the
# optimizers' steps, assignments and the arithmetic between them (Adam's
# beta powers). Any other op in a commit may fail after a write.
_SAFE_IN_COMMIT = frozenset([
    "NoOp", "Identity", "IdentityN", "RefIdentity", "ReadVariableOp", "Const",
    "VariableV2", "VarHandleOp", "Placeholder", "Mul", "Add", "AddV2", "Sub",
    "RealDiv", "Neg", "Cast", "Maximum", "Minimum", "Square", "Sqrt", "Pow",
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp",
    "AssignAddVariableOp", "AssignSubVariableOp"])

Split = collections.namedtuple("Split", [
    "compute_fetches",  # positions of the fetches computed in phase 1
    "commit_fetches",  # positions of the fetches of the commit
    "compute_targets",  # positions of the targets run in phase 1
    "commit_targets",  # positions of the targets run by the commit
    "internal",  # tensors the computation hands to the commit
    "may_fail",  # whether an op of the commit may fail after a write
])


def writes_state(op):
  """Whether `op` writes a variable or TensorBow's state, itself or in the
  functions it runs (a v2 conditional whose branch writes batch norm's
  moving statistics)."""
  return (analysis.is_write(op) or analysis.writes_in_functions(op) or
          (op.type.startswith("TensorBow") and
           op.type not in _PURE_TENSORBOW))


def is_write_group(op):
  """Whether `op` is a write, or a group (NoOp) of writes only."""
  if writes_state(op):
    return True
  return (op.type == "NoOp" and not op.inputs and bool(op.control_inputs) and
          all(is_write_group(c) for c in op.control_inputs))


def orders_only(op, routing=frozenset(), writes=(), memo=None):
  """Whether `op`'s control dependencies on writes (is_write_group) only
  order it: an op of no state that reads no variable computes the same
  value before a write as after it, so the copies may run it before the
  writes it waits on. That is the backward pass which
  `tf.control_dependencies(update_ops)` puts behind batch norm's updates,
  whose activations a wave would otherwise keep for every replica until
  its commit. A TF1 conditional's Switch and Merge count only if named in
  `routing` (routing_ops).

  `writes` are the write ops (or groups) it would no longer wait on, its
  own and those handed down to it. A reference variable's `read` Identity
  gives its consumers the variable's buffer, so an op reading it through
  such ops reads the variable when it runs: if one of `writes` may write
  that variable (an exponential moving average applied after the step),
  the op must still wait, or it would read the value from before. `memo`
  keeps what each write writes between calls."""
  if writes and _reads_written(op, writes, {} if memo is None else memo):
    return False
  if op.type == "NoOp":
    # A group other ops wait on, e.g. tf.gradients' tuples: it must still
    # wait on the computed ops it groups, but not on writes. A group of
    # writes alone, or one nothing waits on (a target), keeps its edges.
    return (bool(compat.control_outputs(op)) and
            not all(is_write_group(c) for c in op.control_inputs))
  if op.type in _CONTROL_FLOW and op.name not in routing:
    return False
  return _value_only(op)


# Ops whose output may be their (first) input's buffer.
_FORWARDING = frozenset([
    "Identity", "RefIdentity", "IdentityN", "StopGradient", "PreventGradient",
    "CheckNumerics", "CheckNumericsV2", "EnsureShape", "Reshape", "ExpandDims",
    "Squeeze", "Bitcast"])


def _aliased_variables(op):
  """Names of the reference variables whose buffers `op`'s inputs may be
  (None for one that cannot be told)."""
  names, seen, stack = set(), set(), list(op.inputs)
  while stack:
    tensor = stack.pop()
    if tensor.name in seen:
      continue
    seen.add(tensor.name)
    if compat.is_ref_dtype(tensor.dtype):
      var = analysis.variable_of(tensor)
      names.add(None if var is None else var.name)
    elif tensor.op.type in _FORWARDING and tensor.op.inputs:
      source = tensor.value_index if tensor.op.type == "IdentityN" else 0
      stack.append(tensor.op.inputs[source])
  return names


def _written_variables(op, memo):
  """Names of the variables that write (or group of writes) `op` and every
  write it waits for may write, or None if that cannot be told."""
  if op.name not in memo:
    memo[op.name] = analysis.written_variables(
        graph_util.closure([op], frozenset()))
  return memo[op.name]


def _reads_written(op, writes, memo):
  aliased = _aliased_variables(op)
  if not aliased:
    return False
  for write in writes:
    written = _written_variables(write, memo)
    if written is None or None in aliased or aliased & written:
      return True
  return False


def _value_only(op):
  return not op.op_def.is_stateful and not any(
      compat.is_ref_dtype(t.dtype) or
      t.dtype.base_dtype in (tf.resource, tf.variant) for t in op.inputs)


# TF1 control flow, whose control edges carry frames and branches.
_CONTROL_FLOW = frozenset([
    "Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit",
    "RefExit", "NextIteration", "RefNextIteration", "LoopCond",
    "ControlTrigger"])


def routing_ops(graph, ops):
  """Names of the Switch ops among `ops`, and the Merge ops they reach, of
  TF1 conditionals in `graph` that only route values, such as the
  conditionals in batch norm's backward pass.

  A conditional's branches may produce dead tensors, which must not cross
  from a computation to its commit; its ops may run before the writes
  they wait on only if the whole conditional can: every op from a Switch
  to the Merges it reaches is value-only and waits on nothing outside
  but writes. None where the graph has while loops (control edges there
  carry frames) or for nested conditionals.
  """
  if any(op.type in ("Enter", "RefEnter") for op in graph.get_operations()):
    return frozenset()
  switches = [op for op in ops if op.type == "Switch"]
  merges, blocked = set(), set()
  for switch in switches:
    region, stack, ok = {switch.name}, [switch], _value_only(switch)
    while stack:
      op = stack.pop()
      following = [c for t in op.outputs for c in t.consumers()]
      following += compat.control_outputs(op)
      for nxt in following:
        if nxt.name in region:
          continue
        region.add(nxt.name)
        if nxt.type == "Merge":
          merges.add(nxt.name)
          continue
        if nxt.type in _CONTROL_FLOW or not _value_only(nxt):
          ok = False
        stack.append(nxt)
    for name in region:
      op = graph.get_operation_by_name(name)
      if op.type != "Merge" and not all(
          c.name in region or is_write_group(c) for c in op.control_inputs):
        ok = False
    if not ok:
      blocked |= region
  return frozenset(n for n in merges | set(op.name for op in switches)
                   if n not in blocked)


def split(fetches, targets, fed_names):
  """How to run one task (fetched tensors, target ops) in two phases.

  Returns:
    A Split, or None when the task cannot be split: it writes nothing, or
    a write waits on a computed op through a control dependency or
    consumes a computed reference or resource (then the task runs whole).
  """
  ops = graph_util.closure([t.op for t in fetches] + list(targets), fed_names)
  fed_ops = set(op.name for op in ops
                if any(t.name in fed_names for t in op.outputs))
  dead = _maybe_dead(ops)
  moved = set()  # computed ops the commit computes instead
  while True:
    after = _after(ops, fed_ops, fed_names, moved)
    if not after:
      return None
    internal, waited = _internal(ops, after, fed_ops, fed_names)
    crossing = (set(t.op.name for t in internal if t.op.name in dead) |
                (waited & dead))
    if not crossing:
      break
    # A tensor of a conditional's branch may carry no value (the branch
    # not taken): the commit computes it, and the branch, itself. So a
    # write in a branch takes its variable through the Switch the commit
    # runs, not a reference handed across, and a branch's constant
    # waits on the pivot the commit computes.
    moved |= crossing
  if waited or any(_stateful(t) for t in internal):
    return None
  target_list = list(targets)
  return Split(
      compute_fetches=[i for i, t in enumerate(fetches)
                       if t.op.name not in after],
      commit_fetches=[i for i, t in enumerate(fetches) if t.op.name in after],
      compute_targets=[i for i, op in enumerate(target_list)
                       if op.name not in after],
      commit_targets=[i for i, op in enumerate(target_list)
                      if op.name in after],
      internal=internal,
      may_fail=any(not _safe_in_commit(op) for op in ops
                   if op.name in after))


def _after(ops, fed_ops, fed_names, moved):
  """Names of the writes among `ops` (a closure, inputs first), of the ops
  in `moved` and of every op that waits for one of them."""
  after = set()
  for op in ops:  # inputs first
    if op.name in fed_ops:
      continue
    if (writes_state(op) or op.name in moved or
        any(t.op.name in after and t.name not in fed_names
            for t in op.inputs) or
        any(c.name in after for c in op.control_inputs)):
      after.add(op.name)
  return after


def _internal(ops, after, fed_ops, fed_names):
  """What a commit running the ops named in `after` takes from the
  computation of `ops`: (the tensors it is handed, the names of the
  computed ops it waits on by a control dependency, which no commit can:
  `split` moves them or runs the task whole)."""
  rereadable = set(fed_ops)
  for op in ops:
    if op.name in after or op.name in rereadable:
      continue
    if ((op.type in analysis.VARIABLE_OPS or op.type in _REREADABLE or
         op.type in analysis.REPLICA_VARIABLE_OPS) and
        not op.control_inputs and
        all(t.op.name in rereadable for t in op.inputs)):
      rereadable.add(op.name)
  internal, waited = [], set()
  seen = set()
  for op in ops:
    if op.name not in after:
      continue
    waited.update(c.name for c in op.control_inputs
                  if c.name not in after and c.name not in rereadable)
    for t in op.inputs:
      if (t.op.name in after or t.op.name in rereadable or
          t.name in fed_names or t.name in seen):
        continue
      seen.add(t.name)
      internal.append(t)
  return internal, waited


def _stateful(tensor):
  """Whether `tensor` is a reference, resource or variant: a commit cannot
  be fed one."""
  return compat.is_ref_dtype(tensor.dtype) or tensor.dtype.base_dtype in (
      tf.resource, tf.variant)


def _maybe_dead(ops):
  """Names of the ops of `ops` (inputs first) whose outputs a TF1
  conditional's branch not taken leaves without a value: a conditional's
  Switch (not a while loop's, whose predicate is a LoopCond) and what is
  computed from it, or waits on an op that is, before a Merge. A
  branch's constants wait on its pivot, so they are dead there too."""
  dead = set()
  for op in ops:
    if (op.type in ("Switch", "RefSwitch") and
        op.inputs[1].op.type != "LoopCond") or (
            op.type not in ("Merge", "RefMerge") and
            (any(t.op.name in dead for t in op.inputs) or
             any(c.name in dead for c in op.control_inputs))):
      dead.add(op.name)
  return dead


def _safe_in_commit(op):
  return (op.type in _SAFE_IN_COMMIT or analysis.is_apply(op) or
          (writes_state(op) and op.type.startswith("TensorBow")))


def gradient_positions(internal):
  """Positions, among the float32 and float64 tensors of `internal` (those
  Runtime.kept_sums sums, in its order), of each that a write takes as the
  whole gradient of a model variable: at its `grad` or `delta` input, of
  the variable's shape (not an outer product's factors, nor a sparse
  update's rows)."""
  positions = []
  kept = [t for t in internal if t.dtype.base_dtype in (tf.float32,
                                                        tf.float64)]
  for k, tensor in enumerate(kept):
    for consumer in tensor.consumers():
      if not (writes_state(consumer) and consumer.inputs):
        continue
      var = analysis.variable_of(consumer.inputs[0])
      names = _input_names(consumer)
      if (var is not None and tensor.shape.is_fully_defined() and
          tensor.shape == graph_util.dtype_and_shape(var)[1] and
          any(names[i] in ("grad", "delta")
              for i, t in enumerate(consumer.inputs) if t is tensor)):
        positions.append(k)
        break
  return positions


def _input_names(op):
  """The name of the op definition's argument behind each input of `op`."""
  names = []
  for arg in op.op_def.input_arg:
    count = (op.get_attr(arg.number_attr) if arg.number_attr else
             len(op.get_attr(arg.type_list_attr)) if arg.type_list_attr
             else 1)
    names += [arg.name] * count
  return names
