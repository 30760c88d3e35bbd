"""No hidden channels between the modules that build a setting's copies
and keep its replicas (the style guide's "No hidden channels"; issue 65).

A hidden channel is an object one module fills and another drains later,
or an attribute set from outside: coupling that a test of private names
cannot see. Read by parsing the code, as tests/test_layout.py does:

* no module sets an attribute on an object it did not make (the planner
  set the copier's chooser; SMA's apply_nodes set its state's
  corrections; EASGD added alpha to SMA's state);
* no class hands another object a private member of its own, a container
  it keeps or a private method (the replica state handed its states and
  their key to AlgorithmRuns);
* the copier calls nothing on a collaborator for its effect alone: what
  it makes it returns (it queued first-run ops and seeds on the replica
  state for seed_run to drain).
"""
import ast
import builtins
import os

import pytest

# Static checks of the checkout: this run's mode cannot change them.
pytestmark = pytest.mark.mode_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tensorbow")


def _modules():
  """(path relative to the checkout, text) of the modules that build the
  copies, make the algorithms' ops and keep the replicas."""
  paths = [os.path.join(PACKAGE, name) for name in
           ("replicas.py", "planner.py", "algorithm_runs.py")]
  for folder in ("rewrite", "algorithms"):
    paths += sorted(os.path.join(PACKAGE, folder, name)
                    for name in os.listdir(os.path.join(PACKAGE, folder))
                    if name.endswith(".py"))
  for path in paths:
    with open(path) as f:
      yield os.path.relpath(path, ROOT), f.read()


def _functions(tree):
  """The module's functions and its classes' methods, each with the
  functions nested in it."""
  for node in tree.body:
    if isinstance(node, ast.ClassDef):
      yield from _functions(node)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      yield node


def _root(node):
  """The name an attribute or subscript chain starts from, or None."""
  while isinstance(node, (ast.Attribute, ast.Subscript)):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


def _makes(call, own_functions):
  """Whether `call` makes a new object for its caller: a class's
  constructor (a capitalised name: NodeDef(), State(...)) or a function
  of the same module (`_node(...)`), not a method of another object."""
  func = call.func
  name = func.attr if isinstance(func, ast.Attribute) else getattr(
      func, "id", "")
  return (name.lstrip("_")[:1].isupper() or
          isinstance(func, ast.Name) and func.id in own_functions)


def _stored(node):
  """The attribute targets that `node` (a statement) sets or deletes."""
  if isinstance(node, ast.Assign):
    targets = node.targets
  elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
    targets = [node.target]
  elif isinstance(node, ast.Delete):
    targets = node.targets
  else:
    return []
  flat = []
  for t in targets:
    flat.extend(t.elts if isinstance(t, ast.Tuple) else [t])
  return [t for t in flat if isinstance(t, ast.Attribute)]


# (module, function, parameter): a NodeDef handed in to be edited in
# place while its GraphDef is built, a protocol buffer, not a collaborator.
_EDITS_A_NODE_DEF = {(os.path.join("tensorbow", "rewrite", "per_example.py"),
                      "_unfold", "node")}


def _foreign_attribute_stores(path, text):
  """[(line, what)] of attributes a module sets (or deletes) on an object
  it did not make: one other than `self` (itself, not an object it
  holds), or than one its function made (`_makes`)."""
  tree = ast.parse(text, path)
  own_functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
  found = []
  for function in _functions(tree):
    made = set(name for p, f, name in _EDITS_A_NODE_DEF
               if (p, f) == (path, function.name))
    for node in ast.walk(function):
      if (isinstance(node, ast.Assign) and
          isinstance(node.value, ast.Call) and
          _makes(node.value, own_functions)):
        made.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(function):
      for target in _stored(node):
        base = target.value
        if isinstance(base, ast.Name) and base.id == "self":
          continue  # itself, not an object it holds
        if _root(base) not in made:
          found.append((target.lineno, ast.unparse(target)))
  return sorted(set(found))


