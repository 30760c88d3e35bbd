"""Every use of TensorFlow's private Python API, in one place.

TensorBow reuses TensorFlow's own fetch handling (so `run` accepts exactly
the fetch structures `tf.compat.v1.Session.run` accepts), the default-session
stack, and the pybind11 handles behind a `Session` and an `Operation` that
its C++ runtime needs. A TensorFlow upgrade touches this file only
(tests/test_private_api.py fails on any use elsewhere).
"""
import threading
import weakref

import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management as _ckpt
from tensorflow.python.client import session as _tf_session
from tensorflow.python.framework import error_interpolation as _interpolation
from tensorflow.python.framework import errors_impl as _errors_impl
from tensorflow.python.framework import op_def_registry as _op_def_registry
from tensorflow.python.framework import ops as _ops
from tensorflow.python.framework import sparse_tensor as _sparse_tensor
from tensorflow.python.framework import stack as _stack
from tensorflow.python.ops import array_ops as _array_ops
from tensorflow.python.training import monitored_session as _monitored_session
from tensorflow.python.util import nest as _nest

SessionInterface = _tf_session.SessionInterface
# The module whose ChiefSessionCreator MonitoredTrainingSession and
# MonitoredSession use: tensorbow-run replaces it there.
monitored_session = _monitored_session
# The class behind `tf.compat.v1.Session`, reached without the public name,
# which `tensorbow-run` replaces while a script runs.
PlainSession = _tf_session.Session

# Platform ABI ids under which TensorFlow's pybind11 may answer the conduit
# that hands out raw pointers (TF 2.21's wheel is built with clang).
PYBIND11_ABI_IDS = (
    "_clang_libstdcpp_cxxabi1002",
    "system_libstdcpp_gxx_abi_1xxx_use_cxx11_abi_1",
    "_gcc_libstdcpp_cxxabi1002",
    "_gcc_libstdcpp_cxxabi1011",
    "_clang_libstdcpp_cxxabi1011",
)


def session_graph(graph):
  """The graph a session made with `graph=graph` runs, checked as
  `tf.compat.v1.Session` checks it.

  Raises:
    TypeError: as TensorFlow's, for a `graph` that is not a `tf.Graph`.
  """
  if graph is None:
    return _ops.get_default_graph()
  if not isinstance(graph, _ops.Graph):
    raise TypeError('Argument `graph` must be a tf.Graph, but got '
                    f'"{type(graph).__name__}"')
  return graph


def session_config(session):
  """The `ConfigProto` a `tf.compat.v1.Session` was made with (TensorFlow's
  default one when it was given None)."""
  return session._config  # pylint: disable=protected-access


def fetch_handler(graph, fetches, feeds):
  """TensorFlow's handler for a fetch structure.

  Args:
    graph: the `tf.Graph` of the fetches.
    fetches: any structure `tf.compat.v1.Session.run` accepts.
    feeds: dict from fed `Tensor.ref()` to fed value.

  Returns:
    An object with `fetches()` (unique tensors to fetch, fed ones left
    out), `targets()` (operations to run) and
    `build_results(session, values)` (the user's structure, rebuilt).
  """
  return _tf_session._FetchHandler(graph, fetches, feeds)  # pylint: disable=protected-access


def feed_items(graph, feed_dict):
  """[(tensor of `graph`, value)] of a feed_dict, as TensorFlow reads it:
  tuple keys flattened, composite keys (SparseTensor) expanded.

  Raises:
    TypeError: as `tf.compat.v1.Session.run` does for a key it cannot read.
  """
  items = []
  for feed, value in _nest.flatten_dict_items(feed_dict).items():
    for tensor_type, _, feed_fn, _ in _tf_session._REGISTERED_EXPANSIONS:  # pylint: disable=protected-access
      if isinstance(feed, tensor_type):
        expanded = feed_fn(feed, value)
        break
    else:
      raise TypeError(f'{feed} in argument `feed_dict` has invalid type '
                      f'"{type(feed).__name__}"')
    for subfeed, subvalue in expanded:
      try:
        tensor = graph.as_graph_element(subfeed, allow_tensor=True,
                                        allow_operation=False)
      except Exception as e:  # pylint: disable=broad-except
        raise TypeError(
            f"Cannot interpret feed_dict key as Tensor: {e.args[0]}") from None
      items.append((tensor, subvalue))
  return items


def sparse_feed_keys(feed_dict):
  """The SparseTensor keys of a feed_dict (tuple keys flattened)."""
  return [k for k in _nest.flatten_dict_items(feed_dict or {})
          if isinstance(k, _sparse_tensor.SparseTensor)]


def session_handle(session):
  """The pybind11 handle of a `tf.compat.v1.Session`'s TF_Session."""
  return session._session  # pylint: disable=protected-access


