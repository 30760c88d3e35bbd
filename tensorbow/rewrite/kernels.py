"""Faster equivalents of slow TensorFlow kernels, used in the replicas.

At a small batch, TensorFlow's Eigen MatMul is slow for a product A·Bᵀ
whose B is a tall weight matrix: the input gradient of a dense layer,
dX = dY·Wᵀ. For LeNet's fc1 (dY 4x512, W 3136x512) it took 10.7 ms on a
2-core AMD EPYC (Zen 3, TensorFlow 2.21 without oneDNN), half of a whole
training step, while the same numbers computed as (W·dYᵀ)ᵀ took 1.4 ms
(and 4.4 ms against 12.3 ms at 64 rows, 17 ms against 20 ms at 256; only a
single row, which Eigen computes as a matrix-vector product, is slower,
0.66 ms against 0.51 ms). `benchmarks/matmul_shapes.py` measures it.

The replicas' copies of such MatMuls compute (B·Aᵀ)ᵀ instead: a MatMul and
a Transpose, both TensorFlow's own kernels, under the original name, so
every consumer is unchanged. The result is the same product, rounded in
another order. The user's graph, which every plain run uses, is left as
written. `TENSORBOW_FAST_KERNELS=0` turns the substitution off, to measure
what it brings.
"""
import os

import tensorflow as tf

# Rows of B from which (B·Aᵀ)ᵀ is used; below it Eigen's blocking is fine.
MIN_TALL_ROWS = 1024
# Rows of A (when known) up to which it is used: a small batch.
MAX_BATCH_ROWS = 256


def enabled():
  """Whether replicas use the faster equivalents (TENSORBOW_FAST_KERNELS)."""
  return os.environ.get("TENSORBOW_FAST_KERNELS", "1") != "0"


def applies(op):
  """Whether `substitute` has a faster equivalent for `op`."""
  return op.type == "MatMul" and _is_small_times_tall_transposed(op)


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
  if not applies(op):
    return None
  a, b = [i for i in node.input if not i.startswith("^")]
  control = [i for i in node.input if i.startswith("^")]
  product = tf.compat.v1.NodeDef()
  product.CopyFrom(node)
  product.name = node.name + ">tensorbow_transposed"
  del product.input[:]
  product.input.extend([b, a] + control)
  product.attr["transpose_a"].b = False
  product.attr["transpose_b"].b = True
  for attr in ("grad_a", "grad_b"):
    if attr in product.attr:
      product.attr[attr].b = False
  perm = tf.compat.v1.NodeDef(name=node.name + ">tensorbow_perm", op="Const",
                              device=node.device)
  perm.attr["dtype"].type = tf.int32.as_datatype_enum
  perm.attr["value"].tensor.CopyFrom(
      tf.make_tensor_proto([1, 0], dtype=tf.int32))
  transpose = tf.compat.v1.NodeDef(name=node.name, op="Transpose",
                                   device=node.device)
  transpose.input.extend([product.name, perm.name])
  transpose.attr["T"].CopyFrom(node.attr["T"])
  transpose.attr["Tperm"].type = tf.int32.as_datatype_enum
  return [product, perm, transpose]


def _is_small_times_tall_transposed(op):
  """A·Bᵀ with B tall (>= MIN_TALL_ROWS rows) and A a small batch."""
  if op.get_attr("transpose_a") or not op.get_attr("transpose_b"):
    return False
  a_shape, b_shape = op.inputs[0].shape, op.inputs[1].shape
  if b_shape.rank != 2 or b_shape[0] is None or b_shape[0] < MIN_TALL_ROWS:
    return False
  rows = a_shape[0] if a_shape.rank == 2 else None
  return rows is None or 1 < rows <= MAX_BATCH_ROWS


def faster_graph_def(graph):
  """`graph` as a GraphDef with every op that `applies` to substituted.

  For benchmarks and tests: plain TensorFlow on the kernels the replicas
  use. TensorBowSession itself never changes the user's graph this way.
  """
  graph_def = tf.compat.v1.GraphDef()
  graph_def.versions.CopyFrom(graph.graph_def_versions)
  for op in graph.get_operations():
    for node in substitute(op.node_def, op) or [op.node_def]:
      graph_def.node.add().CopyFrom(node)
  return graph_def
