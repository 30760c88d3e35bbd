"""Which of a training run's fetches are per-example (DESIGN.md, "Fetches are
merged").

A per-example tensor is one whose first dimension is the batch dimension of
the run's batch sources (its batch feeds, or the pipeline elements the
replicas are fed): the session concatenates its replicas' values. The
graph's own shapes tell it, never a coincidence of sizes: the closure of
the fetches is imported into a scratch graph with every batch source
replaced by a placeholder whose first dimension is `SENTINEL`, a size no
model uses, and TensorFlow's shape functions carry it through (a
`tf.shape(x)[0]`-style partial shape included). A fetch whose inferred
first dimension is a multiple of the sentinel is per-example (a flattened
[B * k] tensor concatenates as its rows do); one of another known size is
not (a loss, a gradient, a weight-shaped tensor).

Where the shapes cannot tell:
- A first dimension (or rank) unknown even then (data-dependent shapes:
  boolean_mask, unique, py_func; or no inference at all, when an import
  fails on an op it cannot name): per-example if the fetch depends on a
  batch source through the data flow, as a row selection does, unless the
  user's graph knows it as a size other than a fixed batch's (a v1
  while_loop's shape invariant, which the import loses).
- An op that hard-codes the size of the batch: one whose shape function
  refuses the sentinel (a fixed-batch pipeline's `tf.reshape(x, [32, 2,
  2])`, or TensorFlow's own gradient of a mean over a static batch), or a
  reshape to that size that the sentinel passes by folding the batch into
  another dimension (`tf.reshape(x, [32, -1])`). Its outputs whose first
  dimension is the size the pipeline was built for are taken as carrying
  the batch dimension, its other outputs keep their shapes, and the
  inference goes on past it.
"""
import re

import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import functions
from tensorbow.rewrite import graph_util

# Prime: a product of a model's sizes is a multiple of it only if one of
# them is. Small enough that a partial shape [SENTINEL * k] stays within
# int32.
SENTINEL = 65521
# Ops past which inference is carried at most (the second rule).
_MAX_CUTS = 64
_FAILED_NODE = re.compile(r"\{\{node ([^}]+)\}\}")
# v2 conditionals and while loops, whose output_shapes attr states their
# outputs' shapes (without it, a loop's are its inputs').
FUNCTIONAL_CONTROL_FLOW = frozenset(["If", "StatelessIf", "Case",
                                     "StatelessCase", "While",
                                     "StatelessWhile"])
# The ops of the folds compat.shape_folds notes, by kind.
_FOLDED_OPS = {"shape": "Shape", "size": "Size"}
# Where the user's ops go in the scratch graph, apart from its placeholders.
_SCOPE = "user"


def per_example(graph, fetches, sources, fed=()):
  """Per fetch, whether it is per-example.

  Args:
    graph: the user's graph.
    fetches: the run's fetched tensors (of `graph`).
    sources: the run's batch sources: batch feeds and pipeline elements
      (tensors of `graph`, rank >= 1).
    fed: the run's other fed tensors; their producers do not run.

  Returns:
    A tuple of bools, one per fetch.
  """
  sources = {t.name: t for t in sources}
  if not sources:
    return tuple(False for _ in fetches)
  # The sizes a fixed-batch pipeline was built for.
  fixed = frozenset(_first(t.shape) for t in sources.values()) - {None}
  fed = dict(sources, **{t.name: t for t in fed})
  ops, inputs = data_closure(fetches, fed)
  depending = dependent(ops, sources)
  shapes = _inferred_shapes(graph, ops, inputs, fetches, sources, fixed)
  decided = []
  for t in fetches:
    shape = shapes.get(t.name) if shapes is not None else None
    if t.name in sources:
      decided.append(True)
    elif shape is not None and shape.rank == 0:
      decided.append(False)
    elif shape is not None and _first(shape) is not None:
      first = _first(shape)
      decided.append(first >= SENTINEL and first % SENTINEL == 0)
    elif _first(t.shape) is not None and _first(t.shape) not in fixed:
      # The user's graph knows a size the batch does not change (a v1
      # while loop's shape invariant), where the import lost it.
      decided.append(False)
    else:
      decided.append(t.op.name in depending and t.shape.rank != 0)
  return tuple(decided)


