"""How the replicas' values of a training run's tensor make the whole
batch's (DESIGN.md, "What leaves the replicas").

Each replica computes what TensorFlow would on its shard. A tensor the
graph reduces over the batch's rows is regrouped exactly, from the
replicas' partial results, never recomputed:

- ROWS: a per-example tensor (rewrite/per_example.py): the replicas'
  values concatenated in the batch's row order;
- SUM: a sum or count over the rows (`reduce_sum` over dimension 0 of a
  per-example tensor, its `size` or `tf.shape(x)[0]`, a scatter or
  segment sum of per-example values into cells: `confusion_matrix`), and
  what linear ops make of such values (a cast, a negation, a sum of them,
  a product or quotient with a value of no batch): the replicas' values
  added;
- MAX, MIN: `reduce_max` or `reduce_min` over dimension 0 of a
  per-example tensor: the replicas' maximum or minimum;
- ROW_INDICES: `tf.where` of a per-example tensor, whose first column
  is a row's index in the replica's shard: the replicas' values
  concatenated, each shard's first row added to its indices;
- a dict {tag: kind} for a serialized Summary (`tf.compat.v1.summary`):
  the kind of each scalar summary's value, which the merge of summaries
  follows;
- None: anything else, a mean over the rows among them: the
  shard-weighted mean of floating-point values, replica 0's of others
  (fetches.merge). So is every value computed from a gradient
  (`analysis.is_gradient_op`): the replicas' backward passes are never
  run again, and a gradient's sum over a shard's rows (a bias's) is
  already that shard's mean.

The kinds follow the graph's data flow from the run's batch sources, never
the sizes a run returns. A write to a variable that is not replicated
(a counter, a metric's accumulators) that adds a SUM value is merged as
the sum of the replicas' moves (sync.sync_op). A value computed
from such writes' results (a metric's update op: its new total over its
new count) is computed again after the wave, on the central model, by a
twin that reads the variables instead (`central_twin`).
"""
import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import analysis
from tensorbow.rewrite import graph_util
from tensorbow.rewrite import per_example

ROWS, SUM, MAX, MIN = "rows", "sum", "max", "min"
ROW_INDICES = "row_indices"
# A row count's way there: the shape of a per-example tensor.
_SHAPE = "shape"

# Reductions over an axis list (input 1), by op type.
_REDUCTIONS = {"Sum": SUM, "Max": MAX, "Min": MIN}
# Ops that add per-example values into cells, by the input of the values.
_SCATTERS = {"ScatterNd": 1, "UnsortedSegmentSum": 0}
# Ops that keep how their first input's values combine.
_KEEPING = frozenset(["Identity", "Cast", "Reshape", "Squeeze", "ExpandDims",
                      "StopGradient", "Snapshot"])
# Of those, the ones that keep every element where it was.
_ELEMENTWISE_KEEPING = frozenset(["Identity", "Cast", "StopGradient",
                                  "Snapshot"])
# Ops whose output is a sum when every input is.
_ADDING = frozenset(["Add", "AddV2", "Sub", "AddN"])
# Ops whose output is a sum when input 0 is and input 1 has no batch.
_SCALING = frozenset(["RealDiv", "Div", "TrueDiv"])
# Functional while loops: output i is loop variable i, input i its start.
_LOOPS = frozenset(["While", "StatelessWhile"])
# Writes that add their input 1 to the variable.
ADDING_WRITES = frozenset(["AssignAdd", "AssignSub", "AssignAddVariableOp",
                           "AssignSubVariableOp"])


