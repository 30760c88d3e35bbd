"""Batch feeds that their placeholders do not declare, and copies of a
graph built for a fixed batch size (DESIGN.md, "Batch feeds are split").

A placeholder declared `[None, ...]` is a batch feed. One declared without
a shape (`placeholder("float")`) or with a fixed first dimension (`(100,
784)`, as TensorFlow's `fully_connected_feed.py` writes it) is one when the
graph's data flow treats its first dimension as the batch's: the run's
training closure is imported into a scratch graph with the candidates'
first dimension set to `per_example.SENTINEL`, and a candidate is a batch
feed when TensorFlow's shape functions accept that and an op reduces over
its rows (a sum or mean over the batch, a weight gradient's matmul).

A graph built for a fixed size also holds that size in constants
TensorFlow folded while building it: a static shape or size
(`tf.shape`, `ones_like`, the broadcasting gradients: noted as
TensorFlow makes them, compat.record_shape_folds) and the tile multiples,
reshape shapes and divisor of the gradients of `reduce_sum` and
`reduce_mean` (found by the gradient scope of the op that made them).
The replicas' copies compute each from their shard instead (`fold_nodes`);
a constant the user's own code wrote stays, and where it fixes the size
(`tf.reshape(x, [100, 28, 28, 1])`) the first training run says so.
"""
import collections
import re

import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import analysis
from tensorbow.rewrite import per_example

# What a folded constant is (Fold.kind), of its sources' shapes.
SHAPE = "shape"  # the shape of sources[0]
SIZE = "size"  # the number of elements of sources[0]
ZEROS = "zeros"  # zeros of sources[0]'s shape
KEPT_DIMS = "kept_dims"  # sources[0]'s shape, 1 along `axes`
TILE_SCALING = "tile_scaling"  # sources[0]'s shape along `axes`, else 1
MEAN_FACTOR = "mean_factor"  # size of sources[0] over that of sources[1]
ANY_SHAPE = "any_shape"  # a list's element shape of unknown rank (-1)

Fold = collections.namedtuple("Fold", [
    "kind",  # one of the kinds above
    "sources",  # names of the tensors (of the user's graph) it is of
    "axes",  # for KEPT_DIMS and TILE_SCALING: reduced axes of sources[0]
    "rank",  # for KEPT_DIMS and TILE_SCALING: sources[0]'s rank
])

# A fold's kind by how compat.shape_folds notes it.
_NOTED = {"shape": SHAPE, "size": SIZE, "zeros": ZEROS}
# Ops through which a batch's rows reach one value: evidence that the
# graph treats a feed's first dimension as the batch's.
_REDUCING = frozenset([
    "Sum", "Mean", "Max", "Min", "Prod", "MatMul", "BatchMatMul",
    "BatchMatMulV2", "BatchMatMulV3", "Conv2DBackpropFilter",
    "Conv2DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter",
    "BiasAddGrad", "L2Loss", "UnsortedSegmentSum"])
# Ops whose input 0 is a table they take rows of.
_LOOKUPS = frozenset(["Gather", "GatherV2", "ResourceGather", "GatherNd",
                      "ResourceGatherNd"])
# Ops whose constant input fixes the size of what they make.
_SIZING = frozenset(["Reshape", "Fill", "Tile", "BroadcastTo", "Slice",
                     "StridedSlice", "Pad", "PadV2", "Const"])
_GRADIENTS = re.compile(r"(?:^|/)gradients(?:_\d+)?/")
# TensorFlow's functions that fold a static shape into a constant
# (compat.record_shape_folds notes what they fold).
_FOLDING = frozenset(["shape_internal", "size_internal", "zeros_like_impl"])
# Beyond this many candidate feeds in one run, none is tried alone.
_MAX_CANDIDATES = 8
# Ops in v1 conditionals an import may carry inference past.
_MAX_CONDITIONAL = 16


class UnsplittableBatch(tf.errors.UnimplementedError):
  """A training run's batch that the user's graph fixes the size of."""

  def __init__(self, message):
    super().__init__(None, None, message)


