"""Reads a user's graph: what a run executes, and what a training run writes.

A run's *closure* is every operation TensorFlow executes for its fetches and
targets. A run is a training run when its closure holds an optimizer's apply op.
The variables written there are classified as DESIGN.md, "What a user gets"
says: model variables (updated by an apply op, averaged by SMA), slots (the
optimizer's other state), and other written variables (a global step, batch-norm
moving statistics).
"""
import collections

import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import functions
from tensorbow.rewrite import graph_util

VARIABLE_OPS = frozenset(["VariableV2", "Variable", "VarHandleOp"])
# What a replicated variable becomes in the execution graph's copies: the
# copy of the replica the task trains (cc/ops/replica_ops.cc).
REPLICA_VARIABLE_OPS = frozenset(
    ["TensorBowReplicaVarHandle", "TensorBowReplicaVariable"])
_APPLY_PREFIXES = ("Apply", "ResourceApply", "SparseApply",
                   "ResourceSparseApply")
_WRITE_PREFIXES = _APPLY_PREFIXES + ("Assign", "Scatter", "ResourceScatter")
_OTHER_WRITES = frozenset(["StridedSliceAssign", "ResourceStridedSliceAssign",
                           "CountUpTo", "ResourceCountUpTo"])
# Pure ops named like writes: they compute a new tensor.
_PURE_SCATTERS = frozenset(["ScatterNd", "ScatterNdNonAliasingAdd"])
# Ops through which a variable (ref or handle) reaches the op using it.
PASS_THROUGH = frozenset(["Identity", "RefIdentity"])
# Input ops whose state a replica cannot copy (not reached when an op
# above comes first).
_UNSUPPORTED_INPUT_OPS = frozenset([
    "IteratorGetNextAsOptional",
    "ReaderRead", "ReaderReadV2", "ReaderReadUpTo", "ReaderReadUpToV2",
])


# Writes by which a tf.compat.v1.train optimizer updates a variable whose
# gradient is sparse (IndexedSlices) without an apply op: GradientDescent
# scatters, Adam assigns. Such a write counts as its variable's apply op
# when made in that variable's "update_<name>" scope of the optimizer's
# apply_gradients (the slots' writes there do not).
_SPARSE_UPDATES = frozenset([
    "ScatterSub", "ScatterAdd", "ResourceScatterSub", "ResourceScatterAdd",
    "AssignSub", "AssignSubVariableOp"])
# Writes that set a variable whole, by which an Optimizer subclass a user
# wrote may take its step (`var.assign(var - rate * grad)` in its
# _apply_dense): its variable's apply op when made in that scope too, and
# computed from a gradient (a write of the variable there from anything
# else, a constraint say, is no step).
_WHOLE_WRITES = frozenset(["Assign", "AssignVariableOp"])


def is_apply(op):
  """Whether `op` is an optimizer's update of a variable (see above)."""
  if op.type.startswith(_APPLY_PREFIXES):
    return True
  var = variable_of(op.inputs[0]) if op.inputs else None
  if var is None or not _steps_by_scope(op.type, op.name, var):
    return False
  return op.type not in _WHOLE_WRITES or _from_gradient(op)


def _steps_by_scope(op_type, op_name, var):
  """Whether a write of type `op_type` named `op_name` of variable op
  `var` is its step by the optimizer scope it is made in (see above)."""
  return ((op_type in _SPARSE_UPDATES or op_type in _WHOLE_WRITES) and
          f"update_{var.name}/" in op_name)


def _from_gradient(write):
  """Whether write `write`'s value is computed from a gradient."""
  return any(is_gradient_op(o) for o in _computed_from(write))


def _computed_from(write):
  """The ops write `write`'s value is computed from: along data inputs,
  and from a read of a resource variable to the writes of that variable
  it waits for (`assign` returns such a read under resource variables).
  Not what it merely waits for: a counter under the user's
  `tf.control_dependencies` around an optimizer is no slot of it."""
  seen, stack, found = set(), [t.op for t in write.inputs[1:]], []
  while stack:
    op = stack.pop()
    if op.name in seen:
      continue
    seen.add(op.name)
    found.append(op)
    stack.extend(t.op for t in op.inputs)
    var = variable_of(op.inputs[0]) if op.type == "ReadVariableOp" else None
    if var is not None:
      stack.extend(c for c in op.control_inputs if is_write(c) and
                   variable_of(c.inputs[0]) == var)
  return found


def is_dense_apply(op):
  """Whether apply op `op` takes a dense gradient of its whole variable."""
  return (op.type.startswith(("Apply", "ResourceApply")) and
          op.type not in _SPARSE_UPDATES)


