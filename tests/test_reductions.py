"""How the replicas' values of a tensor combine (tensorbow/rewrite/
reductions.py; DESIGN.md, "What leaves the replicas"): by the graph's data
flow from the batch sources, and NumPy shows each kind is the whole
batch's value from the shards'."""
import numpy as np
import tensorflow as tf

from tensorbow import fetches as tb_fetches
from tensorbow.rewrite import reductions

tf1 = tf.compat.v1
ROWS, SUM, MAX, MIN = (reductions.ROWS, reductions.SUM, reductions.MAX,
                       reductions.MIN)


def _graph():
  """A classifier on x [None, 4], labels y [None], and what scripts fetch
  from it; returns (graph, {name: tensor}, x, y, lr)."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    lr = tf1.placeholder(tf.float32, [], name="lr")
    w = tf1.get_variable("w", initializer=np.ones([4, 3], np.float32))
    b = tf1.get_variable("b", initializer=np.zeros([3], np.float32))
    logits = tf.matmul(x, w) + b
    predictions = tf.argmax(logits, 1)
    correct = tf.cast(tf.equal(predictions, y), tf.float32)
    loss = tf.reduce_mean(
        tf1.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                        logits=logits))
    bias_grad = tf.gradients(loss, [b])[0]
    tensors = {
        "logits": logits,
        "correct": tf.reduce_sum(correct),
        "correct_int": tf.reduce_sum(tf.cast(correct, tf.int32)),
        "rows": tf.shape(x)[0],
        "size": tf.size(y),
        "nonzero": tf.math.count_nonzero(predictions),
        "column_sums": tf.reduce_sum(logits, 0),
        "row_sums": tf.reduce_sum(logits, 1),
        "all_sum": tf.reduce_sum(logits),
        "scaled_sum": 2.0 * tf.reduce_sum(correct) / lr,
        "sum_of_sums": tf.reduce_sum(correct) + tf.reduce_sum(logits),
        "sum_plus_one": tf.reduce_sum(correct) + 1.0,
        "sum_times_rows": tf.reduce_sum(correct) * tf.reduce_sum(correct),
        "max": tf.reduce_max(logits),
        "min_per_class": tf.reduce_min(logits, axis=0),
        "max_per_row": tf.reduce_max(logits, axis=1),
        "confusion": tf.math.confusion_matrix(y, predictions, 3),
        "segment_sums": tf.math.unsorted_segment_sum(logits, y, 3),
        "accuracy": tf.reduce_mean(correct),
        "loss": loss,
        "bias_grad": bias_grad,
        "weights": w.value(),
        "lr_twice": lr * 2.0,
    }
  return graph, tensors, x, y, lr


EXPECTED = {
    "logits": ROWS, "correct": SUM, "correct_int": SUM, "rows": SUM,
    "size": SUM, "nonzero": SUM, "column_sums": SUM, "row_sums": ROWS,
    "all_sum": SUM, "scaled_sum": SUM, "sum_of_sums": SUM,
    "sum_plus_one": None, "sum_times_rows": None, "max": MAX,
    "min_per_class": MIN, "max_per_row": ROWS, "confusion": SUM,
    "segment_sums": SUM, "accuracy": None, "loss": None,
    # A bias's gradient is a sum over the shard's rows of the per-example
    # gradient of a mean loss: already the shard's mean.
    "bias_grad": None, "weights": None, "lr_twice": None}


def test_each_tensor_combines_as_its_reduction_over_rows():
  graph, tensors, x, y, lr = _graph()
  got = reductions.combinations(graph, list(tensors.values()), [x, y], [lr])
  assert dict(zip(tensors, got)) == EXPECTED


def test_without_batch_sources_nothing_combines():
  graph, tensors, _, _, lr = _graph()
  assert reductions.combinations(graph, list(tensors.values()), [],
                                 [lr]) == (None,) * len(tensors)


def test_the_kinds_regroup_the_whole_batchs_value_from_the_shards():
  graph, tensors, x, y, lr = _graph()
  kinds = dict(zip(tensors, reductions.combinations(
      graph, list(tensors.values()), [x, y], [lr])))
  rng = np.random.RandomState(0)
  rows, labels = rng.randn(10, 4).astype(np.float32), rng.randint(0, 3, 10)
  shards = np.array_split(np.arange(10), 4)
  names = [n for n, k in kinds.items() if k in (ROWS, SUM, MAX, MIN)]
  with tf1.Session(graph=graph) as sess:
    sess.run(tf1.global_variables_initializer())
    fetches = [tensors[n] for n in names]
    whole = sess.run(fetches, {x: rows, y: labels, lr: 0.5})
    parts = [sess.run(fetches, {x: rows[s], y: labels[s], lr: 0.5})
             for s in shards]
  for k, name in enumerate(names):
    merged = tb_fetches.merge([np.asarray(p[k]) for p in parts],
                            [len(s) for s in shards], kinds[name])
    if np.issubdtype(np.asarray(whole[k]).dtype, np.floating):
      np.testing.assert_allclose(merged, whole[k], rtol=1e-5, err_msg=name)
    else:
      np.testing.assert_array_equal(merged, whole[k], err_msg=name)


def test_row_indices_and_summaries_of_sums():
  graph, tensors, x, y, lr = _graph()
  with graph.as_default():
    found = tf.where(tensors["logits"] > 1.0)
    summary = tf1.summary.merge([
        tf1.summary.scalar("n_correct", tensors["correct"]),
        tf1.summary.scalar("n_loss", tensors["loss"]),
        tf1.summary.scalar("n_max", tensors["max"])])
    reshaped = tf.reshape(found, [-1])
  got = reductions.combinations(graph, [found, summary, reshaped], [x, y],
                                [lr])
  assert got[0] == reductions.ROW_INDICES
  assert got[1] == {"n_correct": SUM, "n_loss": None, "n_max": MAX}
  assert got[2] == ROWS  # its row indices moved: merged as rows
