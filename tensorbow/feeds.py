"""A training run's feeds and fetches: checked, sharded, merged.

Fed values are checked as TensorFlow checks them, batch feeds split with
`numpy.array_split` (one shard per replica), a pipeline's elements handed
one to each replica, and each fetch's per-replica values merged back
(DESIGN.md).
"""
import numpy as np
import tensorflow as tf

from tensorbow.rewrite import reductions

# A floating-point type that NumPy's dtype kinds do not call one.
_BFLOAT16 = np.dtype(tf.bfloat16.as_numpy_dtype)


class Elements(list):
  """A feed's value per replica: the elements a wave took from an input
  pipeline, one for each replica."""


def check(plan, fed, replicas):
  """The fed values, in plan order, as checked NumPy arrays (an
  `Elements` of them for an element feed).

  Checked as TensorFlow checks them: dtype and shape, and, with several
  replicas, that every batch feed has the same rows. A batch with fewer
  rows than replicas is not refused: `participants` says which train.
  """
  values = []
  rows = []
  for t, name, is_batch, is_elements, dtype, shape, value in zip(
      plan.feeds, plan.names, plan.batch, plan.elements, plan.np_dtypes,
      plan.shapes, fed):
    if is_elements:
      values.append(Elements(_checked(t, dtype, shape, v) for v in value))
      continue
    array = _checked(t, dtype, shape, value)
    if is_batch:
      rows.append((name, array.shape[0]))
    values.append(array)
  if rows and replicas > 1:  # one replica takes every feed whole
    if len({n for _, n in rows}) > 1:
      raise tf.errors.InvalidArgumentError(
          None, None,
          "TensorBow: all batch feeds of a training run must have the same "
          f"first dimension; got {_described(rows)}")
  return values


def participants(plan, values):
  """How many replicas train on checked `values`: L, or, for a batch
  feed with fewer rows than L (an epoch's last batch), one per row,
  replicas 0, 1, ... in order; an empty batch is replica 0's alone, as
  TensorFlow trains on one (DESIGN.md, feed sharding)."""
  if plan.batch_feed < 0 or not plan.batch[plan.batch_feed]:
    return plan.replicas
  return min(plan.replicas, max(1, len(values[plan.batch_feed])))


def _checked(tensor, dtype, shape, value):
  if isinstance(value, tf.Tensor):
    raise TypeError(
        f"The value of a feed cannot be a tf.Tensor object (feed "
        f"{tensor.name}); feed NumPy arrays, lists or scalars")
  array = np.asarray(value, dtype=dtype)
  if not _shape_fits(shape, array.shape):
    raise ValueError(
        f"Cannot feed value of shape {array.shape} for Tensor {tensor.name}, "
        f"which has shape {tensor.shape}")
  return array


def total_rows(value):
  """The rows of a checked feed value: an element feed's, all replicas'."""
  if isinstance(value, Elements):
    return sum(len(v) for v in value)
  return len(value)


def shard(plan, values, trained=None, borrowed=0):
  """Per feed, one array per replica: batch feeds split as
  numpy.array_split splits them among the `trained` replicas (default:
  all), element feeds one element each, others whole; then `borrowed`
  more replicas each given the first replica's feeds (they compute a step
  that weighs nothing: Algorithm.replicas_equal)."""
  n = plan.replicas if trained is None else trained
  shards = []
  for array, is_batch in zip(values, plan.batch):
    if isinstance(array, Elements):
      parts = [contiguous(v) for v in array]
    elif is_batch and plan.replicas > 1:
      parts = [contiguous(s) for s in np.array_split(array, n)]
    else:
      parts = [contiguous(array)] * n
    shards.append(parts + parts[:1] * borrowed)
  return shards


def wave_shards(plan, values, replicas_equal=False):
  """(shards as `shard` gives them, per replica its rows, replicas that
  train, replicas that borrow) of a wave on checked `values`.

  Replicas 0 .. trained - 1 train; the others sit the wave out (0 rows),
  or, with `replicas_equal` (Algorithm.replicas_equal), borrow replica
  0's shards to compute a step that weighs nothing.
  """
  trained = participants(plan, values)
  borrowed = plan.replicas - trained if replicas_equal else 0
  shards = shard(plan, values, trained, borrowed)
  sizes = ([len(s) for s in shards[plan.batch_feed][:trained]]
           if plan.batch_feed >= 0 else [1] * trained)
  return shards, sizes + [0] * (plan.replicas - trained), trained, borrowed


def worker_part(plan, values, part):
  """`values` with each batch feed cut to rows [start, stop) = part(rows):
  a cluster's worker trains on its own contiguous part of the batch."""
  out = []
  for value, is_batch in zip(values, plan.batch):
    if is_batch and not isinstance(value, Elements):
      start, stop = part(len(value))
      value = value[start:stop]
    out.append(value)
  return out


def _described(rows):
  return ", ".join(f"{name}: {n}" for name, n in rows)


def _shape_fits(dims, shape):
  """Whether an array's shape is compatible with a feed's (known) dims."""
  if dims is None:
    return True
  return len(dims) == len(shape) and all(
      d is None or d == n for d, n in zip(dims, shape))


def contiguous(array):
  """`array` in C order, copied only if it is not (the runtime feeds a
  task's shard by pointer)."""
  # Not np.ascontiguousarray: it turns a scalar into shape [1].
  if array.flags.c_contiguous:
    return array
  return np.require(array, requirements="C")