def test_the_foreign_attribute_check_sees_one():
  text = ("def plan(self, rep, state):\n"
          "  rep.chooser = 1\n"
          "  state.corrections = 2\n"
          "  own = super().variable_state()\n"
          "  own.alpha = None\n"
          "  self._copier.chooser = 3\n"
          "  self._chooser = 4\n"
          "  node = tf.compat.v1.NodeDef()\n"
          "  node.name = 'n'\n"
          "  node.attr['T'].type = 1\n"
          "  made = _node()\n"
          "  made.device = ''\n"
          "  alias = self._copier\n"
          "  alias.chooser = 5\n"
          "def _node():\n"
          "  return None\n")
  assert [line for line, _ in _foreign_attribute_stores("x.py", text)] == [
      2, 3, 5, 6, 14]


# Builtins that read or copy a container they are given, keeping nothing.
_READERS = frozenset(name for name in dir(builtins)
                     if not name[:1].isupper())
_CONTAINERS = frozenset(["dict", "list", "set", "OrderedDict",
                         "defaultdict", "deque"])


def _private_members(cls):
  """(private methods, private containers) a class keeps: `def _x` and
  `self._x = {}` (or [], set(), dict() ...)."""
  methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)
             and n.name.startswith("_") and not n.name.startswith("__")}
  containers = set()
  for node in ast.walk(cls):
    if not isinstance(node, ast.Assign):
      continue
    value = node.value
    is_container = isinstance(
        value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp,
                ast.SetComp)) or (
                    isinstance(value, ast.Call) and
                    (getattr(value.func, "id", None) or
                     getattr(value.func, "attr", None)) in _CONTAINERS)
    for t in node.targets:
      if (is_container and isinstance(t, ast.Attribute) and
          _root(t) == "self" and t.attr.startswith("_")):
        containers.add(t.attr)
  return methods, containers


def _keeper(call, modules, containers):
  """Whether `call` may keep what it is given: a constructor, or a
  method of another object (neither an imported module's function, nor
  a builtin, nor a method of the caller's own containers)."""
  func = call.func
  if isinstance(func, ast.Name):
    return func.id.lstrip("_")[:1].isupper() or func.id not in (
        _READERS | modules)
  if isinstance(func, ast.Attribute):
    receiver = func.value
    if isinstance(receiver, ast.Name) and receiver.id in modules:
      return func.attr.lstrip("_")[:1].isupper()
    if (isinstance(receiver, ast.Attribute) and _root(receiver) == "self" and
        receiver.attr in containers):
      return False
    return True
  return True


def _private_members_handed(path, text):
  """[(line, what)] of a class handing another object a private member
  of its own (`self._x`): a private method, or a container it keeps."""
  tree = ast.parse(text, path)
  modules = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      modules.update((a.asname or a.name).split(".")[0] for a in node.names)
  modules.update(n.name for n in tree.body if isinstance(n, ast.FunctionDef))
  found = []
  for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
    methods, containers = _private_members(cls)
    for call in [n for n in ast.walk(cls) if isinstance(n, ast.Call)]:
      if not _keeper(call, modules, containers):
        continue
      for arg in list(call.args) + [k.value for k in call.keywords]:
        if (isinstance(arg, ast.Attribute) and
            isinstance(arg.value, ast.Name) and arg.value.id == "self" and
            arg.attr in methods | containers):
          found.append((call.lineno, ast.unparse(arg)))
  return sorted(set(found))


def test_the_private_member_check_sees_one():
  text = ("from tensorbow import algorithm_runs\n"
          "from tensorbow.rewrite import graph_util\n"
          "class ReplicaState:\n"
          "  def __init__(self, builder):\n"
          "    self._builder = builder\n"
          "    self._states = {}\n"
          "    self._seeds = dict()\n"
          "    self._runs = algorithm_runs.AlgorithmRuns(\n"
          "        builder, self._states, self._state_key)\n"
          "  def _state_key(self, names):\n"
          "    return names\n"
          "  def runs(self):\n"
          "    self._builder.once('x', states=self._states)\n"
          "    self._seeds.update(self._states)\n"
          "    graph_util.control_stub(self._builder, self._states)\n"
          "    return sorted(self._states), self._builder.once('y', 1)\n")
  assert _private_members_handed("x.py", text) == [
      (8, "self._state_key"), (8, "self._states"), (13, "self._states")]