def is_write(op):
  """Whether `op` writes a variable: an op of a writing kind (an assign, a
  scatter, an apply) given the variable itself, as a reference or a
  resource handle, at its first input. Pure ops of such names
  (`ScatterNd`, whose first input is its indices) write nothing."""
  return (writes_by_type(op.type) and bool(op.inputs) and
          (op.inputs[0].dtype == tf.resource or
           compat.is_ref_dtype(op.inputs[0].dtype)))


def writes_by_type(op_type):
  """Whether ops of type `op_type` may write a variable; where only the
  type is known (in a function's body), whether they do."""
  return ((op_type.startswith(_WRITE_PREFIXES) or op_type in _OTHER_WRITES)
          and op_type not in _PURE_SCATTERS)


# The op types in the functions an op runs (control flow v2, calls).
called_op_types = functions.called_op_types


def trains(op):
  """Whether running `op` takes an optimizer step: an apply op, or an op
  running a function that holds one."""
  return is_apply(op) or any(
      t.startswith(_APPLY_PREFIXES) for t in called_op_types(op))


def variable_of(tensor):
  """The variable op behind a ref or resource tensor, or None. A TF1
  conditional's branch reaches a variable through a Switch."""
  op = tensor.op
  while (op.type in PASS_THROUGH or _branch_switch(op)) and op.inputs:
    op = op.inputs[0].op
  if op.type in VARIABLE_OPS or op.type in REPLICA_VARIABLE_OPS:
    return op
  return None


def _through_control_flow(tensor):
  """Whether a variable reaches `tensor` through control flow v1's ops."""
  op = tensor.op
  while op.type in PASS_THROUGH and op.inputs:
    op = op.inputs[0].op
  return op.type in ("Switch", "RefSwitch", "Enter", "RefEnter", "Merge",
                     "RefMerge")


def _branch_switch(op):
  """Whether `op` is a TF1 conditional's Switch: a branch's way to a value
  made outside it (a while loop's Switch takes a LoopCond)."""
  return (op.type in ("Switch", "RefSwitch") and
          op.inputs[1].op.type != "LoopCond")


def in_branch(tensor):
  """Whether the variable behind ref or resource `tensor` reaches it
  through a TF1 conditional's Switch: a write of it is made in a branch."""
  op = tensor.op
  while (op.type in PASS_THROUGH or _branch_switch(op)) and op.inputs:
    if _branch_switch(op):
      return True
    op = op.inputs[0].op
  return False


def is_variable_value(tensor):
  """Whether fetching `tensor` reads a variable's current value."""
  op = tensor.op
  if op.type in VARIABLE_OPS:
    return True
  # A read that waits on other ops (the value a resource assign or scatter
  # returns) is not: fetched after the wave, it would run them again.
  if op.type in ("Identity", "ReadVariableOp") and op.inputs:
    return not op.control_inputs and variable_of(op.inputs[0]) is not None
  return False


def is_fixed_default(op):
  """Whether `op` is a `placeholder_with_default` whose default every
  replica computes alike: from no variable, placeholder, input pipeline,
  random op or other stateful op. Such an op is shared by the copies, as
  a placeholder is, so that a run feeding it or not reads what
  TensorFlow would."""
  if op.type != "PlaceholderWithDefault":
    return False
  return all(not o.op_def.is_stateful and
             o.type not in ("Placeholder", "PlaceholderV2",
                            "PlaceholderWithDefault")
             for o in graph_util.closure([op.inputs[0].op], frozenset()))


class TrainingInfo(collections.namedtuple("TrainingInfo", [
    "ops", "apply_ops", "model_vars", "slot_vars", "other_vars",
    "batch_dependent", "written", "read_models"],
    defaults=(frozenset(),))):
  """What a training run's closure holds.

  Attributes:
    ops: the closure, inputs first.
    apply_ops: optimizer apply ops, by name.
    model_vars: names of variable ops an apply op updates (input 0).
    slot_vars: names of the apply ops' other variables.
    other_vars: names of other variables the closure writes.
    batch_dependent: the subset of other_vars whose written value depends
      on a batch feed (batch-norm statistics): averaged, not copied.
    written: names of all variable ops written.
    read_models: names of the variable ops the closure reads without
      training them that another training run of the graph trains.
  """


