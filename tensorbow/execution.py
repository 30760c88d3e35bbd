"""The graph a TensorBowSession executes, apart from the user's graph.

The user's `tf.Graph` stays as the user built it: TensorBow's replicas,
synchronisation and bookkeeping ops live in an execution graph that the
session owns. It holds a copy of every user op under the same name,
imported incrementally as the user adds ops, so a run can name user
tensors and ops as they are, and
variables, being named alike, are the same resources in the session. A
finalized user graph trains; closing the session leaves nothing behind.
"""
import tensorflow as tf

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
    self._stubs = {}  # op name -> tensor carrying a control dependency on it
    self.sync()

  def sync(self):
    """Imports the user's ops added since the last call."""
    version = self.user_graph.version
    if version == self.version:
      return
    # as_graph_def's from_version is ignored since TensorFlow 2: the whole
    # graph comes, and the ops imported already are left out.
    graph_def = self.user_graph.as_graph_def()
    nodes = [n for n in graph_def.node if n.name not in self._imported]
    del graph_def.node[:]
    graph_def.node.extend(nodes)
    new = set(node.name for node in graph_def.node)
    input_map = {}
    for node in graph_def.node:
      graph_util.without_colocation(node)
      for inp in node.input:
        if inp.startswith("^"):
          name = inp[1:]
          if name not in new and inp not in input_map:
            with self.graph.as_default():
              input_map[inp] = graph_util.control_stub(
                  self.graph, name, self._stubs, f"tensorbow/control/{name}")
          continue
        name, _, index = inp.partition(":")
        if name not in new:
          input_map[inp] = self.graph.get_tensor_by_name(
              f"{name}:{index or 0}")
    with self.graph.as_default():
      tf.compat.v1.import_graph_def(graph_def, input_map=input_map or None,
                                    name="")
    self._imported.update(new)
    self.version = version
    self._keep_static_shapes(new)

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
    """This graph's tensor named as the user's `tensor`."""
    return self.graph.get_tensor_by_name(tensor.name)

  def op(self, op):
    """This graph's op named as the user's `op`."""
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