def base_session_manager(creator_class, creator):
  """The SessionManager `creator_class` (a SessionCreator class of
  TensorFlow's) would give `creator`, an instance of a subclass."""
  return creator_class._get_session_manager(creator)  # pylint: disable=protected-access


def operation_handle(op):
  """The pybind11 handle of an `Operation`'s TF_Operation."""
  return op._c_op  # pylint: disable=protected-access


def default_session(session):
  """Context manager that makes `session` the default session."""
  return _stack.default_session(session)


def error_from_code(code, message):
  """The `tf.errors.OpError` subclass instance for a TF_Code."""
  return _errors_impl.exception_type_from_error_code(code)(None, None, message)


def extend_session(session):
  """Makes a `tf.compat.v1.Session` see every op now in its graph.

  Sessions made from Python extend their TF_Session only when Python runs
  them; the runtime's TF_SessionRun calls do not.
  """
  session._extend_graph()  # pylint: disable=protected-access


def fetches_fed(handler):
  """Whether a fetch handler fetches a fed tensor (it returns the fed value)."""
  return len(handler._final_fetches) != len(handler._fetches)  # pylint: disable=protected-access


def make_callable(run, fetches, feed_list, accept_options):
  """As `tf.compat.v1.Session.make_callable`, over a session's `run`."""
  feed_list = list(feed_list or [])

  def call(*args, **kwargs):
    if len(args) != len(feed_list):
      raise TypeError(f"expected {len(feed_list)} feed values, got "
                      f"{len(args)}")
    options = run_metadata = None
    if accept_options:
      options = kwargs.pop("options", None)
      run_metadata = kwargs.pop("run_metadata", None)
    if kwargs:
      raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")
    return run(fetches, dict(zip(feed_list, args)), options, run_metadata)

  return call


def callable_from_options(run, callable_options):
  """As `tf.compat.v1.Session._make_callable_from_options`: a callable
  taking the feeds' values in order (and `run_metadata=`), returning the
  fetches' values as a list."""
  feeds = list(callable_options.feed)
  fetches = list(callable_options.fetch)
  targets = list(callable_options.target)
  options = (callable_options.run_options
             if callable_options.HasField("run_options") else None)

  def call(*args, run_metadata=None):
    if len(args) != len(feeds):
      raise TypeError(f"expected {len(feeds)} feed values, got {len(args)}")
    values = run(fetches + targets, dict(zip(feeds, args)), options,
                 run_metadata)
    return values[:len(fetches)]

  return call



def silent_file_writer_init(file_writer, logdir, graph=None, graph_def=None):
  """Sets up a `tf.compat.v1.summary.FileWriter` as its constructor would,
  on an event writer that writes nothing and makes no file."""
  file_writer._closed = False  # pylint: disable=protected-access
  base = type(file_writer).__mro__[1]  # SummaryToEventTransformer
  base.__init__(file_writer, _SilentEventWriter(logdir), graph, graph_def)


class _SilentEventWriter(object):
  """An EventFileWriter's interface, dropping every event."""

  def __init__(self, logdir):
    self._logdir = str(logdir)

  def get_logdir(self):
    return self._logdir

  def add_event(self, event):
    del event

  def reopen(self):
    pass

  def flush(self):
    pass

  def close(self):
    pass


# ---- Checkpoint retention ----------------------------------------------------

_removal = {"hooked": None}  # the callback remove_checkpoint calls too
_state_only = threading.local()  # .remove: a save_retention's remover


def on_checkpoint_removal(callback):
  """Makes TensorFlow's `remove_checkpoint`, by which a `Saver` deletes a
  checkpoint past `max_to_keep`, call `callback(prefix)` after it: once per
  process, the first callback given."""
  if _removal["hooked"] is not None:
    return
  _removal["hooked"] = callback
  original = _ckpt.remove_checkpoint

  def remove_checkpoint(checkpoint_prefix, *args, **kwargs):
    instead = getattr(_state_only, "remove", None)
    if instead is not None:
      instead(checkpoint_prefix)
      return
    original(checkpoint_prefix, *args, **kwargs)
    callback(checkpoint_prefix)

  _ckpt.remove_checkpoint = remove_checkpoint


def save_retention(saver, save_path, remove):
  """A `Saver`'s own retention (`max_to_keep`,
  `keep_checkpoint_every_n_hours`) after a save of `save_path` made without
  `Saver.save`: each checkpoint it would delete is handed to
  `remove(prefix)` instead, its files being another process's."""
  saver._RecordLastCheckpoint(save_path)  # pylint: disable=protected-access
  _state_only.remove = remove
  try:
    saver._MaybeDeleteOldCheckpoints()  # pylint: disable=protected-access
  finally:
    _state_only.remove = None


# ---- Graphs and operations ---------------------------------------------------


def op_def(op_type):
  """The registered `OpDef` of an op type."""
  return _op_def_registry.get(op_type)