def _held(cls):
  """The attributes a class's constructor sets to a collaborator it is
  given (`self._x = x`, x a parameter)."""
  init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and
               n.name == "__init__"), None)
  if init is None:
    return set()
  params = {a.arg for a in init.args.args[1:] + init.args.kwonlyargs}
  return {t.attr for node in ast.walk(init) if isinstance(node, ast.Assign)
          and isinstance(node.value, ast.Name) and node.value.id in params
          for t in node.targets
          if isinstance(t, ast.Attribute) and _root(t) == "self"}


def _calls_for_effect(path, text):
  """[(line, what)] of calls a class makes on a collaborator it was given
  (`self._x.method(...)`, `_held`) whose result it drops: made for their
  effect on the collaborator, what it fills for another to drain."""
  found = []
  for cls in [n for n in ast.walk(ast.parse(text, path))
              if isinstance(n, ast.ClassDef)]:
    held = _held(cls)
    for node in ast.walk(cls):
      if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Attribute)):
        continue
      receiver = node.value.func.value
      if (isinstance(receiver, ast.Attribute) and
          isinstance(receiver.value, ast.Name) and
          receiver.value.id == "self" and receiver.attr in held):
        found.append((node.lineno, ast.unparse(node.value.func)))
  return found


def test_the_fill_check_sees_one():
  text = ("class Copier:\n"
          "  def __init__(self, builder, replicas):\n"
          "    self._builder = builder\n"
          "    self._replicas = replicas\n"
          "    self._copies = {}\n"
          "  def extend(self, info):\n"
          "    self._replicas.run_before_training([1])\n"
          "    self._copies.clear()\n"
          "    with self._builder.building():\n"
          "      made = self._replicas.add_variables(info)\n"
          "    self._builder.once('x', made)\n"
          "    return made\n")
  assert _calls_for_effect("x.py", text) == [
      (7, "self._replicas.run_before_training"), (11, "self._builder.once")]


def _returns(path, class_name, method):
  """The values the `return` statements of `class_name.method` return."""
  with open(os.path.join(ROOT, path)) as f:
    tree = ast.parse(f.read(), path)
  for cls in ast.walk(tree):
    if isinstance(cls, ast.ClassDef) and cls.name == class_name:
      for function in cls.body:
        if isinstance(function, ast.FunctionDef) and function.name == method:
          return [n.value for n in ast.walk(function)
                  if isinstance(n, ast.Return)]
  raise AssertionError(f"no {class_name}.{method} in {path}")


def test_the_copier_returns_what_a_copy_makes():
  returned = _returns(os.path.join("tensorbow", "rewrite", "replicate.py"),
                      "Copier", "extend")
  assert returned and all(
      isinstance(r, ast.Tuple) and len(r.elts) == 2 and
      isinstance(r.elts[1], ast.Call) and
      getattr(r.elts[1].func, "id", None) == "Copied" for r in returned), [
          ast.unparse(r) for r in returned]


# Each check and the modules it reads (a path prefix): the rewriters'
# copies return what they make (Copier.extend), which the planner hands on.
_CHECKS = {
    "no_attribute_set_from_outside": (_foreign_attribute_stores,
                                      "tensorbow"),
    "no_private_member_handed_over": (_private_members_handed, "tensorbow"),
    "no_collaborator_filled_by_a_rewriter": (
        _calls_for_effect, os.path.join("tensorbow", "rewrite")),
}


@pytest.mark.parametrize("name", sorted(_CHECKS))
def test_the_modules_keep_no_hidden_channel(name):
  check, under = _CHECKS[name]
  offenders = [(path, line, what) for path, text in _modules()
               if path.startswith(under)
               for line, what in check(path, text)]
  assert not offenders, offenders