def _first(shape):
  """The first dimension of TensorShape `shape`, None if unknown or none."""
  return shape.as_list()[0] if shape.rank else None


def data_closure(fetches, fed):
  """(ops, fed tensors read): the ops computing `fetches` by data inputs,
  not entering the producers of fed tensors."""
  seen, ops, inputs = set(), [], {}
  stack = [t.op for t in fetches if t.name not in fed]
  while stack:
    op = stack.pop()
    if op.name in seen:
      continue
    seen.add(op.name)
    ops.append(op)
    for t in op.inputs:
      if t.name in fed:
        inputs[t.name] = t
      elif t.op.name not in seen:
        stack.append(t.op)
  return ops, inputs


def dependent(ops, sources):
  """Names of the ops in `ops` whose data flow from a batch source."""
  names = set(op.name for op in ops)
  dependent = set()
  stack = [c for t in sources.values() for c in t.consumers()]
  while stack:
    op = stack.pop()
    if op.name in dependent or op.name not in names:
      continue
    dependent.add(op.name)
    stack.extend(c for t in op.outputs for c in t.consumers())
  return dependent


def _inferred_shapes(graph, ops, inputs, fetches, sources, fixed):
  """{fetch name: its shape with the batch sources' first dimension set to
  SENTINEL}, or None if TensorFlow's shape inference cannot be run."""
  kept = {op.name: op for op in ops}
  cut = {}  # tensor name -> (dtype, shape) in the scratch graph
  for name, t in inputs.items():
    cut[name] = (t.dtype, sentinel_shape(t.shape) if name in sources
                 else t.shape)
  full = _unpinned(graph, kept, cut)
  for _ in range(_MAX_CUTS):
    try:
      shapes, scratch = _imported(full, kept, cut, fetches)
    except ValueError as e:
      failed = _FAILED_NODE.search(str(e))
      name = failed.group(1)[len(_SCOPE) + 1:] if failed else None
      if name not in kept:
        return None
      # A reshape before it may have folded the batch into another
      # dimension; else the op that failed hard-codes the batch size.
      pinning = _pinning_before(full, kept, cut, kept[name], fixed)
    else:
      pinning = [op for op in kept.values()
                 if _pins_batch(scratch, op, fixed)]
      if not pinning:
        return shapes
    # The second rule: inference goes on past an op that hard-codes the
    # batch size.
    for op in pinning:
      del kept[op.name]
      for t in op.outputs:
        cut[t.name] = (t.dtype, sentinel_shape(t.shape)
                       if _first(t.shape) in fixed else t.shape)
  return None


def _pinning_before(full, kept, cut, failed, fixed):
  """The ops to carry inference past when op `failed` refused its inputs'
  shapes: the reshapes among its inputs' ops that pin the batch
  (`_pins_batch`), else `failed` itself."""
  ancestors, _ = data_closure(list(failed.inputs), cut)
  ancestors = {op.name: op for op in ancestors if op.name in kept}
  try:
    _, scratch = _imported(full, ancestors, cut, [])
  except ValueError:  # a loop through `failed`
    return [failed]
  return ([op for op in ancestors.values() if _pins_batch(scratch, op, fixed)]
          or [failed])


def _pins_batch(scratch, op, fixed):
  """Whether user op `op`, as imported in `scratch`, is a reshape to the
  size a fixed-batch pipeline was built for of a tensor carrying the batch
  dimension (`tf.reshape(x, [32, -1])`): a reshape the sentinel does not
  fail where the other sizes divide it."""
  if op.type != "Reshape" or not fixed:
    return False
  imported = scratch.get_operation_by_name(_SCOPE + "/" + op.name)
  source = _first(imported.inputs[0].shape)
  return (_first(imported.outputs[0].shape) in fixed and
          source is not None and source % SENTINEL == 0)


