"""Faster equivalents of slow TensorFlow kernels, used in the replicas.

TensorFlow's CPU kernels are tuned for large batches; at the small batch
of one replica some take several times what the arithmetic needs. The
replicas' copies of these ops compute the same values another way, under
the original name, so every consumer is unchanged (results differ only in
rounding order). The user's graph, which every plain run uses, is left as
written. By default each substitute the rules below pick is kept only
where it times faster than TensorFlow's kernel on the machine at hand
(kernel_choice.py); `TENSORBOW_FAST_KERNELS=all` keeps every one, and
`TENSORBOW_FAST_KERNELS=0` turns them off, to measure what they bring.
The rules came from timing each shape against TensorFlow's kernel
(`benchmarks/matmul_shapes.py`, `conv_shapes.py`, `step_profile.py`; the
figures are in benchmarks/RESULTS.md):

* **MatMul** with a small batch (at most `SMALL` rows of the product, or
  that inner dimension, or either unknown in the graph): TensorBow's own
  `TensorBowMatMul` (cc/kernels/small_matmul.h), which reads the weight
  once and writes the product once. It pays most for the input gradient
  dY·Wᵀ of a wide layer (LeNet's fc1), and for the weight gradient xᵀ·dY
  (a small inner dimension) inside a training step; alone, with its
  operands in cache, that one and the forward product are about even. At
  run time the kernel hands larger shapes to TensorFlow's MatMul kernel.
* **Conv2DBackpropFilter**, stride 1, 'SAME' with an odd kernel: the
  filter gradient is a convolution of the padded input, batch and channels
  swapped, with the output gradient as the filter (a Pad, two Transposes,
  a Conv2D and a Transpose). Faster for LeNet's conv2 at every batch size
  measured, never slower.
* **Conv2DBackpropInput**, the same convolutions, with at least
  `MIN_INPUT_GRAD_WINDOW` map pixels times kernel pixels and at least
  `MIN_INPUT_GRAD_CHANNELS` input channels: the input gradient is the
  forward convolution of the output gradient with the filter flipped and
  its channels swapped. Faster for LeNet's conv2 (14x14, 5x5, 32 -> 64)
  and ResNet's 32x32 3x3 stage; smaller maps (ResNet's 16x16 and 8x8
  stages) and a single input channel (LeNet's conv1) were slower that
  way, so those are left to TensorFlow.
* **Momentum and plain SGD updates of a dense weight** whose gradient is
  a MatMul xᵀ·dy over a small batch (`outer_applies`): TensorBow's apply
  op takes x and dy and applies the gradient as it is made, so the
  gradient, as large as the weight, is never written and read back. An
  algorithm whose `fuses_outer` says so (SMA) turns that op into its own.
"""
import collections
import os

import tensorflow as tf

from tensorbow import compat
from tensorbow import op_nodes

# TensorBowMatMul's small dimension (small_matmul::kMaxSmall).
SMALL = 16
# Conv2DBackpropInput is replaced from this many feature-map pixels times
# kernel pixels (LeNet's conv2: 14 * 14 * 5 * 5 = 4900; ResNet's first
# stage: 32 * 32 * 3 * 3 = 9216, its second 2304) and input channels.
MIN_INPUT_GRAD_WINDOW = 4096
MIN_INPUT_GRAD_CHANNELS = 8
_FLOATS = (tf.float32, tf.float64)


def enabled():
  """Whether replicas use the faster equivalents (TENSORBOW_FAST_KERNELS)."""
  return os.environ.get("TENSORBOW_FAST_KERNELS", "1") != "0"


def measured():
  """Whether each equivalent is kept only where timing it against
  TensorFlow's kernel says it is faster (kernel_choice.py): the default;
  TENSORBOW_FAST_KERNELS=all keeps every one the rules below pick."""
  return enabled() and os.environ.get("TENSORBOW_FAST_KERNELS") != "all"


def applies(op):
  """Whether `substitute` has a faster equivalent for `op`."""
  return _rule(op) is not None