def combinations(graph, tensors, sources, fed=()):
  """Per tensor, how the replicas' values combine: ROWS, SUM, MAX, MIN or
  None.

  Args:
    graph: the user's graph.
    tensors: tensors of `graph` a training run computes.
    sources: the run's batch sources (batch feeds and pipeline elements
      of rank >= 1).
    fed: the run's other fed tensors; their producers do not run.

  Returns:
    A tuple, one kind per tensor.
  """
  if not sources:
    return tuple(None for _ in tensors)
  stops = set(t.name for t in sources) | set(t.name for t in fed)
  ops = _data_ops(tensors, stops)
  # A batch of fixed size: its shape and size are constants TensorFlow
  # folded (compat.shape_folds), which stand for the Shape or Size op.
  folds = {name: (kind, graph.get_tensor_by_name(source))
           for name, (kind, source) in compat.shape_folds(graph).items()}
  candidates = {t.name: t for t in tensors}
  for op in ops:
    for t in _row_inputs(op, folds):
      candidates[t.name] = t
  rows = dict(zip(candidates, per_example.per_example(
      graph, list(candidates.values()), sources, fed)))
  dependent = _dependent(ops, sources, [
      op.outputs[0] for op in ops
      if op.name in folds and rows.get(folds[op.name][1].name)])
  kinds, graded = {}, set()
  for op in ops:  # inputs first
    if op.type in _LOOPS:
      # A v2 while loop's gradient adds its accumulators to the forward
      # loop's variables: only their outputs are a gradient's part.
      graded.update(op.outputs[i].name for i, t in enumerate(op.inputs)
                    if t.name in graded)
    elif analysis.is_gradient_op(op) or any(t.name in graded
                                            for t in op.inputs):
      graded.update(t.name for t in op.outputs)
      continue
    kind = (_folded_kind(folds[op.name], rows) if op.name in folds else
            _kind(op, kinds, rows, dependent))
    if kind is not None:
      for t in op.outputs:
        kinds[t.name] = kind
  return tuple(_decided(t, kinds, rows.get(t.name), ops) for t in tensors)


def _decided(tensor, kinds, per_example, ops):
  """The kind of `tensor` (of a closure `ops`) given the kinds of the
  closure's tensors and whether it is per-example."""
  kind = kinds.get(tensor.name)
  if kind == ROW_INDICES or (kind in (SUM, MAX, MIN) and not per_example):
    return kind
  if per_example:
    return ROWS
  if tensor.op.type in ("ScalarSummary", "MergeSummary"):
    summaries = _scalar_summaries(tensor, ops)
    if summaries:
      return {tag: kinds.get(values.name) for tag, values in summaries}
  return None


def _scalar_summaries(tensor, ops):
  """[(tag, values tensor)] of the scalar summaries among `ops` that
  `tensor` (a serialized Summary, maybe merged) holds, their tags known."""
  inside = set(op.name for op in _data_ops([tensor], frozenset()))
  found = []
  for op in ops:
    if op.type != "ScalarSummary" or op.name not in inside:
      continue
    tag = tf.get_static_value(op.inputs[0])
    if tag is not None and np.ndim(tag) == 0:
      tag = np.asarray(tag).item()
      found.append((tag.decode() if isinstance(tag, bytes) else str(tag),
                    op.inputs[1]))
  return found


def _data_ops(tensors, stops):
  """The ops computing `tensors` by data inputs, inputs first, the
  producers of the tensors named in `stops` included but not entered."""
  return graph_util.closure([t.op for t in tensors], stops, controls=False)


def _dependent(ops, sources, folded=()):
  """Names of the tensors of `ops` whose data flow from a batch source
  (or from `folded`, constants that stand for a batch's shape)."""
  dependent = set(t.name for t in list(sources) + list(folded))
  for op in ops:  # inputs first
    if any(t.name in dependent for t in op.inputs):
      dependent.update(t.name for t in op.outputs)
  return dependent


def _row_inputs(op, folds):
  """The inputs of `op` whose being per-example decides its kind (for a
  constant of `folds`, the tensor whose shape it is)."""
  if op.name in folds:
    return [folds[op.name][1]]
  if op.type in _REDUCTIONS or op.type in ("Size", "Shape", "Where"):
    return op.inputs[:1]
  if op.type in _SCATTERS:
    return [op.inputs[_SCATTERS[op.type]]]
  return []


def _kind(op, kinds, rows, dependent):
  """How the replicas' values of `op`'s outputs combine, from its inputs':
  a kind, _SHAPE, or None."""
  inputs = [kinds.get(t.name) for t in op.inputs]
  if op.type in _REDUCTIONS:
    if (rows.get(op.inputs[0].name) and
        _reduces_rows(op.inputs[1], op.inputs[0].shape.rank)):
      return _REDUCTIONS[op.type]
    return SUM if op.type == "Sum" and inputs[0] == SUM else None
  if op.type == "Size":
    return SUM if rows.get(op.inputs[0].name) else None
  if op.type == "Shape":
    return _SHAPE if rows.get(op.inputs[0].name) else None
  if op.type == "StridedSlice":
    return SUM if inputs[0] == _SHAPE and _first_element(op) else None
  if op.type in _SCATTERS:
    return SUM if rows.get(op.inputs[_SCATTERS[op.type]].name) else None
  if op.type == "Where" and len(op.inputs) == 1:
    return ROW_INDICES if rows.get(op.inputs[0].name) else None
  if op.type in _KEEPING:
    if inputs[0] == ROW_INDICES and op.type not in _ELEMENTWISE_KEEPING:
      return None  # a reshape moves the row indices
    return inputs[0] if inputs[0] != _SHAPE else None
  if op.type == "Neg":
    return SUM if inputs[0] == SUM else None
  if op.type in _ADDING:
    return SUM if inputs and all(k == SUM for k in inputs) else None
  if op.type == "Mul":
    sums = [k == SUM for k in inputs]
    others = [t for t, s in zip(op.inputs, sums) if not s]
    return (SUM if any(sums) and len(others) == 1 and
            others[0].name not in dependent else None)
  if op.type in _SCALING:
    return (SUM if inputs[0] == SUM and op.inputs[1].name not in dependent
            else None)
  if op.type in ("Maximum", "Minimum"):
    kind = MAX if op.type == "Maximum" else MIN
    return kind if all(k == kind for k in inputs) else None
  return None


