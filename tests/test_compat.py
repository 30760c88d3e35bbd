"""TensorFlow's private API as TensorBow holds it (tensorbow/compat.py).

Each function on small inputs, its result compared with what
`tf.compat.v1.Session` itself does where it mirrors the session, so that
a TensorFlow upgrade that changes the private API fails here first.

The handles' tests reach the TF_Session and TF_Operation through
TensorFlow's own pybind11 functions (`pywrap_tf_session`, `c_api_util`):
that is the only way to show a handle is the one the C API takes.
"""
import collections
import gc

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.client import pywrap_tf_session
from tensorflow.python.eager import context
from tensorflow.python.framework import c_api_util

from tensorbow import compat

tf1 = tf.compat.v1
Pair = collections.namedtuple("Pair", ["first", "second"])


def _raised(call):
  """The exception `call()` raises."""
  with pytest.raises(Exception) as info:
    call()
  return info.value


@pytest.fixture
def small():
  """A graph fed x (2 floats), computing y = 2x and its sum."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [2], name="x")
    y = tf.multiply(x, 2.0, name="y")
    total = tf.reduce_sum(y, name="total")
    noop = tf.no_op(name="noop")
  return graph, x, y, total, noop


# ---- sessions ----------------------------------------------------------------


def test_public_names_are_tensorflows_session_classes():
  assert compat.PlainSession is tf1.Session
  assert issubclass(tf1.Session, compat.SessionInterface)
  assert compat.SessionInterface.__name__ == "SessionInterface"
  assert not issubclass(compat.SessionInterface, tf1.Session)
  assert compat.monitored_session.ChiefSessionCreator is (
      tf1.train.ChiefSessionCreator)
  assert compat.monitored_session.MonitoredSession is (
      tf1.train.MonitoredSession)


def test_session_graph_resolves_the_default_graph():
  graph = tf.Graph()
  assert compat.session_graph(graph) is graph
  with graph.as_default():
    assert compat.session_graph(None) is graph
    with tf1.Session() as sess:
      assert sess.graph is graph
  other = tf.Graph()
  with other.as_default():
    assert compat.session_graph(None) is other


# TensorFlow's Session, refusing the graph, fails again in __del__.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("graph", ["", 3, tf1.GraphDef()],
                         ids=["str", "int", "GraphDef"])
def test_session_graph_refuses_a_non_graph_as_tensorflow_does(graph):
  try:
    tf1.Session(graph=graph)
  except TypeError as e:
    expected = str(e)  # the half-made session is let go here, in the test
  else:
    pytest.fail(f"tf.compat.v1.Session took graph={graph!r}")
  gc.collect()
  with pytest.raises(TypeError) as info:
    compat.session_graph(graph)
  assert str(info.value) == expected
  assert type(graph).__name__ in str(info.value)


def test_session_config_is_the_one_given():
  config = tf1.ConfigProto(intra_op_parallelism_threads=1,
                           inter_op_parallelism_threads=2,
                           allow_soft_placement=True)
  with tf1.Session(graph=tf.Graph(), config=config) as sess:
    got = compat.session_config(sess)
  assert got == config
  assert got.intra_op_parallelism_threads == 1
  assert got.inter_op_parallelism_threads == 2


def test_session_config_is_tensorflows_default_when_none_was_given():
  # TensorFlow's Session takes the eager context's config when given None.
  with tf1.Session(graph=tf.Graph()) as sess:
    got = compat.session_config(sess)
  assert isinstance(got, tf1.ConfigProto)
  assert got == context.context().config
  assert got.device_count["GPU"] == 0  # tensorflow-cpu


def _output(tensor):
  """The TF_Output of `tensor`, from compat's handle of its op."""
  return c_api_util.tf_output(compat.operation_handle(tensor.op),
                              tensor.value_index)


def test_handles_are_what_tensorflows_c_api_runs():
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant(3.0, name="a")
    b = tf.constant([1, 2], name="b")
  with tf1.Session(graph=graph) as sess, tf1.Session(graph=graph) as other:
    sess.run(a)  # extends the session with the graph
    assert type(compat.session_handle(sess)).__name__ == "TF_Session"
    assert compat.session_handle(sess) is not compat.session_handle(other)
    assert type(compat.operation_handle(a.op)).__name__ == "TF_Operation"
    values = pywrap_tf_session.TF_SessionRun_wrapper(
        compat.session_handle(sess), None, {}, [_output(a), _output(b)], [],
        None)
  assert float(values[0]) == 3.0
  assert values[1].tolist() == [1, 2]


