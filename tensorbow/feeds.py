"""A training run's feeds: checked and cut into the replicas' shards.

Fed values are checked as TensorFlow checks them, batch feeds split with
`numpy.array_split` (one shard per replica) and a pipeline's elements
handed one to each replica (DESIGN.md). What the replicas fetch is merged
back by fetches.py.
"""
import collections

import numpy as np
import tensorflow as tf


# A wave's feeds, checked and cut. `values`: the checked values in plan
# order; `shards`: per feed, one array per computing replica; `sizes`:
# each replica's rows; replicas 0 .. `trained` - 1 train and `borrowed`
# more compute on replica 0's shards (wave_shards); `rows` and `batch`:
# the rows trained on and the batch the graph was built for (the fed
# batch, or one replica's element of an input pipeline).
Cut = collections.namedtuple("Cut", ["values", "shards", "sizes", "trained",
                                     "borrowed", "rows", "batch"])


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


def cut(plan, fed, replicas, checked, taken, replicas_equal=False):
  """The `Cut` of a wave over `plan` fed `fed` (in plan order).

  Args:
    plan: the wave's `planner.Plan`.
    fed: the fed values, in the order of the plan's feeds.
    replicas: this process's L.
    checked: (plan, fed, L) -> the checked values (a `hooks.Job`'s:
      `check`, or a worker's part of every process's check).
    taken: the input pipeline's elements taken for the wave (None: none).
    replicas_equal: whether replicas that sit the wave out borrow replica
      0's shards (Algorithm.replicas_equal).
  """
  values = checked(plan, fed, replicas)
  rows, batch = _rows_and_batch(plan, values, taken)
  shards, sizes, trained, borrowed = wave_shards(plan, values,
                                                 replicas_equal)
  return Cut(values, shards, sizes, trained, borrowed, rows, batch)


def _rows_and_batch(plan, values, taken):
  """(rows trained on, batch the graph was built for): the fed batch, or
  one replica's element of an input pipeline."""
  if plan.batch_feed < 0:
    if taken is None:
      return 0, 0
    one = next((len(v) for v in taken.elements[0] if np.ndim(v)), 0)
    return one, one
  fed = values[plan.batch_feed]
  if plan.elements[plan.batch_feed]:
    return total_rows(fed), len(fed[0])
  return total_rows(fed), len(fed)


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
