"""Which fetches are per-example (tensorbow/rewrite/per_example.py).

The decision the plan keeps for fetch merging (DESIGN.md, "Fetches are merged"):
by the graph's shapes and data flow, never by a coincidence of sizes. Each graph
here has a tensor whose first dimension happens to equal the batch a run would
feed, so a size test would get it wrong.
"""
import numpy as np
import tensorflow as tf

from tensorbow.rewrite import per_example

tf1 = tf.compat.v1
BATCH = 4


def _decided(graph, fetches, sources, fed=()):
  got = per_example.per_example(graph, list(fetches.values()), sources, fed)
  return dict(zip(fetches, got))


def _classifier(x, y):
  """A softmax classifier whose weight is [BATCH, 10]: its gradient has
  the batch's first dimension by coincidence."""
  w = tf1.get_variable("w", initializer=np.ones([4, 10], np.float32))
  logits = tf.matmul(x, w)
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  return w, logits, loss, tf.gradients(loss, [w])[0]


def test_fed_batch_fetches_by_shape():
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    lr = tf1.placeholder(tf.float32, [], name="lr")
    w, logits, loss, grad = _classifier(x, y)
    fetches = {
        "logits": logits, "loss": loss, "grad": grad,
        "flat": tf.reshape(logits, [-1]),
        "flat_by_shape": tf.reshape(logits, [tf.shape(x)[0] * 10]),
        "rows_by_shape": tf.reshape(x, [tf.shape(x)[0], 2, 2]),
        "predictions": tf.argmax(logits, 1),
        "transposed": tf.transpose(logits),
        "column_sums": tf.reduce_sum(logits, 0),
        "rows": tf.shape(x)[0],
        "scaled_grad": grad * lr,
        "gram": tf.matmul(x, x, transpose_a=True),  # [4, 4]
        "batch": x,
    }
    tf1.train.GradientDescentOptimizer(lr).minimize(loss)
  got = _decided(graph, fetches, [x, y], [lr])
  assert got == {
      "logits": True, "loss": False, "grad": False, "flat": True,
      "flat_by_shape": True, "rows_by_shape": True, "predictions": True,
      "transposed": False, "column_sums": False, "rows": False,
      "scaled_grad": False, "gram": False, "batch": True}


def test_data_dependent_shapes_are_per_example_when_they_depend_on_the_batch():
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    w, logits, _, _ = _classifier(x, y)
    fetches = {
        "masked_rows": tf.boolean_mask(logits, logits[:, 0] > 0),
        "labels_seen": tf.unique(y)[0],
        "py_func_of_rows": tf1.py_func(lambda a: a, [logits], tf.float32),
        "py_func_of_weights": tf1.py_func(lambda a: a, [w], tf.float32),
        "unique_weights": tf.unique(tf.reshape(w, [-1]))[0],
    }
  got = _decided(graph, fetches, [x, y])
  assert got == {"masked_rows": True, "labels_seen": True,
                 "py_func_of_rows": True, "py_func_of_weights": False,
                 "unique_weights": False}


def test_control_flow_keeps_the_batch_dimension():
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    flag = tf1.placeholder(tf.bool, [], name="flag")
    _, logits, _, grad = _classifier(x, y)

    def doubled(value):
      return tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, 2 * a),
                           [0, value])[1]

    fetches = {
        "cond_rows": tf.cond(flag, lambda: 2 * logits, lambda: logits),
        "cond_grad": tf.cond(flag, lambda: 2 * grad, lambda: grad),
        "loop_rows": doubled(logits), "loop_grad": doubled(grad)}
  got = _decided(graph, fetches, [x, y], [flag])
  assert got == {"cond_rows": True, "cond_grad": False, "loop_rows": True,
                 "loop_grad": False}


def _fixed_batch_graph(hard_coded):
  """A fixed-batch pipeline's classifier; `hard_coded`: the model reshapes
  with the batch size written in, as fixed-batch scripts do."""
  graph = tf.Graph()
  with graph.as_default():
    data = tf.data.Dataset.from_tensor_slices(
        (np.zeros([16, 4], np.float32), np.zeros([16], np.int64)))
    x, y = tf1.data.make_one_shot_iterator(
        data.batch(BATCH, drop_remainder=True)).get_next()
    assert x.shape.as_list() == [BATCH, 4]
    fetches = {}
    if hard_coded:
      # [BATCH, 2, 2] fails under the sentinel; [BATCH, -1] does not.
      images = tf.reshape(x, [BATCH, 2, 2])
      x = tf.reshape(images, [BATCH, -1])
      fetches.update(images=images, flat_input=x)
    w, logits, loss, grad = _classifier(x, y)
    fetches.update(logits=logits, loss=loss, grad=grad,
                   zeros=tf.zeros([BATCH, 3]) + tf.reduce_sum(w))
  return graph, fetches, [x.op.inputs[0] if hard_coded else x, y]


def test_fixed_batch_pipeline_elements():
  graph, fetches, _ = _fixed_batch_graph(False)
  got = _decided(graph, fetches, _sources(graph))
  assert got == {"logits": True, "loss": False, "grad": False,
                 "zeros": False}


def test_a_batch_size_written_into_the_graph_still_carries_the_batch():
  graph, fetches, _ = _fixed_batch_graph(True)
  got = _decided(graph, fetches, _sources(graph))
  assert got == {"images": True, "flat_input": True, "logits": True,
                 "loss": False, "grad": False, "zeros": False}


def _sources(graph):
  return graph.get_operation_by_name("IteratorGetNext").outputs


def test_without_batch_sources_nothing_is_per_example():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.constant(np.ones([BATCH, 4], np.float32))
    y = tf.constant(np.zeros([BATCH], np.int64))
    _, logits, loss, grad = _classifier(x, y)
  assert per_example.per_example(graph, [logits, loss, grad], []) == (
      False, False, False)


def test_an_import_takes_the_functions_its_ops_run_and_no_others(
    monkeypatch):
  """Fetches computed through a function that calls another are decided
  by their shapes; the scratch import is given the functions the kept ops
  run, nested calls included, and none of the rest of the graph's library
  (a one-shot iterator's, which holds the arrays of its data set)."""
  from tensorflow.python.framework import function  # pylint: disable=g-import-not-at-top
  graph = tf.Graph()
  with graph.as_default():

    @function.Defun(tf.float32)
    def inner(v):
      return v * 2.0

    @function.Defun(tf.float32)
    def outer(v):
      return inner(v) + 1.0

    tf1.data.make_one_shot_iterator(tf.data.Dataset.from_tensor_slices(
        np.zeros([64, 4], np.float32)).map(lambda v: v + 1.0)).get_next()
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    y = tf1.placeholder(tf.int64, [None], name="y")
    through = tf.reshape(outer(x), [-1, 4])
    w, logits, loss, grad = _classifier(through, y)
    fetches = {"logits": logits, "loss": loss, "grad": grad,
               "through": through}
  given = []
  imported = per_example._imported  # pylint: disable=protected-access

  def spy(full, kept, cut, wanted):
    given.append(set(f.signature.name for f in full.library.function))
    return imported(full, kept, cut, wanted)

  monkeypatch.setattr(per_example, "_imported", spy)
  got = _decided(graph, fetches, [x, y])
  assert got == {"logits": True, "loss": False, "grad": False,
                 "through": True}
  assert given and all(
      names == {outer.name, inner.name} for names in given), given