def test_extend_session_shows_it_the_ops_added_since_its_last_run():
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant(1.0, name="a")
  with tf1.Session(graph=graph) as sess:
    sess.run(a)
    with graph.as_default():
      c = tf.constant(2.0, name="c")

    def run_c():
      return pywrap_tf_session.TF_SessionRun_wrapper(
          compat.session_handle(sess), None, {}, [_output(c)], [], None)

    with pytest.raises(tf.errors.InvalidArgumentError, match="c:0"):
      run_c()
    compat.extend_session(sess)
    assert [float(v) for v in run_c()] == [2.0]
    compat.extend_session(sess)  # nothing new: no error
    assert sess.run(c) == 2.0


def test_default_session_is_the_default_inside_only():
  graph = tf.Graph()
  with graph.as_default():
    c = tf.constant(5.0)
  outer = tf1.Session(graph=graph)
  inner = tf1.Session(graph=graph)
  try:
    before = tf1.get_default_session()
    with compat.default_session(outer):
      assert tf1.get_default_session() is outer
      with compat.default_session(inner):
        assert tf1.get_default_session() is inner
        assert c.eval() == 5.0  # Tensor.eval() finds it
      assert tf1.get_default_session() is outer
    assert tf1.get_default_session() is before
  finally:
    outer.close()
    inner.close()


@pytest.mark.parametrize("code,error", [
    (tf.errors.CANCELLED, tf.errors.CancelledError),
    (tf.errors.INVALID_ARGUMENT, tf.errors.InvalidArgumentError),
    (tf.errors.NOT_FOUND, tf.errors.NotFoundError),
    (tf.errors.OUT_OF_RANGE, tf.errors.OutOfRangeError),
    (tf.errors.UNIMPLEMENTED, tf.errors.UnimplementedError),
    (tf.errors.INTERNAL, tf.errors.InternalError),
    (tf.errors.RESOURCE_EXHAUSTED, tf.errors.ResourceExhaustedError),
    (tf.errors.ABORTED, tf.errors.AbortedError),
])
def test_error_from_code_is_tensorflows_error_class(code, error):
  e = compat.error_from_code(code, "what went wrong")
  assert type(e) is error
  assert e.error_code == code
  assert e.message == "what went wrong"
  assert e.op is None and e.node_def is None


# ---- fetches and feeds ------------------------------------------------------


def test_fetch_handler_lists_unique_fetches_and_targets(small):
  graph, x, y, total, noop = small
  handler = compat.fetch_handler(graph, {"a": [y, total], "b": (noop, y)},
                                 {})
  assert handler.fetches() == [y, total]
  assert handler.targets() == [noop]
  assert not compat.fetches_fed(handler)


@pytest.mark.parametrize("structure", [
    lambda s: s[2],
    lambda s: [s[2], [s[3], s[4]]],
    lambda s: {"y": s[2], "more": {"total": s[3], "op": s[4]}},
    lambda s: Pair(s[3], (s[2], "total:0")),
    lambda s: "y:0",
    lambda s: s[4],
], ids=["tensor", "nested list", "nested dict", "namedtuple", "name", "op"])
def test_fetch_handler_rebuilds_what_session_run_returns(small, structure):
  graph, x = small[0], small[1]
  fetches = structure(small)
  feed = {x: [1.0, 2.5]}
  handler = compat.fetch_handler(graph, fetches, {})
  with tf1.Session(graph=graph) as sess:
    expected = sess.run(fetches, feed)
    values = sess.run(handler.fetches() + handler.targets(), feed)
    got = handler.build_results(sess, values[:len(handler.fetches())])
  tf.nest.assert_same_structure(got, expected)
  for g, e in zip(tf.nest.flatten(got), tf.nest.flatten(expected)):
    if e is None:
      assert g is None
    else:
      np.testing.assert_array_equal(g, e)
  assert type(got) is type(expected)


