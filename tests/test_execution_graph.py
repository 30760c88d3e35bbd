"""The user's graph is left as the user built it (tensorbow/execution.py).

TensorBow's replicas and bookkeeping ops live in the session's own
execution graph: a finalized graph trains and evaluates, sessions leave
nothing behind in the graph, and `graph_def`, savers and collections see
the user's ops only. Checked against NumPy's SMA and tf.compat.v1.Session.
"""
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import compat

from children import child_env
import graphs
import references

RNG = np.random.RandomState(23)
X = RNG.randn(8, 3).astype(np.float32)
Y = RNG.randn(8, 1).astype(np.float32)
LR, ALPHA, MU = 0.1, 0.5, 0.9


def build(use_resource):
  """graphs.build trained by gradient descent, with a global step."""
  m = graphs.build(lambda: tf.compat.v1.train.GradientDescentOptimizer(LR),
                   use_resource, global_step=True)
  return m.graph, m.x, m.y, [m.w, m.b], m.loss, m.train, m.init


def sma_sgd(waves, replicas=2):
  """The central model (w, b) of every wave, by tests/references.py."""
  return [z for z, _, _, _ in references.sma(
      [graphs.W0, graphs.B0], [(X, Y)] * waves, replicas, ALPHA, MU, LR)]


def loss_at(z):
  return 0.5 * np.mean((X @ z[0] + z[1] - Y) ** 2)


def _session(graph):
  return tb.TensorBowSession(graph=graph, replicas=2, alpha=ALPHA,
                             central_momentum=MU)