def analyse_training(ops, batch_feed_names, trainable=None):
  """Classifies a training run's closure (see TrainingInfo).

  `trainable`: names of the trainable variable ops (default: those of the
  ops' graph's collection).

  Raises:
    tf.errors.UnimplementedError: for what TensorBow cannot train.
  """
  apply_ops, model_vars, slot_vars, written = [], [], [], {}
  for op in ops:
    _check_input(op)
    for name in _function_written(op):
      written.setdefault(name, []).append(op)
    if not is_write(op):
      continue
    var = _written_variable(op)
    written.setdefault(var.name, []).append(op)
    if is_apply(op):
      apply_ops.append(op.name)
      if var.name in model_vars:
        raise tf.errors.UnimplementedError(
            None, op,
            f"TensorBow cannot train variable '{var.name}': it is updated "
            "by more than one apply op in the same run")
      model_vars.append(var.name)
      slot_vars.extend(n for n in _slots_of(op) if n not in slot_vars)
  if trainable is None:
    trainable = trainable_variable_ops(ops[0].graph if ops else None)
  _check_trainable_writes(written, trainable)
  model, slots = set(model_vars), set(slot_vars)
  other_vars = [n for n in written if n not in model and n not in slots]
  batch_dependent = [
      n for n in other_vars
      if any(_depends_on(op.inputs[1:], batch_feed_names)
             for op in written[n])]
  read_models = frozenset(
      set(op.name for op in ops) & model_variables(ops[0].graph, trainable)
      - model) if ops else frozenset()
  return TrainingInfo(ops, apply_ops, model_vars, slot_vars, other_vars,
                      batch_dependent, sorted(set(written) | slots),
                      read_models)


def _check_input(op):
  """Refuses an input op whose state a replica cannot copy."""
  if op.type in _UNSUPPORTED_INPUT_OPS:
    raise tf.errors.UnimplementedError(
        None, op,
        f"TensorBow cannot train through op '{op.name}' (type {op.type}): "
        "each replica needs its own batch; feed it, or take it from a "
        "tf.data iterator's get_next() or a queue's dequeue")


def _written_variable(op):
  """The variable op write `op` writes; refuses a write TensorBow cannot
  train (in a loop, of no variable op, a step in a conditional)."""
  var = variable_of(op.inputs[0]) if op.inputs else None
  if var is None and _through_control_flow(op.inputs[0]):
    raise tf.errors.UnimplementedError(
        None, op,
        f"TensorBow cannot train op '{op.name}' (type {op.type}): it "
        "writes a variable inside tf.while_loop (or one a conditional "
        "returns), which is not supported; supported are writes in a "
        "tf.cond branch, such as batch norm's moving statistics under an "
        "is_training flag")
  if var is None:
    raise tf.errors.UnimplementedError(
        None, op,
        f"TensorBow cannot train op '{op.name}' (type {op.type}): the "
        "variable it writes is not a VariableV2 or VarHandleOp output")
  if is_apply(op) and in_branch(op.inputs[0]):
    raise _conditional_step(f"op '{op.name}' (type {op.type})", op,
                            var.name)
  return var


def _slots_of(apply_op):
  """Names of the slot variables of optimizer step `apply_op`, in order."""
  slots = []
  if not apply_op.type.startswith(_APPLY_PREFIXES):
    # Its slots are the variables written to compute the update.
    for w in _computed_from(apply_op):
      slot = variable_of(w.inputs[0]) if is_write(w) else None
      if slot is not None:
        slots.append(slot.name)
  for t in apply_op.inputs[1:]:
    # Slots are passed as variables; values (Adam's beta powers) are not.
    if t.dtype == tf.resource or t.dtype != t.dtype.base_dtype:
      slot = variable_of(t)
      if slot is not None:
        slots.append(slot.name)
  return list(dict.fromkeys(slots))


def _check_trainable_writes(written, trainable):
  """Refuses a write of a trainable variable that is neither its step
  nor waits for it (`written`: {variable name: its writes})."""
  for name, op in ((n, op) for n, ops in written.items() for op in ops):
    if name in trainable and not is_apply(op) and not _after_step(
        op, written[name]):
      raise tf.errors.UnimplementedError(
          None, op,
          f"TensorBow cannot train op '{op.name}' (type {op.type}): it "
          f"writes trainable variable '{name}' outside an optimizer's apply "
          "op; supported are the tf.compat.v1.train optimizers, and writes "
          "that wait for the variable's step (a weight clip under "
          "tf.control_dependencies([train_op]))")


def _function_written(op):
  """Names of the variable ops written in the functions `op` runs: a
  conditional's branch (control flow v2) or a tf.function.

  Raises:
    tf.errors.UnimplementedError: for an optimizer step among those
      writes (a conditional step), a write in a loop's body, or one whose
      variable cannot be told.
  """
  names = []
  for write in functions.writes(op, writes_by_type):
    node = write.node
    var = None if write.variable is None else variable_of(write.variable)
    what = (f"op '{node.name}' (type {node.op}) inside op '{op.name}' "
            f"(type {op.type})")
    if node.op.startswith(_APPLY_PREFIXES) or (
        var is not None and _steps_by_scope(node.op, node.name, var)):
      raise _conditional_step(what, op, None if var is None else var.name)
    if write.in_loop:
      raise tf.errors.UnimplementedError(
          None, op,
          f"TensorBow cannot train {what}: it writes a variable in a "
          "tf.while_loop's body, which is not supported; supported are "
          "writes in a tf.cond branch or a tf.function")
    if var is None:
      raise tf.errors.UnimplementedError(
          None, op,
          f"TensorBow cannot train {what}: the variable it writes is not "
          "one TensorBow can trace to a VariableV2 or VarHandleOp")
    names.append(var.name)
  return names


