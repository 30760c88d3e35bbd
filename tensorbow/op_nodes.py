"""NodeDefs of TensorBow's ops, built from inputs and attrs given by name.

The rewrite (rewrite/, algorithms/) writes the execution graph's TensorBow
ops as NodeDefs; the kernel tests build the same ops through ops.py. Both
name every input and attr as the op's `REGISTER_OP` (cc/ops/) does, the
one definition of an op's inputs: `node_def` orders what it is given by
the OpDef the loaded library registered, so no caller restates an op's
input order, and a name the op does not have fails where the node is
built, not at import or in a kernel. `input_names` reads any NodeDef's
inputs by the same names, to hand an optimizer's apply op's inputs on to
the TensorBow op replacing it.

TensorFlow 2 no longer returns the library's `OP_LIST` from
`tf.load_op_library`; the OpDefs come from TensorFlow's op registry
(compat.op_def), for the op types the library defines.
"""
import tensorflow as tf

from tensorbow import compat
from tensorbow import ops as tb_ops


def op_def(op_type):
  """The OpDef of TensorBow's op `op_type`, as cc/ops/ registers it.

  Raises:
    ValueError: if TensorBow's library defines no op `op_type`.
  """
  definition = compat.op_def(op_type)
  if (definition is None or not op_type.startswith("TensorBow") or
      not hasattr(tb_ops.library(), op_type)):
    raise ValueError(f"{op_type!r} is not an op of TensorBow's library "
                     "(cc/ops/)")
  return definition


def node_def(op_type, name, device="", control=(), **args):
  """The NodeDef `name` of TensorBow op `op_type`.

  Args:
    op_type: a TensorBow op type (`TensorBowResourceApplySmaMomentum`).
    name: the node's name.
    device: its device.
    control: names of the ops it waits for (no "^").
    **args: every input and attr of the op by its name in cc/ops/, as the
      library's generated functions take them: an input as the name of
      the tensor it reads ("op:0"), a list input as a list of them (its
      number attr, e.g. N, is set from its length); an attr as an
      `AttrValue`, or a Python value of the attr's type (a `tf.DType`
      for `type`, a shape for `shape`, str or bytes for `string`, ...).
      An attr given as None, or not given, keeps its default.

  Returns:
    The NodeDef, its inputs in the op's order, then `control`.

  Raises:
    ValueError: for an op TensorBow does not define, a name the op has
      neither as an input nor as an attr, a missing input or attr without
      a default, a list input given a single name or the other way round,
      or a control input written with "^".
    TypeError: for an attr value of the wrong kind.
  """
  definition = op_def(op_type)
  _check_names(op_type, name, definition, args)
  node = tf.compat.v1.NodeDef(name=name, op=op_type, device=device)
  for arg in definition.input_arg:
    node.input.extend(_input_tensors(op_type, name, arg, args[arg.name]))
  node.input.extend(_control_inputs(op_type, name, control))
  counts = {arg.number_attr: len(args[arg.name])
            for arg in definition.input_arg if arg.number_attr}
  for attr in definition.attr:
    value = _attr_value(op_type, name, attr, args.get(attr.name),
                        counts.get(attr.name))
    if value is not None:
      _set_attr(node.attr[attr.name], attr.type, value, op_type, attr.name)
  return node


def _check_names(op_type, name, definition, args):
  """Raises ValueError if `args` names what op `op_type` (OpDef
  `definition`) has neither as an input nor as an attr, or leaves out an
  input of node `name`: an input has no default."""
  inputs = [arg.name for arg in definition.input_arg]
  attrs = {attr.name: attr for attr in definition.attr}
  unknown = sorted(set(args) - set(inputs) - set(attrs))
  if unknown:
    raise ValueError(
        f"{op_type} has no input or attr {', '.join(map(repr, unknown))}; "
        f"its inputs are {', '.join(inputs)} and its attrs "
        f"{', '.join(attrs)}")
  missing = [n for n in inputs if n not in args]
  if missing:
    raise ValueError(f"{op_type} '{name}' needs input(s) "
                     f"{', '.join(missing)}")


