"""A training run's feeds and fetches (tensorbow/feeds.py), below the session.

Fed values are checked as `tf.compat.v1.Session.run` checks them, batch feeds
split in `numpy.array_split` order (DESIGN.md, "Batch feeds are split") and each
fetch's per-replica values merged (DESIGN.md, "Fetches are merged"); every case
is compared with NumPy or with TensorFlow's own session.
"""
import collections

import numpy as np
import pytest
import tensorflow as tf

from tensorbow import feeds
from tensorbow import fetches
from tensorbow.rewrite import reductions

tf1 = tf.compat.v1

# What feeds.py reads of a plan (the planner's Plan holds more).
_Plan = collections.namedtuple("_Plan", [
    "feeds", "names", "batch", "elements", "np_dtypes", "shapes",
    "replicas", "batch_feed"])


def _plan(tensors, replicas, elements=()):
  """A plan feeding `tensors`; those in `elements` take an element each.

  A batch feed is one of rank >= 1 with an unknown first dimension
  (DESIGN.md, "Batch feeds are split"), unless it takes elements.
  """
  element_names = {t.name for t in elements}
  is_element = [t.name in element_names for t in tensors]
  batch = [t.shape.rank is not None and t.shape.rank >= 1 and
           t.shape.as_list()[0] is None and not e
           for t, e in zip(tensors, is_element)]
  return _Plan(
      feeds=list(tensors), names=[t.name for t in tensors], batch=batch,
      elements=is_element,
      np_dtypes=[t.dtype.base_dtype.as_numpy_dtype for t in tensors],
      shapes=[None if t.shape.rank is None else tuple(t.shape.as_list())
              for t in tensors],
      replicas=replicas,
      batch_feed=(batch.index(True) if any(batch) else
                  is_element.index(True) if any(is_element) else -1))


_Feeds = collections.namedtuple("_Feeds", [
    "graph", "x", "y", "lr", "fixed", "anyrank", "labels", "element"])