def plan_batches(graph, ops, fed, values, batch, elements):
  """(per feed, whether it is a batch feed; the constants TensorFlow
  folded from static shapes, `folds`) of a training run over closure
  `ops` (of the execution graph) fed `values` to `fed` (of the user's
  `graph`): beyond the declared batch feeds `batch`, those the data flow
  shows (DESIGN.md, "Batch feeds are split"); `elements` says which
  feeds are a pipeline's elements.

  Raises:
    ValueError, UnsplittableBatch: as `by_data_flow` and `check_noticed`.
  """
  # The closure may hold TensorBow's own ops of the execution graph (a
  # control dependency's stand-in): not the user's.
  names = set(op.name for op in ops)
  user_ops = [op for op in graph.get_operations() if op.name in names]
  found = folds(graph, user_ops)
  undeclared = by_data_flow(graph, user_ops, fed, values,
                            [b or e for b, e in zip(batch, elements)], found)
  batch = [b or u for b, u in zip(batch, undeclared)]
  check_noticed(graph, user_ops, fed, batch)
  return batch, found


def folds(graph, ops):
  """{Const op name: Fold} of the constants among `ops` (a training run's
  closure, of `graph`) that TensorFlow folded from a static shape of a
  tensor the run computes."""
  recorded = compat.shape_folds(graph)
  names = frozenset(op.name for op in ops)
  found = {}
  for op in ops:
    if op.type != "Const":
      continue
    if op.name in recorded:
      kind, source = recorded[op.name]
      found[op.name] = Fold(_NOTED[kind], (source,), (), None)
      continue
    fold = _gradient_fold(graph, op) or _accumulator_fold(op)
    if fold is not None:
      found[op.name] = fold
  # A copy computes a fold from what the run computes anyway.
  return {name: fold for name, fold in found.items()
          if all(s.rpartition(":")[0] in names for s in fold.sources)}


def check_noticed(graph, ops, fed, batch):
  """Refuses a training run whose fixed-size batch feeds (`batch` says
  which of `fed` are batch feeds) reach a constant TensorFlow folded from
  a static shape without noting it (made before `tensorbow` was
  imported): the copies could not compute it from their shard.

  Raises:
    UnsplittableBatch: naming the constant and the placeholders.
  """
  fixed = [t for t, b in zip(fed, batch)
           if b and t.shape.rank and t.shape.as_list()[0] is not None]
  if not fixed:
    return
  noted = compat.shape_folds(graph)
  for op in ops:
    if (op.type == "Const" and op.name not in noted and
        any(frame.name in _FOLDING for frame in op.traceback)):
      names = ", ".join(f"'{t.op.name}' {tuple(t.shape.as_list())}"
                        for t in fixed)
      raise UnsplittableBatch(
          f"TensorBow cannot split the batches fed to placeholders {names} "
          f"among the replicas: TensorFlow folded a static shape into "
          f"constant '{op.name}' before tensorbow was imported, and the "
          "replicas cannot compute it from their shard. Import tensorbow "
          "before building the graph, or declare the placeholders with an "
          "unknown first dimension")


def _gradient_fold(graph, const):
  """The Fold of Const op `const` if the gradient function of a
  `reduce_sum` or `reduce_mean` made it from the static shape of the
  reduced tensor (math_grad's _SumGrad and _MeanGrad), else None."""
  match = _GRADIENTS.search(const.name)
  if match is None:
    return None
  rest = const.name[match.end():]
  for end in [m.start() for m in re.finditer("_grad/", rest)]:
    try:
      forward = graph.get_operation_by_name(rest[:end])
    except KeyError:
      continue
    if forward.type in ("Sum", "Mean"):
      scope = const.name[:match.end() + end] + "_grad/"
      return _reduction_fold(forward, const, scope)
  return None


def _accumulator_fold(const):
  """An ANY_SHAPE Fold if Const op `const` is the element shape of a list
  that a v2 while loop's gradient accumulates the loop's tensors in
  (while_v2 makes it from their static shapes: a fixed batch's rows),
  else None."""
  for consumer in const.outputs[0].consumers():
    if (consumer.type == "EmptyTensorList" and consumer.inputs[0] is
        const.outputs[0] and consumer.name.endswith("/accumulator") and
        _GRADIENTS.search(consumer.name)):
      return Fold(ANY_SHAPE, (), (), None)
  return None


