"""SSGD (tensorbow.algorithms.SSGD): the replicas' gradients, weighted by
shard size, are averaged and one identical update is applied, so a wave
equals tf.compat.v1.Session training on the whole batch, with any
optimizer. Uneven shards: 18 rows over 4 replicas."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

import graphs

tf1 = tf.compat.v1
REPLICAS, WAVES = 4, 3
RNG = np.random.RandomState(29)
BATCHES = [(RNG.randn(18, 3).astype(np.float32),
            RNG.randn(18, 1).astype(np.float32)) for _ in range(WAVES)]
OPTIMIZERS = {
    "gd": lambda: tf1.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf1.train.MomentumOptimizer(0.1, 0.9),
    "adam": lambda: tf1.train.AdamOptimizer(0.1),
    "adagrad": lambda: tf1.train.AdagradOptimizer(0.1),
}


def _train(make_session, model):
  with make_session(model.graph) as sess:
    sess.run(model.init)
    losses = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
              for x, y in BATCHES]
    return losses, sess.run([model.w, model.b, model.step])


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_ssgd_equals_tensorflow_on_the_whole_batch(optimizer, use_resource):
  model = graphs.build(OPTIMIZERS[optimizer], use_resource, global_step=True)
  expected = _train(lambda graph: tf1.Session(graph=graph), model)
  got = _train(lambda graph: tb.TensorBowSession(
      graph=graph, replicas=REPLICAS, algorithm="ssgd"), model)
  np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
  for g, e in zip(got[1][:2], expected[1][:2]):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
  assert got[1][2] == expected[1][2] == WAVES


def test_ssgd_refuses_sparse_updates_with_nothing_changed():
  graph = tf.Graph()
  with graph.as_default():
    ids = tf1.placeholder(tf.int32, [None])
    table = tf1.get_variable("table", initializer=np.ones([6, 2], np.float32))
    loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf1.global_variables_initializer()
  with tb.TensorBowSession(graph=graph, replicas=2,
                           algorithm=tb.algorithms.SSGD()) as sess:
    sess.run(init)
    with pytest.raises(tf.errors.UnimplementedError, match="sparse update"):
      sess.run(train, {ids: [0, 1, 2, 3]})
    np.testing.assert_array_equal(sess.run(table), np.ones([6, 2]))


def test_ssgd_cannot_skip_replicas():
  with pytest.raises(ValueError, match="nonfinite"):
    tb.TensorBowSession(algorithm="ssgd", nonfinite="skip")