def substitute(node, op):
  """NodeDefs computing `node` (a copy of `op`) faster, or None.

  Args:
    node: the NodeDef being copied into a replica (name and inputs already
      those of the copy).
    op: the user's `tf.Operation` it copies, for static shapes.

  Returns:
    A list of NodeDefs whose last one takes `node`'s name, or None to keep
    `node` as it is.
  """
  rule = _rule(op)
  return None if rule is None else rule(node, op)


def faster_graph_def(graph):
  """`graph` as a GraphDef with every op that `applies` to substituted.

  For benchmarks and tests: plain TensorFlow on the kernels the replicas
  use. TensorBowSession itself never changes the user's graph this way.
  """
  graph_def = tf.compat.v1.GraphDef()
  graph_def.versions.CopyFrom(graph.graph_def_versions)
  fused = outer_applies(graph.get_operations())
  dropped = unwaited(fused)
  for op in graph.get_operations():
    node = tf.compat.v1.NodeDef()
    node.CopyFrom(op.node_def)
    inputs = [i for i in node.input if i not in dropped]
    del node.input[:]
    node.input.extend(inputs)
    if op.name in fused:
      nodes = outer_apply(node, op, fused[op.name], dropped)
    else:
      nodes = substitute(node, op) or [node]
    for out in nodes:
      graph_def.node.add().CopyFrom(out)
  return graph_def


# ---- Which ops ---------------------------------------------------------------


def _rule(op):
  if op.type == "MatMul" and _is_small_batch_matmul(op):
    return _matmul
  if op.type == "Conv2DBackpropFilter" and _is_plain_same_conv(op):
    return _conv_filter_grad
  if op.type == "Conv2DBackpropInput" and _is_plain_same_conv(op):
    kh, kw = _kernel_size(op)
    dims = _dims(op.outputs[0], 4)
    if (dims is not None and None not in dims[1:] and
        dims[1] * dims[2] * kh * kw >= MIN_INPUT_GRAD_WINDOW and
        dims[3] >= MIN_INPUT_GRAD_CHANNELS):
      return _conv_input_grad
  return None


def _dims(tensor, rank):
  """`tensor`'s static dims (None where unknown) if its rank is `rank`.

  Read through as_list(): under v1 behaviour indexing a TensorShape gives
  a Dimension, which is never None.
  """
  shape = tensor.shape
  return shape.as_list() if shape.rank == rank else None


def _small(dim):
  return dim is None or dim <= SMALL


def _is_small_batch_matmul(op):
  """A float product with few (or unknown) rows or a small inner dimension."""
  if op.get_attr("T") not in _FLOATS:
    return False
  a = _dims(op.inputs[0], 2)
  if a is None:
    return False
  rows, depth = reversed(a) if op.get_attr("transpose_a") else a
  return _small(rows) or _small(depth)


def _is_plain_same_conv(op):
  """NHWC, float, stride and dilation 1, 'SAME' with an odd kernel (or 1x1).

  Not inside a while loop or cond: the equivalents add Consts, which would
  need the control-flow context's frame.
  """
  if compat.in_control_flow(op):
    return False
  if op.get_attr("T") not in _FLOATS:
    return False
  if op.get_attr("data_format") not in (b"NHWC", "NHWC"):
    return False
  if list(op.get_attr("strides")) != [1, 1, 1, 1]:
    return False
  if list(op.get_attr("dilations")) != [1, 1, 1, 1]:
    return False
  kh, kw = _kernel_size(op)
  if kh is None or kw is None:
    return False
  padding = op.get_attr("padding")
  padding = padding.decode() if isinstance(padding, bytes) else padding
  if padding == "SAME":
    return kh % 2 == 1 and kw % 2 == 1
  return padding == "VALID" and kh == 1 and kw == 1


def _kernel_size(op):
  """(height, width) of a convolution gradient's filter, None if unknown."""
  filter_ = op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1]
  dims = _dims(filter_, 4)
  return (None, None) if dims is None else (dims[0], dims[1])


# ---- The equivalents ---------------------------------------------------------


def _matmul(node, op):
  del op  # the kernel picks its loops from the shapes at run time
  given = op_nodes.named_inputs(node)
  return [op_nodes.node_def(
      "TensorBowMatMul", node.name, device=node.device,
      control=op_nodes.control_names(node), a=given["a"], b=given["b"],
      T=node.attr["T"], transpose_a=node.attr["transpose_a"],
      transpose_b=node.attr["transpose_b"])]


