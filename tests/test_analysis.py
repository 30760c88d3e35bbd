"""tensorbow/rewrite/analysis.py: what a run writes."""
import pytest
import tensorflow as tf

from tensorbow.rewrite import analysis
from tensorbow.rewrite import graph_util


def test_written_variables_after_a_failure_leaves_out_writes_that_waited():
  graph = tf.Graph()
  with graph.as_default():
    a = tf.compat.v1.get_variable("a", initializer=1.0)
    b = tf.compat.v1.get_variable("b", initializer=2.0)
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")
    checked = tf.debugging.check_numerics(x, "bad", name="checked")
    write_a = tf.compat.v1.assign(a, checked)  # waits for the check
    write_b = tf.compat.v1.assign(b, 3.0)  # does not
    ops = graph_util.closure([write_a.op, write_b.op], frozenset())
  assert analysis.written_variables(ops) == {"a", "b"}
  assert analysis.written_variables(ops, failed_op=checked.op) == {"b"}
  # A write that failed itself wrote nothing.
  assert analysis.written_variables(ops, failed_op=write_b.op) == {"a"}


def _clip(after_step):
  graph = tf.Graph()
  with graph.as_default():
    w = tf.compat.v1.get_variable("w", initializer=[[1.0], [2.0]])
    x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
    loss = tf.reduce_sum(tf.matmul(x, w))
    step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.control_dependencies([step] if after_step else []):
      clip = tf.compat.v1.assign(w, tf.clip_by_value(w, -1.0, 1.0))
    ops = graph_util.closure([step, clip.op], frozenset(["x:0"]))
  return ops, clip


def test_a_write_after_the_step_of_a_model_variable_trains():
  """A weight clip under tf.control_dependencies([train_op]) is a
  replica's own constraint after its update."""
  ops, clip = _clip(after_step=True)
  info = analysis.analyse_training(ops, ["x:0"])
  assert info.model_vars == ["w"]
  assert "w" in info.written


def test_a_write_of_a_model_variable_racing_its_step_is_refused():
  ops, clip = _clip(after_step=False)
  with pytest.raises(tf.errors.UnimplementedError,
                     match=r"writes trainable variable 'w' outside an "
                     r"optimizer's apply op.*control_dependencies") as e:
    analysis.analyse_training(ops, ["x:0"])
  assert e.value.op is clip.op


def test_writes_are_told_by_the_variable_they_write():
  # ScatterNd (gather_nd's gradient, confusion_matrix) is named like the
  # variable scatters but computes a new tensor: no write (issue #60).
  graph = tf.Graph()
  with graph.as_default():
    v = tf.compat.v1.get_variable("v", initializer=[1.0, 2.0])
    r = tf.compat.v1.get_variable("r", initializer=[1.0, 2.0],
                                  use_resource=True)
    indices = tf.constant([[1]])
    pure = tf.scatter_nd(indices, [5.0], [2])
    matrix = tf.math.confusion_matrix([0, 1], [1, 1], 2)
    writes = [tf.compat.v1.scatter_add(v, [1], [5.0]),
              tf.raw_ops.ResourceScatterAdd(resource=r.handle, indices=[1],
                                            updates=[5.0]),
              tf.compat.v1.assign_add(v, [1.0, 1.0])]
  assert not analysis.is_write(pure.op)
  assert not any(analysis.is_write(op) for op in graph.get_operations()
                 if op.name.startswith(matrix.op.name.split("/")[0]))
  assert all(analysis.is_write(getattr(w, "op", w)) for w in writes)


def _switched_batch_norm():
  """Batch norm's moving statistics written in the true branch of a
  `tf.cond` on an `is_training` flag (v1 Switch or v2 If by the mode);
  returns (graph, loss, train op)."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    training = tf.compat.v1.placeholder_with_default(True, [],
                                                     name="is_training")
    moving = tf.compat.v1.get_variable(
        "moving_mean", [3], initializer=tf.zeros_initializer(),
        trainable=False)
    w = tf.compat.v1.get_variable("w", initializer=[[1.0]] * 3)

    def batch():
      mean = tf.reduce_mean(x, 0)
      with tf.control_dependencies(
          [tf.compat.v1.assign(moving, 0.9 * moving + 0.1 * mean)]):
        return tf.identity(mean)

    mean = tf.cond(training, batch, lambda: tf.identity(moving))
    loss = tf.reduce_sum(tf.matmul(x - mean, w))
    step = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
  return graph, loss, step


def test_writes_in_a_branch_are_other_variables_of_the_batch():
  """The moving statistics a conditional's branch writes are written
  variables like any other (DESIGN.md, "State"): one copy per replica,
  their central value the mean, because their value comes from the
  batch."""
  graph, _, step = _switched_batch_norm()
  ops = graph_util.closure([step], frozenset())
  info = analysis.analyse_training(ops, ["x:0"])
  assert info.model_vars == ["w"]
  assert info.other_vars == ["moving_mean"]
  assert info.batch_dependent == ["moving_mean"]


def test_a_plain_run_through_a_writing_branch_writes_its_variable():
  """An evaluation run left at is_training's default writes the moving
  statistics, in a v2 conditional's function too: its replicas are
  re-seeded after it."""
  graph, loss, _ = _switched_batch_norm()
  ops = graph_util.closure([loss.op], frozenset())
  assert analysis.written_variables(ops) == {"moving_mean"}
