"""How a run is routed (tensorbow/routing.py), below the session.

A run whose fetches or targets depend on an optimizer's apply op is a
training run, every other run a plain run (DESIGN.md, "Two kinds of run"). Each
case is a small tf.compat.v1 graph, with reference and resource variables,
and checks the exact classification: training or not, the variables
written and read, the fed tensors and their values' order, the input
pipeline's tensors taken first and the SparseTensor feeds.
"""
import threading
import types

import numpy as np
import pytest
import tensorflow as tf

from tensorbow import compat
from tensorbow import execution
from tensorbow import routing

tf1 = tf.compat.v1
X = np.arange(8, dtype=np.float32).reshape(4, 2)
Y = np.ones([4, 1], np.float32)
USE_RESOURCE = pytest.mark.parametrize("use_resource", [True, False],
                                       ids=["resource", "ref"])


def _router(graph):
  return routing.Router(graph, execution.ExecutionGraph(graph),
                        threading.RLock())


def _least_squares(use_resource, optimizer=None):
  """Least squares y ~ x @ w + b, its training op named "train"."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    w = tf1.get_variable("w", initializer=np.ones([2, 1], np.float32),
                         use_resource=use_resource)
    b = tf1.get_variable("b", initializer=np.zeros([1], np.float32),
                         use_resource=use_resource)
    step = tf1.train.get_or_create_global_step()
    h = tf.matmul(x, w, name="h")
    loss = tf.reduce_mean(tf.square(h + b - y), name="loss")
    optimizer = optimizer or tf1.train.GradientDescentOptimizer(0.1)
    train = optimizer.minimize(loss, global_step=step, name="train")
    init = tf1.global_variables_initializer()
    reset = tf1.assign(w, tf.zeros([2, 1]), name="reset")
  return types.SimpleNamespace(graph=graph, x=x, y=y, w=w, b=b, step=step,
                               h=h, loss=loss, train=train, init=init,
                               reset=reset)


def _plain_error(graph, fetches, feed_dict):
  """The error `tf.compat.v1.Session.run` raises for a run."""
  with tf1.Session(graph=graph) as sess:
    with pytest.raises(Exception) as info:
      sess.run(fetches, feed_dict)
  return info.value


# ---- training or plain -------------------------------------------------------


@USE_RESOURCE
def test_a_run_applying_gradients_is_training(use_resource):
  m = _least_squares(use_resource)
  route, values = _router(m.graph).route(m.train, {m.x: X, m.y: Y})
  closure = route.closure
  assert isinstance(route, routing.Route)
  assert isinstance(closure, routing.Closure)
  assert closure.training is True
  assert closure.written == {"w", "b", "global_step"}
  assert closure.reads == {"w", "b", "global_step"}
  assert closure.pulled == ()
  assert route.pulled == [] and route.sparse == ()
  assert route.signature == ((), ("train",), ("x:0", "y:0"))
  assert [t.name for t in route.fed] == ["x:0", "y:0"]
  assert values[0] is X and values[1] is Y
  apply_type = ("ResourceApplyGradientDescent" if use_resource else
                "ApplyGradientDescent")
  applied = sorted(op.name for op in closure.ops if op.type == apply_type)
  assert applied == ["train/update_b/" + apply_type,
                     "train/update_w/" + apply_type]


@USE_RESOURCE
def test_the_ops_run_inputs_first(use_resource):
  m = _least_squares(use_resource)
  route, _ = _router(m.graph).route(m.train, {m.x: X, m.y: Y})
  position = {op.name: i for i, op in enumerate(route.closure.ops)}
  assert position["train"] == len(position) - 1
  for op in route.closure.ops:
    for t in op.inputs:
      assert position[t.op.name] < position[op.name], (t.op.name, op.name)
    for c in op.control_inputs:
      assert position[c.name] < position[op.name], (c.name, op.name)


@USE_RESOURCE
def test_a_training_run_writes_its_model_and_counter(use_resource):
  m = _least_squares(use_resource,
                     tf1.train.MomentumOptimizer(0.1, momentum=0.9))
  router = _router(m.graph)
  route, _ = router.route(m.train, {m.x: X, m.y: Y})
  assert route.closure.training
  assert {"w", "b", "global_step"} <= route.closure.written
  assert route.closure.reads == {"w", "w/Momentum", "b", "b/Momentum",
                                 "global_step"}
  init, _ = router.route(m.init, {})
  assert init.closure.written == {"w", "w/Momentum", "b", "b/Momentum",
                                  "global_step"}


@USE_RESOURCE
def test_fetching_the_loss_is_a_plain_run(use_resource):
  m = _least_squares(use_resource)
  route, _ = _router(m.graph).route(m.loss, {m.x: X, m.y: Y})
  assert route.closure.training is False
  assert route.closure.written == frozenset()
  assert route.closure.reads == {"w", "b"}
  assert route.signature == (("loss:0",), (), ("x:0", "y:0"))


@USE_RESOURCE
@pytest.mark.parametrize("fetches", [
    lambda m: [m.loss, m.train],
    lambda m: {"loss": m.loss, "step": (m.train,)},
    lambda m: "train",  # an operation's name
    lambda m: ["loss:0", "train"],
], ids=["list", "nested dict", "op name", "names"])
def test_any_fetch_structure_holding_the_train_op_trains(use_resource,
                                                         fetches):
  m = _least_squares(use_resource)
  route, _ = _router(m.graph).route(fetches(m), {m.x: X, m.y: Y})
  assert route.closure.training is True
  assert route.signature[1] == ("train",)


@USE_RESOURCE
def test_initialisation_and_assignments_are_plain_runs_that_write(
    use_resource):
  m = _least_squares(use_resource)
  router = _router(m.graph)
  init, _ = router.route(m.init, {})
  assert not init.closure.training
  assert init.closure.written == {"w", "b", "global_step"}
  assert init.fed == [] and init.signature[2] == ()
  reset, _ = router.route(m.reset, {})
  assert not reset.closure.training
  assert reset.closure.written == {"w"}
  reads, _ = router.route([m.w, m.step], {})
  assert not reads.closure.training
  assert reads.closure.written == frozenset()
  assert reads.closure.reads == {"w", "global_step"}


@USE_RESOURCE
def test_a_fed_tensor_cuts_what_runs_behind_it(use_resource):
  """Fed h = x @ w: w is not read, x need not be fed."""
  m = _least_squares(use_resource)
  h = np.zeros([4, 1], np.float32)
  route, values = _router(m.graph).route(m.loss, {m.h: h, m.y: Y})
  assert route.closure.reads == {"b"}
  names = {op.name for op in route.closure.ops}
  assert "h" in names and "x" not in names and "w" not in names
  assert [t.name for t in route.fed] == ["h:0", "y:0"]
  assert values[0] is h


@USE_RESOURCE
def test_feeding_the_training_input_does_not_stop_the_training(
    use_resource):
  """Feeding h leaves w's gradient to compute: still training."""
  m = _least_squares(use_resource)
  route, _ = _router(m.graph).route(m.train, {m.h: np.zeros([4, 1]),
                                              m.y: Y})
  assert route.closure.training