@pytest.fixture
def placeholders():
  """Placeholders of every kind a training run is fed."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")  # batch
    y = tf1.placeholder(tf.float32, [None], name="y")  # batch
    lr = tf1.placeholder(tf.float32, [], name="lr")  # scalar
    fixed = tf1.placeholder(tf.float32, [2, 3], name="fixed")
    anyrank = tf1.placeholder(tf.float32, None, name="anyrank")
    labels = tf1.placeholder(tf.int32, [None], name="labels")  # batch
    element = tf1.placeholder(tf.float32, [3, 2], name="element")
  return _Feeds(graph, x, y, lr, fixed, anyrank, labels, element)


def _tensorflow_error(graph, tensor, value):
  """The error `tf.compat.v1.Session.run` raises feeding `tensor` `value`."""
  with graph.as_default():
    out = tf.identity(tensor)
  with tf1.Session(graph=graph) as sess:
    with pytest.raises(Exception) as info:
      sess.run(out, {tensor: value})
  return info.value


# ---- check ------------------------------------------------------------------


def test_values_are_converted_as_tensorflow_converts_them(placeholders):
  p = placeholders
  fed = [[[1, 2], [3, 4], [5, 6]], [0.5, 1.5, 2.5], 3, np.arange(6.0).reshape(
      2, 3), [[[7]]], np.array([1.9, -2.9, 3.0]), ]
  tensors = [p.x, p.y, p.lr, p.fixed, p.anyrank, p.labels]
  values = feeds.check(_plan(tensors, 3), fed, 3)
  with p.graph.as_default():
    outs = [tf.identity(t) for t in tensors]
  with tf1.Session(graph=p.graph) as sess:
    expected = sess.run(outs, dict(zip(tensors, fed)))
  assert len(values) == len(expected)
  for got, want, t in zip(values, expected, tensors):
    assert isinstance(got, np.ndarray), t.name
    assert got.dtype == want.dtype, t.name
    assert got.shape == want.shape, t.name
    np.testing.assert_array_equal(got, want, err_msg=t.name)
  assert values[5].tolist() == [1, -2, 3]  # truncated, as NumPy casts


@pytest.mark.parametrize("tensor,value", [
    ("x", [1.0, 2.0, 3.0]),  # rank 1 for a rank-2 batch feed
    ("x", [[1.0, 2.0, 3.0]]),  # a row too long
    ("x", 4.0),  # a scalar for a batch feed
    ("lr", [0.1]),  # a list for a scalar
    ("fixed", np.zeros([3, 2])),  # transposed
    ("element", np.zeros([2, 2])),
])
def test_a_value_of_the_wrong_shape_is_refused_as_tensorflow_does(
    placeholders, tensor, value):
  t = getattr(placeholders, tensor)
  expected = _tensorflow_error(placeholders.graph, t, value)
  assert isinstance(expected, ValueError)
  with pytest.raises(ValueError) as info:
    feeds.check(_plan([t], 2), [value], 2)
  assert str(info.value) == str(expected)


def test_a_tensor_is_not_a_feed_value(placeholders):
  p = placeholders
  with p.graph.as_default():
    value = tf.zeros([4])
  assert isinstance(_tensorflow_error(p.graph, p.y, value), TypeError)
  with pytest.raises(TypeError, match=r"cannot be a tf\.Tensor object "
                     r"\(feed y:0\)"):
    feeds.check(_plan([p.y], 2), [value], 2)


def test_a_value_that_does_not_convert_is_refused(placeholders):
  p = placeholders
  with pytest.raises(ValueError, match="could not convert string to float"):
    feeds.check(_plan([p.y], 2), [["one", "two"]], 2)


def test_batch_feeds_of_different_rows_are_refused_naming_each(placeholders):
  p = placeholders
  plan = _plan([p.x, p.y, p.lr], 2)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"same first dimension; got x:0: 4, y:0: 3$"):
    feeds.check(plan, [np.zeros([4, 2]), np.zeros([3]), 0.1], 2)


@pytest.mark.parametrize("rows,replicas,trained", [
    (3, 4, 3), (1, 2, 1), (0, 2, 1), (4, 4, 4), (9, 4, 4)])
def test_fewer_rows_than_replicas_train_one_replica_per_row(
    placeholders, rows, replicas, trained):
  """An epoch's last batch: one replica per row, replicas 0, 1, ... in
  order; an empty batch is replica 0's alone (DESIGN.md)."""
  p = placeholders
  plan = _plan([p.x, p.y], replicas)
  values = feeds.check(plan, [np.arange(2 * rows).reshape(rows, 2),
                              np.arange(rows)], replicas)
  assert feeds.participants(plan, values) == trained
  shards = feeds.shard(plan, values, trained)
  assert [len(s) for s in shards[0]] == [len(s) for s in shards[1]] == [
      len(s) for s in np.array_split(np.arange(rows), trained)]
  np.testing.assert_array_equal(np.concatenate(shards[0]), values[0])


def test_borrowed_replicas_take_the_first_replicas_shards(placeholders):
  p = placeholders
  plan = _plan([p.x, p.lr], 4)
  values = feeds.check(plan, [np.arange(4).reshape(2, 2), 0.5], 4)
  shards = feeds.shard(plan, values, 2, borrowed=2)
  assert len(shards[0]) == len(shards[1]) == 4
  for r in (2, 3):
    np.testing.assert_array_equal(shards[0][r], values[0][:1])
    assert shards[1][r] == 0.5


def test_one_replica_takes_every_feed_whole(placeholders):
  """With one replica nothing is split: TensorFlow's rules alone."""
  p = placeholders
  values = feeds.check(_plan([p.x, p.y], 1), [np.zeros([1, 2]),
                                              np.zeros([5])], 1)
  assert [v.shape for v in values] == [(1, 2), (5,)]


