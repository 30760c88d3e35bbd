"""Python wrappers of TensorBow's ops (cc/ops/).

For the SMA ops (cc/ops/sma_ops.cc) each wrapper picks the resource form
(`TensorBowResource...`) for a resource handle and the reference form for
a reference variable, like TensorFlow's `ResourceApply...` / `Apply...`
pairs. The maths of each op is in its docstring; the kernels are in
cc/kernels/. `mat_mul` is the small-batch matrix product of
cc/ops/matmul_ops.cc, `apply_outer` the dense update taking its gradient
as two factors.

Every wrapper passes each input and attr by its name in cc/ops/, as the
rewrite's NodeDefs name them (op_nodes.py): the op's `REGISTER_OP` is the
one definition of its input order, for the kernel tests and the execution
graph alike.
"""
import glob
import os

import tensorflow as tf

_LIBRARY = None


# A directory holding the built libraries to load instead of the package's
# own (pip's build): e.g. the one scripts/bazel_build.sh prints.
LIBRARY_DIR_ENV = "TENSORBOW_LIBRARY_DIR"


def library_file(stem):
  """The path of TensorBow's built library `stem` (`_sma_ops`, `_runtime`).

  Raises:
    ImportError: if it was not built.
  """
  where = os.environ.get(LIBRARY_DIR_ENV) or os.path.dirname(__file__)
  found = sorted(glob.glob(os.path.join(where, stem + "*.so")))
  if not found:
    raise ImportError(
        f"TensorBow's library {stem}*.so is missing from {where}; build it "
        "with `pip install --no-build-isolation .` from the TensorBow "
        f"checkout (or scripts/bazel_build.sh, with ${LIBRARY_DIR_ENV} "
        "naming the directory it prints)")
  return found[0]


def library():
  """The loaded op library (loaded on first use).

  Raises:
    ImportError: if the library was not built.
  """
  global _LIBRARY
  if _LIBRARY is None:
    _LIBRARY = tf.load_op_library(library_file("_sma_ops"))
  return _LIBRARY


def _is_resource(var):
  return var.dtype == tf.resource


def apply_sma_gradient_descent(var, correction, central, alpha, lr, delta,
                               use_locking=False, name=None):
  """One replica's SGD step with its SMA correction.

    c = alpha * (var - central);  correction = c
    var = var - lr * delta - c

  Args:
    var: the replica's variable (resource handle or ref).
    correction: resource handle of the replica's correction buffer.
    central: the central model's value (a tensor of var's shape).
    alpha, lr: scalars.
    delta: the gradient.
    use_locking: hold the variables' locks for the update.
    name: op name.

  Returns:
    The op (resource form) or the updated ref (reference form).
  """
  op = (library().tensor_bow_resource_apply_sma_gradient_descent
        if _is_resource(var) else
        library().tensor_bow_apply_sma_gradient_descent)
  return op(var=var, correction=correction, central=central, alpha=alpha,
            lr=lr, delta=delta, use_locking=use_locking, name=name)


def apply_sma_momentum(var, accum, correction, central, alpha, lr, grad,
                       momentum, use_locking=False, use_nesterov=False,
                       name=None):
  """One replica's momentum step with its SMA correction.

    c = alpha * (var - central);  correction = c
    accum = momentum * accum + grad
    var = var - lr * accum - c                          (use_nesterov=False)
    var = var - lr * grad - lr * momentum * accum - c   (use_nesterov=True)

  Args and Returns as `apply_sma_gradient_descent`; `accum` is the momentum
  slot, of var's kind.
  """
  op = (library().tensor_bow_resource_apply_sma_momentum if _is_resource(var)
        else library().tensor_bow_apply_sma_momentum)
  return op(var=var, accum=accum, correction=correction, central=central,
            alpha=alpha, lr=lr, grad=grad, momentum=momentum,
            use_locking=use_locking, use_nesterov=use_nesterov, name=name)


def sma_correction(var, correction, central, alpha, use_locking=False,
                   name=None):
  """correction = alpha * (var - central), before any optimizer's apply op."""
  op = (library().tensor_bow_resource_sma_correction if _is_resource(var)
        else library().tensor_bow_sma_correction)
  return op(var=var, correction=correction, central=central, alpha=alpha,
            use_locking=use_locking, name=name)