@USE_RESOURCE
def test_sparse_gradient_updates_are_training_a_users_scatter_is_not(
    use_resource):
  """An optimizer updates an embedding by scatter (ScatterSub or
  ResourceScatterAdd), not an apply op: that is training too; the same
  kind of write outside the optimizer is a plain run's."""
  graph = tf.Graph()
  with graph.as_default():
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    emb = tf1.get_variable("emb", initializer=np.ones([5, 2], np.float32),
                           use_resource=use_resource)
    loss = tf.reduce_sum(tf.nn.embedding_lookup(emb, ids))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    scatter = tf1.scatter_sub(emb, [0], [[1.0, 1.0]])
  router = _router(graph)
  route, _ = router.route(train, {ids: [1, 3]})
  assert route.closure.training
  assert route.closure.written == {"emb"}
  assert not any(op.type.startswith(("Apply", "ResourceApply"))
                 for op in route.closure.ops)
  route, _ = router.route(scatter, {})
  assert not route.closure.training
  assert route.closure.written == {"emb"}


def test_a_write_through_a_fed_handle_is_unknown():
  """A write whose variable cannot be told: written is None (unknown)."""
  graph = tf.Graph()
  with graph.as_default():
    handle = tf1.placeholder(tf.resource, [], name="handle")
    write = tf.raw_ops.AssignVariableOp(resource=handle, value=1.0)
  route, _ = _router(graph).route(write, {handle: np.zeros([], object)})
  assert not route.closure.training
  assert route.closure.written is None


# ---- fed values, caching -----------------------------------------------------


@USE_RESOURCE
def test_fed_values_come_in_the_order_of_the_fed_tensors_names(
    use_resource):
  m = _least_squares(use_resource)
  router = _router(m.graph)
  for _ in range(2):  # classified, then from the cache
    route, values = router.route(m.loss, {m.y: Y, m.x: X})
    assert [t.name for t in route.fed] == ["x:0", "y:0"]
    assert route.order == [1, 0]
    assert values[0] is X and values[1] is Y


@USE_RESOURCE
def test_a_tuple_key_is_flattened(use_resource):
  m = _least_squares(use_resource)
  route, values = _router(m.graph).route(m.loss, {(m.y, m.x): (Y, X)})
  assert [t.name for t in route.fed] == ["x:0", "y:0"]
  assert values[0] is X and values[1] is Y