def test_rows_are_counted_on_batch_feeds_only(placeholders):
  """Feeds with a known first dimension, scalars and feeds of unknown rank
  are not batches: four replicas take them whole, whatever their size."""
  p = placeholders
  tensors = [p.x, p.lr, p.fixed, p.anyrank]
  plan = _plan(tensors, 4)
  assert plan.batch == [True, False, False, False]
  values = feeds.check(plan, [np.zeros([4, 2]), 1.0, np.zeros([2, 3]),
                              np.zeros([1, 1, 1])], 4)
  assert [v.shape for v in values] == [(4, 2), (), (2, 3), (1, 1, 1)]


def test_element_feeds_are_checked_element_by_element(placeholders):
  p = placeholders
  plan = _plan([p.element, p.x], 2, elements=[p.element])
  first = [[1, 2], [3, 4], [5, 6]]
  second = np.arange(6, 12).reshape(3, 2)
  values = feeds.check(plan, [[first, second], np.zeros([2, 2])], 2)
  assert isinstance(values[0], feeds.Elements)
  assert isinstance(values[0], list)
  assert len(values[0]) == 2
  assert all(v.dtype == np.float32 and v.shape == (3, 2) for v in values[0])
  np.testing.assert_array_equal(values[0][0], np.asarray(first, np.float32))
  np.testing.assert_array_equal(values[0][1], second.astype(np.float32))
  assert not isinstance(values[1], feeds.Elements)
  with pytest.raises(ValueError, match=r"shape \(2, 2\) for Tensor "
                     r"element:0"):
    feeds.check(plan, [[first, np.zeros([2, 2])], np.zeros([2, 2])], 2)


def test_element_rows_do_not_count_as_a_batch_feeds(placeholders):
  """An element feed's rows are its own: a batch feed of 2 rows beside
  elements of 3 rows is not a mismatch."""
  p = placeholders
  with p.graph.as_default():
    rows = tf1.placeholder(tf.float32, [None, 2], name="rows")
  plan = _plan([rows, p.x], 2, elements=[rows])
  values = feeds.check(plan, [[np.zeros([3, 2])] * 2, np.zeros([2, 2])], 2)
  assert feeds.total_rows(values[0]) == 6
  assert feeds.total_rows(values[1]) == 2


def test_total_rows():
  assert feeds.total_rows(np.zeros([7, 3])) == 7
  assert feeds.total_rows(feeds.Elements(
      [np.zeros([2, 3]), np.zeros([5, 3]), np.zeros([1, 3])])) == 8
  assert feeds.total_rows(feeds.Elements()) == 0


# ---- shard ------------------------------------------------------------------


def test_batch_feeds_are_split_as_array_split_others_given_whole(
    placeholders):
  p = placeholders
  plan = _plan([p.x, p.lr, p.fixed, p.labels], 3)
  x = np.arange(14, dtype=np.float32).reshape(7, 2)
  labels = np.arange(7, dtype=np.int32)
  fixed = np.ones([2, 3], np.float32)
  lr = np.asarray(0.5, np.float32)
  shards = feeds.shard(plan, [x, lr, fixed, labels])
  assert len(shards) == 4 and all(len(s) == 3 for s in shards)
  for got, want in zip(shards[0], np.array_split(x, 3)):
    np.testing.assert_array_equal(got, want)
  for got, want in zip(shards[3], np.array_split(labels, 3)):
    np.testing.assert_array_equal(got, want)
  assert [s.shape for s in shards[0]] == [(3, 2), (2, 2), (2, 2)]
  for r in range(3):
    assert shards[1][r].shape == ()  # a scalar stays a scalar
    assert shards[1][r] == 0.5
    np.testing.assert_array_equal(shards[2][r], fixed)


def test_one_replica_takes_the_batch_whole(placeholders):
  p = placeholders
  x = np.arange(6, dtype=np.float32).reshape(3, 2)
  shards = feeds.shard(_plan([p.x], 1), [x])
  assert len(shards[0]) == 1
  np.testing.assert_array_equal(shards[0][0], x)


