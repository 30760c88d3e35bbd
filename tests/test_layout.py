"""The checkout's layout: what anyone can check without running a model.

* No module imports another by file path: the reference models, their
  training loop, data loaders and benchmark suites are packages (`models`,
  `benchmarks`), imported by name.
* No import circle: no module of the checkout imports, through others, a
  module that imports it.
* `import tensorbow` loads only TensorBow's own modules beyond what
  `import tensorflow` loads. (TensorFlow 2.21 itself imports absl and, in
  this environment, matplotlib, so "no absl" can only mean "none of
  TensorBow's making".)
"""
import ast
import os
import re
import subprocess
import sys

import pytest

# Static checks of the checkout, and `import tensorbow` in a child process
# that sets no TF1 mode: this run's mode cannot change them (conftest.py).
pytestmark = pytest.mark.mode_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# tensorbow-run runs a user's script as `python script.py` would: its
# folder on sys.path is the point, not a way to import our own modules.
_RUNS_USER_SCRIPTS = os.path.join("tensorbow", "cli", "main.py")
# $TENSORBOW_LIBRARY_DIR names a directory of built libraries (Bazel's
# output): the runtime extension is loaded from there as the op library is
# by tf.load_op_library, never a Python module of the checkout.
_LOADS_BUILT_LIBRARIES = os.path.join("tensorbow", "runtime", "__init__.py")


def _python_files():
  for folder in ("tensorbow", "models", "benchmarks", "examples", "tests"):
    for root, _, files in os.walk(os.path.join(ROOT, folder)):
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(root, name)
          yield os.path.relpath(path, ROOT), open(path).read()


def test_no_module_imports_a_file_by_path():
  path_import = re.compile(
      r"spec_from_file_location|SourceFileLoader|imp\.load_source|"
      r"sys\.path\.(insert|append)|sys\.path\s*\[")
  offenders = [
      path for path, text in _python_files()
      if path not in (_RUNS_USER_SCRIPTS, _LOADS_BUILT_LIBRARIES,
                      os.path.join("tests", "test_layout.py"))
      and path_import.search(text)]
  assert not offenders, offenders