def merge(values, sizes, combine):
  """Merges one fetch's per-replica values (DESIGN.md, "What leaves the
  replicas").

  Args:
    values: the fetch's value per replica, in replica order.
    sizes: the rows of each replica's shard, or None (no batch: equal
      weights).
    combine: how they make the whole batch's (the plan's decision,
      rewrite/reductions.py): ROWS, concatenated; ROW_INDICES (rows of
      [row index, ...]), concatenated with each shard's first row added
      to its column 0; SUM, added (in float64 for floating point,
      exactly for integers); MAX or MIN, their maximum or minimum; None,
      any other value.

  Returns:
    The merged value; for None, a floating-point fetch's mean weighted by
    `sizes`, in float64 then cast back, or else the first replica's value.
  """
  first = values[0]
  if len(values) == 1:
    return first[()] if first.ndim == 0 else first
  if combine == reductions.ROW_INDICES and sizes and all(
      v.ndim == 2 for v in values):
    firsts = np.cumsum([0] + list(sizes[:-1]))
    return np.concatenate([v + np.eye(1, v.shape[1], dtype=v.dtype) * first
                           for v, first in zip(values, firsts)])
  if (combine in (reductions.ROWS, reductions.ROW_INDICES) and
      all(v.ndim >= 1 for v in values)):
    return np.concatenate(values)
  same = all(v.shape == first.shape for v in values)
  if combine in _ELEMENTWISE and same:
    if _is_float(first):
      merged = _ELEMENTWISE[combine](
          [v.astype(np.float64) for v in values]).astype(first.dtype)
    else:
      merged = _ELEMENTWISE[combine](values).astype(first.dtype)
    return merged[()] if first.ndim == 0 else merged
  # Values that differ in shape (a data-dependent one) have no mean.
  if _is_float(first) and same:
    weights = np.asarray(sizes if sizes else [1] * len(values), np.float64)
    if not weights.sum():
      weights = np.ones(len(values))
    total = np.zeros(first.shape, np.float64)
    for weight, value in zip(weights, values):
      total += weight * value.astype(np.float64)
    mean = total / weights.sum()
    return first.dtype.type(mean) if first.ndim == 0 else mean.astype(
        first.dtype)
  return first[()] if first.ndim == 0 else first


# How the replicas' values of a reduction over rows combine, elementwise.
_ELEMENTWISE = {
    reductions.SUM: lambda vs: np.sum(vs, axis=0),
    reductions.MAX: lambda vs: np.max(vs, axis=0),
    reductions.MIN: lambda vs: np.min(vs, axis=0),
}


def merge_fetches(plan, fetched, outputs, sizes, replicas=None):
  """{fetch position: merged value} of the fetches (`fetched`) a wave's
  replicas computed: all but `plan`'s central and echoed ones, whose
  values are `outputs` (per replica, in fetch order) from shards of
  `sizes` rows. `replicas`: (how many trained, which committed or None),
  merged over those; None: every output (a pool's chunks)."""
  if replicas is not None:
    trained, committed = replicas
    keep = [r for r in range(trained)
            if committed is None or committed[r]] or [0]
    outputs = [outputs[r] for r in keep]
    sizes = [sizes[r] for r in keep] if plan.batch_feed >= 0 else None
  echoed = set(i for i, _ in plan.echoed)
  computed = [i for i in range(len(fetched))
              if i not in plan.central_fetches and i not in echoed]
  merged = {}
  for k, i in enumerate(computed):
    values = [o[k] for o in outputs]
    merged[i] = (merge_summaries(values, sizes, plan.combine[i])
                 if fetched[i].op.type in SUMMARY_OPS else
                 merge(values, sizes, plan.combine[i]))
  return merged


def sums_over_rows(plan, merged):
  """The values of `merged` ({fetch position: value}) that are sums over
  the batch's rows (reductions.SUM): what other processes add to."""
  return {i: v for i, v in merged.items()
          if plan.combine[i] == reductions.SUM}


def in_dtype_of(value, total):
  """`total` (a sum, in float64) in the dtype and form of `value`."""
  return np.asarray(total).astype(np.asarray(value).dtype)[()]


def _is_float(array):
  return array.dtype.kind == "f" or array.dtype == _BFLOAT16


def echoed(value, combine):
  """A fed value fetched back from a training run: an element feed's
  elements merged as the replicas' fetches of it are (`combine`)."""
  if not isinstance(value, Elements):
    return value
  return merge(list(value), [len(v) if np.ndim(v) else 1 for v in value],
               combine)


# Ops whose output is a serialized `Summary` (tf.compat.v1.summary).
SUMMARY_OPS = frozenset([
    "ScalarSummary", "HistogramSummary", "ImageSummary", "AudioSummary",
    "AudioSummaryV2", "TensorSummary", "TensorSummaryV2", "MergeSummary"])


def merge_summaries(values, sizes, combine=None):
  """Merges one summary fetch's per-replica values: each scalar as the
  value it summarises merges (`combine`, {tag: kind} of
  rewrite/reductions.py: a sum over rows added, a maximum or minimum
  theirs), any other scalar the shard-weighted mean over the replicas, as
  a fetched loss is; the other values (histograms, images, ...) are the
  first replica's."""
  first = values[0][()]
  if len(values) == 1:
    return first
  protos = [tf.compat.v1.Summary.FromString(v[()]) for v in values]
  weights = np.asarray(sizes if sizes else [1] * len(values), np.float64)
  kinds = combine if isinstance(combine, dict) else {}
  merged = protos[0]
  for k, value in enumerate(merged.value):
    if value.WhichOneof("value") == "simple_value":
      scalars = np.array([p.value[k].simple_value for p in protos],
                         np.float64)
      kind = kinds.get(value.tag)
      value.simple_value = float(
          _ELEMENTWISE[kind](scalars) if kind in _ELEMENTWISE else
          np.dot(weights, scalars) / weights.sum())
  return merged.SerializeToString()