def test_elements_go_one_to_each_replica(placeholders):
  p = placeholders
  plan = _plan([p.element, p.lr], 2, elements=[p.element])
  first = np.zeros([3, 2], np.float32)
  second = np.ones([3, 2], np.float32)
  shards = feeds.shard(plan, [feeds.Elements([first, second]),
                              np.float32(2)])
  np.testing.assert_array_equal(shards[0][0], first)
  np.testing.assert_array_equal(shards[0][1], second)


def test_shards_are_c_contiguous(placeholders):
  """The runtime hands shards to TensorFlow as C arrays: a Fortran-order
  batch or a strided fixed feed is copied, values unchanged."""
  p = placeholders
  plan = _plan([p.x, p.fixed, p.element], 2, elements=[p.element])
  x = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(6, 2))
  fixed = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]
  element = np.arange(6, dtype=np.float32).reshape(2, 3).T
  assert not (x.flags.c_contiguous or fixed.flags.c_contiguous or
              element.flags.c_contiguous)
  shards = feeds.shard(plan, [x, fixed, feeds.Elements([element, element])])
  for per_feed, whole in zip(shards, [np.array_split(x, 2), [fixed] * 2,
                                      [element] * 2]):
    for got, want in zip(per_feed, whole):
      assert got.flags.c_contiguous
      np.testing.assert_array_equal(got, want)


def test_python_lists_are_checked_then_sharded(placeholders):
  p = placeholders
  rows = [[float(i), -float(i)] for i in range(5)]
  plan = _plan([p.x], 2)
  shards = feeds.shard(plan, feeds.check(plan, [rows], 2))
  expected = np.array_split(np.asarray(rows, np.float32), 2)
  assert [s.tolist() for s in shards[0]] == [e.tolist() for e in expected]


# ---- merge ------------------------------------------------------------------


_FLOATS = [np.float16, np.float32, np.float64, tf.bfloat16.as_numpy_dtype]


@pytest.mark.parametrize("dtype", _FLOATS)
def test_a_float_scalar_is_the_shard_weighted_mean(dtype):
  values = [np.asarray(v, dtype) for v in (1.0, 2.0, 4.0)]
  merged = fetches.merge(values, [3, 2, 2], None)
  assert merged.dtype == np.dtype(dtype)
  assert merged.shape == ()
  expected = np.average([1.0, 2.0, 4.0], weights=[3, 2, 2])  # 15 / 7
  np.testing.assert_allclose(float(merged), expected, rtol=1e-2)
  if dtype is np.float64:
    assert float(merged) == pytest.approx(15.0 / 7.0, rel=1e-15)


def test_without_sizes_a_float_scalar_is_the_plain_mean():
  values = [np.float32(1.0), np.float32(2.0), np.float32(6.0)]
  values = [np.asarray(v) for v in values]
  assert float(fetches.merge(values, None, None)) == pytest.approx(3.0)
  assert float(fetches.merge(values, [], None)) == pytest.approx(3.0)


def test_a_nonfinite_replica_propagates_into_the_mean():
  merged = fetches.merge([np.asarray(1.0, np.float32),
                        np.asarray(np.nan, np.float32)], [2, 2], None)
  assert np.isnan(merged)


@pytest.mark.parametrize("value", [
    np.asarray(7, np.int32), np.asarray(7, np.int64), np.asarray(True),
    np.asarray(b"text", dtype=object), np.asarray(1 + 2j, np.complex64)])
def test_other_scalars_are_replica_zeros(value):
  other = np.asarray(value.dtype.type(0) if value.dtype != object
                     else b"other", dtype=value.dtype)
  merged = fetches.merge([value, other, other], [1, 1, 1], None)
  assert merged == value[()]
  assert np.ndim(merged) == 0


def test_one_replicas_value_is_its_value():
  merged = fetches.merge([np.asarray(2.5, np.float32)], [4], None)
  assert merged == np.float32(2.5)
  assert merged.dtype == np.float32
  first = np.arange(4.0, dtype=np.float32).reshape(2, 2)
  assert fetches.merge([first], [2], None) is first
  assert fetches.merge([first], [2], reductions.ROWS) is first


