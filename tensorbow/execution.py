"""The graph a TensorBowSession executes, apart from the user's graph.

The user's `tf.Graph` stays as the user built it: TensorBow's replicas,
synchronisation and bookkeeping ops live in an execution graph that the
session owns. It holds a copy of every user op under the same name,
imported incrementally as the user adds ops, so a run can name user
tensors and ops as they are, and
variables, being named alike, are the same resources in the session. A
finalized user graph trains; closing the session leaves nothing behind.
"""
import threading

import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import graph_util


class ExecutionGraph(object):
  """The user's ops, by name, plus TensorBow's.

  Args:
    user_graph: the `tf.Graph` the user builds and fetches from.
  """

  def __init__(self, user_graph):
    self.user_graph = user_graph
    self.graph = tf.Graph()
    self.version = 0  # the user graph's version imported up to
    self._imported = set()  # names of the user's ops imported
    self._functions = set()  # names of the user's functions imported
    self._stubs = {}  # op name -> tensor carrying a control dependency on it
    self._lock = threading.RLock()  # syncs, and imports a run asks for
    self.sync()

  def sync(self):
    """Imports the user's ops added since the last call, but for datasets
    no op reads (`_unread_datasets`), which wait until a run names them.

    The user's graph may grow meanwhile, on other threads.
    """
    self._sync_with(())

  def _sync_with(self, wanted):
    """Imports the user's new ops, and `wanted` (names of user ops) with
    what they read even where `_unread_datasets` keeps them out."""
    # A graph def read while another thread builds holds ops TensorFlow
    # has made but not finished (not yet known to the Python graph, a
    # loop's inputs not yet set): wait for whole ops, as TensorFlow's
    # Session waits before it extends its graph.
    with self._lock, compat.graph_read_lock(self.user_graph):
      self._sync_locked(wanted)

  def _sync_locked(self, wanted):
    version = self.user_graph.version
    if version == self.version and not wanted:
      return
    functions = compat.function_names(self.user_graph) - self._functions
    if functions:
      # Each function once: importing one again compares it whole, seconds
      # a sync for a one-shot iterator's, which holds the arrays given to
      # Dataset.from_tensor_slices.
      compat.copy_functions(self.user_graph, self.graph, functions)
      self._functions |= functions
    # Only the new ops: as_graph_def would copy the whole graph each sync,
    # a data set held in it as constants included.
    graph_def = tf.compat.v1.GraphDef()
    graph_def.versions.CopyFrom(self.user_graph.graph_def_versions)
    fresh = [op for op in self.user_graph.get_operations()
             if op.name not in self._imported]
    held = _unread_datasets(fresh) - set(op.name for op in graph_util.closure(
        [self.user_graph.get_operation_by_name(n) for n in wanted], ()))
    pending = [graph_util.without_colocation(op.node_def)
               for op in fresh if op.name not in held]
    new = set(node.name for node in pending)
    # An op whose name is a scope of ops imported already (`x + 1`
    # makes "add/y" before "add": a sync between the two sees "add/y"
    # alone) would be renamed by an import: it is made by its own name,
    # after what it reads, and the ops reading it are imported after it.
    while pending:
      scopes = _scopes(op.name for op in self.graph.get_operations())
      clashing = set(n.name for n in pending if n.name in scopes)
      later = _downstream(pending, clashing)
      now = [n for n in pending if n.name not in later]
      if now:
        graph_def.node.extend(now)
        self._import(graph_def)
        del graph_def.node[:]
      made = [n for n in pending if n.name in clashing and
              all(self._has(i) for i in n.input)]
      if not made and not now:
        raise ValueError(
            "TensorBow cannot copy ops "
            f"{sorted(clashing)} into its execution graph: their names "
            "are scopes of ops copied before them")
      for node in made:
        self._make(node)
      done = set(n.name for n in now) | set(n.name for n in made)
      pending = [n for n in pending if n.name not in done]
    self._imported.update(new)
    self.version = version
    self._keep_static_shapes(new)

  def _has(self, inp):
    try:
      self.graph.get_operation_by_name(inp.lstrip("^").partition(":")[0])
    except KeyError:
      return False
    return True

  def _external(self, inp):
    """The tensor of this graph that input `inp` of an imported node,
    naming an op outside the import, maps to."""
    if inp.startswith("^"):
      name = inp[1:]
      with self.graph.as_default():
        return graph_util.control_stub(self.graph, name, self._stubs,
                                       f"tensorbow/control/{name}")
    name, _, index = inp.partition(":")
    return self.graph.get_tensor_by_name(f"{name}:{index or 0}")

  def _import(self, graph_def):
    """Imports `graph_def`'s nodes under their names."""
    inside = set(node.name for node in graph_def.node)
    input_map = {}
    for node in graph_def.node:
      for inp in node.input:
        if inp.lstrip("^").partition(":")[0] not in inside:
          input_map.setdefault(inp, None)
    for inp in input_map:
      input_map[inp] = self._external(inp)
    with self.graph.as_default():
      tf.compat.v1.import_graph_def(graph_def, input_map=input_map or None,
                                    name="")

  def _make(self, node):
    """Makes NodeDef `node`'s op by its own name, its inputs in this
    graph already."""
    data = [self._external(i) for i in node.input if not i.startswith("^")]
    control = [self.graph.get_operation_by_name(i[1:])
               for i in node.input if i.startswith("^")]
    with self.graph.as_default():
      compat.make_op(self.graph, node, data, control)

  def _keep_static_shapes(self, names):
    """Gives imported tensors the static shapes the user's have.

    A GraphDef carries no shape set from Python (`set_shape`, as
    `shuffle_batch` and `dequeue_many` do on their outputs), so import
    would leave them unknown: replicas copied from here would not know
    the batch size their graph was built for.
    """
    for name in names:
      user_op = self.user_graph.get_operation_by_name(name)
      op = self.graph.get_operation_by_name(name)
      for user_tensor, tensor in zip(user_op.outputs, op.outputs):
        if user_tensor.shape != tensor.shape:
          try:
            tensor.set_shape(user_tensor.shape)
          except ValueError:
            pass  # not compatible: the imported op's own inference rules

  def tensor(self, tensor):
    """This graph's tensor named as the user's `tensor`, imported now if
    it waited (`sync`)."""
    self.op(tensor.op)
    return self.graph.get_tensor_by_name(tensor.name)

  def op(self, op):
    """This graph's op named as the user's `op`, imported now if it
    waited (`sync`)."""
    try:
      return self.graph.get_operation_by_name(op.name)
    except KeyError:
      self._sync_with((op.name,))
    return self.graph.get_operation_by_name(op.name)

  def user_error(self, error):
    """`error`, raised by an op of this graph, as TensorFlow's `Session.run`
    would raise it: its `op` and `node_def` the user's op of that name."""
    op = error.op
    if not isinstance(op, tf.Operation) or op.graph is not self.graph:
      return error
    try:
      user_op = self.user_graph.get_operation_by_name(op.name)
    except KeyError:
      return error
    return graph_util.error_at(error, user_op)


