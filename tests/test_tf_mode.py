"""The suite really runs in the TF1 mode it was asked for (conftest.py),
and the tests it runs in one mode only are ones the mode cannot change.

Each mode changes what TensorBow sees in a user's graph: the default
variable kind, what indexing a static shape gives, and the control-flow
ops; a run of the suite in the wrong mode would test neither.

A test marked `mode_independent` runs in v1 mode only. Its source must not
show a way to depend on the mode: the `tf_mode` or `tf_mode_statement`
fixture (a child process in this run's mode), TensorFlow's Python API, a
test helper that uses it, or a graph or session made by name; nor may the
test's own-module helpers and fixtures. What it reaches through the
package is caught while it runs (conftest.py).
"""
import ast
import os

import pytest
import tensorflow as tf

import tensorbow as tb

TESTS = os.path.dirname(os.path.abspath(__file__))
MARK = "mode_independent"
MODE_FIXTURES = frozenset(["tf_mode", "tf_mode_statement"])
# What makes a graph or a session, by the name called.
MAKERS = frozenset([
    "Graph", "Session", "InteractiveSession", "TensorBowSession",
    "MonitoredSession", "MonitoredTrainingSession",
    "SingularMonitoredSession"])


def test_mode_is_in_effect(tf_mode):
  assert not tf.executing_eagerly()
  with tf.Graph().as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    v = tf.compat.v1.get_variable("v", initializer=1.0)
  if tf_mode == "v1":
    assert isinstance(x.shape[0], tf.compat.v1.Dimension)
    assert tf.compat.dimension_value(x.shape[0]) is None
    assert v.op.type == "VariableV2"
    assert not tf.compat.v1.control_flow_v2_enabled()
  else:
    assert x.shape[0] is None
    assert v.op.type == "VarHandleOp"
    assert tf.compat.v1.control_flow_v2_enabled()


def _helpers():
  """{module name: path} of the tests' helper modules (not test files)."""
  found = {}
  for root, _, names in os.walk(TESTS):
    for name in names:
      if (name.endswith(".py") and not name.startswith("test_") and
          name != "conftest.py"):
        path = os.path.join(root, name)
        found[os.path.relpath(path, TESTS)[:-3].replace(os.sep, ".")] = path
  return found


def _imported(node):
  """The modules an import statement may load, as written."""
  if isinstance(node, ast.Import):
    return [a.name for a in node.names]
  if node.level:
    return []
  return [node.module] + [f"{node.module}.{a.name}" for a in node.names]


def _tensorflow_names(tree):
  """The names a module binds to TensorFlow: its imports, and module-level
  names assigned from them (`tf1 = tf.compat.v1`)."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names |= {a.asname or a.name.split(".")[0] for a in node.names
                if a.name.split(".")[0] == "tensorflow"}
    elif (isinstance(node, ast.ImportFrom) and not node.level and
          node.module.split(".")[0] == "tensorflow"):
      names |= {a.asname or a.name for a in node.names}
  assigns = [n for n in tree.body if isinstance(n, ast.Assign)]
  while True:
    more = {t.id for n in assigns for t in n.targets
            if isinstance(t, ast.Name) and t.id not in names and
            any(isinstance(v, ast.Name) and v.id in names
                for v in ast.walk(n.value))}
    if not more:
      return names
    names |= more


def _uses_tensorflow(module, helpers, seen=()):
  """Whether a test helper module imports TensorFlow, itself or through
  another helper."""
  with open(helpers[module]) as f:
    tree = ast.parse(f.read(), helpers[module])
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for name in _imported(node):
        if name.split(".")[0] == "tensorflow":
          return True
        if (name in helpers and name not in seen and
            _uses_tensorflow(name, helpers, seen + (module,))):
          return True
  return False


def _called_name(func):
  return getattr(func, "attr", None) or getattr(func, "id", None)


def _marked(expressions):
  return any(isinstance(n, ast.Attribute) and n.attr == MARK
             for e in expressions for n in ast.walk(e))


def _scopes(tree):
  """(name, nodes) of each thing in a module marked mode_independent: the
  module, or a test or class and the module's own functions (helpers,
  fixtures) it calls or takes, however deep."""
  if _marked([n.value for n in tree.body if isinstance(n, ast.Assign) and
              any(getattr(t, "id", None) == "pytestmark"
                  for t in n.targets)]):
    return [("the module", [tree])]
  functions = {n.name: n for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
  scopes = []
  for node in tree.body:
    if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                              ast.ClassDef)) and
            _marked(node.decorator_list)):
      continue
    reached, todo = [], [node]
    while todo:
      scope = todo.pop()
      reached.append(scope)
      for n in ast.walk(scope):
        name = (n.arg if isinstance(n, ast.arg) else
                n.id if isinstance(n, ast.Name) else None)
        if name in functions and functions[name] not in reached + todo:
          todo.append(functions[name])
    scopes.append((node.name, reached))
  return scopes


def mode_dependence(source, path="<test>"):
  """[(name marked, line, what)]: how each test marked mode_independent in
  a test file's source could depend on the TF1 mode."""
  tree = ast.parse(source, path)
  helpers = _helpers()
  tensorflow = _tensorflow_names(tree)
  found = []
  for marked, nodes in _scopes(tree):
    for node in (n for scope in nodes for n in ast.walk(scope)):
      what = None
      if isinstance(node, ast.arg) and node.arg in MODE_FIXTURES:
        what = f"takes the {node.arg} fixture"
      elif (isinstance(node, ast.Constant) and
            node.value in MODE_FIXTURES):
        what = f"names the {node.value} fixture"
      elif isinstance(node, ast.Name) and node.id in tensorflow:
        what = f"uses TensorFlow ({node.id})"
      elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for name in _imported(node):
          if name.split(".")[0] == "tensorflow":
            what = f"imports {name}"
          elif name in helpers and _uses_tensorflow(name, helpers):
            what = f"imports {name}, a test helper that uses TensorFlow"
      elif (isinstance(node, ast.Call) and
            _called_name(node.func) in MAKERS):
        what = f"makes a {_called_name(node.func)}"
      if what:
        found.append((marked, node.lineno, what))
  return sorted(set(found), key=lambda f: (f[1], f[2]))


