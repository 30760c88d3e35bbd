"""TensorFlow's private Python API is used in `tensorbow/compat.py` only.

In the style of tensorflow/addons' `test_no_private_tf_api`: no module of
the package but compat.py imports `tensorflow.python...`, and none reads
a private member (`x._name`) that TensorBow does not define itself, which
can only be TensorFlow's. The few that stay are listed below with the
reason; a TensorFlow upgrade then touches compat.py and this list only.
"""
import ast
import os

import pytest

# Parses the package's source: the TF1 mode cannot change it (conftest.py).
pytestmark = pytest.mark.mode_independent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "tensorbow")
COMPAT = os.path.join("tensorbow", "compat.py")

# (file, private member) -> why it stays outside compat.py.
ALLOWED = {
    (os.path.join("tensorbow", "monitored.py"), "_scaffold"):
        "TensorBowSessionCreator is TensorFlow's ChiefSessionCreator with "
        "its session manager replaced, built from the scaffold the base "
        "class keeps, as the base class builds its own",
    (os.path.join("tensorbow", "monitored.py"), "_recovery_wait_secs"):
        "_SessionManager is TensorFlow's SessionManager with the method "
        "that makes the session replaced; it waits for a checkpoint as the "
        "method it replaces does, for as long as the base class says",
    (os.path.join("tensorbow", "cli", "patches.py"), "_master"):
        "the ChiefSessionCreator stand-in keeps TensorFlow's session "
        "manager for a remote master, which the base class keeps",
}
# Public despite the underscore: namedtuple's documented methods.
_NAMEDTUPLE_API = frozenset(["_replace", "_asdict", "_fields", "_make"])


def _modules():
  for root, _, files in os.walk(PACKAGE):
    for name in sorted(files):
      if name.endswith(".py"):
        path = os.path.join(root, name)
        with open(path) as f:
          yield os.path.relpath(path, ROOT), ast.parse(f.read(), path)


def _private(name):
  return name.startswith("_") and not name.startswith("__")


def _own_private_names():
  """Private names TensorBow defines: functions, classes, module names,
  and attributes it assigns."""
  names = set()
  for _, tree in _modules():
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        names.add(node.name)
      elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        names.add(node.id)
      elif isinstance(node, ast.Attribute) and isinstance(node.ctx,
                                                          ast.Store):
        names.add(node.attr)
      elif isinstance(node, ast.alias):
        names.add(node.asname or node.name)
  return {n for n in names if _private(n)} | _NAMEDTUPLE_API


def private_uses():
  """[(file, line, what)] of TensorFlow's private API outside compat.py."""
  own = _own_private_names()
  found = []
  for path, tree in _modules():
    if path == COMPAT:
      continue
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
      else:
        modules = []
      found += [(path, node.lineno, m) for m in modules
                if m == "tensorflow.python" or
                m.startswith("tensorflow.python.")]
      if (isinstance(node, ast.Attribute) and _private(node.attr) and
          node.attr not in own and (path, node.attr) not in ALLOWED):
        found.append((path, node.lineno, node.attr))
  return found


def test_private_tensorflow_api_only_in_compat():
  assert private_uses() == []


def test_every_allowed_use_is_still_needed():
  own = _own_private_names()
  used = set()
  for path, tree in _modules():
    used |= {(path, n.attr) for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and n.attr not in own}
  assert set(ALLOWED) == used & set(ALLOWED), set(ALLOWED) - used