def _conditional_step(what, op, variable):
  """The error refusing a conditional optimizer step (`what`, in or of
  `op`) of `variable` (a name, or None)."""
  of = f" of variable '{variable}'" if variable else ""
  return tf.errors.UnimplementedError(
      None, op,
      f"TensorBow cannot train {what}: it is an optimizer step{of}, and "
      "the step itself is conditional (under tf.cond, as a dynamic loss "
      "scale's step is), which is not supported: every replica takes its "
      "step in every wave. Conditionals in the model train (batch norm's "
      "moving statistics under an is_training flag); take the step "
      "unconditionally, e.g. with a fixed loss scale")


def _after_step(op, writes):
  """Whether write `op` waits for an apply op among `writes` (the run's
  writes of its variable): a replica's weight clip or constraint, applied
  to the replica's copy after its whole update."""
  steps = [w for w in writes if is_apply(w)]
  return bool(steps) and any(
      s in graph_util.closure([op], frozenset()) for s in steps)


def model_variables(graph, trainable):
  """Names of the variable ops among `trainable` that an apply op in
  `graph` updates: the model variables of any of its training runs."""
  names = set()
  for op in graph.get_operations():
    if is_apply(op):
      var = variable_of(op.inputs[0])
      if var is not None and var.name in trainable:
        names.add(var.name)
  return names


def trainable_variable_ops(graph):
  """Names of the variable ops in `graph`'s trainable-variables collection."""
  if graph is None:
    return set()
  names = set()
  for v in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES):
    op = getattr(v, "op", None)
    if op is not None:
      names.add(op.name)
  return names


def _depends_on(tensors, names):
  if not names:
    return False
  for op in graph_util.closure([t.op for t in tensors], fed_names=frozenset()):
    if any(t.name in names for t in op.outputs):
      return True
  return False


def written_variables(ops, failed_op=None):
  """Names of the variable ops that `ops` may write (a plain run's closure),
  or None if some write's variable cannot be told.

  With `failed_op`, the op whose error ended the run: only the writes that
  do not wait for it, since TensorFlow runs no op after an input failed.
  """
  if failed_op is not None:
    ops = [op for op in ops if not is_write(op) or failed_op not in
           graph_util.closure([op], frozenset())]
  names = set()
  for op in ops:
    for write in functions.writes(op, writes_by_type):
      var = None if write.variable is None else variable_of(write.variable)
      if var is None:
        return None
      names.add(var.name)
    if is_write(op):
      var = variable_of(op.inputs[0]) if op.inputs else None
      if var is None:
        return None
      names.add(var.name)
  return frozenset(names)


def writes_in_functions(op):
  """Whether the functions `op` runs write a variable (a conditional's
  branch writing batch norm's moving statistics): for the split of a task
  (phases.py), `op` is a write."""
  return any(writes_by_type(t) for t in called_op_types(op))


def is_gradient_op(op):
  """Whether `op` computes part of a gradient: made by a gradient function
  (scope `<X>_grad`) under `tf.gradients`' scope ("gradients", "gradients_1",
  an optimizer's compute_gradients too) or a GradientTape's."""
  parts = op.name.split("/")[:-1]
  for i, part in enumerate(parts):
    base, _, suffix = part.partition("_")
    if ((base == "gradients" and (not suffix or suffix.isdigit())) or
        part == "gradient_tape"):
      return any(p.endswith("_grad") for p in parts[i + 1:])
  return False


def gradient_writes(ops, fed_names, trainable):
  """Names of the trainable variable ops (`trainable`) that a plain run's
  closure `ops` writes with a value computed from a gradient: a training
  step written by hand (tf.gradients and assign_sub), not an optimizer's
  apply op. Sorted; empty for assigns, initializers and restores."""
  names = set()
  for op in ops:
    if not is_write(op) or len(op.inputs) < 2:
      continue
    var = variable_of(op.inputs[0])
    if var is None or var.name not in trainable or var.name in names:
      continue
    computing = graph_util.closure([t.op for t in op.inputs[1:]], fed_names)
    if any(is_gradient_op(o) and
           not any(t.name in fed_names for t in o.outputs)
           for o in computing):
      names.add(var.name)
  return sorted(names)