def apply_sma_correction(var, correction, dtype=None, use_locking=False,
                         name=None):
  """var = var - correction, after the optimizer's apply op.

  `dtype` (the variables' dtype) is required for resource handles, which
  do not carry it.
  """
  if _is_resource(var):
    if dtype is None:
      raise ValueError("apply_sma_correction needs `dtype` for resource "
                       "variables")
    return library().tensor_bow_resource_apply_sma_correction(
        var=var, correction=correction, T=dtype, use_locking=use_locking,
        name=name)
  return library().tensor_bow_apply_sma_correction(
      var=var, correction=correction, use_locking=use_locking, name=name)


def apply_sma_central(central, central_prev, corrections, momentum,
                      use_locking=False, name=None):
  """The central model's SMA update (reference-variable form).

    z_new = z + sum_j c_j + momentum * (z - z_prev);  z_prev = z;  z = z_new
  """
  return library().tensor_bow_apply_sma_central(
      central=central, central_prev=central_prev, corrections=corrections,
      momentum=momentum, use_locking=use_locking, name=name)


def resource_apply_sma_central(central, central_prev, corrections, momentum,
                               use_locking=False, name=None):
  """The central model's SMA update (resource form); see apply_sma_central."""
  return library().tensor_bow_resource_apply_sma_central(
      central=central, central_prev=central_prev, corrections=corrections,
      momentum=momentum, use_locking=use_locking, name=name)


def resource_apply_sma_gradient_descent_with_central(
    var, central, central_prev, next_central, alpha, lr, delta,
    central_momentum, replica, num_replicas, barrier, use_locking=False,
    replica_index=None, first_replica=0, stagger=0, name=None):
  """Replica `replica`'s SGD step, SMA correction and share of the update.

    c = alpha * (var - z);  var = var - lr * delta - c
    next = z + central_momentum * (z - z_prev) + c_0 + ... + c_{L-1}

  the corrections added in replica order whatever order the replicas run
  in. The last of the `num_replicas` replicas of a wave to finish sets
  z_prev = z and z = next, by swapping buffers.

  Args:
    var: resource handle of the replica's variable.
    central, central_prev, next_central: resource handles of z, z_prev and
      the buffer summing the next z.
    alpha, lr, central_momentum: scalars.
    delta: the gradient.
    replica: where this replica's pass over the variable starts: the
      `replica`-th of `stagger` evenly spaced positions (stagger 0:
      num_replicas); also its id, in [0, num_replicas), unless
      `replica_index` gives that.
    num_replicas: L.
    barrier: name of the per-variable count (shared by the L ops).
    use_locking: hold var's lock exclusively for the update.
    replica_index: the replica whose step this is, an int32 scalar in
      [first_replica, first_replica + num_replicas), as the execution
      graph feeds it per learning task; None: `replica`.
    first_replica: the index of the wave's first replica.
    stagger: the number of start positions (the execution graph's: its
      stream groups).
    name: op name.

  Returns:
    The op.
  """
  return library().tensor_bow_resource_apply_sma_gradient_descent_with_central(
      var=var, central=central, central_prev=central_prev, next=next_central,
      alpha=alpha, lr=lr, delta=delta, central_momentum=central_momentum,
      replica_index=replica if replica_index is None else replica_index,
      replica=replica, num_replicas=num_replicas, first_replica=first_replica,
      stagger=stagger, barrier=barrier, use_locking=use_locking, name=name)


def resource_apply_sma_momentum_with_central(
    var, accum, central, central_prev, next_central, alpha, lr, grad,
    momentum, central_momentum, replica, num_replicas, barrier,
    use_locking=False, use_nesterov=False, replica_index=None,
    first_replica=0, stagger=0, name=None):
  """As `resource_apply_sma_gradient_descent_with_central`, with momentum.

    accum = momentum * accum + grad
    var = var - lr * accum - c                          (use_nesterov=False)
    var = var - lr * grad - lr * momentum * accum - c   (use_nesterov=True)
  """
  return library().tensor_bow_resource_apply_sma_momentum_with_central(
      var=var, accum=accum, central=central, central_prev=central_prev,
      next=next_central, alpha=alpha, lr=lr, grad=grad, momentum=momentum,
      central_momentum=central_momentum,
      replica_index=replica if replica_index is None else replica_index,
      replica=replica, num_replicas=num_replicas, first_replica=first_replica,
      stagger=stagger, barrier=barrier, use_locking=use_locking,
      use_nesterov=use_nesterov, name=name)