@pytest.mark.parametrize("use_resource", [True, False])
def test_finalized_graph_trains_and_evaluates(use_resource):
  graph, x, y, w, loss, train, init = build(use_resource)
  graph.finalize()
  with _session(graph) as sess:
    sess.run(init)
    for z in sma_sgd(3):
      sess.run(train, {x: X, y: Y})
      for value, expected in zip(sess.run(w), z):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    evaluated = sess.run(loss, {x: X, y: Y})
  np.testing.assert_allclose(evaluated, loss_at(sma_sgd(3)[-1]), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("use_resource", [True, False])
def test_sessions_leave_the_users_graph_as_it_was(use_resource, tmp_path):
  graph, x, y, w, _, train, init = build(use_resource)
  ops = [op.name for op in graph.get_operations()]
  version = graph.version
  collections = {key: list(graph.get_collection(key))
                 for key in graph.get_all_collection_keys()}
  for _ in range(50):
    with _session(graph) as sess:
      sess.run(init)
      sess.run(train, {x: X, y: Y})
      assert sess.execution_graph is not graph
      assert any(op.name.startswith("tensorbow/")
                 for op in sess.execution_graph.get_operations())
      assert not any("tensorbow" in n.name for n in sess.graph_def.node)
  assert [op.name for op in graph.get_operations()] == ops
  assert graph.version == version
  assert {key: list(graph.get_collection(key))
          for key in graph.get_all_collection_keys()} == collections
  with graph.as_default():
    saver = tf.compat.v1.train.Saver()
  with _session(graph) as sess:
    sess.run(init)
    sess.run(train, {x: X, y: Y})
    path = saver.save(sess, str(tmp_path / "model"))
  assert [name for name, _ in tf.train.list_variables(path)] == [
      "b", "global_step", "w"]


def test_ops_added_later_run_and_train():
  graph, x, y, w, loss, train, init = build(True)
  with _session(graph) as sess:
    sess.run(init)
    sess.run(train, {x: X, y: Y})
    with graph.as_default():
      # An op depending (by control) on one without outputs, and a new
      # training signature.
      after = tf.identity(2.0 * loss)
      with tf.control_dependencies([train]):
        counted = tf.identity(loss)
    z = sma_sgd(3)
    np.testing.assert_allclose(sess.run(after, {x: X, y: Y}),
                               2 * loss_at(z[0]), rtol=1e-5)
    sess.run([counted, train], {x: X, y: Y})
    for value, expected in zip(sess.run(w), z[1]):
      np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
  # The new ops are the user's: TensorFlow's own session runs them too.
  with tf.compat.v1.Session(graph=graph) as plain:
    plain.run(init)
    np.testing.assert_allclose(plain.run(after, {x: X, y: Y}),
                               2 * loss_at([graphs.W0, graphs.B0]), rtol=1e-5)


def test_each_function_is_imported_once_new_ones_later(monkeypatch):
  # A one-shot iterator keeps its data set in a function: arrays given to
  # `from_tensor_slices` are inside it, and a sync that imported it again
  # compared it whole (seconds for Fashion-MNIST's 188 MB).
  graph = tf.Graph()
  with graph.as_default():
    first = _dataset_one_shot()
    sess = tb.TensorBowSession(replicas=2)
  imported = []
  original = compat.copy_functions

  def spy(source, target, names):
    imported.extend(names)
    original(source, target, names)

  monkeypatch.setattr(compat, "copy_functions", spy)
  before = compat.function_names(graph)
  with graph.as_default():
    tripled = first * 3
  got = [sess.run(tripled)]
  assert imported == []
  with graph.as_default():
    second = tf.compat.v1.data.make_one_shot_iterator(
        tf.data.Dataset.range(3).map(lambda v: v + 7)).get_next()
  got += [sess.run([tripled, second]) for _ in range(3)]
  sess.close()
  assert sorted(imported) == sorted(compat.function_names(graph) - before)
  assert len(imported) >= 1
  with tf.compat.v1.Session(graph=graph) as plain:
    expected = [plain.run(tripled)]
    expected += [plain.run([tripled, second]) for _ in range(3)]
  np.testing.assert_equal(got, expected)


# ---- Plain runs by name behave as tf.compat.v1.Session ----------------------


def _dataset_one_shot():
  return tf.compat.v1.data.make_one_shot_iterator(
      tf.data.Dataset.range(5).map(lambda v: v * 2)).get_next()


def _dataset_initializable():
  p = tf.compat.v1.placeholder(tf.int64, [])
  it = tf.compat.v1.data.make_initializable_iterator(tf.data.Dataset.range(p))
  return p, it.initializer, it.get_next()


def _two_placeholders():
  a = tf.compat.v1.placeholder(tf.float32, [])
  c = tf.compat.v1.placeholder(tf.float32, [])
  return a, c, a + 1, (a + 1) * c


def _partial_run(s, o):
  h = s.partial_run_setup([o[2], o[3]], [o[0], o[1]])
  return s.partial_run(h, o[2], {o[0]: 1.0}), s.partial_run(h, o[3],
                                                             {o[1]: 3.0})


def _unfeedable():
  a = tf.constant(1.0)
  tf.compat.v1.get_default_graph().prevent_feeding(a)
  return a, a + 1


def _variable():
  v = tf.compat.v1.get_variable("v", initializer=2.0)
  return v, tf.compat.v1.assign_add(v, 1.0), v * 3, (
      tf.compat.v1.global_variables_initializer())


def _traced(s, o):
  metadata = tf.compat.v1.RunMetadata()
  s.run(o, options=tf.compat.v1.RunOptions(trace_level=3),
        run_metadata=metadata)
  return len(metadata.step_stats.dev_stats) > 0


def _summary():
  tf.compat.v1.summary.scalar("v", tf.constant(3.0))
  return tf.compat.v1.summary.merge_all()


PLAIN_RUNS = {
    "one_shot_dataset": (_dataset_one_shot,
                         lambda s, n: [s.run(n) for _ in range(3)]),
    "initializable_dataset": (
        _dataset_initializable,
        lambda s, o: (s.run(o[1], {o[0]: 3}), [s.run(o[2])
                                                for _ in range(3)])),
    "partial_run": (_two_placeholders, _partial_run),
    "sparse_feed": (
        lambda: (lambda sp: (sp, tf.sparse.reduce_sum(sp)))(
            tf.compat.v1.sparse_placeholder(tf.float32)),
        lambda s, o: s.run(o[1], {o[0]: tf.compat.v1.SparseTensorValue(
            [[0, 0], [1, 2]], [1.0, 2.0], [3, 3])})),
    "tuple_key": (_two_placeholders,
                  lambda s, o: s.run(o[3], {(o[0], o[1]): (2.0, 5.0)})),
    "unfeedable": (_unfeedable, lambda s, o: s.run(o[1], {o[0]: 3.0})),
    "unknown_key": (lambda: tf.constant(1.0),
                    lambda s, o: s.run(o, {"nope:0": 3.0})),
    "int_key": (lambda: tf.constant(1.0), lambda s, o: s.run(o, {3: 3.0})),
    "unknown_fetch": (lambda: tf.constant(1.0), lambda s, o: s.run("nope:0")),
    "bad_shape": (lambda: tf.compat.v1.placeholder(tf.float32, [2]),
                  lambda s, o: s.run(o * 2, {o: [1.0, 2.0, 3.0]})),
    "while_loop": (
        lambda: tf.while_loop(lambda i: i < 10, lambda i: i + 3, [0]),
        lambda s, o: s.run(o)),
    "summary": (_summary, lambda s, o: len(s.run(o)) > 0),
    "variable_eval_and_feed": (
        _variable,
        lambda s, o: (o[3].run(session=s), o[1].eval(session=s),
                      o[0].eval(session=s), s.run(o[2], {o[0]: 5.0}))),
    "make_callable": (lambda: tf.compat.v1.placeholder(tf.float32, []),
                      lambda s, o: s.make_callable(o * 4, [o])(2.0)),
    "string": (lambda: tf.strings.join(["a", "b"]), lambda s, o: s.run(o)),
    "traced": (lambda: tf.constant(1.0) + 1, _traced),
    "empty_graph": (lambda: None, lambda s, o: s.run([])),
}


def _outcome(make_session, build, run):
  graph = tf.Graph()
  with graph.as_default():
    objects = build()
  with make_session(graph) as sess:
    try:
      return repr(run(sess, objects))
    except Exception as e:  # pylint: disable=broad-except
      return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("name", sorted(PLAIN_RUNS))
def test_plain_run_behaves_as_tensorflow(name):
  build, run = PLAIN_RUNS[name]
  expected = _outcome(lambda g: tf.compat.v1.Session(graph=g), build, run)
  got = _outcome(_session, build, run)
  assert got == expected


# Runs, plain and training, that bring new seeding, refreshing and reading
# ops into the execution graph after others have run.
_MUTATION_SCRIPT = """\
import numpy as np
import tensorflow.compat.v1 as tf
import tensorbow as tb

{mode}
x = tf.placeholder(tf.float32, [None, 3])
w = tf.get_variable("w", [3, 1])
loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
step = tf.train.get_or_create_global_step()
train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
rows = np.ones((4, 3), np.float32)
with tb.TensorBowSession(replicas=2) as sess:
  sess.run(tf.global_variables_initializer())
  sess.run([train, step], {{x: rows}})
  sess.run(w.assign(w * 2.0))
  sess.run(train, {{x: rows}})
  sess.run(tf.global_variables_initializer())
  sess.run([loss, train], {{x: rows}})
  print("done")
"""


@pytest.mark.slow  # a child process, as TensorFlow checks
def test_no_op_is_changed_after_a_session_ran_it(tmp_path, tf_mode_statement):
  # TensorFlow warns that such a change has no effect and will be an error.
  script = tmp_path / "mutation.py"
  script.write_text(_MUTATION_SCRIPT.format(mode=tf_mode_statement))
  done = subprocess.run([sys.executable, str(script)],
                        env=child_env(TF_CPP_MIN_LOG_LEVEL="0"),
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "done" in done.stdout
  assert "after it was run by a session" not in done.stderr


def _grow(graph, rounds=8):
  """Adds while loops, their gradients and imports of the graph to `graph`:
  ops TensorFlow builds in several steps (TensorFlow's session_test.py
  _build_graph). Returns the last round's feeds and fetches.

  Control flow v2's loop (graph mode) is left out: its gradient adds
  outputs to the loop op after a session ran it, which TensorFlow's own
  session refuses (its test is v1 only); there a product stands in.
  """
  with graph.as_default():
    graph_def = None
    for _ in range(rounds):
      x = tf.compat.v1.placeholder(tf.float32, [])
      y = tf.compat.v1.placeholder(tf.float32, [])
      if tf.compat.v1.control_flow_v2_enabled():
        z = [x + 1.0, tf.sin(x) * y]
      else:
        z = tf.compat.v1.while_loop(lambda x, y: x < 10,
                                    lambda x, y: (x + 1, x * y), [x, y])
      grads = tf.gradients(z, [x, y])
      if graph_def is None:
        graph_def = graph.as_graph_def()
      else:
        tf.graph_util.import_graph_def(graph_def, name="import")
  return {x: 1.5, y: 2.0}, [z, grads]


@pytest.mark.parametrize("make", [tf.compat.v1.Session,
                                  lambda: tb.TensorBowSession(replicas=2)],
                         ids=["tf", "tensorbow"])
def test_runs_while_the_graph_grows_behave_as_tensorflow(make):
  graph = tf.Graph()
  with graph.as_default():
    c = tf.constant(5.0)
    sess = make()
  stop, failures, values = threading.Event(), [], []

  def run_loop():
    try:
      while not stop.is_set():
        values.append(sess.run(c))
    except Exception as e:  # pylint: disable=broad-except
      failures.append(e)

  threads = [threading.Thread(target=run_loop) for _ in range(6)]
  for t in threads:
    t.start()
  try:
    feeds, fetches = _grow(graph)
  finally:
    stop.set()
    for t in threads:
      t.join()
  assert not failures, failures[0]
  assert values and set(values) == {5.0}
  # The copy is whole: the ops built while the runs ran compute as
  # TensorFlow's.
  got = sess.run(fetches, feeds)
  sess.close()
  with tf.compat.v1.Session(graph=graph) as plain:
    np.testing.assert_equal(got, plain.run(fetches, feeds))


@pytest.mark.parametrize("make", [tf.compat.v1.Session,
                                  lambda: tb.TensorBowSession(replicas=2)],
                         ids=["tf", "tensorbow"])
def test_an_op_named_as_a_scope_run_before_runs(make):
  # What a run between two ops of `x + 1.0` sees on another thread: the
  # constant "s/y" runs before its op "s" exists.
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    y = tf.constant([1.0, 2.0], name="s/y")
    sess = make()
    assert list(sess.run(y)) == [1.0, 2.0]
    s = tf.raw_ops.AddV2(x=x, y=y, name="s/")
    t = tf.identity(s, name="t")
  assert s.op.name == "s"
  got = sess.run([s, t, "s:0"], {x: [3.0, 4.0]})
  sess.close()
  np.testing.assert_array_equal(got, [[4.0, 6.0]] * 3)


def test_a_function_with_its_own_gradient_trains_as_tensorflow():
  """A Defun whose gradient is a function of its own (not the true one, so
  TensorFlow's autodiff would differ): both functions are copied into the
  execution graph, and L = 1 trains as tf.compat.v1.Session does."""
  from tensorflow.python.framework import function  # pylint: disable=g-import-not-at-top

  def build():
    graph = tf.Graph()
    with graph.as_default():
      tf.compat.v1.set_random_seed(1)

      @function.Defun(tf.float32, tf.float32)
      def half_gradient(x, dy):
        return dy * 1.5 * x * x

      @function.Defun(tf.float32, grad_func=half_gradient)
      def cube(x):
        return x * x * x

      x = tf.compat.v1.placeholder(tf.float32, [None, 2])
      w = tf.compat.v1.get_variable("w", [2, 2])
      loss = tf.reduce_sum(cube(tf.matmul(x, w)))
      step = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
      init = tf.compat.v1.global_variables_initializer()
    return graph, x, w, step, init

  trained = []
  for make in (lambda graph: tf.compat.v1.Session(graph=graph),
               lambda graph: tb.TensorBowSession(graph=graph, replicas=1)):
    graph, x, w, step, init = build()
    with make(graph) as sess:
      sess.run(init)
      start = sess.run(w)
      for i in range(3):
        sess.run(step, {x: np.full([4, 2], 0.1 * (i + 1), np.float32)})
      trained.append(sess.run(w))
  assert not np.allclose(trained[0], start)
  np.testing.assert_allclose(trained[1], trained[0], rtol=1e-6)


def test_a_dataset_no_op_reads_waits_until_a_run_names_it():
  """A one-shot iterator builds its dataset again inside its function: the
  dataset it was made of, and the array given to `from_tensor_slices`, are
  left unread in the user's graph. They stay out of the execution graph
  until a run names them (fetched, fed) or an op made later reads them,
  and every run returns what tf.compat.v1.Session's does."""
  rows = np.arange(24, dtype=np.float32).reshape(6, 4)

  def build():
    graph = tf.Graph()
    with graph.as_default():
      batches = tf.data.Dataset.from_tensor_slices(rows).batch(2)
      total = tf.reduce_sum(
          tf.compat.v1.data.make_one_shot_iterator(batches).get_next())
    array = [op for op in graph.get_operations() if op.type == "Const" and
             op.outputs[0].shape.as_list() == [6, 4]][0].outputs[0]
    unread = [op.name for op in graph.get_operations()
              if op.type.endswith("Dataset") or op.type.endswith("DatasetV2")]
    return graph, batches, total, array, unread

  def runs(sess, graph, batches, total, array):
    got = [sess.run(total)]
    got.append(sess.run(total, {array: rows * 0}))  # fed, not read
    got.append(sess.run(array))
    with graph.as_default():
      later = tf.compat.v1.data.make_initializable_iterator(batches)
      again = tf.reduce_sum(later.get_next())
    sess.run(later.initializer)
    got += [sess.run([again, total]), sess.run(again)]
    return got

  graph, batches, total, array, unread = build()
  with tf.compat.v1.Session(graph=graph) as plain:
    expected = runs(plain, graph, batches, total, array)
  graph, batches, total, array, unread = build()
  with tb.TensorBowSession(graph=graph, replicas=1) as sess:
    copied = set(op.name for op in sess.execution_graph.get_operations())
    assert unread and not copied & set(unread + [array.op.name])
    got = runs(sess, graph, batches, total, array)
    copied = set(op.name for op in sess.execution_graph.get_operations())
    assert copied >= set(unread + [array.op.name])
  np.testing.assert_equal(got, expected)


@pytest.mark.parametrize("use_resource", [True, False], ids=["resource", "ref"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_settings_first_runs_make_no_ops_after_its_plan(replicas,
                                                          use_resource):
  """The op seeding a setting's replicas at its first wave and the one
  refreshing the user's slots before a plain run reads them are made with
  the training run's copies: made later, each would extend TensorFlow's
  session once more, which sends its whole graph and library. At L = 1
  the session trains as tf.compat.v1.Session does."""
  def run(make):
    m = graphs.build(
        lambda: tf.compat.v1.train.MomentumOptimizer(LR, MU), use_resource)
    with make(m.graph) as sess:
      sess.run(m.init)
      sess.run(m.train, {m.x: X, m.y: Y})
      made = len(getattr(sess, "execution_graph", m.graph).get_operations())
      sess.run(m.train, {m.x: X, m.y: Y})
      values = sess.run([m.w, m.b])
      sess.run(m.train, {m.x: X[:4], m.y: Y[:4]})
      values += sess.run([m.w, m.b])
      grown = len(getattr(sess, "execution_graph", m.graph).get_operations())
    return values, grown - made

  got, grown = run(
      lambda g: tb.TensorBowSession(graph=g, replicas=replicas))
  assert grown == 0
  if replicas == 1:
    expected, _ = run(lambda g: tf.compat.v1.Session(graph=g))
    for value, reference in zip(got, expected):
      np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-6)