def interpolate_graph(message, graph):
  """An error message with TensorFlow's {{node ...}} tags expanded, as
  TensorFlow's own errors show them."""
  return _interpolation.interpolate_graph(message, graph)


def function_names(graph):
  """The names of the functions in `graph`'s library."""
  return set(graph._functions)  # pylint: disable=protected-access


def copy_functions(source, target, names):
  """Adds the functions `names` of graph `source`'s library to graph
  `target`'s, each with the gradient it has there, by TensorFlow's C
  function objects: neither graph is turned into a GraphDef (which, for a
  one-shot iterator's function holding the arrays given to
  `from_tensor_slices`, took most of a second)."""
  for name in sorted(names):
    target._add_function(source._functions[name])  # pylint: disable=protected-access


def graph_read_lock(graph):
  """A context holding off `graph`'s op construction (a while loop or
  gradients mid-build, an import), as TensorFlow's `Session` does while it
  extends its graph, so that a copy of the graph sees only whole ops."""
  return graph._session_run_lock()  # pylint: disable=protected-access


def make_op(graph, node_def, inputs, control_inputs):
  """Makes NodeDef `node_def`'s op in `graph` by exactly its name (an
  import would rename it if the name is a scope in use), on `inputs`
  (tensors) and after `control_inputs`."""
  op = graph._create_op_internal(  # pylint: disable=protected-access
      node_def.op, inputs, name=node_def.name + "/",
      attrs=dict(node_def.attr), compute_device=False)
  if control_inputs:
    add_control_inputs(op, control_inputs)
  if node_def.device:
    op._set_device(node_def.device)  # pylint: disable=protected-access
  return op


def add_control_inputs(op, ops):
  """Makes graph op `op` wait for `ops`, changing no other op."""
  op._add_control_inputs(list(ops))  # pylint: disable=protected-access


def clear_device(op):
  """Unpins graph op `op` from its device."""
  op._set_device("")  # pylint: disable=protected-access


def control_outputs(op):
  """The ops that wait for `op` through a control dependency."""
  return op._control_outputs  # pylint: disable=protected-access


def in_control_flow(op):
  """Whether `op` is inside a TF1 while loop or cond."""
  return op._get_control_flow_context() is not None  # pylint: disable=protected-access


def is_ref_dtype(dtype):
  """Whether `dtype` is a reference variable's (`float32_ref`, ...)."""
  return dtype._is_ref_dtype  # pylint: disable=protected-access


def graph_function(graph, name):
  """The function `name` defined in `graph` (a `tf.function` or Defun
  body), or None if `graph` has none by that name."""
  if not graph._is_function(name):  # pylint: disable=protected-access
    return None
  return graph._get_function(name)  # pylint: disable=protected-access


# {graph: {Const op name: ("shape" | "size" | "zeros", name of the tensor
# it is of)}}
# of the static shapes TensorFlow folded into constants while the graph
# was built (record_shape_folds).
_shape_folds = weakref.WeakKeyDictionary()


def record_shape_folds():
  """Makes TensorFlow note, from now on, each constant it folds a tensor's
  static shape or size into (`tf.shape`, `tf.size`, `ones_like` and the
  gradient functions that call them, in graph mode), or a tensor of zeros
  of its shape (`zeros_like`), and of which tensor:
  a batch fed to a placeholder of fixed size can then be split, the
  copies computing those from their shard (rewrite/batch_sizes.py). Only
  notes; what TensorFlow builds is unchanged. Idempotent."""
  for name, kind in (("shape_internal", "shape"), ("size_internal", "size"),
                     ("zeros_like_impl", "zeros")):
    fold = getattr(_array_ops, name)
    if not getattr(fold, "_tensorbow_recording", False):
      setattr(_array_ops, name, _recording(fold, kind))


def _recording(fold, kind):
  """`fold` (array_ops.shape_internal or size_internal), noting the
  constants it returns in graph mode (record_shape_folds)."""

  def folded(input, *args, **kwargs):  # pylint: disable=redefined-builtin
    result = fold(input, *args, **kwargs)
    op = getattr(result, "op", None)
    if (op is not None and isinstance(input, tf.Tensor) and
        hasattr(input, "graph") and input.graph is op.graph):
      if op.type == "Const":
        _shape_folds.setdefault(op.graph, {})[op.name] = (kind, input.name)
      elif op.type == "Fill" and op.inputs[0].op.type == "Const":
        # zeros_like of a large tensor fills a shape it folded.
        _shape_folds.setdefault(op.graph, {})[op.inputs[0].op.name] = (
            "shape", input.name)
    return result

  folded._tensorbow_recording = True  # pylint: disable=protected-access
  return folded


def shape_folds(graph):
  """{Const op name: ("shape" | "size" | "zeros", tensor name)} of the
  static shapes TensorFlow folded into constants of `graph`
  (record_shape_folds)."""
  return dict(_shape_folds.get(graph, {}))