def test_a_fetched_feed_is_answered_with_the_fed_value(small):
  graph, x, y, total, _ = small
  value = np.array([4.0, 5.0], np.float32)
  handler = compat.fetch_handler(graph, [x, total], {x.ref(): value})
  assert handler.fetches() == [total]
  assert compat.fetches_fed(handler)
  got = handler.build_results(None, [np.float32(18.0)])
  np.testing.assert_array_equal(got[0], value)
  assert got[1] == 18.0
  unfed = compat.fetch_handler(graph, [y, total], {x.ref(): value})
  assert not compat.fetches_fed(unfed)


@pytest.mark.parametrize("fetches", [3, None, {"a": 1.5}],
                         ids=["int", "None", "dict of float"])
def test_fetch_handler_refuses_what_session_run_refuses(small, fetches):
  graph = small[0]
  with tf1.Session(graph=graph) as sess:
    expected = _raised(lambda: sess.run(fetches))
  with pytest.raises(type(expected)) as info:
    compat.fetch_handler(graph, fetches, {})
  assert str(info.value) == str(expected)


def test_feed_items_reads_keys_as_tensorflow_does(small):
  graph, x, y, _, _ = small
  with graph.as_default():
    sp = tf1.sparse_placeholder(tf.float32, name="sp")
    z = tf1.placeholder(tf.int32, [], name="z")
  value = tf1.SparseTensorValue([[0, 1]], [7.0], [2, 2])
  items = compat.feed_items(graph, {"x:0": [1.0, 2.0], (z, y): (3, "yv"),
                                    sp: value})
  by_name = {t.name: v for t, v in items}
  assert len(items) == 6
  assert all(t.graph is graph for t, _ in items)
  assert by_name["x:0"] == [1.0, 2.0]
  assert by_name["z:0"] == 3
  assert by_name["y:0"] == "yv"
  assert by_name[sp.indices.name] == [[0, 1]]
  assert by_name[sp.values.name] == [7.0]
  assert by_name[sp.dense_shape.name] == [2, 2]
  assert compat.feed_items(graph, {}) == []


@pytest.mark.parametrize("key", [3, 2.5, "nothing:0", "noop", "x"],
                         ids=["int", "float", "missing", "op", "op name"])
def test_feed_items_refuses_keys_as_tensorflow_does(small, key):
  graph = small[0]
  with tf1.Session(graph=graph) as sess:
    expected = _raised(lambda: sess.run(small[3], {key: [1.0, 2.0]}))
  assert isinstance(expected, TypeError)
  with pytest.raises(TypeError) as info:
    compat.feed_items(graph, {key: [1.0, 2.0]})
  assert str(info.value) == str(expected)


def test_sparse_feed_keys_lists_the_sparse_keys(small):
  graph, x = small[0], small[1]
  with graph.as_default():
    first = tf1.sparse_placeholder(tf.float32, name="first")
    second = tf1.sparse_placeholder(tf.float32, name="second")
  value = tf1.SparseTensorValue([[0]], [1.0], [1])
  keys = compat.sparse_feed_keys({x: [1.0, 2.0], first: value,
                                  second: value})
  assert len(keys) == 2
  assert {id(k) for k in keys} == {id(first), id(second)}
  assert compat.sparse_feed_keys({x: [1.0, 2.0]}) == []
  assert compat.sparse_feed_keys(None) == []


def test_make_callable_runs_as_session_make_callable(small):
  graph, x, y, total, noop = small
  fetches = {"y": y, "total": [total, noop]}
  with tf1.Session(graph=graph) as sess:
    expected = sess.make_callable(fetches, [x])([1.0, 3.0])
    got = compat.make_callable(sess.run, fetches, [x], False)([1.0, 3.0])
  np.testing.assert_array_equal(got["y"], expected["y"])
  assert got["total"][0] == expected["total"][0] == 8.0
  assert got["total"][1] is None and expected["total"][1] is None