def _reduction_fold(forward, const, scope):
  """The Fold of `const`, made in gradient scope `scope` of reduction op
  `forward`, from how an op of that scope takes it; None if none does as
  _SumGrad and _MeanGrad do."""
  reduced = forward.inputs[0]
  axes = tf.get_static_value(forward.inputs[1])
  rank = reduced.shape.rank
  if axes is None or not rank:
    return None
  axes = tuple(sorted(set(int(a) % rank for a in np.reshape(axes, [-1]))))
  value = const.outputs[0]
  for consumer in value.consumers():
    if not consumer.name.startswith(scope):
      continue
    at = [i for i, t in enumerate(consumer.inputs) if t is value]
    if consumer.type == "Tile" and at == [1]:
      return Fold(TILE_SCALING, (reduced.name,), axes, rank)
    if consumer.type == "Reshape" and at == [1]:
      return Fold(KEPT_DIMS, (reduced.name,), axes, rank)
    if (forward.type == "Mean" and consumer.type in ("RealDiv", "Div")
        and at == [1]):
      return Fold(MEAN_FACTOR, (reduced.name, forward.outputs[0].name),
                  axes, rank)
  return None


def fold_nodes(node, fold, source_dtypes, resolve):
  """NodeDefs computing `fold` from a copy's own tensors, in place of the
  copy's Const NodeDef `node` (the last keeps its name).

  Args:
    node: the copied Const NodeDef.
    fold: its Fold.
    source_dtypes: the dtypes of `fold.sources`.
    resolve: the name ("op:index") by which the copy reads the tensor of
      the user's graph named as given.
  """
  dtype = tf.as_dtype(node.attr["dtype"].type)
  scratch = tf.Graph()
  with scratch.as_default():
    sources = [tf.compat.v1.placeholder(d.base_dtype, name=f"source_{i}")
               for i, d in enumerate(source_dtypes)]
    tf.identity(_computed(fold, sources, dtype), name="value")
  local = {f"source_{i}": resolve(name)
           for i, name in enumerate(fold.sources)}
  nodes = []
  for made in scratch.as_graph_def().node:
    if made.name in local:
      continue
    out = tf.compat.v1.NodeDef()
    out.CopyFrom(made)
    out.name = _fold_name(node.name, made.name)
    out.device = node.device
    del out.input[:]
    for inp in made.input:
      name, _, index = inp.partition(":")
      out.input.append(local[name] if name in local else
                       f"{_fold_name(node.name, name)}:{index or 0}")
    nodes.append(out)
  return nodes


def _fold_name(const_name, made):
  return const_name if made == "value" else (
      f"{const_name}>tensorbow_fold/{made}")


def _computed(fold, sources, dtype):
  """The tensor `fold` stands for, of `sources` (its sources' tensors)."""
  if fold.kind == SIZE:
    return tf.size(sources[0], out_type=dtype)
  if fold.kind == ZEROS:
    return tf.zeros_like(sources[0], dtype=dtype)
  if fold.kind == ANY_SHAPE:
    return tf.constant(-1, dtype)
  if fold.kind == MEAN_FACTOR:
    rows = tf.size(sources[0]) // tf.maximum(tf.size(sources[1]), 1)
    return tf.cast(rows, dtype)
  shape = tf.shape(sources[0], out_type=dtype)
  if fold.kind == SHAPE:
    return shape
  mask = tf.constant([1 if i in fold.axes else 0 for i in range(fold.rank)],
                     dtype)
  if fold.kind == KEPT_DIMS:
    return shape * (1 - mask) + mask
  return shape * mask + (1 - mask)  # TILE_SCALING


def is_batch_feed(tensor):
  """Whether fed `tensor` is a declared batch feed: rank >= 1, first
  dimension unknown."""
  # as_list(), not shape[0]: under v1 behaviour that is a Dimension, never
  # None.
  shape = tensor.shape
  return (shape.rank is not None and shape.rank >= 1 and
          shape.as_list()[0] is None)


