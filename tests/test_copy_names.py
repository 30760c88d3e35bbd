"""The names of the copies (rewrite/builder.py `flat`): valid TensorFlow
names whatever the user's names are, one copy name per user name, and
training that does not depend on what the user called things."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.rewrite import builder

# Names TensorFlow accepts for ops, with the parts that broke copies: a
# part starting with '_' or '-' (tf.clip_by_global_norm makes `.../_0`),
# '>' and '.' of the user's own, and names that differ only there.
_NAMES = [
    "a", "a/b", "a>b", "a/_0", "a>b/_c", "clip_by_global_norm/_0", "a/-b",
    "a.b/c", "a/.b", "a./b", "a..b", ".a/b", "a/>b", "x/tensorbow_step",
    "a/b.>c", "0/1/2", "a//b", "A-b_c.d/e", "a/b/", "a>.b", "a.>b",
]


def test_flat_names_are_distinct_valid_and_reversible():
  flats = [builder.flat(n) for n in _NAMES]
  assert len(set(flats)) == len(_NAMES)
  assert all("/" not in f for f in flats)
  assert [builder.unflat(f) for f in flats] == _NAMES
  # A node TensorBow adds beside a copy never takes a user's copy name.
  assert builder.flat("x/tensorbow_step") != builder.flat("x") + (
      ">tensorbow_step")
  assert builder.unflat(builder.flat("x") + ">tensorbow_step") == (
      "x/tensorbow_step")
  graph_def = tf.compat.v1.GraphDef()
  for f in flats:
    graph_def.node.add(name=f"tensorbow/group_0/{f}", op="NoOp")
  with tf.Graph().as_default() as graph:
    tf.compat.v1.import_graph_def(graph_def, name="")
  assert len(graph.get_operations()) == len(_NAMES)


def _clipped_regression(scope):
  """Least squares trained with gradients clipped by their global norm,
  its variables and ops under `scope`; returns the graph and its parts."""
  graph = tf.Graph()
  with graph.as_default(), tf.compat.v1.variable_scope(scope):
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w = tf.compat.v1.get_variable(
        "w", initializer=np.linspace(-1, 1, 3, dtype=np.float32)[:, None])
    b = tf.compat.v1.get_variable("b", initializer=np.float32([0.5]))
    with tf.name_scope("_hidden"):
      loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
    opt = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9)
    grads, variables = zip(*opt.compute_gradients(loss))
    clipped, _ = tf.clip_by_global_norm(grads, 0.5)
    train = opt.apply_gradients(zip(clipped, variables), name="-step.op")
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, [w, b], loss, train, init


def _train(make_session, scope, batches):
  graph, x, y, variables, loss, train, init = _clipped_regression(scope)
  losses = []
  with graph.as_default(), make_session(graph) as sess:
    sess.run(init)
    for xs, ys in batches:
      losses.append(sess.run([loss, train], {x: xs, y: ys})[0])
    return losses, sess.run(variables)


def _batches(rows=8, waves=4):
  rng = np.random.RandomState(3)
  return [(rng.randn(rows, 3).astype(np.float32),
           rng.randn(rows, 1).astype(np.float32)) for _ in range(waves)]


@pytest.mark.parametrize("scope", ["plain", "top/_under/a>b/c-d.e"])
def test_one_replica_equals_tensorflow_whatever_the_names(scope):
  batches = _batches()
  want = _train(lambda g: tf.compat.v1.Session(graph=g), scope, batches)
  got = _train(lambda g: tb.TensorBowSession(graph=g, replicas=1), scope,
               batches)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  for a, b in zip(got[1], want[1]):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_replicas_train_the_same_whatever_the_names():
  """Names are only names: at L = 4 a graph under scopes with leading
  underscores, '>', '-' and '.' trains to the same bits as the same graph
  under a plain scope."""
  batches = _batches()

  def session(graph):
    return tb.TensorBowSession(graph=graph, replicas=4)

  plain = _train(session, "plain", batches)
  odd = _train(session, "top/_under/a>b/c-d.e", batches)
  np.testing.assert_array_equal(plain[0], odd[0])
  for a, b in zip(plain[1], odd[1]):
    np.testing.assert_array_equal(a, b)
  # ... and it did train: the central model moved from its start.
  assert not np.allclose(plain[1][0][:, 0], np.linspace(-1, 1, 3))


def test_user_names_a_gt_b_and_a_slash_b_stay_apart():
  """A user's `a>b` and `a/b` are different ops; their copies must be."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 2])
    with tf.compat.v1.variable_scope("a"):
      v1 = tf.compat.v1.get_variable("b", initializer=np.float32([[1.], [2.]]))
    v2 = tf.compat.v1.get_variable("a>b", initializer=np.float32([[3.], [4.]]))
    loss = (tf.reduce_sum(tf.matmul(x, v1), name="a>b_loss") +
            2.0 * tf.reduce_sum(tf.matmul(x, v2), name="a/b_loss"))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  xs = np.float32([[1., 2.], [3., 4.]])
  results = []
  for make in (tf.compat.v1.Session,
               lambda graph: tb.TensorBowSession(graph=graph, replicas=1)):
    with make(graph=graph) as sess:
      sess.run(init)
      sess.run(train, {x: xs})
      results.append(sess.run([v1, v2]))
  for a, b in zip(*results):
    np.testing.assert_array_equal(a, b)
