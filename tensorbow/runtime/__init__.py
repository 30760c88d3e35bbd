"""Python face of TensorBow's C++ task scheduler (cc/runtime/).

A `Runtime` borrows the TF_Session of a `tf.compat.v1.Session` and runs
waves of learning tasks on its own threads, the GIL released: per wave, one
prepared call per replica, then an optional synchronisation call.
"""
import collections
import importlib.util
import os
import sys

from tensorflow.core.protobuf import config_pb2

from tensorbow import compat
from tensorbow import ops

TaskTiming = collections.namedtuple(
    "TaskTiming",
    ["wave", "replica", "stream_group", "rows", "phase", "start", "end"])
TaskTiming.__doc__ = """One task: replica -1 is a synchronisation task;
rows is the first dimension of the batch feed TensorFlow was given (-1:
no batch feed); phase is 0 for a learning task's computation, 1 for its
commit (an atomic wave's second phase); start and end are seconds of a
steady clock."""


def extension():
  """The runtime extension: the package's own, or $TENSORBOW_LIBRARY_DIR's."""
  name = "tensorbow._runtime"
  if name in sys.modules:
    return sys.modules[name]
  try:
    if os.environ.get(ops.LIBRARY_DIR_ENV):
      spec = importlib.util.spec_from_file_location(
          name, ops.library_file("_runtime"))
      module = importlib.util.module_from_spec(spec)
      spec.loader.exec_module(module)
      sys.modules[name] = module
      return module
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
    num_replicas: L, the most tasks of a wave.
    placement: None, or (per stream group its device, per replica its
      device), device indices: then replica r's tasks run only on the
      stream groups of its device.

  Calls given `by_group` are one per stream group: a task of replica r is
  run by whichever stream group g (of its device) takes it first, with
  calls[g], fed the replica's feeds and then r (an int32 scalar) as its
  last feed.

  The threads start with the first call prepared, so a session that never
  trains starts none; `close` stops them.
  """

  def __init__(self, session, num_stream_groups, num_replicas=1,
               inline=False, placement=None):
    self._session = session
    self._num_stream_groups = max(1, num_stream_groups)
    self._num_replicas = num_replicas
    self._placement = ([list(p) for p in placement] if placement is not None
                       else [[], []])
    self._started = None
    self._closed = False
    # Each task's ops run on the thread of its stream group, not on
    # TensorFlow's inter-op pool (RunOptions.inter_op_thread_pool = -1).
    self.inline = inline

  @property
  def _impl(self):
    if self._started is None:
      if self._closed:
        raise RuntimeError("TensorBow's runtime was closed")
      self._started = extension().Runtime(
          compat.session_handle(self._session), self._num_stream_groups,
          self._num_replicas, list(compat.PYBIND11_ABI_IDS),
          *self._placement)
    return self._started

  @property
  def started(self):
    return self._started is not None

  def close(self):
    """Stops the threads once the wave in flight has finished."""
    self._started = None
    self._closed = True

  @property
  def num_stream_groups(self):
    return self._num_stream_groups

  def add_call(self, feeds, fetches, targets):
    """Prepares a call: fed tensors, fetched tensors, target operations."""
    return self._impl.add_call(
        [(compat.operation_handle(t.op), t.value_index) for t in feeds],
        [(compat.operation_handle(t.op), t.value_index) for t in fetches],
        [compat.operation_handle(op) for op in targets])

  def run_wave(self, calls, feeds, dtypes, batch_feed=-1, sync_call=-1,
               run_options=None, run_metadata=None, by_group=False):
    """Runs calls[r] with feeds[r] for every replica r, then `sync_call`.

    Args:
      calls: one call id per replica (or, `by_group`, per stream group).
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
    options, others = _options(run_options, self.inline)
    return _outputs(self._impl.run_wave(
        calls, by_group, feeds, dtypes, batch_feed, sync_call, options, others,
        run_metadata is not None), run_metadata)

  def run_pool(self, calls, feeds, dtypes, split, batch_sizes,
               run_options=None):
    """A pool run (Adaptive SGD's dynamic scheduling): the rows of the
    feeds marked in `split` are cut into chunks as replicas come free, each
    taking its batch size of rows (`batch_sizes`, one per replica), the
    free replica that has waited longest first. A chunk is one run of the
    per-stream-group call `calls[g]`, fed its rows of the split feeds, the
    other feeds whole and its replica's index.

    Returns:
      Per chunk in the order of its rows, (replica, begin, end, fetched
      NumPy arrays).

    Raises:
      tf.errors.OpError: the first failure; chunks already run stay
        applied, and none starts after it.
    """
    _, others = _options(run_options, self.inline)
    code, message, chunks = self._impl.run_pool(
        calls, feeds, dtypes, [bool(s) for s in split],
        [int(b) for b in batch_sizes], others)
    if code != 0:
      raise compat.error_from_code(code, message)
    return chunks

  def compute(self, calls, feeds, dtypes, batch_feed, internal,
              check_finite=False, run_options=None, run_metadata=None,
              by_group=False):
    """The first phase of an atomic wave: like `run_wave` without a
    synchronisation, but the last `internal` fetches of every call are kept
    for `commit` instead of returned, and so are the feeds (borrowed: the
    caller keeps them alive until `commit` or `discard`).

    Returns:
      (outputs, nonfinite): per replica, its other fetches; and, with
      `check_finite`, per replica the positions among all its fetches
      holding an infinity or a NaN.
    """
    options, others = _options(run_options, self.inline)
    *result, nonfinite = self._impl.compute(
        calls, by_group, feeds, dtypes, batch_feed, options, others,
        run_metadata is not None, internal, check_finite)
    return _outputs(result, run_metadata), nonfinite

  def commit(self, calls, commit, sync_call=-1, run_options=None,
             run_metadata=None, by_group=False):
    """The second phase: calls[r] for every replica r with commit[r], fed
    what `compute` was fed for r (keep those arrays alive until now) and
    then what it kept; then `sync_call`. Runs with `run_options` but no
    deadline: a commit started finishes. Replica 0's trace is merged into
    `run_metadata`.

    Returns:
      Per replica, its fetches (empty if not committed).
    """
    if run_options is not None:
      untimed = type(run_options)()
      untimed.CopyFrom(run_options)
      untimed.timeout_in_ms = 0
      run_options = untimed
    options, others = _options(run_options, self.inline)
    return _outputs(self._impl.commit(
        calls, by_group, list(commit), sync_call, options, others,
        run_metadata is not None), run_metadata, merge=True)

  def atomic(self, calls, feeds, dtypes, batch_feed, internal, between,
             check_finite=False, run_options=None, run_metadata=None,
             by_group=False):
    """An atomic wave in one call: `compute` (arguments as its), then
    `between(outputs, nonfinite)`, which says what to commit as (commit
    calls, per replica whether it commits, sync call), then `commit`. If
    the compute or `between` raises, what the compute kept is discarded
    and nothing is written.

    Returns:
      (per replica its computed fetches, per replica its committed ones).
    """
    try:
      computed, nonfinite = self.compute(
          calls, feeds, dtypes, batch_feed, internal, check_finite,
          run_options, run_metadata, by_group)
      commit_calls, committed, sync_call = between(computed, nonfinite)
    except BaseException:
      self.discard()
      raise
    return computed, self.commit(commit_calls, committed, sync_call,
                                 run_options, run_metadata, by_group)

  def average_kept(self, weights):
    """Between `compute` and `commit`: every floating-point tensor kept for
    the commit becomes, for every replica, the mean over the replicas
    weighted by `weights` (summing to 1). Raises ValueError, keeping the
    wave, if a kept tensor differs in shape across the replicas or is not
    floating-point and differs."""
    self._impl.average_kept([float(w) for w in weights])

  def kept_sums(self, weights):
    """Between `compute` and `commit`: per floating-point tensor kept for
    the commit, its sum over the replicas weighted by `weights`, a
    float64 vector (errors as average_kept's)."""
    return self._impl.kept_sums([float(w) for w in weights])

  def replace_kept(self, values):
    """Every replica's floating-point tensors kept for the commit become
    `values` (one float64 vector each, as kept_sums gives them)."""
    self._impl.replace_kept(list(values))

  def discard(self):
    """Forgets what `compute` kept: the wave is not committed."""
    self._impl.discard()

  def task_timings(self, last=None):
    """TaskTiming of every task run so far (the latest 16384), or of the
    latest `last`."""
    if not self.started:
      return []
    return [TaskTiming(*t) for t in self._impl.task_timings(last or 0)]

  def last_sync_seconds(self):
    """The seconds the latest wave's synchronisation task (the sum across
    devices) took, or 0 if its last task was a replica's."""
    last = self.task_timings(last=1)
    return last[0].end - last[0].start if last and last[0].replica < 0 else 0.0

  def clear_task_timings(self):
    if self.started:
      self._impl.clear_task_timings()

  def arena_stats(self):
    """Per stream group, its arena's counters (a dict): num_allocs (feed
    buffers staged since the start), bytes_in_use, peak_bytes_in_use,
    system_allocs (regions taken from the system allocator) and
    system_bytes (held now); [] before the first call."""
    return self._impl.arena_stats() if self.started else []