def undeclared(tensor, value):
  """Whether fed `tensor`, fed `value`, may be a batch feed its
  placeholder does not declare: a placeholder without a shape or with a
  fixed first dimension, fed a value of rank >= 1."""
  shape = tensor.shape
  return (tensor.op.type in ("Placeholder", "PlaceholderV2") and
          np.ndim(value) >= 1 and
          (shape.rank is None or
           (shape.rank >= 1 and shape.as_list()[0] is not None)))


def by_data_flow(graph, ops, fed, values, sources, found):
  """Which of a training run's undeclared candidate feeds are batch feeds.

  Args:
    graph: the user's graph.
    ops: the run's closure (ops of `graph`).
    fed: the run's fed tensors (of `graph`).
    values: what the run feeds them.
    sources: per feed, whether it is a batch source already (a declared
      batch feed, or a pipeline's element).
    found: `folds(graph, ops)`.

  Returns:
    Per feed, whether it is an undeclared batch feed.

  Raises:
    ValueError: a value that does not fit its placeholder's shape, as
      `tf.compat.v1.Session` says it.
    UnsplittableBatch: a candidate of fixed size that the user's own code
      fixes the size of (naming the op), or, with no batch feed found, one
      that the data flow cannot tell.
  """
  for t, v in zip(fed, values):
    if not tf.TensorShape(np.shape(v)).is_compatible_with(t.shape):
      # TensorFlow's own check of what the user feeds comes first.
      raise ValueError(
          f"Cannot feed value of shape {np.shape(v)} for Tensor {t.name}, "
          f"which has shape {t.shape}")
  rows = set(len(v) for v, s in zip(values, sources) if s and np.ndim(v))
  candidates = [i for i, (t, v) in enumerate(zip(fed, values))
                if not sources[i] and undeclared(t, v) and
                (not rows or len(v) in rows)]
  if not candidates:
    return [False] * len(fed)
  scratch = _Scratch(graph, ops, fed, values, sources, found)
  chosen = scratch.largest(candidates)
  for i in candidates:
    if i not in chosen and fed[i].shape.rank is not None:
      scratch.check_fixed(i, chosen, bool(chosen or any(sources)))
  return [i in chosen for i in range(len(fed))]