def _test_files():
  for root, _, names in os.walk(TESTS):
    for name in sorted(names):
      if name.startswith("test_") and name.endswith(".py"):
        path = os.path.join(root, name)
        with open(path) as f:
          yield os.path.relpath(path, TESTS), f.read()


def test_tests_marked_mode_independent_cannot_depend_on_the_mode():
  marked, found = [], []
  for path, source in _test_files():
    if _scopes(ast.parse(source, path)):
      marked.append(path)
    found += [(path,) + f for f in mode_dependence(source, path)]
  assert marked  # the check sees the marks
  assert not found, found


MIS_MARKED = '''\
import pytest
import tensorflow as tf
import tensorbow as tb
tf1 = tf.compat.v1

def _session():
  return tb.TensorBowSession(replicas=2)

@pytest.fixture
def script(tmp_path, tf_mode_statement):
  return tmp_path

@pytest.mark.mode_independent
def test_child(script):
  pass

@pytest.mark.mode_independent
def test_helper():
  _session()

@pytest.mark.parametrize("x", [
    pytest.param(1, marks=pytest.mark.mode_independent)])
def test_param(x, request):
  tf1.placeholder(tb.float32)
  request.getfixturevalue("tf_mode")

@pytest.mark.mode_independent
class TestGraph:
  def test_graph(self):
    import graphs

def test_unmarked(tf_mode):
  tf.Graph()

@pytest.mark.mode_independent
def test_clean(tmp_path):
  assert tb.__name__
'''


def test_the_check_sees_mis_marked_tests():
  assert mode_dependence(MIS_MARKED) == [
      ("test_helper", 7, "makes a TensorBowSession"),
      ("test_child", 10, "takes the tf_mode_statement fixture"),
      ("test_param", 24, "uses TensorFlow (tf1)"),
      ("test_param", 25, "names the tf_mode fixture"),
      ("TestGraph", 30, "imports graphs, a test helper that uses TensorFlow"),
  ]
  module = ("import pytest\nimport tensorflow as tf\n"
            "pytestmark = [pytest.mark.slow, pytest.mark.mode_independent]\n"
            "def test_graph():\n  tf.Graph()\n")
  assert mode_dependence(module) == [
      ("the module", 2, "imports tensorflow"),
      ("the module", 5, "makes a Graph"),
      ("the module", 5, "uses TensorFlow (tf)")]
  assert mode_dependence(module.replace("pytestmark", "marks")) == []


def test_the_guard_fails_a_test_that_makes_a_graph_or_session(
    mode_independent_guard):
  refused = r"^t is marked mode_independent, so it runs in v1 mode only, "
  makers = [(tf.Graph, "Graph"), (tf.compat.v1.Session, "Session"),
            (tf.compat.v1.InteractiveSession, "InteractiveSession"),
            (lambda: tb.TensorBowSession(replicas=2), "Graph, Session")]
  with tf.Graph().as_default():
    for make, made in makers:
      with pytest.raises(AssertionError,
                         match=refused + f"but it made {made}: remove"):
        with mode_independent_guard("t"):
          thing = make()
          if hasattr(thing, "close"):
            thing.close()
    with pytest.raises(AssertionError, match=refused + r"but it made 1 "
                       r"op\(s\) in the default graph: remove"):
      with mode_independent_guard("t"):
        tf.constant(1.0)
    with mode_independent_guard("t"):
      pass


def test_mode_independent_tests_run_in_v1_mode_only(request, tf_mode):
  ran = [item.nodeid for item in request.session.items
         if item.get_closest_marker(MARK)]
  if tf_mode != "v1" and not request.config.getoption("--all-modes"):
    assert not ran