def mat_mul(a, b, transpose_a=False, transpose_b=False, min_elements=None,
            name=None):
  """product = op(a) · op(b), as `tf.linalg.matmul` of two matrices.

  Its CPU kernel reads the large operand once where the product has few
  rows (a small batch times a weight, or a gradient times a weight's
  transpose) or the inner dimension is small (a weight's gradient over a
  small batch); other shapes run TensorFlow's own MatMul kernel.

  Args:
    a, b: float32 or float64 matrices.
    transpose_a, transpose_b: use the transpose of a (of b).
    min_elements: the small-batch loops run only when op(b) or the product
      has at least this many elements (None: the op's default, 65536);
      smaller products run TensorFlow's kernel, which is faster there.
    name: op name.

  Returns:
    The product, [rows of op(a), columns of op(b)].

  Raises:
    tf.errors.InvalidArgumentError: at run time, for inputs that are not
      matrices or whose inner dimensions differ (ValueError at graph
      construction when the static shapes show it).
  """
  kwargs = {} if min_elements is None else {"min_elements": min_elements}
  return library().tensor_bow_mat_mul(a=a, b=b, transpose_a=transpose_a,
                                      transpose_b=transpose_b, name=name,
                                      **kwargs)


@tf.RegisterGradient("TensorBowMatMul")
def _mat_mul_grad(op, grad):
  """d/da and d/db of op(a) · op(b), as TensorFlow's MatMul gradient."""
  a, b = op.inputs
  transpose_a = op.get_attr("transpose_a")
  transpose_b = op.get_attr("transpose_b")
  if not transpose_a and not transpose_b:
    return (mat_mul(grad, b, transpose_b=True),
            mat_mul(a, grad, transpose_a=True))
  if not transpose_a:
    return mat_mul(grad, b), mat_mul(grad, a, transpose_a=True)
  if not transpose_b:
    return mat_mul(b, grad, transpose_b=True), mat_mul(a, grad)
  return (mat_mul(b, grad, transpose_a=True, transpose_b=True),
          mat_mul(grad, a, transpose_a=True, transpose_b=True))


def apply_outer(var, accum, lr, a, b, momentum=None, use_nesterov=False,
                use_locking=False, name=None):
  """ApplyMomentum (or with `accum` and `momentum` None,
  ApplyGradientDescent) with the gradient aᵀ·b, which is never made whole.

    grad = aᵀ·b   (a: [rows, m], b: [rows, n]; var: [m, n])
    accum = momentum * accum + grad;  var = var - lr * accum
    (use_nesterov: var = var - lr * grad - lr * momentum * accum)

  Args:
    var, accum: variables (resource handles or refs, both of one kind).
    lr: scalar.
    a, b: the gradient's factors; for a dense layer y = x·W, x and dy.
    momentum: scalar, or None for gradient descent.
    use_nesterov, use_locking: as the Apply ops'.
    name: op name.

  Returns:
    The op (resource form) or the updated ref (reference form).
  """
  lib = library()
  resource = _is_resource(var)
  if momentum is None:
    apply = (lib.tensor_bow_resource_apply_gradient_descent_outer if resource
             else lib.tensor_bow_apply_gradient_descent_outer)
    # The op calls its learning rate alpha, as ApplyGradientDescent does.
    return apply(var=var, alpha=lr, a=a, b=b, use_locking=use_locking,
                 name=name)
  apply = (lib.tensor_bow_resource_apply_momentum_outer if resource
           else lib.tensor_bow_apply_momentum_outer)
  return apply(var=var, accum=accum, lr=lr, a=a, b=b, momentum=momentum,
               use_locking=use_locking, use_nesterov=use_nesterov, name=name)
