"""The corpus's reference refuses runs whose result TensorFlow leaves to
the executor (races.py): a read of a variable that the same run updates,
with nothing in the graph ordering the two."""
import numpy as np
import pytest
import tensorflow as tf

from idioms import harness
from idioms import races

train = tf.compat.v1.train


def _built(build):
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(harness.SEED)
    fetches, feed = build()
  return graph, fetches, feed


def _scaled_loss(scale):
  """The MLP's loss times `scale(w)` of a scalar variable w, fetched with
  the Momentum step that updates w."""
  loss, feed = harness.mlp_loss()
  w = tf.compat.v1.get_variable("w", [], initializer=tf.ones_initializer())
  loss = loss * scale(w)
  return [loss, train.MomentumOptimizer(0.1, 0.9).minimize(loss)], feed(0)


def test_a_fetched_product_with_a_reference_variable_races():
  """`loss * w`: the product reads w's buffer, which the step updates, and
  the gradients do not use the product, so nothing orders the two. A
  resource variable's read is the one the gradients use: ordered."""
  graph, fetches, feed = _built(lambda: _scaled_loss(lambda w: w))
  found = races.unordered_reads(graph, fetches, feed)
  if tf.compat.v1.resource_variables_enabled():
    assert found == []
  else:
    assert found == [("mul", "Momentum/update_w/ApplyMomentum")]
    with pytest.raises(AssertionError, match="not determined"):
      with races.CheckedSession(graph=graph) as sess:
        sess.run(fetches, feed)


def test_reads_the_gradients_use_are_ordered():
  """Through a Square the product reads a value the gradients wait for;
  every read of a plain training run is ordered, and the checked session
  runs it as TensorFlow does."""
  graph, fetches, feed = _built(lambda: _scaled_loss(tf.square))
  assert races.unordered_reads(graph, fetches, feed) == []
  with graph.as_default():
    init = tf.compat.v1.global_variables_initializer()
  values = []
  for session in (tf.compat.v1.Session, races.CheckedSession):
    with session(graph=graph) as sess:
      sess.run(init)
      values.append([sess.run(fetches, feed)[0] for _ in range(3)])
  np.testing.assert_array_equal(values[0], values[1])


def _read_and_add(ordered):
  w = tf.compat.v1.get_variable("w", [], initializer=tf.ones_initializer())
  doubled = w * 2.0
  with tf.control_dependencies([doubled] if ordered else []):
    add = tf.compat.v1.assign_add(w, 1.0)
  return [doubled, add], {}


@pytest.mark.parametrize("ordered", [False, True])
def test_an_assign_beside_a_read_races_unless_ordered(ordered):
  """Any update counts, not an optimizer's alone, for either kind of
  variable; a control dependency orders the read first."""
  graph, fetches, feed = _built(lambda: _read_and_add(ordered))
  found = races.unordered_reads(graph, fetches, feed)
  assert bool(found) != ordered, found
  assert all(update.startswith("AssignAdd") for _, update in found)


def test_a_run_without_the_update_has_no_race():
  """The race is within one run: fetching the product alone is fine."""
  graph, fetches, feed = _built(lambda: _scaled_loss(lambda w: w))
  assert races.unordered_reads(graph, fetches[:1], feed) == []