def _conv_input_grad(node, op):
  """dX = conv2d(dY, W flipped in space, in/out channels swapped), 'SAME'."""
  _, filter_, grad = _data_inputs(node)
  control = _control_inputs(node)
  axes = _const(node, "flip_axes", [0, 1])
  flipped = _node(node, "flipped", "ReverseV2", [filter_, axes.name] + control,
                  T=node.attr["T"], Tidx=_type(tf.int32))
  perm = _const(node, "swap_perm", [0, 1, 3, 2])
  swapped = _node(node, "swapped", "Transpose", [flipped.name, perm.name],
                  T=node.attr["T"], Tperm=_type(tf.int32))
  conv = _conv2d(node, None, [grad, swapped.name], "SAME")
  return [axes, flipped, perm, swapped, conv]


def _conv_filter_grad(node, op):
  """dW from conv2d(pad(X) as [C, H', W', B], dY as [H, W, B, O]), 'VALID'."""
  inputs, _, grad = _data_inputs(node)
  control = _control_inputs(node)
  kh, kw = _kernel_size(op)
  paddings = _const(node, "paddings", [[0, 0], [(kh - 1) // 2] * 2,
                                       [(kw - 1) // 2] * 2, [0, 0]])
  padded = _node(node, "padded", "Pad", [inputs, paddings.name] + control,
                 T=node.attr["T"], Tpaddings=_type(tf.int32))
  input_perm = _const(node, "input_perm", [3, 1, 2, 0])
  input_t = _node(node, "input_t", "Transpose", [padded.name, input_perm.name],
                  T=node.attr["T"], Tperm=_type(tf.int32))
  grad_perm = _const(node, "grad_perm", [1, 2, 0, 3])
  grad_t = _node(node, "grad_t", "Transpose", [grad, grad_perm.name] + control,
                 T=node.attr["T"], Tperm=_type(tf.int32))
  product = _conv2d(node, "product", [input_t.name, grad_t.name], "VALID")
  out = _node(node, None, "Transpose", [product.name, grad_perm.name],
              T=node.attr["T"], Tperm=_type(tf.int32))
  return [paddings, padded, input_perm, input_t, grad_perm, grad_t, product,
          out]


def _data_inputs(node):
  return [i for i in node.input if not i.startswith("^")]


def _control_inputs(node):
  return [i for i in node.input if i.startswith("^")]


def _type(dtype):
  value = tf.compat.v1.AttrValue()
  value.type = dtype.as_datatype_enum
  return value


def _node(like, suffix, op_type, inputs, **attrs):
  """A NodeDef named `<like>>tensorbow_<suffix>` (or `like`'s own name)."""
  node = tf.compat.v1.NodeDef(
      name=like.name if suffix is None else f"{like.name}>tensorbow_{suffix}",
      op=op_type, device=like.device)
  node.input.extend(inputs)
  for key, value in attrs.items():
    node.attr[key].CopyFrom(value)
  return node


def _const(like, suffix, value):
  node = _node(like, suffix, "Const", [], dtype=_type(tf.int32))
  node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, tf.int32))
  return node


def _conv2d(like, suffix, inputs, padding):
  """A stride-1 NHWC Conv2D named as `_node` names it."""
  node = _node(like, suffix, "Conv2D", inputs, T=like.attr["T"])
  node.attr["strides"].list.i.extend([1, 1, 1, 1])
  node.attr["dilations"].list.i.extend([1, 1, 1, 1])
  node.attr["padding"].s = padding.encode()
  node.attr["data_format"].s = b"NHWC"
  return node


# ---- A dense layer's weight gradient applied as it is made -------------------

# Apply op -> (the TensorBow op taking the gradient as aᵀ·b, the name of
# the apply op's gradient input). The TensorBow op takes the apply op's
# other inputs by the same names.
_OUTER_APPLIES = {
    "ApplyMomentum": ("TensorBowApplyMomentumOuter", "grad"),
    "ResourceApplyMomentum": ("TensorBowResourceApplyMomentumOuter", "grad"),
    "ApplyGradientDescent": ("TensorBowApplyGradientDescentOuter", "delta"),
    "ResourceApplyGradientDescent": (
        "TensorBowResourceApplyGradientDescentOuter", "delta"),
}


# A fusable apply op's MatMul and the control inputs ("^name") of the
# MatMul and of the Identity ops between them, which the fused op takes
# over.
Outer = collections.namedtuple("Outer", ["matmul", "waits"])


def outer_applies(ops):
  """{apply op name: Outer} for the apply ops among `ops` that can take
  their gradient as the factors of the MatMul making it.

  The weight gradient of a dense layer y = x·W is xᵀ·dy; at a small batch
  writing it out and reading it back costs more than the product. An apply
  op qualifies if its gradient comes from such a MatMul (transpose_a, not
  transpose_b; through Identity ops, as tf.gradients' gating adds) that
  nothing else consumes, its inner dimension (the batch) small or unknown,
  and all of them among `ops` outside control flow. The MatMul stays in
  the graph for any fetch of it; only the apply op stops reading it. What
  the skipped Identity ops and the MatMul waited for, the fused op waits
  for: with tf.gradients' gating, the layer's input gradient, which reads
  the weight before the update.
  """
  names = set(op.name for op in ops)
  found = {}
  for op in ops:
    if op.type not in _OUTER_APPLIES:
      continue
    grad = _OUTER_APPLIES[op.type][1]
    tensor = op.inputs[op_nodes.input_names(op.node_def).index(grad)]
    consumer = op
    waits = []
    while (tensor.op.type == "Identity" and tensor.op.name in names and
           tensor.consumers() == [consumer]):
      consumer = tensor.op
      waits += _control_inputs(consumer.node_def)
      tensor = tensor.op.inputs[0]
    matmul = tensor.op
    if (matmul.type == "MatMul" and matmul.name in names and
        tensor.consumers() == [consumer] and
        matmul.get_attr("transpose_a") and
        not matmul.get_attr("transpose_b") and
        matmul.get_attr("T") in _FLOATS and
        matmul.get_attr("T") == op.get_attr("T") and
        not any(compat.in_control_flow(o) for o in (op, matmul)) and
        _dims(matmul.inputs[0], 2) is not None and
        _small(_dims(matmul.inputs[0], 2)[0])):
      found[op.name] = Outer(matmul,
                             waits + _control_inputs(matmul.node_def))
  return found


def unwaited(fused):
  """The control inputs ("^name") nothing needs to wait for once the apply
  ops of `fused` ({name: Outer}) are fused: their MatMuls, which only those
  apply ops read (tf.gradients' gating waits for them); waiting for a value
  with no effects changes no result."""
  return set("^" + outer.matmul.name for outer in fused.values())


def outer_apply(node, op, outer, dropped, resolve=lambda name: name):
  """The NodeDefs of TensorBow's apply op replacing `node` (a copy of apply
  op `op`), its gradient given as the factors of `outer.matmul`, and
  waiting for `outer.waits` but those in `dropped` (see `unwaited`);
  `resolve` maps the user graph's input names to the copy's.

  The waits are put on an Identity of the first factor, as tf.gradients'
  gating puts them on the gradient: an apply op waiting on a computation
  through a control dependency could not run in a commit of its own
  (phases.split).
  """
  factors = op_nodes.named_inputs(outer.matmul.node_def)
  a, b = resolve(factors["a"]), resolve(factors["b"])
  waits = [resolve(w) for w in outer.waits if w not in dropped]
  op_type, grad = _OUTER_APPLIES[op.type]
  nodes = []
  if waits:
    gate = _node(node, "gated", "Identity", [a] + list(dict.fromkeys(waits)),
                 T=node.attr["T"])
    nodes.append(gate)
    a = gate.name + ":0"
  given = op_nodes.named_inputs(node)
  del given[grad]
  fused = op_nodes.node_def(
      op_type, node.name, device=node.device,
      control=op_nodes.control_names(node), **given, a=a, b=b,
      T=node.attr["T"], **{attr: node.attr[attr] for attr in (
          "use_locking", "use_nesterov") if attr in node.attr})
  return nodes + [fused]