def test_make_callable_passes_options_only_when_asked():
  calls = []

  def run(*args):
    calls.append(args)
    return "result"

  options, metadata = tf1.RunOptions(trace_level=3), tf1.RunMetadata()
  call = compat.make_callable(run, "f", ["a", "b"], True)
  assert call(1, 2, options=options, run_metadata=metadata) == "result"
  assert calls[-1] == ("f", {"a": 1, "b": 2}, options, metadata)
  assert call(3, 4) == "result"
  assert calls[-1] == ("f", {"a": 3, "b": 4}, None, None)
  plain = compat.make_callable(run, "f", None, False)
  assert plain() == "result"
  assert calls[-1] == ("f", {}, None, None)
  with pytest.raises(TypeError, match=r"^unexpected keyword arguments: "
                     r"\['options'\]$"):
    plain(options=options)
  with pytest.raises(TypeError, match=r"^unexpected keyword arguments: "
                     r"\['other'\]$"):
    call(1, 2, other=3)
  with pytest.raises(TypeError, match=r"^expected 2 feed values, got 1$"):
    call(1)
  with pytest.raises(TypeError, match=r"^expected 0 feed values, got 1$"):
    plain(1)
  assert len(calls) == 3  # the refused calls did not run


def test_callable_from_options_returns_the_fetches_in_order(small):
  graph = small[0]
  callable_options = config_pb2.CallableOptions(
      feed=["x:0"], fetch=["total:0", "y:0"], target=["noop"])
  with tf1.Session(graph=graph) as sess:
    expected = sess._make_callable_from_options(callable_options)(  # pylint: disable=protected-access
        np.array([1.0, 2.0], np.float32))
    call = compat.callable_from_options(sess.run, callable_options)
    got = call(np.array([1.0, 2.0], np.float32))
  assert len(got) == len(expected) == 2
  assert got[0] == expected[0] == 6.0
  np.testing.assert_array_equal(got[1], expected[1])
  with pytest.raises(TypeError, match=r"^expected 1 feed values, got 0$"):
    call()


def test_callable_from_options_passes_its_run_options():
  calls = []

  def run(fetches, feed_dict, options, run_metadata):
    calls.append((fetches, feed_dict, options, run_metadata))
    return ["t", "u", None]

  callable_options = config_pb2.CallableOptions(
      feed=["a:0"], fetch=["t:0", "u:0"], target=["op"])
  callable_options.run_options.timeout_in_ms = 1234
  metadata = tf1.RunMetadata()
  call = compat.callable_from_options(run, callable_options)
  assert call(5, run_metadata=metadata) == ["t", "u"]
  fetches, feed_dict, options, run_metadata = calls[-1]
  assert fetches == ["t:0", "u:0", "op"]
  assert feed_dict == {"a:0": 5}
  assert options.timeout_in_ms == 1234
  assert run_metadata is metadata
  bare = compat.callable_from_options(
      run, config_pb2.CallableOptions(fetch=["t:0"]))
  assert bare() == ["t"]
  assert calls[-1][2] is None and calls[-1][3] is None


# ---- graphs and operations --------------------------------------------------


def test_op_def_is_the_registered_one():
  matmul = compat.op_def("MatMul")
  assert matmul.name == "MatMul"
  assert [a.name for a in matmul.input_arg] == ["a", "b"]
  assert [a.name for a in matmul.output_arg] == ["product"]
  assert {a.name for a in matmul.attr} >= {"transpose_a", "transpose_b", "T"}
  apply = compat.op_def("ResourceApplyGradientDescent")
  assert [a.name for a in apply.input_arg] == ["var", "alpha", "delta"]
  assert compat.op_def("NoSuchOpType") is None


def test_interpolate_graph_explains_node_tags(small):
  graph = small[0]
  message = compat.interpolate_graph(
      "bad value in {{node total}} there", graph)
  assert message.startswith("Graph execution error:")
  assert "Detected at node 'total'" in message
  assert message.endswith("bad value in {{node total}} there")
  plain = compat.interpolate_graph("no tags", graph)
  assert plain == "Graph execution error:\n\nno tags"
  assert "Detected" not in compat.interpolate_graph("{{node nothing}}",
                                                    graph)


def test_add_control_inputs_changes_that_op_only(small):
  graph, x, y, total, noop = small
  with graph.as_default():
    first = tf.no_op(name="first")
    second = tf.no_op(name="second")
  compat.add_control_inputs(total.op, [first, second])
  assert [op.name for op in total.op.control_inputs] == ["first", "second"]
  assert y.op.control_inputs == []
  assert [op.name for op in compat.control_outputs(first)] == ["total"]
  node = graph.as_graph_def().node
  assert [n.input for n in node if n.name == "total"][0][-2:] == [
      "^first", "^second"]
  compat.add_control_inputs(noop, ())
  assert noop.control_inputs == []