def _input_tensors(op_type, name, arg, given):
  """The tensor names `given` for input `arg` of op `op_type`'s node
  `name`, as a list; raises ValueError for a list input given a single
  name or the other way round."""
  is_list = isinstance(given, (list, tuple))
  if is_list != bool(arg.number_attr or arg.type_list_attr):
    raise ValueError(
        f"{op_type} '{name}': input {arg.name} takes "
        f"{'a list of tensor names' if not is_list else 'one tensor name'}"
        f", got {given!r}")
  return given if is_list else [given]


def _control_inputs(op_type, name, control):
  """The control inputs ("^" and the op's name) of op `op_type`'s node
  `name` waiting for the ops `control` names; raises ValueError for a
  name written with "^", so that no caller writes one twice."""
  inputs = []
  for c in control:
    if c.startswith("^"):
      raise ValueError(f"{op_type} '{name}': give control input {c!r} "
                       "without its '^'")
    inputs.append("^" + c)
  return inputs


def _attr_value(op_type, name, attr, given, count):
  """What attr `attr` of op `op_type`'s node `name` is set to: `given`,
  or, for a list input's number attr, `count`, the list's length; None
  keeps the attr's default.

  Raises:
    ValueError: for a number attr given other than its list's length, or
      an attr without a default not given.
  """
  value = given
  if count is not None:
    if given is not None and given != count:
      raise ValueError(f"{op_type} '{name}': {attr.name}={given!r} but "
                       f"its list input has {count} names")
    value = count
  if value is None and not attr.HasField("default_value"):
    raise ValueError(f"{op_type} '{name}' needs attr {attr.name} "
                     f"({attr.type})")
  return value

def _set_attr(out, attr_type, value, op_type, attr_name):
  if isinstance(value, tf.compat.v1.AttrValue):
    out.CopyFrom(value)
  elif attr_type == "type":
    out.type = tf.as_dtype(value).as_datatype_enum
  elif attr_type == "int" and isinstance(value, int):
    out.i = value
  elif attr_type == "bool" and isinstance(value, bool):
    out.b = value
  elif attr_type == "float" and isinstance(value, (int, float)):
    out.f = value
  elif attr_type == "string" and isinstance(value, (str, bytes)):
    out.s = value.encode() if isinstance(value, str) else value
  elif attr_type == "shape":
    out.shape.CopyFrom(tf.TensorShape(value).as_proto())
  elif attr_type == "list(string)" and isinstance(value, (list, tuple)):
    out.list.s.extend(v.encode() if isinstance(v, str) else v for v in value)
  else:
    raise TypeError(f"{op_type}: attr {attr_name} ({attr_type}) cannot be "
                    f"set from {value!r}; give an AttrValue")


def input_names(node):
  """The name in its op's OpDef of each data input of NodeDef `node`, in
  order (a list input's name once per tensor): of TensorBow's ops and
  TensorFlow's alike.

  Raises:
    ValueError: for an op type no library registered.
  """
  return [arg for arg, count, _ in _input_args(node) for _ in range(count)]


def named_inputs(node):
  """{input name: tensor name} of NodeDef `node`'s data inputs, a list of
  tensor names for a list input (see `input_names`)."""
  data = iter(i for i in node.input if not i.startswith("^"))
  named = {}
  for arg, count, is_list in _input_args(node):
    tensors = [next(data) for _ in range(count)]
    named[arg] = tensors if is_list else tensors[0]
  return named


def control_names(node):
  """The names of the ops NodeDef `node` waits for (its "^" inputs)."""
  return [i[1:] for i in node.input if i.startswith("^")]


def _input_args(node):
  """[(input name, how many tensors, whether a list)] of NodeDef `node`."""
  definition = compat.op_def(node.op)
  if definition is None:
    raise ValueError(f"no op {node.op!r} is registered (node '{node.name}')")
  args = []
  for arg in definition.input_arg:
    length = arg.number_attr or arg.type_list_attr
    if length and length not in node.attr:
      raise ValueError(f"node '{node.name}' ({node.op}) has no attr "
                       f"{length}, the length of its input {arg.name}")
    if arg.number_attr:
      count = node.attr[length].i
    elif arg.type_list_attr:
      count = len(node.attr[length].list.type)
    else:
      count = 1
    args.append((arg.name, count, bool(length)))
  return args