@USE_RESOURCE
def test_a_run_is_classified_once_per_structure_and_feed_keys(use_resource):
  m = _least_squares(use_resource)
  router = _router(m.graph)
  first, _ = router.route([m.loss, m.train], {m.x: X, m.y: Y})
  again, values = router.route([m.loss, m.train], {m.x: X + 1, m.y: Y})
  assert again is first and first.cacheable
  np.testing.assert_array_equal(values[0], X + 1)
  # Another structure of the same fetches: its own route, the same closure.
  other, _ = router.route({"step": m.train, "loss": m.loss},
                          {m.y: Y, m.x: X})
  assert other is not first
  assert other.signature == first.signature
  assert other.closure is first.closure
  # Other feed keys: another closure.
  fed_h, _ = router.route([m.loss, m.train], {m.h: Y, m.y: Y})
  assert fed_h.closure is not first.closure


@USE_RESOURCE
def test_a_fetched_feed_is_not_cached_and_not_run(use_resource):
  m = _least_squares(use_resource)
  router = _router(m.graph)
  route, values = router.route([m.x, m.loss], {m.x: X, m.y: Y})
  assert not route.cacheable
  assert [t.name for t in route.handler.fetches()] == ["loss:0"]
  assert route.signature[0] == ("loss:0",)
  again, _ = router.route([m.x, m.loss], {m.x: X, m.y: Y})
  assert again is not route
  assert again.closure is route.closure


@USE_RESOURCE
def test_ops_added_later_are_routed(use_resource):
  m = _least_squares(use_resource)
  exec_graph = execution.ExecutionGraph(m.graph)
  router = routing.Router(m.graph, exec_graph, threading.RLock())
  router.route(m.loss, {m.x: X, m.y: Y})
  with m.graph.as_default():
    double = tf.multiply(m.loss, 2.0, name="double")
  exec_graph.sync()  # as the session does before each run
  route, _ = router.route(double, {m.x: X, m.y: Y})
  assert route.signature[0] == ("double:0",)
  assert not route.closure.training
  assert route.closure.reads == {"w", "b"}


# ---- refusals, as tf.compat.v1.Session ---------------------------------------


@USE_RESOURCE
def test_an_unfeedable_tensor_is_refused_as_tensorflow_does(use_resource):
  m = _least_squares(use_resource)
  router = _router(m.graph)
  feed = {m.x: X, m.y: Y}
  router.route(m.train, feed)  # cached before it became unfeedable
  m.graph.prevent_feeding(m.x)
  expected = _plain_error(m.graph, m.loss, feed)
  assert str(expected) == "Tensor x:0 may not be fed."
  for fetches in (m.train, m.loss):  # cached, new
    with pytest.raises(ValueError) as info:
      router.route(fetches, feed)
    assert str(info.value) == str(expected)


@USE_RESOURCE
def test_a_fetch_made_unfetchable_is_refused_though_cached(use_resource):
  m = _least_squares(use_resource)
  router = _router(m.graph)
  router.route(m.train, {m.x: X, m.y: Y})
  m.graph.prevent_fetching(m.train)
  expected = _plain_error(m.graph, m.train, {m.x: X, m.y: Y})
  with pytest.raises(ValueError) as info:
    router.route(m.train, {m.x: X, m.y: Y})
  assert str(info.value) == str(expected)
  assert "not fetchable" in str(expected)


@USE_RESOURCE
@pytest.mark.parametrize("key", [3, "nothing:0", "w/Initializer"])
def test_a_feed_key_tensorflow_cannot_read_is_refused_alike(use_resource,
                                                            key):
  m = _least_squares(use_resource)
  expected = _plain_error(m.graph, m.loss, {key: 1.0})
  assert isinstance(expected, TypeError)
  with pytest.raises(TypeError) as info:
    _router(m.graph).route(m.loss, {key: 1.0})
  assert str(info.value) == str(expected)


@USE_RESOURCE
def test_refuse_training_names_the_apply_op(use_resource):
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=np.ones([2, 1], np.float32),
                         use_resource=use_resource)
    loss = tf.reduce_sum(tf.matmul(x, w), name="loss")
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
  router = _router(graph)
  apply_type = ("ResourceApplyGradientDescent" if use_resource else
                "ApplyGradientDescent")
  handler = compat.fetch_handler(graph, [loss, train], {})
  with pytest.raises(tf.errors.UnimplementedError) as info:
    router.refuse_training(handler, ["x:0"], "partial_run")
  assert info.value.message == (
      "TensorBow cannot take a training step in partial_run: the fetches "
      f"run optimizer op 'GradientDescent/update_w/{apply_type}'; take it "
      "with run()")
  assert router.refuse_training(compat.fetch_handler(graph, loss, {}),
                                ["x:0"], "partial_run") is None