def sentinel_import(graph, kept, cut):
  """(scratch graph, None) of an import of the `kept` ops ({name: op}) of
  `graph`, their inputs named in `cut` replaced by placeholders of the
  (dtype, shape) given there; or (None, the name of the op of `graph`
  whose shape function refused them, None if none is named)."""
  try:
    _, scratch = _imported(_unpinned(graph, kept), kept, cut, [])
  except ValueError as e:
    failed = _FAILED_NODE.search(str(e))
    name = failed.group(1)[len(_SCOPE) + 1:] if failed else None
    return None, (name if name in kept else None)
  return scratch, None


def _unpinned(graph, kept, cut=None):
  """A GraphDef of `graph`'s `kept` ops and the functions they run, its
  v2 conditionals and loops without their outputs' shapes, and, given the
  `cut` of an import, its noted folds of a tensor the import has as the
  ops they stand for: as the user's graph states them, they would pin the
  batch's size the sentinel stands for (a partitioned embedding lookup
  reshapes its rows to the folded shape of a fixed-size batch of ids)."""
  # The kept ops alone: the graph's own GraphDef would copy all of it and
  # its library, a data set held in either included.
  full = tf.compat.v1.GraphDef()
  full.versions.CopyFrom(graph.graph_def_versions)
  full.node.extend(op.node_def for op in kept.values())
  functions.add_library(graph, full.node, full.library)
  folds = {} if cut is None else {
      name: (kind, source)
      for name, (kind, source) in compat.shape_folds(graph).items()
      if kind in _FOLDED_OPS and (source in cut or
                                  source.rpartition(":")[0] in kept)}
  for node in full.node:
    if node.op in FUNCTIONAL_CONTROL_FLOW:
      node.attr.pop("output_shapes", None)
    elif node.name in folds:
      _unfold(node, *folds[node.name], graph)
  return full


def _unfold(node, kind, source, graph):
  """Makes Const NodeDef `node`, TensorFlow's fold of tensor `source`'s
  static shape or size (`kind`, compat.shape_folds), the op computing
  it."""
  dtype = node.attr["dtype"].type
  node.op = _FOLDED_OPS[kind]
  node.ClearField("attr")
  node.attr["T"].type = graph.get_tensor_by_name(source).dtype.as_datatype_enum
  node.attr["out_type"].type = dtype
  del node.input[:]
  node.input.append(source)


def imported_op(scratch, name):
  """The op of a scratch graph (sentinel_import) importing op `name`."""
  return scratch.get_operation_by_name(_SCOPE + "/" + name)


def _imported(full, kept, cut, fetches):
  """(the fetches' shapes, the scratch graph) of an import of the `kept`
  ops of GraphDef `full`, their inputs named in `cut` replaced by
  placeholders of the shapes given there."""
  graph_def = tf.compat.v1.GraphDef()
  graph_def.versions.CopyFrom(full.versions)
  graph_def.library.CopyFrom(full.library)
  for node in full.node:
    if node.name in kept:
      copy = graph_def.node.add()
      copy.CopyFrom(node)
      # Only data inputs count for shapes; the ops behind control inputs
      # and colocations are not imported.
      data = [i for i in copy.input if not i.startswith("^")]
      del copy.input[:]
      copy.input.extend(data)
      graph_util.without_colocation(copy)
  used = set()
  for node in graph_def.node:
    for i in node.input:
      used.add(i if ":" in i else i + ":0")
  scratch = tf.Graph()
  shapes = {}
  with scratch.as_default():
    input_map = {}
    for name, (dtype, shape) in cut.items():
      placeholder = tf.compat.v1.placeholder(dtype.base_dtype, shape)
      if name in used:
        input_map[name] = placeholder
      shapes[name] = placeholder.shape
    wanted = [t.name for t in fetches
              if t.op.name in kept and t.name not in cut]
    returned = tf.compat.v1.import_graph_def(
        graph_def, input_map=input_map, return_elements=wanted,
        name=_SCOPE)
    shapes.update(zip(wanted, (t.shape for t in returned)))
  return shapes, scratch


def sentinel_shape(shape):
  """`shape` with its first dimension the sentinel (a batch's)."""
  if shape.rank is None or shape.rank == 0:
    return shape
  return tf.TensorShape([SENTINEL] + shape.as_list()[1:])
