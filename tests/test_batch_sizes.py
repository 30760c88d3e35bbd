"""rewrite/batch_sizes.py: which undeclared feeds are batches, the
constants TensorFlow folded from a fixed batch size, and the refusal
where the user's own code fixes it (issue #62; DESIGN.md, "Batch
feeds are split")."""
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.rewrite import graph_util
from tensorbow.rewrite import batch_sizes

from children import CHECKOUT, child_env

ROWS = 10


def _closure(graph, fetches, fed):
  with graph.as_default():
    roots = [t.op if isinstance(t, tf.Tensor) else t for t in fetches]
  return graph_util.closure(roots, frozenset(t.name for t in fed))


def _mean_loss_graph(extra=None):
  """A fixed-size regression whose loss is a mean; `extra(x, pred)` may
  add a fed tensor and return (pred, [(tensor, value)])."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (ROWS, 3), name="x")
    w = tf.compat.v1.get_variable("w", [3, 2])
    pred = tf.matmul(x, w)
    fed = [(x, np.ones((ROWS, 3), np.float32))]
    if extra is not None:
      pred, more = extra(x, pred)
      fed += more
    loss = tf.reduce_mean(tf.square(pred)) / tf.constant(float(ROWS))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
  return graph, train, fed


def test_folds_are_found_by_the_op_that_made_them():
  graph, train, fed = _mean_loss_graph()
  ops = _closure(graph, [train], [t for t, _ in fed])
  folds = batch_sizes.folds(graph, ops)
  kinds = sorted((f.kind, f.sources) for f in folds.values())
  assert (batch_sizes.MEAN_FACTOR, ("Square:0", "Mean:0")) in kinds
  assert (batch_sizes.TILE_SCALING, ("Square:0",)) in kinds
  assert (batch_sizes.KEPT_DIMS, ("Square:0",)) in kinds
  # The user's own constant of the same value is no fold.
  assert not any(name.startswith("Const") for name in folds)


def _decided(extra):
  graph, train, fed = _mean_loss_graph(extra)
  tensors = [t for t, _ in fed]
  ops = _closure(graph, [train], tensors)
  return batch_sizes.by_data_flow(
      graph, ops, tensors, [v for _, v in fed], [False] * len(fed),
      batch_sizes.folds(graph, ops))


def test_a_fixed_size_input_is_a_batch_and_class_weights_are_not():
  def weights(x, pred):
    del x
    cw = tf.compat.v1.placeholder(tf.float32, (2,), name="class_weights")
    return pred * cw, [(cw, np.ones(2, np.float32))]
  assert _decided(weights) == [True, False]


def test_a_table_of_as_many_rows_as_the_batch_is_not_a_batch():
  def table(x, pred):
    fed = tf.compat.v1.placeholder(tf.float32, (ROWS, 2), name="table")
    ids = tf.cast(tf.abs(x[:, 0]), tf.int32) % 3
    return pred + tf.gather(fed, ids), [(fed, np.ones((ROWS, 2),
                                                      np.float32))]
  assert _decided(table) == [True, False]


def _reshaping_graph():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, (8, 16), name="images")
    y = tf.compat.v1.placeholder(tf.float32, (8,), name="targets")
    images = tf.reshape(x, [8, 4, 4, 1], name="to_images")
    w = tf.compat.v1.get_variable(
        "w", [1, 4, 4, 1],
        initializer=tf.compat.v1.constant_initializer(0.1))
    pred = tf.reduce_sum(images * w, [1, 2, 3])
    loss = tf.reduce_mean(tf.square(pred - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    tf.identity(w, name="w_value")
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, train, init


def test_a_reshape_the_user_wrote_is_named_and_nothing_changes():
  graph, x, y, train, init = _reshaping_graph()
  with tb.TensorBowSession(graph=graph, replicas=4) as sess:
    sess.run(init)
    before = sess.run("w_value:0")
    with pytest.raises(tf.errors.UnimplementedError,
                       match=r"placeholder 'images' \(declared shape \(8, 16\)"
                       r"\).*op 'to_images' \(Reshape\) fixes its size.*"
                       r"tf\.compat\.v1\.placeholder\(tf\.float32, "
                       r"\[None, 16\]\)"):
      sess.run(train, {x: np.ones((8, 16)), y: np.ones(8)})
    np.testing.assert_array_equal(sess.run("w_value:0"), before)


def test_auto_keeps_one_replica_for_a_batch_that_cannot_split():
  """Under replicas="auto" the refusal pins L = 1, said in the tuner's
  decisions, and the run trains as TensorFlow does."""
  graph, x, y, train, init = _reshaping_graph()
  feed = {x: np.arange(128, dtype=np.float32).reshape(8, 16) / 128,
          y: np.ones(8)}
  with tf.compat.v1.Session(graph=graph) as sess:
    sess.run(init)
    sess.run(train, feed)
    expected = sess.run("w_value:0")
  with tb.TensorBowSession(graph=graph, replicas="auto") as sess:
    sess.run(init)
    sess.retune(2)  # as a trial of the tuner's would
    sess.run(train, feed)
    assert sess.replicas == 1
    np.testing.assert_allclose(sess.run("w_value:0"), expected, rtol=1e-6)
    reasons = [str(d) for d in sess.tuning_decisions()]
  assert any("kept at L=1" in r and "op 'to_images' (Reshape)" in r
             for r in reasons), reasons


@pytest.mark.parametrize("replicas", [1, 4])
def test_what_the_user_feeds_is_checked_as_tensorflow_checks_it(replicas):
  graph, train, fed = _mean_loss_graph()
  x = fed[0][0]
  with graph.as_default():
    init = tf.compat.v1.global_variables_initializer()
  with tb.TensorBowSession(graph=graph, replicas=replicas) as sess:
    sess.run(init)
    with pytest.raises(ValueError, match=r"Cannot feed value of shape "
                       r"\(6, 3\) for Tensor x:0, which has shape \(10, 3\)"):
      sess.run(train, {x: np.ones((6, 3))})
    sess.run(train, {x: np.ones((ROWS, 3))})  # then trains
    with pytest.raises(ValueError, match="Cannot feed value of shape"):
      sess.run(train, {x: np.ones((6, 3))})


def test_a_shapeless_feed_fed_a_batch_then_a_scalar():
  """The classic linear regression feeds one sample a run; another run
  feeds a batch to the same placeholder: each is planned by what it is
  fed, the batch split, the scalar given whole."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder("float", name="x")
    y = tf.compat.v1.placeholder("float", name="y")
    w = tf.Variable(0.5, name="w")
    cost = tf.reduce_sum(tf.square(x * w - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(cost)
    init = tf.compat.v1.global_variables_initializer()
  xs = np.arange(4, dtype=np.float32)
  ys = 3 * xs
  with tb.TensorBowSession(graph=graph, replicas=2,
                           algorithm="ssgd") as sess:
    sess.run(init)
    sess.run(train, {x: xs, y: ys})
    after_batch = sess.run(w)
    sess.run(train, {x: 2.0, y: 6.0})
    after_scalar = sess.run(w)
  # Synchronous SGD steps with the replicas' mean gradient, each of a
  # summed loss over its two rows: half the whole batch's; given all four
  # rows each, it would be TensorFlow's step on the whole batch.
  whole = np.sum(2 * (xs * 0.5 - ys) * xs)
  np.testing.assert_allclose(after_batch, 0.5 - 0.01 * whole / 2, rtol=1e-6)
  assert np.isfinite(after_scalar) and after_scalar != after_batch


# A fixed-size graph built before tensorbow is imported: TensorFlow's
# folds of `ones_like` in the loss's count of rows went unnoted.
_BUILT_FIRST = """
import sys
import numpy as np
import tensorflow as tf
if sys.argv[1] == "v1":
  tf.compat.v1.disable_v2_behavior()
else:
  tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, (8, 3), name="x")
y = tf.compat.v1.placeholder(tf.int64, (8,), name="y")
logits = tf.matmul(x, tf.compat.v1.get_variable("w", [3, 4]))
loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(y, logits)
train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
import tensorbow as tb
with tb.TensorBowSession(replicas=2) as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  try:
    sess.run(train, {x: np.ones((8, 3)), y: np.zeros(8)})
  except tf.errors.UnimplementedError as e:
    print(e.message)
"""


@pytest.mark.slow  # a child process of its own
def test_a_graph_built_before_the_import_is_refused_by_name(request):
  done = subprocess.run(
      [sys.executable, "-c", _BUILT_FIRST,
       request.config.getoption("--tf-mode")],
      capture_output=True, text=True, timeout=120, env=child_env(),
      cwd=CHECKOUT)
  assert done.returncode == 0, done.stderr[-2000:]
  assert ("placeholders 'x' (8, 3), 'y' (8,)" in done.stdout and
          "before tensorbow was imported" in done.stdout), done.stdout