def test_import_tensorbow_loads_only_its_own_modules():
  code = (
      "import sys\n"
      "import tensorflow\n"
      "before = set(sys.modules)\n"
      "import tensorbow\n"
      "print('\\n'.join(sorted(set(sys.modules) - before)))\n")
  out = subprocess.run(
      [sys.executable, "-c", code], capture_output=True, text=True,
      check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")).stdout
  extra = [m for m in out.split() if m]
  assert "tensorbow.session" in extra
  # tf.load_op_library registers the op library under a hashed name.
  foreign = [m for m in extra
             if m.split(".")[0] != "tensorbow" and
             not re.fullmatch(r"[0-9a-f]{40}", m)]
  assert not foreign, foreign


def _import_graph():
  """{module: modules of the checkout it imports} for tensorbow, models,
  benchmarks and examples. `from package import name` is an edge to the
  package only if its __init__ defines `name` (else `name` is a module:
  a submodule, or a built extension such as tensorbow._runtime)."""
  files = {}
  for folder in ("tensorbow", "models", "benchmarks", "examples"):
    for root, _, names in os.walk(os.path.join(ROOT, folder)):
      for name in names:
        if name.endswith(".py"):
          path = os.path.join(root, name)
          module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
          files[module[:-len(".__init__")] if module.endswith(".__init__")
                else module] = path
  trees = {m: ast.parse(open(p).read(), p) for m, p in files.items()}

  def defines(package, name):
    for node in trees[package].body:
      targets = (node.targets if isinstance(node, ast.Assign) else
                 [a for a in getattr(node, "names", [])]
                 if isinstance(node, (ast.Import, ast.ImportFrom)) else [])
      if getattr(node, "name", None) == name or any(
          getattr(t, "id", None) == name or
          getattr(t, "asname", None) == name or
          getattr(t, "name", None) == name for t in targets):
        return True
    return False

  graph = {}
  for module, tree in trees.items():
    edges = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        edges |= {a.name for a in node.names if a.name in trees}
      elif isinstance(node, ast.ImportFrom) and node.module in trees:
        for alias in node.names:
          full = f"{node.module}.{alias.name}"
          if full in trees:
            edges.add(full)
          elif defines(node.module, alias.name):
            edges.add(node.module)
      elif isinstance(node, ast.ImportFrom) and node.module:
        edges |= {f"{node.module}.{a.name}" for a in node.names
                  if f"{node.module}.{a.name}" in trees}
    graph[module] = edges - {module}
  return graph


def test_no_import_circle():
  graph = _import_graph()
  state, path, circles = {}, [], []

  def visit(module):
    state[module] = "open"
    path.append(module)
    for other in sorted(graph[module]):
      if state.get(other) == "open":
        circles.append(path[path.index(other):] + [other])
      elif other not in state:
        visit(other)
    path.pop()
    state[module] = "done"

  for module in sorted(graph):
    if module not in state:
      visit(module)
  assert not circles, [" -> ".join(c) for c in circles]


# Public despite the underscore: namedtuple's documented methods.
_NAMEDTUPLE_API = frozenset(["_replace", "_asdict", "_fields", "_make"])


def _private_reaches(path, text):
  """[(line, what)] of a module reading a private name (`x._name`, or
  getattr's) of something other than itself: `self`, `cls` or `super()`."""
  found = []
  for node in ast.walk(ast.parse(text, path)):
    if isinstance(node, ast.Attribute):
      name, owner = node.attr, node.value
      if (isinstance(owner, ast.Name) and owner.id in ("self", "cls") or
          isinstance(owner, ast.Call) and
          getattr(owner.func, "id", None) == "super"):
        continue
    elif (isinstance(node, ast.Call) and
          getattr(node.func, "id", None) in ("getattr", "hasattr",
                                              "setattr") and
          len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
      name = str(node.args[1].value)
    else:
      continue
    if (name.startswith("_") and not name.startswith("__") and
        name not in _NAMEDTUPLE_API):
      found.append((node.lineno, ast.unparse(node)))
  return found


def test_no_module_reaches_into_anothers_private_names():
  # compat.py is where TensorFlow's private API is used (test_private_api).
  offenders = [
      (path, line, what) for path, text in _python_files()
      if path.startswith("tensorbow" + os.sep) and
      path != os.path.join("tensorbow", "compat.py")
      for line, what in _private_reaches(path, text)]
  assert not offenders, offenders


def test_the_private_reach_check_sees_one():
  text = ("def f(session):\n"
          "  a = session._trainer\n"
          "  b = getattr(session, '_planner', None)\n"
          "  return self._own, super()._own, a._replace(x=1)\n")
  assert [line for line, _ in _private_reaches("x.py", text)] == [2, 3]


def test_no_package_file_is_over_500_lines():
  # The product and the reference models' training code, split by job.
  long = [(path, text.count("\n")) for path, text in _python_files()
          if path.startswith(("tensorbow" + os.sep, "models" + os.sep)) and
          text.count("\n") > 500]
  assert not long, long


# A function reads in one screen: at most 60 lines from its `def` to its
# last line, docstring included. An exception is named here with its
# reason (at most two); there is none today.
_LONG_FUNCTION_LINES = 60
_LONG_FUNCTIONS = {}


def _long_functions(path, text):
  """(path:name, lines) of the functions in `text` over the bound."""
  return [(f"{path}:{node.name}", node.end_lineno - node.lineno + 1)
          for node in ast.walk(ast.parse(text))
          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
          and node.end_lineno - node.lineno + 1 > _LONG_FUNCTION_LINES]


def test_no_package_function_is_over_60_lines():
  assert len(_LONG_FUNCTIONS) <= 2, _LONG_FUNCTIONS
  long = [(name, lines) for path, text in _python_files()
          if path.startswith("tensorbow" + os.sep)
          for name, lines in _long_functions(path, text)
          if name not in _LONG_FUNCTIONS]
  assert not long, long


def test_the_long_function_check_sees_one():
  body = "".join(f"  x{i} = {i}\n" for i in range(60))
  assert _long_functions("x.py", "def f():\n" + body) == [("x.py:f", 61)]
  assert not _long_functions("x.py", "def f():\n" + body[body.index("\n") + 1:])


def _public_functions(tree):
  """(qualified name, def node, its class or None) of the module-level
  functions and public classes' methods of a parsed module whose names
  are public."""
  for node in tree.body:
    if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
      yield node.name, node, None
    if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
      for method in node.body:
        if (isinstance(method, ast.FunctionDef) and
            not method.name.startswith("_")):
          yield f"{node.name}.{method.name}", method, node


def _undocumented(trees):
  """The public functions of `trees` ({path: parsed module}) without a
  docstring. Exempt: a method of a class with bases whose name a method
  of the package documents (the base's docstring says what it does), and
  a one-line property."""
  documented = {n.name for tree in trees.values() for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef) and ast.get_docstring(n)}
  missing = []
  for path, tree in trees.items():
    for name, node, cls in _public_functions(tree):
      if ast.get_docstring(node):
        continue
      if cls is not None and cls.bases and node.name in documented:
        continue
      if len(node.body) == 1 and any(
          isinstance(d, ast.Name) and d.id == "property"
          for d in node.decorator_list):
        continue
      missing.append(f"{path}:{name}")
  return missing


def test_every_public_function_says_what_it_does():
  trees = {path: ast.parse(text) for path, text in _python_files()
           if path.startswith("tensorbow" + os.sep)}
  assert not _undocumented(trees), _undocumented(trees)


def test_the_docstring_check_sees_one():
  tree = ast.parse("def f():\n  return 1\n\n\nclass A(B):\n"
                   "  def run(self):\n    return 2\n"
                   "  def g(self):\n    return 3\n")
  documented = ast.parse("class B:\n  def run(self):\n    \"\"\"Runs.\"\"\"\n")
  assert _undocumented({"x.py": tree, "b.py": documented}) == [
      "x.py:f", "x.py:A.g"]


def _design_names():
  """What docs/DESIGN.md can be cited by: its headings and the bold
  lead-ins of its paragraphs ("**Fetches are merged.**")."""
  text = open(os.path.join(ROOT, "docs", "DESIGN.md")).read()
  names = set(re.findall(r"^#+ (.+?)\s*$", text, re.M))
  # "Two levels: devices and workers" is cited as "Two levels" too.
  names |= {n.split(":")[0] for n in names}
  names |= {n.rstrip(".") for n in re.findall(r"\*\*([^*]+?)\*\*", text)}
  return {" ".join(n.split()) for n in names}


def _design_citations(text):
  """The names cited as DESIGN.md's: `DESIGN.md, "Name"` or `DESIGN.md's X
  ("Name")`, and any "section N"."""
  flat = " ".join(re.sub(r"\n\s*(#|//)", " ", text).split())
  cited = re.findall(r'DESIGN\.md(?:, |\'s [^(")]{0,20}\()"([^"]+)"', flat)
  numbered = re.findall(r"DESIGN\.md,? (?:section )?\d+(?:\.\d+)*\b", flat)
  return cited, numbered


def test_design_citations_name_what_docs_design_holds():
  names = _design_names()
  wrong = []
  for folder in ("tensorbow", "models", "benchmarks", "examples", "tests",
                 "cc", "scripts"):
    for root, _, files in os.walk(os.path.join(ROOT, folder)):
      for name in files:
        path = os.path.join(root, name)
        if (name.endswith((".py", ".cc", ".h", ".sh")) and
            path != os.path.abspath(__file__)):
          cited, numbered = _design_citations(open(path).read())
          wrong += [(os.path.relpath(path, ROOT), c) for c in cited
                    if c not in names] + [
                        (os.path.relpath(path, ROOT), n) for n in numbered]
  assert not wrong, wrong


def test_the_design_citation_check_sees_a_wrong_one():
  cited, numbered = _design_citations(
      'merged (DESIGN.md, "Fetches\n  are merged"); see DESIGN.md 2.4 and '
      'DESIGN.md\'s SMA ("Synchronous model averaging")')
  assert cited == ["Fetches are merged", "Synchronous model averaging"]
  assert numbered == ["DESIGN.md 2.4"]
  assert "Fetches are merged" in _design_names()


# What crosses processes sits behind one object (tensorbow/scaleout): the
# training core names none of it. `cluster_timeout` is the session's public
# option, given to that object.
_SCALE_OUT_WORDS = re.compile(r"cluster|reducer|chief", re.I)


def _scale_out_mentions(text):
  return [line for line in text.splitlines()
          if _SCALE_OUT_WORDS.search(line.replace("cluster_timeout", ""))]


def test_the_training_core_names_no_cluster_reducer_or_chief():
  for name in ("waves.py", "wave.py", "hooks.py", "session.py"):
    text = open(os.path.join(ROOT, "tensorbow", name)).read()
    assert not _scale_out_mentions(text), (name, _scale_out_mentions(text))


# A wave knows its job only as hooks.Job (issue 66): the modules a wave
# runs through, and the algorithms, import nothing of tensorbow.scaleout.
_WAVE_MODULES = ("tensorbow.waves", "tensorbow.wave", "tensorbow.hooks",
                 "tensorbow.seeding", "tensorbow.algorithm_runs")


def _imports_scale_out(graph, module):
  return sorted(m for m in graph[module] if m.startswith("tensorbow.scaleout"))


def test_a_wave_and_the_algorithms_import_nothing_of_the_processes():
  graph = _import_graph()
  modules = list(_WAVE_MODULES) + [
      m for m in graph if m.startswith("tensorbow.algorithms")]
  found = {m: _imports_scale_out(graph, m) for m in modules}
  assert not any(found.values()), found


# The processes behind one package (issue 66): outside tensorbow/scaleout,
# only the command line and the facade that composes a session from its
# parts (session.py, as the command line composes a job) import it, and
# no function outside it takes a cluster, a membership, a reducer or the
# scale-out object: the others are given what they need of it as values
# and callables (setting.Processes, preemption.Agreement, hooks.Job).
_COMPOSE_PROCESSES = ("tensorbow.session",)
_PROCESS_PARAMETERS = frozenset(["cluster", "membership", "reducer",
                                 "scale_out", "workers_object"])


def _outside_the_processes(module):
  return (module.startswith("tensorbow") and
          not module.startswith(("tensorbow.scaleout", "tensorbow.cli")))


def test_only_the_facade_and_the_command_line_import_the_processes():
  graph = _import_graph()
  found = {m: _imports_scale_out(graph, m) for m in graph
           if _outside_the_processes(m) and m not in _COMPOSE_PROCESSES}
  assert not any(found.values()), {m: i for m, i in found.items() if i}


def _process_parameters(source):
  """(function, parameter) of the functions in `source` that take a
  parameter named as a cluster object is (_PROCESS_PARAMETERS)."""
  return sorted(
      (node.name, a.arg) for node in ast.walk(ast.parse(source))
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
      for a in node.args.args + node.args.kwonlyargs
      if a.arg in _PROCESS_PARAMETERS)


def test_no_function_outside_the_processes_takes_a_cluster_object():
  found = {}
  for path, text in _python_files():
    module = path[:-len(".py")].replace(os.sep, ".")
    if _outside_the_processes(module):
      taken = _process_parameters(text)
      if taken:
        found[module] = taken
  assert not found, found


def test_the_process_parameter_check_sees_one():
  assert _process_parameters(
      "class P:\n  def __init__(self, session, cluster):\n    pass\n") == [
          ("__init__", "cluster")]


def test_the_process_import_check_sees_one():
  graph = {"tensorbow.wave": {"tensorbow.scaleout", "tensorbow.hooks"}}
  assert _imports_scale_out(graph, "tensorbow.wave") == ["tensorbow.scaleout"]


def test_the_scale_out_check_sees_one():
  assert _scale_out_mentions("    totals = self._reducer.sum(arrays)")
  assert not _scale_out_mentions("    cluster_timeout=60.0,")


def _builder_uses(text):
  """The builder members an algorithm's source uses (comments aside)."""
  code = "\n".join(line.split("#")[0] for line in text.splitlines())
  return set(re.findall(r"(?<![\w./])builder\.(\w+)", code))


def _builder_offers():
  """What algorithms/base.py says the builder offers an algorithm."""
  doc = ast.get_docstring(ast.parse(open(os.path.join(
      ROOT, "tensorbow", "algorithms", "base.py")).read()))
  offer = doc[doc.index("which offers:"):doc.index("It is a")]
  return set(re.findall(r"`(\w+)", offer))


def test_algorithms_use_only_what_the_builder_offers_them():
  # Not a channel: an algorithm cannot queue work in the builder for the
  # replica state to find later (issue 47); its hooks return it.
  folder = os.path.join(ROOT, "tensorbow", "algorithms")
  offered = _builder_offers()
  for name in sorted(os.listdir(folder)):
    if name.endswith(".py"):
      used = _builder_uses(open(os.path.join(folder, name)).read())
      assert used <= offered, (name, sorted(used - offered))


def test_the_builder_use_check_sees_one():
  assert _builder_uses("builder.run_before_training(op)") == {
      "run_before_training"}
  assert not _builder_uses("tb_builder.unflat(name)")
  assert "run_before_training" not in _builder_offers()


def _public_attributes_set(source, class_name):
  """The public attributes a class's methods set on `self`."""
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.ClassDef) and node.name == class_name:
      return {target.attr for target in ast.walk(node)
              if isinstance(target, ast.Attribute)
              and isinstance(target.ctx, ast.Store)
              and isinstance(target.value, ast.Name)
              and target.value.id == "self"
              and not target.attr.startswith("_")}
  raise AssertionError(f"no class {class_name}")


