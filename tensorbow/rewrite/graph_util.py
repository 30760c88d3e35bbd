"""Small graph helpers shared by the copier, the replica state, the
algorithms and the execution graph: reading, writing and making variables
by their op, ordering without `tf.control_dependencies`, and errors named
as the user's ops."""
import tensorflow as tf

from tensorbow import compat


def after(ops, name, made=None):
  """`made` (an op or tensor; default a new NoOp) named `name`, run after
  `ops`.

  Not by `tf.control_dependencies`: that marks its ops with an attribute,
  a change TensorFlow warns about (and will refuse) for ops a session has
  run. Only the new op is changed here.
  """
  if made is None:
    made = tf.no_op(name=name)
  else:
    made = tf.identity(made, name=name)
  op = made if isinstance(made, tf.Operation) else made.op
  compat.add_control_inputs(op, ops)
  return made


def control_stub(graph, name, stubs, stub_name):
  """A tensor of `graph` whose op waits for op `name`: its first output,
  or a constant made once (kept in `stubs`) named `stub_name`, for an op
  with none. A control input given to an import is mapped to one."""
  op = graph.get_operation_by_name(name)
  if op.outputs:
    return op.outputs[0]
  if name not in stubs:
    stubs[name] = after([op], stub_name, tf.constant(0))
  return stubs[name]


def without_colocation(node):
  """`node` (a NodeDef, changed in place) placed by its own device alone:
  an import would fail on colocation with ops outside it."""
  if "_class" in node.attr:
    del node.attr["_class"]
  return node


def error_at(error, op, message=None):
  """`error` raised again for `op` (None: no op), as TensorFlow's
  `Session.run` raises it for the op that failed."""
  return type(error)(op.node_def if op is not None else None, op,
                     error.message if message is None else message)


def resource(name, dtype, shape):
  """A resource variable of TensorBow's own, named `name`."""
  return tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, shared_name=name,
                                name=name)


def dtype_and_shape(var_op):
  """(base dtype, shape) of variable op `var_op`."""
  dtype = tf.as_dtype(var_op.get_attr("dtype"))
  shape = tf.TensorShape(var_op.get_attr("shape"))
  return dtype.base_dtype, shape


def read(var_op):
  """The value of variable op `var_op` (ref or resource)."""
  if var_op.type == "VarHandleOp":
    return tf.raw_ops.ReadVariableOp(resource=var_op.outputs[0],
                                     dtype=var_op.get_attr("dtype"))
  return tf.identity(var_op.outputs[0])


def assign(var_op, value):
  """Op assigning `value` to variable op `var_op` (ref or resource)."""
  if var_op.type == "VarHandleOp":
    return tf.raw_ops.AssignVariableOp(resource=var_op.outputs[0], value=value)
  return tf.raw_ops.Assign(ref=var_op.outputs[0], value=value).op


def closure(fetch_ops, fed_names, controls=True):
  """Every op executed to produce `fetch_ops`, as TensorFlow prunes it.

  Args:
    fetch_ops: operations fetched or targeted.
    fed_names: names of fed tensors; their producers do not run.
    controls: whether to follow control inputs; without, the ops whose
      values `fetch_ops` are computed from.

  Returns:
    A list of operations in dependency order (inputs first).
  """
  seen = set()
  order = []
  stack = [(op, False) for op in fetch_ops]
  while stack:
    op, expanded = stack.pop()
    if expanded:
      order.append(op)
      continue
    if op.name in seen:
      continue
    seen.add(op.name)
    stack.append((op, True))
    if any(t.name in fed_names for t in op.outputs):
      continue
    for t in op.inputs:
      if t.op.name not in seen:
        stack.append((t.op, False))
    for c in op.control_inputs if controls else ():
      if c.name not in seen:
        stack.append((c, False))
  return order