def test_per_example_tensors_are_concatenated_in_replica_order():
  values = [np.arange(6).reshape(3, 2), np.arange(6, 10).reshape(2, 2),
            np.arange(10, 14).reshape(2, 2)]
  merged = fetches.merge(values, [3, 2, 2], reductions.ROWS)
  np.testing.assert_array_equal(merged, np.concatenate(values))
  assert merged.shape == (7, 2)
  merged = fetches.merge([np.array([1.0, 2.0]), np.array([3.0])], [2, 1],
                       reductions.ROWS)
  np.testing.assert_array_equal(merged, [1.0, 2.0, 3.0])
  # Whatever their first dimension: a flattened [rows * k] tensor too.
  values = [np.arange(9.0), np.arange(6.0)]
  np.testing.assert_array_equal(fetches.merge(values, [3, 2], reductions.ROWS),
                                np.concatenate(values))


@pytest.mark.parametrize("dtype", _FLOATS)
def test_a_float_tensor_not_per_example_is_the_shard_weighted_mean(dtype):
  # A [4, 3] gradient with shards of 4 rows: its first dimension is the
  # shard size by coincidence, it is not concatenated.
  rng = np.random.RandomState(0)
  values = [rng.randn(4, 3).astype(dtype) for _ in range(3)]
  merged = fetches.merge(values, [4, 4, 2], None)
  assert merged.shape == (4, 3) and merged.dtype == np.dtype(dtype)
  expected = np.average(np.asarray(values, np.float64), axis=0,
                        weights=[4, 4, 2])
  np.testing.assert_array_equal(merged, expected.astype(dtype))
  unweighted = fetches.merge(values, None, None)
  np.testing.assert_array_equal(
      unweighted, np.mean(np.asarray(values, np.float64), 0).astype(dtype))


def test_other_tensors_not_per_example_are_replica_zeros():
  first = np.arange(8, dtype=np.int64).reshape(4, 2)
  assert fetches.merge([first, first + 1], [4, 4], None) is first
  flags = np.array([True, False])
  assert fetches.merge([flags, ~flags], [2, 2], None) is flags


def test_float_values_of_different_shapes_have_no_mean_and_are_replica_zeros():
  # Data-dependent shapes (tf.unique of a weight): no mean exists.
  first = np.array([1.0, 2.0, 3.0], np.float32)
  assert fetches.merge([first, np.array([5.0], np.float32)], [2, 2],
                     None) is first


def test_a_per_example_fetch_with_a_scalar_value_is_not_concatenated():
  # A py_func of unknown shape that returned scalars: there are no rows.
  merged = fetches.merge([np.asarray(1.0, np.float32),
                        np.asarray(3.0, np.float32)], [1, 3], reductions.ROWS)
  assert merged == np.float32(2.5) and np.ndim(merged) == 0


def test_replicas_without_rows_weigh_alike():
  merged = fetches.merge([np.float32([1.0]), np.float32([3.0])], [0, 0], None)
  np.testing.assert_array_equal(merged, [2.0])


# ---- merge_summaries ------------------------------------------------------


def _summary(loss, accuracy, histogram_max):
  summary = tf1.Summary(value=[
      tf1.Summary.Value(tag="loss", simple_value=loss),
      tf1.Summary.Value(tag="weights", histo=tf1.HistogramProto(
          min=0.0, max=histogram_max, num=3)),
      tf1.Summary.Value(tag="accuracy", simple_value=accuracy),
  ])
  return np.asarray(summary.SerializeToString(), dtype=object)