# The session's collaborators of one setting: what the session learns from
# them, they return or offer as a method or property, not as an attribute
# one sets and the other reads later (issue 47: the session read the
# trainer's last_rows after each training run).
_COLLABORATORS = [("waves.py", "Trainer"), ("wave.py", "WaveSteps"),
                  ("planner.py", "Planner"),
                  ("replicas.py", "ReplicaState"),
                  ("algorithm_runs.py", "AlgorithmRuns")]


@pytest.mark.parametrize("module, class_name", _COLLABORATORS)
def test_the_sessions_collaborators_set_no_public_attribute(module,
                                                            class_name):
  source = open(os.path.join(ROOT, "tensorbow", module)).read()
  assert not _public_attributes_set(source, class_name)


def test_the_public_attribute_check_sees_one():
  assert _public_attributes_set(
      "class Trainer:\n  def train(self):\n    self.last_rows = 3\n"
      "    self._waves = 1\n", "Trainer") == {"last_rows"}


# The algorithm seam: what another module may ask of an algorithm. Every
# method and flag of `algorithms.base.Algorithm` but Python's own (`__eq__`,
# `__hash__`, `__repr__`) counts; an algorithm joins a wave through one
# hook set (`wave_hooks`), not a hook per run (issue 65). At most 20.
_SEAM_LIMIT = 20
_ALGORITHM_NAMES = re.compile(r"^(algorithm|_algorithm)$")


