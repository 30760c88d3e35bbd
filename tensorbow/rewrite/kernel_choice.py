"""Keeps a substitute of `substitutes` only where it is faster on this machine.

Whether TensorBow's kernel (or rewrite) beats TensorFlow's own depends on
the CPU, TensorFlow's build (oneDNN or not) and the shape. When the
replicas' copies are built, each op `substitutes` would substitute is timed
both ways on the shapes a replica runs (unknown dimensions taken as the
replica's rows), in a graph of its own with random inputs: the faster is
kept. Choices are cached per machine (CPU, TensorFlow version, oneDNN
setting) and shape in a JSON file (TENSORBOW_CACHE_DIR, by default
~/.cache/tensorbow), logged at DEBUG and listed by `choices`.
"""
import fcntl
import json
import logging
import os
import platform
import time

import numpy as np
import tensorflow as tf

from tensorbow import ops as tb_ops
from tensorbow.rewrite import substitutes

_CACHE_FILE = "kernel_choices.json"
# Inputs of TF's ops that hold a shape, not data: derived from the output.
_SIZE_INPUTS = {"Conv2DBackpropInput": 0, "Conv2DBackpropFilter": 1}
# Elements of an op's inputs below which one evaluation is too short to
# time alone: a session run's own cost (tens of microseconds) would weigh.
_SMALL_INPUTS = 1 << 16