def _unread_datasets(ops):
  """The names of `ops` that wait to be imported until a run names them:
  each dataset of `ops` that no op reads, and what only such ops read.

  A one-shot iterator builds its dataset again inside its own function, so
  the dataset the user made it from, and the arrays given to
  `from_tensor_slices` as constants, are left in the graph unread: copied,
  they cost their size at every sync and at each extension of the
  TensorFlow session, which sends the whole graph. Runs that name them
  import them then (`op`), with what they read.
  """
  held = set()
  for op in reversed(ops):  # readers are made after what they read
    readers = [c for t in op.outputs for c in t.consumers()]
    readers += compat.control_outputs(op)
    if readers:
      if all(r.name in held for r in readers):
        held.add(op.name)
    elif op.outputs and all(t.dtype == tf.variant for t in op.outputs):
      held.add(op.name)
  return held


def _scopes(names):
  """Every scope the op names `names` lie under ("a" and "a/b" of
  "a/b/c")."""
  scopes = set()
  for name in names:
    parts = name.split("/")
    for i in range(1, len(parts)):
      scopes.add("/".join(parts[:i]))
  return scopes


def _downstream(nodes, names):
  """`names` and the names of `nodes` (NodeDefs) that read them, directly
  or through other `nodes`."""
  readers = {}
  for node in nodes:
    for inp in node.input:
      readers.setdefault(inp.lstrip("^").partition(":")[0], []).append(
          node.name)
  found, stack = set(names), list(names)
  while stack:
    for reader in readers.get(stack.pop(), ()):
      if reader not in found:
        found.add(reader)
        stack.append(reader)
  return found