def _seam(source):
  """The names `class Algorithm` in `source` defines, Python's own
  aside."""
  for node in ast.parse(source).body:
    if isinstance(node, ast.ClassDef) and node.name == "Algorithm":
      names = set()
      for item in node.body:
        if isinstance(item, ast.FunctionDef):
          names.add(item.name)
        elif isinstance(item, ast.Assign):
          names.update(t.id for t in item.targets if isinstance(t, ast.Name))
      return {n for n in names if not n.startswith("__")}
  raise AssertionError("no class Algorithm")


def _asked_of_algorithms(text):
  """The attributes `text` reads of an object it calls `algorithm`
  (`settings.algorithm`, `self._algorithm`, ...)."""
  return {node.attr for node in ast.walk(ast.parse(text))
          if isinstance(node, ast.Attribute) and _ALGORITHM_NAMES.match(
              getattr(node.value, "id", getattr(node.value, "attr", "")))}


def test_the_algorithm_seam_has_at_most_20_hooks_and_flags():
  seam = _seam(open(os.path.join(ROOT, "tensorbow", "algorithms",
                                 "base.py")).read())
  assert len(seam) <= _SEAM_LIMIT, sorted(seam)
  outside = {}
  for path, text in _python_files():
    if (path.startswith("tensorbow" + os.sep) and
        not path.startswith(os.path.join("tensorbow", "algorithms"))):
      asked = _asked_of_algorithms(text) - seam
      if asked:
        outside[path] = sorted(asked)
  assert not outside, outside  # asked of an algorithm beyond the seam


def test_the_seam_checks_see_one():
  source = ("class Algorithm:\n  pooled = False\n  def __eq__(self, o):\n"
            "    pass\n  def wave_hooks(self, setting):\n    pass\n")
  assert _seam(source) == {"pooled", "wave_hooks"}
  assert _asked_of_algorithms(
      "x = self._algorithm.merge_ops(b)\ny = settings.algorithm.name\n"
      "z = algorithm.pooled\nw = self._runs.merge_ops\n") == {
          "merge_ops", "name", "pooled"}