class _Scratch(object):
  """Imports of a training run's closure with chosen feeds' first
  dimension set to the sentinel (per_example.SENTINEL)."""

  def __init__(self, graph, ops, fed, values, sources, found):
    self._graph = graph
    self._fed = fed
    self._values = values
    # An accumulator's element shape stays what the graph says: the
    # copies' own is only made unknown at run time.
    found = {name: fold for name, fold in found.items()
             if fold.kind != ANY_SHAPE}
    fed_names = frozenset(t.name for t in fed) | frozenset(
        name + ":0" for name in found)
    applies = [op for op in ops if analysis.is_apply(op)]
    kept, _ = per_example.data_closure(
        [t for op in applies for t in op.inputs], fed_names)
    self._kept = {op.name: op for op in kept}
    self._cut = {}
    for t, v, source in zip(fed, values, sources):
      shape = tf.TensorShape(np.shape(v))
      self._cut[t.name] = (t.dtype, per_example.sentinel_shape(shape)
                           if source else shape)
    for name, fold in found.items():
      const = graph.get_operation_by_name(name).outputs[0]
      # A shape keeps its rank; zeros of a shape, not even that.
      self._cut[const.name] = (const.dtype, tf.TensorShape(None)
                               if fold.kind == ZEROS else const.shape)

  def largest(self, candidates):
    """The largest set of `candidates` (feed positions) that import with
    the sentinel and whose rows an op reduces; removing one at a time."""
    chosen = set(candidates[:_MAX_CANDIDATES])
    while chosen:
      scratch, _ = self._imported(chosen)
      if scratch is not None:
        unreduced = set(i for i in chosen if not self._reduced(scratch, i))
        if not unreduced:
          return chosen
        chosen -= unreduced
        continue
      for i in sorted(chosen):
        if self._imported(chosen - {i})[0] is not None:
          chosen = chosen - {i}
          break
      else:
        return set()
    return chosen

  def check_fixed(self, i, chosen, found_batch):
    """Refuses candidate `i` (a placeholder of known rank left whole) if
    an op the user wrote fixes its size, or if no batch was found at all.

    Raises:
      UnsplittableBatch: naming the placeholder and what fixes its size.
    """
    _, failed = self._imported(chosen | {i})
    fixing = self._fixing_op(failed, i) if failed else None
    if fixing is None and found_batch:
      return
    t = self._fed[i]
    declared = tuple(t.shape.as_list())
    because = (f"op '{fixing.name}' ({fixing.type}) fixes its size"
               if fixing is not None else
               "the graph's data flow does not show which dimension is the "
               "batch's")
    raise UnsplittableBatch(
        f"TensorBow cannot split the batch fed to placeholder "
        f"'{t.op.name}' (declared shape {declared}) among the replicas: "
        f"{because}. Declare it with an unknown first dimension, "
        f"tf.compat.v1.placeholder(tf.{t.dtype.base_dtype.name}, "
        f"{[None] + list(declared[1:])}), and write -1 (or tf.shape(x)[0]) "
        "where the code sizes by the batch; or train with one replica")

  def _fixing_op(self, failed, i):
    """The op of the user's whose constant fixes the size of candidate
    `i`'s data: op `failed`, where the import refused it, or one of its
    ancestors (a reshape folding the batch into another dimension)."""
    ancestors, _ = per_example.data_closure(
        list(self._graph.get_operation_by_name(failed).inputs) + [
            t for t in self._graph.get_operation_by_name(failed).outputs],
        frozenset(t.name for t in self._fed))
    depends = per_example.dependent(ancestors, {self._fed[i].name:
                                                self._fed[i]})
    for op in [self._graph.get_operation_by_name(failed)] + ancestors:
      if (op.name in depends and op.type in _SIZING and
          any(t.op.type == "Const" and t.name not in self._cut
              for t in op.inputs[1:])):
        return op
    return None

  def _imported(self, chosen):
    """(scratch graph, None), or (None, the op that refused the sentinel)
    of an import with the feeds at positions `chosen` at the sentinel."""
    for _ in range(_MAX_CONDITIONAL):
      cut = dict(self._cut)
      for i in chosen:
        t = self._fed[i]
        cut[t.name] = (t.dtype, per_example.sentinel_shape(
            tf.TensorShape(np.shape(self._values[i]))))
      scratch, failed = per_example.sentinel_import(self._graph, self._kept,
                                                    cut)
      op = self._kept.get(failed)
      if op is None or not compat.in_control_flow(op):
        return scratch, failed
      # A branch of a v1 conditional that may not run for these shapes
      # (the squeeze of a label's last dimension, when it has one): its
      # outputs keep the user's graph's shapes.
      del self._kept[failed]
      self._cut.update((t.name, (t.dtype, t.shape)) for t in op.outputs)
    return None, failed

  def _reduced(self, scratch, i):
    """Whether an op of `scratch` reduces over candidate `i`'s rows:
    followed from it along the tensors that carry the sentinel, never
    through a lookup's table."""
    fed = self._fed[i]
    stack = [(per_example.imported_op(scratch, op.name), k)
             for op in fed.consumers() if op.name in self._kept
             for k, t in enumerate(op.inputs) if t is fed]
    seen = set()
    while stack:
      op, k = stack.pop()
      if op.name in seen or (op.type in _LOOKUPS and k == 0):
        continue
      seen.add(op.name)
      carried = [t for t in op.outputs if _carries(t.shape)]
      if op.type in _REDUCING and not carried:
        return True
      # A conditional's merge of branches of other shapes (the squeeze of
      # a label in one) may carry the rows without its shape saying so.
      carried += [t for t in op.outputs if _unknown_rows(t.shape)]
      stack.extend((c, j) for t in carried for c in t.consumers()
                   for j, x in enumerate(c.inputs) if x is t)
    return False


def _carries(shape):
  """Whether a dimension of `shape` is a multiple of the sentinel."""
  return shape.rank is not None and any(
      d is not None and d >= per_example.SENTINEL and
      d % per_example.SENTINEL == 0 for d in shape.as_list())


def _unknown_rows(shape):
  """Whether the first dimension of `shape` is unknown (or its rank)."""
  return shape.rank is None or (shape.rank > 0 and
                                shape.as_list()[0] is None)