def _machine():
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  return (f"{cpu}|tf {tf.__version__}|onednn "
          f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')}")


def _timed(graph_def, fetch, values, copies=None, repeats=2, runs=3):
  """Seconds per evaluation of `fetch` in `graph_def`, whose inputs
  "input_<i>:0" are `values`: the least over `repeats` blocks of `runs`
  runs of `copies` copies. The inputs are variables, not constants, which
  TensorFlow would fold before the run; the copies spread the cost of a
  session run (two at a time on TensorFlow's inter-op threads, alike for
  both kernels), which an op on large inputs does not need (None: 4 for
  inputs under _SMALL_INPUTS elements, else 1)."""
  if copies is None:
    copies = 4 if sum(np.size(v) for v in values) < _SMALL_INPUTS else 1
  graph = tf.Graph()
  feeds = {}
  with graph.as_default():
    outputs = []
    for k in range(copies):
      # Inputs of its own per copy: TensorFlow would merge copies of one
      # op on the same inputs.
      reads = {f"input_{i}:0": _variable(f"copy_{k}_input_{i}", value,
                                         feeds).read_value()
               for i, value in enumerate(values)}
      outputs += tf.compat.v1.import_graph_def(
          graph_def, input_map=reads, return_elements=[fetch],
          name=f"copy_{k}")
    # A value, not a group: TensorFlow prunes ops whose results only a
    # control dependency waits for.
    target = tf.add_n([tf.reduce_sum(out) for out in outputs])
    init = tf.compat.v1.global_variables_initializer()
  return _best_seconds(graph, target, (init, feeds), copies, repeats, runs)


def _variable(name, value, feeds):
  """A resource variable initialised to `value` through a placeholder
  (added to `feeds`): as a constant, a layer's weights made the graph
  megabytes, which building and optimising it took a second to handle."""
  initial = tf.compat.v1.placeholder(value.dtype, value.shape,
                                     name=name + "_initial")
  feeds[initial] = value
  return tf.compat.v1.get_variable(name, initializer=initial,
                                   use_resource=True, trainable=False)


def _timed_outer(fused, op_type, a_shape, b_shape, dtype, nesterov, copies=4,
                 repeats=2, runs=3):
  """Seconds per apply op of type `op_type` (a dense one, see
  substitutes.outer_applies) on resource variables with gradient aᵀ·b: as a
  MatMul and TensorFlow's op, or `fused` as TensorBow's op taking a and b.
  Timed as `_timed` times, on `copies` variables of their own."""
  graph = tf.Graph()
  rng = np.random.RandomState(0)
  momentum = "Momentum" in op_type
  feeds = {}
  with graph.as_default():
    applies = []
    for k in range(copies):

      def variable(name, shape):
        return _variable(f"copy_{k}_{name}",
                         rng.uniform(-1, 1, shape).astype(dtype), feeds)

      a, b = variable("a", a_shape), variable("b", b_shape)
      var = variable("var", [a_shape[1], b_shape[1]])
      accum = variable("accum", var.shape.as_list()) if momentum else None
      lr = tf.constant(0.01, dtype)
      if fused:
        applies.append(tb_ops.apply_outer(
            var.handle, accum.handle if momentum else None, lr,
            a.read_value(), b.read_value(),
            tf.constant(0.9, dtype) if momentum else None, nesterov))
      else:
        grad = tf.matmul(a.read_value(), b.read_value(), transpose_a=True)
        if momentum:
          applies.append(tf.raw_ops.ResourceApplyMomentum(
              var=var.handle, accum=accum.handle, lr=lr, grad=grad,
              momentum=tf.constant(0.9, dtype), use_nesterov=nesterov))
        else:
          applies.append(tf.raw_ops.ResourceApplyGradientDescent(
              var=var.handle, alpha=lr, delta=grad))
    target = tf.group(*applies)
    init = tf.compat.v1.global_variables_initializer()
  return _best_seconds(graph, target, (init, feeds), copies, repeats, runs)


def _best_seconds(graph, target, init, copies, repeats, runs):
  """`init`: the initializer op and what it is fed."""
  # TensorFlow's own session, also under tensorbow-run, whose stand-in
  # would plan (and time kernels for) a run that writes.
  session = getattr(tf.compat.v1.Session, "tensorbow_original",
                    tf.compat.v1.Session)
  with session(graph=graph) as sess:
    sess.run(*init)
    for _ in range(2):
      sess.run(target)
    best = float("inf")
    for _ in range(repeats):
      start = time.perf_counter()
      for _ in range(runs):
        sess.run(target)
      best = min(best, (time.perf_counter() - start) / (runs * copies))
  return best


class Chooser(object):
  """Times substitutes against TensorFlow's kernels for one session.

  Args:
    rows: a replica's rows, taken for unknown dimensions.
    timer: `timer(graph_def, fetch, values)` -> seconds per evaluation
      of `fetch`, the graph's inputs "input_<i>:0" being `values` (tests
      give their own).
    cache_dir: where the choices are kept (None: TENSORBOW_CACHE_DIR or
      ~/.cache/tensorbow; "" keeps none).
    outer_timer: `outer_timer(fused, op_type, a_shape, b_shape, dtype,
      nesterov)` -> seconds per apply op, as `_timed_outer` (tests give
      their own).
  """

  def __init__(self, rows, timer=None, cache_dir=None, outer_timer=None):
    self.rows = max(1, int(rows))
    self._timer = timer or _timed
    self._outer_timer = outer_timer or _timed_outer
    if cache_dir is None:
      cache_dir = os.environ.get(
          "TENSORBOW_CACHE_DIR",
          os.path.join(os.path.expanduser("~"), ".cache", "tensorbow"))
    self._path = os.path.join(cache_dir, _CACHE_FILE) if cache_dir else None
    self._machine = _machine()
    self._decided = {}  # op name -> whether its substitute is kept
    self.choices = []  # per op decided: a dict, see `keep`

  def keep(self, node, op, substitute):
    """Whether `substitute` (the NodeDefs replacing `node`, a copy of
    `op`) is faster than `op`'s own kernel on a replica's shapes."""
    if op.name in self._decided:  # another stream group's copy
      return self._decided[op.name]
    shapes = [self._concrete(t) for t in op.inputs]
    if any(s is None for s in shapes):
      return True  # a rank TensorBow cannot time: keep the rule's choice
    key = json.dumps([op.type, _attrs(op), shapes])
    cache = self._load()
    entry = cache.get(self._machine, {}).get(key)
    if entry is None:
      values = self._values(op, shapes)
      own = tf.compat.v1.NodeDef()
      own.CopyFrom(node)
      del own.input[:]
      own.input.extend(f"input_{i}" for i in range(len(values)))
      own.device = ""
      replaced = substitutes.substitute(own, op)
      inputs = [_placeholder(f"input_{i}", v) for i, v in enumerate(values)]
      entry = self._measure(op, lambda: {
          "tf": self._timer(_graph_def(inputs + [own]), own.name + ":0",
                            values),
          "tensorbow": self._timer(_graph_def(inputs + replaced),
                                   own.name + ":0", values)})
      if entry is None:
        return False
      entry = self._record(key, entry)
    return self._decide(op, op.type, shapes, entry)

  def keep_outer(self, op, matmul):
    """Whether apply op `op` is faster taking its gradient as the factors
    of `matmul` (substitutes.outer_applies) than after it, on a replica's
    shapes."""
    if op.name in self._decided:
      return self._decided[op.name]
    shapes = [self._concrete(t) for t in matmul.inputs]
    dtype = op.get_attr("T").as_numpy_dtype
    nesterov = ("use_nesterov" in op.node_def.attr and
                op.get_attr("use_nesterov"))
    key = json.dumps([op.type, "MatMul(transpose_a)", nesterov,
                      np.dtype(dtype).name, shapes])
    cache = self._load()
    entry = cache.get(self._machine, {}).get(key)
    if entry is None:
      op_type = op.type if op.type.startswith("Resource") else (
          "Resource" + op.type)
      entry = self._measure(op, lambda: {fused: self._outer_timer(
          fused == "tensorbow", op_type, shapes[0], shapes[1], dtype,
          nesterov) for fused in ("tf", "tensorbow")})
      if entry is None:
        return False
      entry = self._record(key, entry)
    return self._decide(op, f"{op.type}(MatMul)", shapes, entry)

  def _measure(self, op, time_both):
    """`time_both()`, or None (TensorFlow's kernel is kept for `op`) if
    timing fails: the shapes a replica runs are not always known before
    its first run (a dimension the graph leaves unknown and a reshape
    fixes), and a failed measurement must not fail the user's run."""
    try:
      return time_both()
    except Exception as e:  # pylint: disable=broad-except
      self._decided[op.name] = False
      logging.getLogger("tensorbow").warning(
          "TensorBow kernels: could not time a substitute for %s (%s); "
          "TensorFlow's kernel is kept: %s", op.name, op.type,
          str(e).splitlines()[0] if str(e) else type(e).__name__)
      return None

  def _decide(self, op, kind, shapes, entry):
    chosen = entry["tensorbow"] < entry["tf"]
    self._decided[op.name] = chosen
    self.choices.append(dict(op=op.name, type=kind, shapes=shapes,
                             tf_seconds=entry["tf"],
                             tensorbow_seconds=entry["tensorbow"],
                             substitute=chosen))
    logging.getLogger("tensorbow").debug(
        "TensorBow kernels: %s (%s %s): TensorFlow %.1f us, TensorBow "
        "%.1f us -> %s", op.name, kind, shapes, entry["tf"] * 1e6,
        entry["tensorbow"] * 1e6, "TensorBow's" if chosen else
        "TensorFlow's")
    return chosen

  def _concrete(self, tensor):
    if tensor.shape.rank is None:
      return None
    return [self.rows if d is None else d for d in tensor.shape.as_list()]

  def _values(self, op, shapes):
    """The op's inputs on a replica's shapes: random data, and for a size
    input the op's output shape."""
    size_input = _SIZE_INPUTS.get(op.type)
    rng = np.random.RandomState(0)
    values = []
    for i, (tensor, shape) in enumerate(zip(op.inputs, shapes)):
      if i == size_input:
        values.append(np.array(self._concrete(op.outputs[0]), np.int32))
      else:
        values.append(rng.uniform(-1, 1, shape).astype(
            tensor.dtype.base_dtype.as_numpy_dtype))
    return values

  def _load(self):
    if self._path is None or not os.path.exists(self._path):
      return {}
    try:
      with open(self._path) as f:
        return json.load(f)
    except (OSError, ValueError):
      return {}

  def _record(self, key, entry):
    """Caches `entry` (timings) for `key` unless another process cached
    one first; returns the entry in force.

    Every TensorBow process of this user shares the file, the workers of
    one job among them: a choice is added under a lock to the file as it
    is then, and the first timing written for a shape is the one every
    process uses, so two processes never train one shape with different
    kernels (and lose bit-reproducibility) because both timed it.
    """
    if self._path is None:
      return entry
    try:
      os.makedirs(os.path.dirname(self._path), exist_ok=True)
      with open(self._path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        cache = self._load()
        entry = cache.setdefault(self._machine, {}).setdefault(key, entry)
        scratch = f"{self._path}.{os.getpid()}.tmp"
        with open(scratch, "w") as f:
          json.dump(cache, f)
        os.replace(scratch, self._path)
    except OSError:
      pass  # an unwritable cache only costs timing again
    return entry


def _attrs(op):
  return {name: str(op.get_attr(name))
          for name in ("transpose_a", "transpose_b", "strides", "padding",
                       "data_format", "dilations")
          if name in op.node_def.attr}


def _graph_def(nodes):
  graph_def = tf.compat.v1.GraphDef()
  graph_def.versions.producer = tf.version.GRAPH_DEF_VERSION
  for node in nodes:
    graph_def.node.add().CopyFrom(node)
  return graph_def


def _placeholder(name, value):
  node = tf.compat.v1.NodeDef(name=name, op="Placeholder")
  node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
  return node
