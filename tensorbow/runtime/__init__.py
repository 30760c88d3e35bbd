"""Python face of TensorBow's C++ task scheduler (cc/runtime/).

A `Runtime` borrows the TF_Session of a `tf.compat.v1.Session` and runs
waves of learning tasks on its own threads, the GIL released: per wave, one
prepared call per replica, then an optional synchronisation call.
"""
import collections
import os

from tensorbow import compat

TaskTiming = collections.namedtuple(
    "TaskTiming", ["wave", "replica", "stream_group", "rows", "start", "end"])
TaskTiming.__doc__ = """One task: replica -1 is a synchronisation task;
rows is the first dimension of the batch feed TensorFlow was given (-1:
no batch feed); start and end are seconds of a steady clock."""


def _extension():
  try:
    from tensorbow import _runtime  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        f"TensorBow's runtime extension is missing or broken ({e}); build it "
        "with `pip install --no-build-isolation .` from the TensorBow "
        "checkout") from e
  return _runtime


class Runtime(object):
  """Runs waves of learning tasks over a session's TF_Session.

  Args:
    session: the `tf.compat.v1.Session` whose graph holds the replicas.
    num_stream_groups: concurrent tasks (worker threads, the caller's
      included).
  """

  def __init__(self, session, num_stream_groups):
    self._impl = _extension().Runtime(
        compat.session_handle(session), num_stream_groups,
        list(compat.PYBIND11_ABI_IDS))

  @property
  def num_stream_groups(self):
    return self._impl.num_stream_groups

  def add_call(self, feeds, fetches, targets):
    """Prepares a call: fed tensors, fetched tensors, target operations."""
    return self._impl.add_call(
        [(compat.operation_handle(t.op), t.value_index) for t in feeds],
        [(compat.operation_handle(t.op), t.value_index) for t in fetches],
        [compat.operation_handle(op) for op in targets])

  def run_wave(self, calls, feeds, dtypes, batch_feed=-1, sync_call=-1,
               run_options=None, run_metadata=None):
    """Runs calls[r] with feeds[r] for every replica r, then `sync_call`.

    Args:
      calls: one call id per replica.
      feeds: per replica, C-contiguous NumPy arrays in the call's feed order.
      dtypes: the TF_DataType enum of each feed.
      batch_feed: the position of a batch feed, whose rows each task's
        timing records, or -1.
      sync_call: call id run after every task succeeded, or -1.
      run_options: the `RunOptions` of replica 0, or None; the other tasks
        run with the same options but no tracing (TensorFlow traces one run
        at a time).
      run_metadata: a `RunMetadata` to fill from replica 0, or None.

    Returns:
      Per replica, the list of fetched NumPy arrays.

    Raises:
      tf.errors.OpError: the first failure of the wave.
    """
    options = others = b""
    if run_options is not None:
      options = run_options.SerializeToString()
      untraced = type(run_options)()
      untraced.CopyFrom(run_options)
      untraced.trace_level = untraced.NO_TRACE
      others = untraced.SerializeToString()
    code, message, outputs, metadata = self._impl.run_wave(
        calls, feeds, dtypes, batch_feed, sync_call, options, others,
        run_metadata is not None)
    if code != 0:
      raise compat.error_from_code(code, message)
    if run_metadata is not None and metadata:
      run_metadata.ParseFromString(metadata)
    return outputs

  def task_timings(self):
    """TaskTiming of every task run so far (the latest million)."""
    return [TaskTiming(*t) for t in self._impl.task_timings()]

  def clear_task_timings(self):
    self._impl.clear_task_timings()


def fetchable_dtypes():
  """TF_DataType enums whose tensors a wave can return to Python."""
  return frozenset(_extension().Runtime.fetchable_dtypes())


def default_stream_groups(num_replicas):
  """Concurrent tasks on the CPU: one per core, at most one per replica."""
  env = os.environ.get("TENSORBOW_STREAM_GROUPS")
  if env:
    return max(1, int(env))
  return max(1, min(num_replicas, os.cpu_count() or 1))
