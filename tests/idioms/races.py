"""Reads of a variable that race with its update in the same run.

A reference variable's `read` (an Identity) hands its consumers the
variable's own buffer, which an Apply/Assign op updates in place. When a
run both updates a variable and computes something from it, and nothing in
the graph orders the two, TensorFlow's executor may run the consumer before
the update or after it: `tf.compat.v1.Session` itself gives either value
from one run to the next. An optimizer orders the reads its gradients make
(`gate_gradients=GATE_OP` groups an op's gradients, so the update waits for
the backward pass that read the variable); a forward value the gradients do
not use, such as `loss * w` fetched beside the train op that updates `w`,
is left unordered.

Such a value is no reference for "L = 1 equals `tf.compat.v1.Session`": the
reference is not one value. `race_free` fails a run that holds such a
read, and `CheckedSession`, the corpus's reference session, calls it on
every run, so the corpus compares only values TensorFlow determines. Resource
variables read by ReadVariableOp, which an update copies away from, are
checked the same way: the read itself may run before or after the update.
Neither a functional control-flow op (While, If, a call) nor the value a
v1 cond chooses (its Merge) is looked into.
"""
import tensorflow as tf

# Ops that hand on their input's buffer: a consumer behind them reads the
# variable as much as one consuming the variable's `read`.
_FORWARDING = frozenset({
    "Identity", "RefIdentity", "StopGradient", "PreventGradient",
    "IdentityN", "Switch", "RefSwitch", "Enter",
    "RefEnter", "Exit", "RefExit", "NextIteration", "RefNextIteration"})
_VARIABLES = frozenset({"VariableV2", "Variable", "VarHandleOp"})
# Ops that take a variable and ask about it, not its value.
_NOT_READING = frozenset({
    "VarIsInitializedOp", "IsVariableInitialized", "VariableShape",
    "DestroyResourceOp"})
# Ops that take a variable (by reference or handle) and do not write it.
_NOT_WRITING = frozenset({
    "ReadVariableOp", "ResourceGather", "ResourceGatherNd"}) | (
        _FORWARDING | _NOT_READING)
# Not looked into: functional control flow and calls (what their bodies
# do), and a v1 cond's Merge (which branch it hands on is known only when
# the run is).
_NOT_LOOKED_INTO = frozenset({
    "While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase",
    "PartitionedCall", "StatefulPartitionedCall", "Merge", "RefMerge"})


class CheckedSession(tf.compat.v1.Session):
  """`tf.compat.v1.Session` as the corpus's reference: a run whose result
  TensorFlow does not determine fails before it runs."""

  def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
    race_free(self.graph, fetches, feed_dict)
    return super().run(fetches, feed_dict, options, run_metadata)


def race_free(graph, fetches, feed=None):
  """Fails when a run of `fetches` (feeding `feed`) in `graph` reads a
  variable, unordered, that the same run updates."""
  races = unordered_reads(graph, fetches, feed)
  assert not races, (
      "TensorFlow's own result is not determined: these reads race with "
      f"an update of the variable in the same run: {races}")


def unordered_reads(graph, fetches, feed=None):
  """[(reading op, updating op)]: the run's reads of a variable that no
  path in the graph orders against an update of it in the same run."""
  fed = {graph.as_graph_element(t)
         for t in tf.nest.flatten(list(feed or {}), expand_composites=True)}
  roots = [graph.as_graph_element(f)
           for f in tf.nest.flatten(fetches, expand_composites=True)]
  run = _ancestors([getattr(r, "op", r) for r in roots], fed)
  readers, writers = {}, {}
  for op in run:
    for variable in _variables_read(op, fed):
      readers.setdefault(variable, []).append(op)
    for variable in _variables_written(op):
      writers.setdefault(variable, []).append(op)
  if not writers:
    return []
  after = {op: _ancestors([op], fed)
           for ops in list(readers.values()) + list(writers.values())
           for op in ops}
  return sorted((reader.name, update.name)
                for variable, updates in writers.items()
                for update in updates
                for reader in readers.get(variable, ())
                if reader not in after[update] and update not in after[reader])


def _ancestors(ops, fed):
  """The ops a run of `ops` executes: `ops` and what they wait for, short
  of fed tensors."""
  seen, stack = set(), list(ops)
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    stack.extend(t.op for t in op.inputs if t not in fed)
    stack.extend(op.control_inputs)
  return seen


def _source(tensor, fed):
  """The variable op whose buffer or handle `tensor` is, else None."""
  while tensor not in fed:
    op = tensor.op
    if op.type in _VARIABLES:
      return op
    if op.type not in _FORWARDING or not op.inputs:
      return None
    index = tensor.value_index if op.type == "IdentityN" else 0
    tensor = op.inputs[min(index, len(op.inputs) - 1)]
  return None


def _variables_read(op, fed):
  """The variables whose value `op` computes from: a consumer of a
  reference variable's buffer, or ReadVariableOp of a handle."""
  if op.type in _FORWARDING | _VARIABLES | _NOT_LOOKED_INTO | _NOT_READING:
    return []
  if op.type not in _NOT_WRITING and _variables_written(op):
    return []
  sources = (_source(t, fed) for t in op.inputs)
  return [s for s in sources if s is not None]


def _variables_written(op):
  """The variables `op` updates in place: a reference or handle input of
  an op that writes it."""
  if op.type in _NOT_WRITING | _NOT_LOOKED_INTO:
    return []
  written = []
  for t in op.inputs:
    if t.dtype._is_ref_dtype or t.dtype == tf.resource:  # pylint: disable=protected-access
      source = _source(t, set())
      if source is not None:
        written.append(source)
  return written