# ---- input pipelines and SparseTensor feeds ----------------------------------


@USE_RESOURCE
@pytest.mark.parametrize("pipeline", ["dataset", "queue"])
def test_a_training_runs_pipeline_is_pulled_first(use_resource, pipeline):
  graph = tf.Graph()
  with graph.as_default():
    if pipeline == "dataset":
      data = tf.data.Dataset.from_tensor_slices(
          (X, Y)).batch(2).repeat()
      x, y = tf1.data.make_one_shot_iterator(data).get_next()
      source_type = "IteratorGetNext"
    else:
      queue = tf1.FIFOQueue(8, [tf.float32, tf.float32], [[2], [1]])
      x, y = queue.dequeue_many(2)
      source_type = "QueueDequeueManyV2"
    w = tf1.get_variable("w", initializer=np.ones([2, 1], np.float32),
                         use_resource=use_resource)
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
  router = _router(graph)
  route, values = router.route(train, {})
  assert route.closure.training
  assert route.closure.pulled == (x.name, y.name)
  assert len(route.pulled) == 2
  assert route.pulled[0] is x and route.pulled[1] is y
  assert route.pulled[0].graph is graph  # the user's, not the execution's
  assert values == []
  # Taken before the wave: the replicas are fed its outputs, so the ops
  # behind it (the iterator or queue) do not run in them.
  source = x.op.inputs[0].op
  assert x.op.type == source_type and y.op is x.op
  assert source.name not in {op.name for op in route.closure.ops}
  plain, _ = router.route(loss, {})
  assert not plain.closure.training
  assert plain.closure.pulled == () and plain.pulled == []
  assert source.name in {op.name for op in plain.closure.ops}


def test_runs_name_the_pipelines_they_take_from_or_reset():
  graph = tf.Graph()
  with graph.as_default():
    features = tf1.placeholder(tf.float32, [None, 2], name="features")
    iterator = tf1.data.make_initializable_iterator(
        tf.data.Dataset.from_tensor_slices(features).batch(2))
    x = iterator.get_next()
    queue = tf1.FIFOQueue(8, [tf.float32], [[1]], name="queue")
    y = queue.dequeue_many(2)
    enqueue = queue.enqueue_many([Y])
    w = tf1.get_variable("w", initializer=np.ones([2, 1], np.float32))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    tf1.data.experimental.make_saveable_from_iterator(iterator)
    serialize = graph.get_operation_by_name("SerializeIterator")
  router = _router(graph)
  it, q = iterator.initializer.inputs[1].op.name, "queue"
  route, _ = router.route(train, {})
  assert route.closure.pipelines.takes == {x.op.name: it, y.op.name: q}
  assert route.closure.pipelines.resets == frozenset()
  plain, _ = router.route(x, {})
  assert plain.closure.pipelines.takes == {x.op.name: it}
  reset, _ = router.route(iterator.initializer, {features: X})
  assert reset.closure.pipelines == ({}, frozenset([it]), frozenset())
  save, _ = router.route(serialize.outputs[0], {})
  assert save.closure.pipelines == ({}, frozenset(), frozenset([it]))
  # A fed output: the op does not run. An enqueue takes nothing.
  for fetches, feeds in ((loss, {x: X[:2]}), (enqueue, {})):
    other, _ = router.route(fetches, feeds)
    assert it not in other.closure.pipelines.takes.values()
    assert not other.closure.pipelines.resets
  assert router.route(enqueue, {})[0].closure.pipelines.takes == {}


@USE_RESOURCE
def test_sparse_feeds_of_a_training_run_are_listed(use_resource):
  graph = tf.Graph()
  with graph.as_default():
    sp = tf1.sparse_placeholder(tf.float32, [None, 2], name="sp")
    w = tf1.get_variable("w", initializer=np.ones([2, 1], np.float32),
                         use_resource=use_resource)
    loss = tf.reduce_sum(tf.sparse.sparse_dense_matmul(sp, w))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
  value = tf1.SparseTensorValue([[0, 1], [2, 0]], [1.0, 2.0], [3, 2])
  router = _router(graph)
  for _ in range(2):  # not kept in the cached route
    route, values = router.route(train, {sp: value})
    assert route.closure.training
    assert len(route.sparse) == 1 and route.sparse[0] is sp
    assert [t.name for t in route.fed] == sorted(
        [sp.indices.name, sp.values.name, sp.dense_shape.name])
    by_name = dict(zip([t.name for t in route.fed], values))
    assert by_name[sp.indices.name] == value.indices
    assert by_name[sp.values.name] == value.values
    assert by_name[sp.dense_shape.name] == value.dense_shape
  plain, _ = router.route(loss, {sp: value})
  assert plain.sparse == ()