def test_summary_scalars_are_shard_weighted_means_the_rest_replica_zeros():
  values = [_summary(1.0, 0.5, 10.0), _summary(2.0, 0.25, 20.0),
            _summary(4.0, 1.0, 30.0)]
  merged = tf1.Summary.FromString(fetches.merge_summaries(values, [2, 1, 1]))
  assert [v.tag for v in merged.value] == ["loss", "weights", "accuracy"]
  assert merged.value[0].simple_value == pytest.approx(
      np.average([1.0, 2.0, 4.0], weights=[2, 1, 1]))  # 2.0
  assert merged.value[2].simple_value == pytest.approx(
      np.average([0.5, 0.25, 1.0], weights=[2, 1, 1]))  # 0.5625
  assert merged.value[1].histo.max == 10.0
  unweighted = tf1.Summary.FromString(fetches.merge_summaries(values, None))
  assert unweighted.value[0].simple_value == pytest.approx(7.0 / 3.0)


def test_one_replicas_summary_is_its_bytes():
  value = _summary(1.5, 0.5, 1.0)
  assert fetches.merge_summaries([value], [8]) == value[()]


def test_summary_ops_are_tensorflows_summary_op_types():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant([1.0, 2.0])
    ops = [tf1.summary.scalar("s", x[0]), tf1.summary.histogram("h", x),
           tf1.summary.image("i", tf.zeros([1, 2, 2, 1])),
           tf1.summary.audio("a", tf.zeros([1, 4]), 8000),
           tf1.summary.tensor_summary("t", x)]
    ops.append(tf1.summary.merge(ops))
  for op in ops:
    assert op.op.type in fetches.SUMMARY_OPS, op.op.type
  assert "Identity" not in fetches.SUMMARY_OPS


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32,
                                   np.float64])
def test_a_sum_over_rows_is_the_replicas_sum(dtype):
  # A count of correct predictions, a confusion matrix: the batch's is
  # the sum of the shards', whatever their sizes (issue #60).
  values = [np.asarray(v, dtype) for v in (3, 7, 2)]
  merged = fetches.merge(values, [4, 4, 2], reductions.SUM)
  assert merged == dtype(12) and merged.dtype == np.dtype(dtype)
  assert np.ndim(merged) == 0
  cells = [np.arange(4, dtype=dtype).reshape(2, 2) * k for k in (1, 2)]
  np.testing.assert_array_equal(
      fetches.merge(cells, [3, 3], reductions.SUM), cells[0] * 3)


def test_a_float32_sum_is_added_in_float64():
  values = [np.float32(1e8), np.float32(1.0), np.float32(-1e8)]
  merged = fetches.merge([np.asarray(v) for v in values], [1, 1, 1],
                       reductions.SUM)
  assert merged == np.float32(1.0) and merged.dtype == np.float32


@pytest.mark.parametrize("combine, expected", [
    (reductions.MAX, [5, 4]), (reductions.MIN, [-1, 2])])
def test_a_maximum_or_minimum_over_rows_is_the_replicas(combine, expected):
  values = [np.array([5, 2], np.int64), np.array([-1, 4], np.int64)]
  np.testing.assert_array_equal(fetches.merge(values, [2, 2], combine),
                                expected)


def test_row_indices_are_concatenated_past_the_earlier_shards_rows():
  # tf.where of a per-example mask: [row in the shard, column] per replica.
  values = [np.array([[0, 1], [2, 0]], np.int64), np.array([[1, 1]], np.int64),
            np.zeros([0, 2], np.int64)]
  merged = fetches.merge(values, [3, 3, 2], reductions.ROW_INDICES)
  np.testing.assert_array_equal(merged, [[0, 1], [2, 0], [4, 1]])
  assert merged.dtype == np.int64


def test_summary_scalars_follow_what_they_summarise():
  values = [_summary(1.0, 3.0, 10.0), _summary(2.0, 5.0, 20.0)]
  merged = tf1.Summary.FromString(fetches.merge_summaries(
      values, [3, 1], {"accuracy": reductions.SUM, "loss": None}))
  assert merged.value[0].simple_value == pytest.approx(1.25)  # the mean
  assert merged.value[2].simple_value == 8.0  # a count of correct rows