def _outputs(result, run_metadata, merge=False):
  """The outputs of a (code, message, outputs, metadata) result; raises
  its error; sets `run_metadata` from its metadata (or merges it in)."""
  code, message, outputs, metadata = result
  if code != 0:
    raise compat.error_from_code(code, message)
  if run_metadata is not None and metadata:
    if merge:
      run_metadata.MergeFromString(metadata)
    else:
      run_metadata.ParseFromString(metadata)
  return outputs


# Serialized once: every wave of an inline session without options uses it.
_INLINE = config_pb2.RunOptions(inter_op_thread_pool=-1).SerializeToString()


def _options(run_options, inline=False):
  """Serialized options for replica 0 and, untraced, for the others; with
  `inline`, for running each task's ops on the calling thread, unless
  `run_options` names an inter-op pool."""
  if inline:
    if run_options is None:
      return _INLINE, _INLINE
    given = run_options
    run_options = config_pb2.RunOptions(inter_op_thread_pool=-1)
    run_options.MergeFrom(given)
    run_options.inter_op_thread_pool = given.inter_op_thread_pool or -1
  if run_options is None:
    return b"", b""
  untraced = type(run_options)()
  untraced.CopyFrom(run_options)
  untraced.trace_level = untraced.NO_TRACE
  return run_options.SerializeToString(), untraced.SerializeToString()


def fetchable_dtypes():
  """TF_DataType enums whose tensors a wave can return to Python."""
  return frozenset(extension().Runtime.fetchable_dtypes())


def default_stream_groups(num_replicas):
  """Concurrent tasks on the CPU: one per core, at most one per replica."""
  env = os.environ.get("TENSORBOW_STREAM_GROUPS")
  if env:
    return max(1, int(env))
  return max(1, min(num_replicas, os.cpu_count() or 1))
