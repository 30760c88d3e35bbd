"""A training run's fetches: the replicas' values merged back into one
per fetch (DESIGN.md, "What leaves the replicas").

Each fetch merges as the plan decided (rewrite/reductions.py): rows
concatenated, sums over rows added, maxima and minima taken, a summary's
scalars merged as what they summarise, any other floating-point value
the mean weighted by the replicas' rows. feeds.py cut the batch they
computed on.
"""
import numpy as np
import tensorflow as tf

from tensorbow import feeds
from tensorbow.rewrite import reductions

# A floating-point type that NumPy's dtype kinds do not call one.
_BFLOAT16 = np.dtype(tf.bfloat16.as_numpy_dtype)


def of_wave(plan, fetched, outputs, sizes, replicas, values, over=None):
  """{fetch position: value} of what a wave's replicas computed and of
  the fed values it echoes (the central fetches are read after it).

  Args:
    plan: the wave's `planner.Plan`.
    fetched: the handler's fetches.
    outputs, sizes, replicas: as `merge_fetches` takes them.
    values: the wave's checked fed values (feeds.Cut.values).
    over: (arrays in float64) -> them summed over the processes, for the
      fetches that are sums over rows (what keeps the processes' central
      models equal is made with them); None: no sum is taken (the
      setting's replicas are not in use).
  """
  merged = merge_fetches(plan, fetched, outputs, sizes, replicas)
  if over is not None:
    sums = sums_over_rows(plan, merged)
    positions = sorted(sums)
    # In float64: exact for counts, one all-reduce for all.
    totals = over([np.asarray(sums[i], np.float64) for i in positions])
    merged.update((i, in_dtype_of(sums[i], total))
                  for i, total in zip(positions, totals))
  for i, j in plan.echoed:
    merged[i] = echoed(values[j], plan.combine[i])
  return merged


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
  if not isinstance(value, feeds.Elements):
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
