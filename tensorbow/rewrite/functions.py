"""Reads the functions an op runs: control flow v2 and function calls.

Without `disable_v2_behavior()`, `tf.cond` and `tf.while_loop` build `If`
and `While` ops that run functions of the graph's library, and a
`tf.function` called in a graph is a `PartitionedCall`. What such an op
does is in those functions' bodies, which `analysis` reads through this
module: the op types they hold (`called_op_types`), and the writes they
make with the variables those writes reach, traced from the op's own
inputs (`writes`), as batch norm's moving statistics written in a
conditional's true branch (DESIGN.md, "State").
"""
import collections

from tensorbow import compat

# Ops that run functions of the graph's library: control flow v2 (what
# tf.cond and tf.while_loop build without disable_v2_behavior) and calls.
FUNCTION_CALLS = frozenset([
    "If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase",
    "PartitionedCall", "StatefulPartitionedCall"])
# Ops whose functions take the op's inputs after the first (the predicate
# or the branch index); other calls take all of them.
_BRANCHING = frozenset(["If", "StatelessIf", "Case", "StatelessCase"])
_LOOPS = frozenset(["While", "StatelessWhile"])
# Ops of a function's body through which a variable's handle reaches the
# op that uses it.
_PASS_THROUGH = frozenset(["Identity"])

# A write made in a function `op` runs: its NodeDef, the tensor of `op`'s
# graph that its first input (the variable) is, or None where that cannot
# be told, and whether a loop's body makes it (a `While` on the way).
FunctionWrite = collections.namedtuple("FunctionWrite",
                                       ["node", "variable", "in_loop"])


def called_op_types(op):
  """The op types in the functions `op` runs, nested calls included; empty
  for an op that runs none."""
  graph = op.graph
  own = compat.graph_function(graph, op.type) is not None
  if op.type not in FUNCTION_CALLS and not own:
    return set()
  types = set()
  for _, _, definition in _reached(graph, _called(graph, op.node_def)):
    types.update(node.op for node in definition.node_def)
  return types


def add_library(graph, node_defs, library):
  """Adds to `library` (a FunctionDefLibrary) the functions of `graph`
  that `node_defs` run, nested calls included, with the gradient
  functions they name: what an import of those nodes alone needs of a
  library that may hold far more (a one-shot iterator's function holding
  the arrays of a data set)."""
  names = [name for node in node_defs for name in _called(graph, node)]
  for name, function, definition in _reached(graph, names, gradients=True):
    library.function.add().CopyFrom(definition)
    gradient = getattr(function, "grad_func_name", None)
    if gradient:
      library.gradient.add(function_name=name, gradient_func=gradient)


def _called(graph, node_def):
  """The names of the functions a NodeDef runs: those its attributes
  name, and its op type where that is a function of `graph`."""
  names = list(function_names(node_def))
  if compat.graph_function(graph, node_def.op) is not None:
    names.append(node_def.op)
  return names


def _reached(graph, names, gradients=False):
  """(name, function, FunctionDef) of each function of `graph` that
  running functions `names` runs, nested calls included (and, with
  `gradients`, the gradient functions they name), each once."""
  seen, names = set(), list(names)
  while names:
    name = names.pop()
    function = compat.graph_function(graph, name)
    if name in seen or function is None:
      continue
    seen.add(name)
    definition = function.definition
    yield name, function, definition
    for node in definition.node_def:
      names += _called(graph, node)
    gradient = getattr(function, "grad_func_name", None)
    if gradients and gradient:
      names.append(gradient)


def function_names(node_def):
  """The names of the functions a NodeDef's attributes name."""
  for attr in node_def.attr.values():
    if attr.HasField("func"):
      yield attr.func.name
    elif attr.HasField("list"):
      yield from (f.name for f in attr.list.func)


def writes(op, is_write_type):
  """The writes made in the functions `op` runs, nested calls included.

  Args:
    op: an operation of a graph.
    is_write_type: whether a node of a given op type writes a variable.

  Returns:
    A list of FunctionWrite, one per writing node of every function body
    (a body called twice is read twice, with each call's inputs).
  """
  found = []
  _visit(op.graph, op.node_def, [t for t in op.inputs], False,
         is_write_type, found, depth=0)
  return found


def _calls(graph, node_def):
  """[(function name, index of the node's input that is its first
  argument)] of the functions a node runs."""
  calls = []
  if compat.graph_function(graph, node_def.op) is not None:
    calls.append((node_def.op, 0))
  if node_def.op in FUNCTION_CALLS:
    offset = 1 if node_def.op in _BRANCHING else 0
    calls += [(name, offset) for name in function_names(node_def)]
  return calls


def _visit(graph, node_def, inputs, in_loop, is_write_type, found, depth):
  """Adds to `found` the writes of the functions `node_def` runs, its data
  inputs being `inputs` (tensors of `graph`, or None where unknown)."""
  if depth > 20:  # a recursive function: nothing more to learn
    return
  in_loop = in_loop or node_def.op in _LOOPS
  for name, offset in _calls(graph, node_def):
    function = compat.graph_function(graph, name)
    if function is None:
      continue
    definition = function.definition
    args = [a.name for a in definition.signature.input_arg]
    sources = {a: (inputs[offset + i] if offset + i < len(inputs) else None)
               for i, a in enumerate(args)}
    nodes = {n.name: n for n in definition.node_def}

    def source(inp, sources=sources, nodes=nodes):
      name = inp.split(":")[0]
      if name in sources:
        return sources[name]
      node = nodes.get(name)
      if node is not None and node.op in _PASS_THROUGH and node.input:
        return source(node.input[0])
      return None

    for node in definition.node_def:
      data = [source(i) for i in node.input if not i.startswith("^")]
      if is_write_type(node.op):
        found.append(FunctionWrite(node, data[0] if data else None, in_loop))
      _visit(graph, node, data, in_loop, is_write_type, found, depth + 1)