def _folded_kind(fold, rows):
  """The kind of a constant TensorFlow folded from a static shape or size,
  `fold` = ("shape" | "size" | "zeros", its tensor): as a Shape or Size
  op's."""
  kind, source = fold
  if not rows.get(source.name) or kind not in ("shape", "size"):
    return None  # zeros of a batch's shape add nothing
  return _SHAPE if kind == "shape" else SUM


def _reduces_rows(axes, rank):
  """Whether reduction axes `axes` (a tensor) of a tensor of rank `rank`
  (None: unknown) include dimension 0."""
  value = tf.get_static_value(axes)
  if value is not None:
    return any(int(a) == 0 or (rank and int(a) == -rank)
               for a in value.reshape(-1))
  # reduce_*(x) over every axis of a tensor of unknown rank.
  if axes.op.type == "Range":
    start = tf.get_static_value(axes.op.inputs[0])
    return start is not None and int(start) == 0
  return False


def _first_element(op):
  """Whether StridedSlice `op` takes element 0 alone (`tf.shape(x)[0]`)."""
  begin = tf.get_static_value(op.inputs[1])
  return (begin is not None and begin.reshape(-1).tolist()[:1] == [0] and
          op.get_attr("shrink_axis_mask") & 1 == 1)


def central_twin(builder, tensor, summed):
  """A tensor of the execution graph computing `tensor` (of it) from the
  central model after a wave, or None.

  Where `tensor` reads variables merged as sums (names in `summed`), by a
  write's result or a read after it (a metric's update op: its new total
  over its new count), and otherwise only constants, variables and pure
  ops, the twin reads those variables as the wave left them. Made once
  per tensor (`builder.once`)."""
  writes = set(op.name for op in _data_ops([tensor], frozenset())
               if analysis.is_write(op) and _written(op) in summed)
  stops = frozenset(t.name for name in writes
                    for t in builder.graph.get_operation_by_name(name).outputs)
  ops = _data_ops([tensor], stops)
  inner = [op for op in ops if op.type not in analysis.VARIABLE_OPS and
           op.name not in writes]
  if not (writes or any(op.name in summed for op in ops)) or any(
      (op.op_def.is_stateful and op.type != "ReadVariableOp") or
      op.type in ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault")
      or analysis.is_gradient_op(op) for op in inner):
    return None

  def read(write):
    return graph_util.read(analysis.variable_of(write.inputs[0]))

  def build():
    if tensor.op.name in writes:  # the write's result itself
      return read(tensor.op)
    local = set(op.name for op in inner)
    graph_def = tf.compat.v1.GraphDef()
    input_map = {}
    for op in inner:
      node = graph_def.node.add()
      node.CopyFrom(op.node_def)
      graph_util.without_colocation(node)
      del node.input[:]
      for t in op.inputs:  # control inputs dropped: it runs on its own
        if t.op.name not in local and t.name not in input_map:
          input_map[t.name] = read(t.op) if t.op.name in writes else t
        node.input.append(t.name)
    scope = builder.graph.unique_name("after_sums/twin")  # below prefix
    tf.compat.v1.import_graph_def(graph_def, input_map=input_map,
                                  name=scope + "/")
    return builder.graph.get_tensor_by_name(f"{scope}/{tensor.name}")

  return builder.once("after_sums", tensor.name, build)


def _written(op):
  """The name of the variable write `op` writes, or None."""
  var = analysis.variable_of(op.inputs[0])
  return var.name if var is not None else None