def test_control_outputs_are_the_ops_waiting_on_it():
  graph = tf.Graph()
  with graph.as_default():
    a = tf.no_op(name="a")
    with tf.control_dependencies([a]):
      b = tf.constant(1.0, name="b")
      tf.no_op(name="c")
    d = tf.identity(b, name="d")  # a data input, not a control one
  assert sorted(op.name for op in compat.control_outputs(a)) == ["b", "c"]
  assert compat.control_outputs(b.op) == []
  assert compat.control_outputs(d.op) == []


def test_clear_device_unpins_that_op_only():
  graph = tf.Graph()
  with graph.as_default():
    with tf.device("/cpu:0"):
      a = tf.constant(1.0, name="a")
      b = tf.constant(2.0, name="b")
  assert "CPU:0" in a.op.device
  compat.clear_device(a.op)
  assert a.op.device == ""
  assert "CPU:0" in b.op.device
  assert [n.device for n in graph.as_graph_def().node
          if n.name == "a"] == [""]


@pytest.fixture
def control_flow_v1():
  """Builds control flow as TF1 does (Switch, Merge, Enter), in either
  mode: `disable_v2_behavior` does so already, eager-disabled graph mode
  builds If and While functions unless told."""
  enabled = tf1.control_flow_v2_enabled()
  tf1.disable_control_flow_v2()
  yield
  if enabled:
    tf1.enable_control_flow_v2()


def test_in_control_flow_tells_ops_in_a_v1_cond_and_loop(control_flow_v1):  # pylint: disable=unused-argument
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant(1.0, name="a")
    branch = []

    def true_fn():
      branch.append(tf.add(a, 1.0, name="inside"))
      return branch[-1]

    out = tf1.cond(a > 0, true_fn, lambda: a - 1)
    body = []

    def step(i):
      body.append(tf.add(i, 1, name="step"))
      return body[-1]

    loop = tf1.while_loop(lambda i: i < 3, step, [tf.constant(0)])
    after = tf.identity(out, name="after")
  assert compat.in_control_flow(branch[0].op)
  assert compat.in_control_flow(body[0].op)
  assert not compat.in_control_flow(a.op)
  assert not compat.in_control_flow(after.op)
  assert out.op.type == "Merge"
  assert loop.op.type == "Exit"


def test_in_control_flow_is_false_outside_any():
  graph = tf.Graph()
  with graph.as_default():
    a = tf.constant(1.0)
    b = tf.square(a)
  assert not compat.in_control_flow(a.op)
  assert not compat.in_control_flow(b.op)


def test_is_ref_dtype():
  assert compat.is_ref_dtype(tf.float32._as_ref)  # pylint: disable=protected-access
  assert not compat.is_ref_dtype(tf.float32)
  assert not compat.is_ref_dtype(tf.resource)
  graph = tf.Graph()
  with graph.as_default():
    ref = tf1.get_variable("ref", [2], use_resource=False)
    resource = tf1.get_variable("resource", [2], use_resource=True)
  assert compat.is_ref_dtype(ref.op.outputs[0].dtype)
  assert ref.op.outputs[0].dtype.base_dtype == tf.float32
  assert not compat.is_ref_dtype(resource.op.outputs[0].dtype)
  assert not compat.is_ref_dtype(ref.value().dtype)


def test_graph_function_finds_a_called_function():
  @tf.function
  def double(v):
    return v * 2.0

  graph = tf.Graph()
  with graph.as_default():
    out = double(tf.constant(1.0))
  name = out.op.get_attr("f").name
  function = compat.graph_function(graph, name)
  assert function is not None
  assert function.definition.signature.name == name
  assert "Mul" in [n.op for n in function.definition.node_def]
  assert compat.graph_function(graph, "no_such_function") is None
  assert compat.graph_function(graph, out.op.name) is None  # an op's name
  assert compat.graph_function(tf.Graph(), name) is None  # another graph's
