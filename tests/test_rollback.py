"""What a wave's backup keeps and puts back (rollback.py): the variables
of a graph, in both kinds; the replicas' copies are put back by the
dropped-wave tests of test_elastic.py."""
import numpy as np
import pytest
import tensorflow as tf

from tensorbow import rollback


@pytest.mark.parametrize("resource", [False, True])
def test_a_backup_puts_back_every_variable_initialised_when_it_saved(
    resource):
  graph = tf.Graph()
  with graph.as_default():
    v = tf.compat.v1.get_variable("v", initializer=[1.0, 2.0],
                                  use_resource=resource)
    late = tf.compat.v1.get_variable("late", initializer=[5],
                                     use_resource=resource)
    change = tf.group(v.assign([7.0, 8.0]), late.assign([9]))
  with tf.compat.v1.Session(graph=graph) as sess:
    sess.run(v.initializer)
    backup = rollback.Backup(sess, graph)
    backup.save()  # `late` is not initialised yet: not kept
    sess.run(late.initializer)
    sess.run(change)
    backup.restore()
    np.testing.assert_array_equal(sess.run(v), [1.0, 2.0])
    assert sess.run(late) == [9]
    backup.save()  # now kept
    sess.run(change)
    sess.run(v.assign([0.0, 0.0]))
    backup.forget()  # the wave finished: nothing to put back
    backup.restore()
    np.testing.assert_array_equal(sess.run(v), [0.0, 0.0])
    backup.save()
    sess.run(change)
    backup.restore()
    np.testing.assert_array_equal(sess.run(v), [0.0, 0.0])
    assert sess.run(late) == [9]


def test_a_variable_never_initialised_costs_no_ops_per_save():
  graph = tf.Graph()
  with graph.as_default():
    v = tf.compat.v1.get_variable("v", initializer=[1.0])
    tf.compat.v1.get_variable("never", shape=[2])  # never initialised
  with tf.compat.v1.Session(graph=graph) as sess:
    sess.run(v.initializer)
    backup = rollback.Backup(sess, graph)
    backup.save()
    version = graph.version
    for _ in range(3):
      backup.save()
    assert graph.version == version  # the check of `never` is made once
    sess.run(v.assign([2.0]))
    backup.restore()
    assert sess.run(v) == [1.0]


def test_a_backup_never_changes_an_op_a_session_has_run(monkeypatch):
  # TensorFlow warns that setting an attribute of an op after a run "will
  # trigger an error in the future"; grouping ops sets one (a control
  # dependency's mark). The backup's ops of a save before a variable came
  # are run again, so they must be left as they were built.
  graph = tf.Graph()
  with graph.as_default():
    v = tf.compat.v1.get_variable("v", initializer=[1.0, 2.0])
    late = tf.compat.v1.get_variable("late", initializer=[5])
  changed = []
  original = tf.Operation._set_attr  # pylint: disable=protected-access
  with tf.compat.v1.Session(graph=graph) as sess:
    sess.run(v.initializer)
    backup = rollback.Backup(sess, graph)
    backup.save()
    backup.restore()
    ran = {op.name for op in graph.get_operations()}
    monkeypatch.setattr(
        tf.Operation, "_set_attr",
        lambda op, name, value: (changed.append((op.name, name)),
                                 original(op, name, value)))
    sess.run(late.initializer)
    backup.save()  # kept anew: `late` joins `v`
    sess.run(v.assign([3.0, 4.0]))
    backup.restore()
    np.testing.assert_array_equal(sess.run(v), [1.0, 2.0])
  assert [c for c in changed if c[0] in ran] == []
