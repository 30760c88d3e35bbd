"""tensorbow/rewrite/analysis.py: what a run writes."""
import tensorflow as tf

from tensorbow.rewrite import analysis


def test_written_variables_after_a_failure_leaves_out_writes_that_waited():
  graph = tf.Graph()
  with graph.as_default():
    a = tf.compat.v1.get_variable("a", initializer=1.0)
    b = tf.compat.v1.get_variable("b", initializer=2.0)
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")
    checked = tf.debugging.check_numerics(x, "bad", name="checked")
    write_a = tf.compat.v1.assign(a, checked)  # waits for the check
    write_b = tf.compat.v1.assign(b, 3.0)  # does not
    ops = analysis.closure([write_a.op, write_b.op], frozenset())
  assert analysis.written_variables(ops) == {"a", "b"}
  assert analysis.written_variables(ops, failed_op=checked.op) == {"b"}
  # A write that failed itself wrote nothing.
  assert analysis.written_variables(ops, failed_op=write_b.op) == {"a"}
