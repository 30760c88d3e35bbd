"""This process's place in a job of several workers, and the sums it takes
with the others (DESIGN.md, "Two levels").

A cluster is given the way TensorFlow gives it: `TF_CONFIG` holds a
`cluster` with a `worker` job of two or more addresses and this process's
`task`. Each worker process starts one `tf.distribute.Server` for its task;
a session's `Reducer` sums NumPy arrays over every worker with TensorFlow's
collective all-reduce (gRPC between the servers), in a small graph of its
own that runs on this worker's server. The training session itself stays
in-process: what crosses workers is fetched, summed and fed back.

A worker that dies or stops answering is found by the heartbeats
(`heartbeat.py`) within a session's `heartbeat_timeout`: a sum under way
is cancelled and fails naming it, as does every sum after.
"""
import json
import logging
import os
import threading
import time

import numpy as np
import tensorflow as tf

from tensorbow import options as tb_options
from tensorbow.scaleout import heartbeat as tb_heartbeat

DEFAULT_TIMEOUT = 60.0  # seconds a reduction waits for the other workers
DEFAULT_HEARTBEAT_TIMEOUT = 3.0  # seconds of silence that lose a worker
DEFAULT_START_TIMEOUT = 300.0  # seconds the first waits for them to start


class Cluster(object):
  """The workers of a job and which of them this process is.

  Args:
    workers: the workers' "host:port" addresses: two or more as
      `TF_CONFIG` gives them, or those that went on after a loss (one
      alone, maybe).
    index: this process's place among them; worker 0 is the chief.

  Raises:
    ValueError: no worker, or an index out of range.
  """

  def __init__(self, workers, index):
    workers = [str(w) for w in workers]
    if not workers:
      raise ValueError("a cluster needs a worker")
    if isinstance(index, bool) or not isinstance(index, int) or not (
        0 <= index < len(workers)):
      raise ValueError(f"worker index must be an int in [0, {len(workers)}), "
                       f"got {index!r}")
    for w in workers:
      if not tb_options.is_address(w):
        raise ValueError(f"a worker's address must be host:port, got {w!r}")
    self.workers = workers
    self.index = index

  def __eq__(self, other):
    return (isinstance(other, Cluster) and self.workers == other.workers and
            self.index == other.index)

  def __repr__(self):
    return f"Cluster({self.workers!r}, index={self.index})"

  @property
  def num_workers(self):
    return len(self.workers)

  @property
  def others(self):
    """The indices of the other workers."""
    return [i for i in range(self.num_workers) if i != self.index]

  @property
  def is_chief(self):
    return self.index == 0

  def device(self):
    """This worker's CPU device."""
    return f"/job:worker/replica:0/task:{self.index}/device:CPU:0"

  def part(self, rows, replicas=1):
    """(start, stop): this worker's contiguous part of `rows` rows when
    every worker trains `replicas` replicas: the shards its replicas would
    take if numpy.array_split cut the rows into one shard per replica of
    the cluster, which the worker's own even split then gives back."""
    n = self.num_workers * replicas
    size, extra = divmod(rows, n)
    first = self.index * replicas
    start = first * size + min(first, extra)
    last = first + replicas
    return start, last * size + min(last, extra)

  def check_rows(self, rows, replicas, name):
    """Raises tf.errors.InvalidArgumentError if batch `name` of `rows`
    rows leaves a worker no part, each training `replicas` replicas.

    A worker with fewer rows than replicas trains as many as it has rows,
    as one process does (DESIGN.md); one with none would run none of the
    wave's ops, so what the wave counts (a global step) would fall behind
    the other workers'.
    """
    needed = (self.num_workers - 1) * replicas + 1
    if rows < needed:
      raise tf.errors.InvalidArgumentError(
          None, None,
          f"TensorBow: a batch of {rows} rows ({name}) leaves worker "
          f"{self.num_workers - 1} of {self.num_workers} no rows: the rows "
          f"go to the cluster's {self.num_workers * replicas} replicas in "
          f"order, one each, and every worker needs one, so a batch needs "
          f"at least {needed}; batch the input pipeline with "
          "drop_remainder=True (or feed whole batches) to avoid it")


def from_environ(environ=None):
  """The cluster `TF_CONFIG` gives, or None: no `TF_CONFIG`, or no more
  than one worker.

  Raises:
    ValueError: a `TF_CONFIG` that is not JSON, has jobs other than
      "worker", or names no task of that job for this process.
  """
  text = (os.environ if environ is None else environ).get("TF_CONFIG", "")
  if not text.strip():
    return None
  try:
    config = json.loads(text)
  except ValueError as e:
    raise ValueError(f"TF_CONFIG is not JSON: {e}") from None
  jobs = dict(config.get("cluster") or {})
  workers = jobs.pop("worker", [])
  if len(workers) < 2:
    return None
  if jobs:
    raise ValueError(f"TensorBow trains on a cluster of workers only; "
                     f"TF_CONFIG also has {sorted(jobs)}")
  task = config.get("task") or {}
  if task.get("type") != "worker" or "index" not in task:
    raise ValueError(f"TF_CONFIG's task must be a worker with an index, got "
                     f"{task!r}")
  return Cluster(workers, int(task["index"]))


def to_environ(cluster):
  """The `TF_CONFIG` value that gives `cluster`."""
  return json.dumps({"cluster": {"worker": cluster.workers},
                     "task": {"type": "worker", "index": cluster.index}})


_servers = {}  # (workers, index) -> (the process's server for that task,
#                                      its Heartbeat)
_servers_lock = threading.Lock()
_group_keys = [0]  # the last collective group key a reducer took


def server_config():
  """The ConfigProto the servers and the reducers' sessions share."""
  config = tf.compat.v1.ConfigProto()
  config.experimental.collective_group_leader = (
      "/job:worker/replica:0/task:0")
  return config


def session_config(cluster):
  """A reducer's session's ConfigProto: the servers', its runs seeing this
  worker alone (the collectives reach the others themselves), so closing
  the session to cancel a sum does not wait on a worker that is lost."""
  config = server_config()
  config.device_filters.append(f"/job:worker/task:{cluster.index}")
  return config


def server(cluster):
  """This process's `tf.distribute.Server` for its task in `cluster`,
  started on first use with the process's heartbeats (a port can be
  served once per process)."""
  return _started(cluster)[0]


def heartbeat(cluster):
  """This process's `heartbeat.Heartbeat` with the other workers of
  `cluster`, started with the server."""
  return _started(cluster)[1]


def _started(cluster):
  key = (tuple(cluster.workers), cluster.index)
  with _servers_lock:
    if key not in _servers:
      started = tf.distribute.Server(
          tf.train.ClusterSpec({"worker": cluster.workers}),
          job_name="worker", task_index=cluster.index,
          config=server_config(), start=True)
      beats = tb_heartbeat.Heartbeat(cluster)
      beats.start()
      _servers[key] = (started, beats)
    return _servers[key]


def last_group_key():
  """The collective group key this process's last reducer took."""
  with _servers_lock:
    return _group_keys[0]


def follow_group_key(key):
  """This process's next reducer takes the key after `key`: a joiner's
  reducer forms one group with the job's next ones."""
  with _servers_lock:
    _group_keys[0] = key


class WorkerLost(tf.errors.UnavailableError):
  """A sum failed because workers were lost (`lost`: their indices)."""

  def __init__(self, message, lost):
    super().__init__(None, None, message)
    self.lost = tuple(lost)


class Reducer(object):
  """Sums arrays over the workers of a cluster, one all-reduce per dtype.

  Every worker's session makes its reducers in the same order (the same
  script), so the n-th reducer of each process forms one collective group.

  Args:
    cluster: the `Cluster`.
    timeout: seconds a sum waits for the other workers before it fails.
    start_timeout: seconds the first sum waits for them to start.
    heartbeat_timeout: seconds a worker may be silent (no heartbeat)
      before it is lost: a sum under way is cancelled, and it and every
      later sum fail naming it.
    requested: `requested()`, whether this worker was asked to stop; every
      sum carries it, and `asked` holds the workers that were, by the sums
      so far (`stopping`: any).
    joining: `joining()`, whether this worker has processes to take in;
      every sum carries it too, and `joining` says whether any had, by the
      sums so far.
  """

  def __init__(self, cluster, timeout=DEFAULT_TIMEOUT,
               start_timeout=DEFAULT_START_TIMEOUT,
               heartbeat_timeout=DEFAULT_HEARTBEAT_TIMEOUT, requested=None,
               joining=None):
    self._cluster = cluster
    self._timeout = float(timeout)
    self._start_timeout = float(start_timeout)
    self._heartbeat_timeout = float(heartbeat_timeout)
    with _servers_lock:
      _group_keys[0] += 1
      self._group_key = _group_keys[0]
    self._graph = tf.Graph()
    self._session = None
    self._sums = {}  # (dtype, size) -> (placeholder, sum)
    self._lost_seen = {}  # worker index -> seconds silent, once lost
    self._cancel_lock = threading.Lock()
    self._cancelling = False  # whether a lost worker's sum is cancelled
    self.seconds = 0.0  # in sums, once the workers had started
    self._requested = requested or (lambda: False)
    self.asked = set()  # the workers asked to stop, by the sums so far
    self._joining = joining or (lambda: False)
    self.joining = False  # whether a worker had joiners, by the sums so far
    self._spans = []  # (start, end, what) of the sums not yet taken

  def take_spans(self):
    """The (start, end, what) of the sums since the last call, in seconds
    of time.monotonic."""
    spans, self._spans = self._spans, []
    return spans

  def close(self):
    with self._cancel_lock:
      if self._session is not None and not self._cancelling:
        self._session.close()
      self._session = None

  def sum(self, arrays, what):
    """Per array of `arrays`, its sum over the workers; `what` names the
    step for an error ("wave 12").

    Raises:
      tf.errors.UnavailableError: a worker was lost or did not answer
        within the timeout.
    """
    arrays = [np.asarray(a) for a in arrays]
    workers = self._cluster.num_workers
    if workers == 1:  # the last worker left
      if self._requested():
        self.asked.add(0)
      self.joining = self.joining or bool(self._joining())
      return [a.copy() for a in arrays]
    # Each worker's request to stop, and whether it has joiners, ride
    # along, so all learn of them in the same sum, and of whose a request
    # is. They take a dtype the sum has already (a flag is exact in any):
    # there is one all-reduce per dtype.
    carrier = next((a.dtype for a in arrays if a.dtype.kind in "fi"),
                   np.dtype(np.float64))
    flags = np.zeros([2 * workers], carrier)
    flags[self._cluster.index] = bool(self._requested())
    flags[workers + self._cluster.index] = bool(self._joining())
    arrays.append(flags)
    by_dtype = {}
    for i, a in enumerate(arrays):
      by_dtype.setdefault(a.dtype, []).append(i)
    by_dtype = sorted(by_dtype.items(), key=lambda d: d[0].str)
    ops, feeds = [], {}
    for dtype, indices in by_dtype:
      flat = np.concatenate([arrays[i].ravel() for i in indices])
      placeholder, total = self._sum_op(dtype, flat.size)
      ops.append(total)
      feeds[placeholder] = flat
    sums = self._run(ops, feeds, what)
    out = [None] * len(arrays)
    for (_, indices), flat in zip(by_dtype, sums):
      offset = 0
      for i in indices:
        n = arrays[i].size
        out[i] = flat[offset:offset + n].reshape(arrays[i].shape)
        offset += n
    self.asked.update(i for i, flag in enumerate(out[-1][:workers])
                      if flag > 0)
    self.joining = self.joining or bool(np.any(out[-1][workers:] > 0))
    return out[:-1]

  @property
  def stopping(self):
    """Whether a worker was asked to stop, by the sums so far."""
    return bool(self.asked)

  def from_chief(self, values, what):
    """{name: the chief's value} of `values` ({name: this worker's array}),
    for the arrays of numbers; `what` names the step for an error. The
    collective sums numbers only: other values stay each worker's."""
    names = sorted(n for n, v in values.items()
                   if np.asarray(v).dtype.kind in "fiuc")
    if not names:
      return {}
    mine = [values[n] if self._cluster.is_chief else
            np.zeros_like(values[n]) for n in names]
    return dict(zip(names, self.sum(mine, what)))

  def _sum_op(self, dtype, size):
    key = (np.dtype(dtype).str, size)
    if key not in self._sums:
      with self._graph.as_default(), tf.device(self._cluster.device()):
        placeholder = tf.compat.v1.placeholder(dtype, [size])
        # The instance key tells this sum from the group's others; the same
        # script makes its sums in the same order on every worker.
        total = tf.raw_ops.CollectiveReduceV2(
            input=placeholder,
            group_size=self._cluster.num_workers,
            group_key=self._group_key,
            instance_key=len(self._sums) + 1,
            ordering_token=[], merge_op="Add", final_op="Id",
            timeout_seconds=self._timeout)
      self._sums[key] = (placeholder, total)
    return self._sums[key]

  def _run(self, ops, feeds, what):
    if self._session is None:
      self._wait_for_workers()
      heartbeat(self._cluster).expect()
      self._session = tf.compat.v1.Session(
          server(self._cluster).target, graph=self._graph,
          config=session_config(self._cluster))
    if self._lost_now(heartbeat(self._cluster).silent()):
      raise self._lost_error(what, None)
    stop = heartbeat(self._cluster).watch(self._cancel_if_lost)
    start = time.monotonic()
    try:
      return self._session.run(ops, feeds)
    except tf.errors.OpError as e:
      raise self._lost_error(what, e) from None
    finally:
      stop()
      end = time.monotonic()
      self.seconds += end - start
      if len(self._spans) < 4096:  # kept until an observer takes them
        self._spans.append((start, end, what))

  def _lost_now(self, silent):
    """Records, and returns, the workers `silent` ({index: seconds}) says
    are lost."""
    for i, seconds in silent.items():
      if seconds >= self._heartbeat_timeout:
        self._lost_seen.setdefault(i, seconds)
    return self._lost_seen

  def _cancel_if_lost(self, silent):
    """On the heartbeat's thread: cancels the sum under way once a worker
    is lost, by closing the session on a thread of its own."""
    with self._cancel_lock:
      if (self._cancelling or self._session is None or
          not self._lost_now(silent)):
        return
      self._cancelling = True
      threading.Thread(target=self._session.close, daemon=True,
                       name="tensorbow-cancel-sum").start()

  def _lost_error(self, what, error):
    """The UnavailableError of a sum (`what`) that failed with `error`
    (None: refused before it ran) naming the workers that look lost."""
    cause = "" if error is None else (
        f" ({type(error).__name__}: {error.message.splitlines()[0]})")
    said, lost = self._lost(wait=error is not None)
    message = (f"TensorBow: worker {self._cluster.index} of "
               f"{self._cluster.num_workers} lost the others during {what}: "
               f"{said}{cause}")
    return (WorkerLost(message, lost) if lost else
            tf.errors.UnavailableError(None, None, message))

  def _lost(self, wait):
    """(what to say, their indices) of the other workers the heartbeats
    found lost: gone (their port refused connections) or silent past the
    heartbeat timeout; else that one did not answer within the timeout.
    With `wait`, a sum failed before the heartbeats knew why (another
    survivor's sum was cancelled first, say): gives them until their
    bound to find the worker."""
    deadline = time.monotonic() + (
        self._heartbeat_timeout + tb_heartbeat.PROBE_AFTER + 1.0 if wait
        else 0.0)
    while True:
      silent = heartbeat(self._cluster).silent()
      lost = self._lost_now(silent)
      said = [f"worker {i} ({self._cluster.workers[i]}) " + (
          "is gone" if silent.get(i) == float("inf") else
          f"did not answer heartbeats for {self._heartbeat_timeout:g} s")
              for i in sorted(lost)]
      if said:
        return ", ".join(said), sorted(lost)
      if time.monotonic() >= deadline:
        return (f"a worker did not answer within {self._timeout:g} s "
                "(the heartbeats found none of the others lost)"), []
      time.sleep(0.1)

  def _wait_for_workers(self):
    """Waits, with a message every 10 s, until every other worker's server
    listens, for at most start_timeout seconds."""
    server(self._cluster)
    deadline = time.monotonic() + self._start_timeout
    said = time.monotonic()
    waiting = self._cluster.others
    while True:
      waiting = [i for i in waiting
                 if not tb_heartbeat.listening(self._cluster.workers[i], 1.0)]
      if not waiting:
        return
      names = ", ".join(f"worker {i} ({self._cluster.workers[i]})"
                        for i in waiting)
      if time.monotonic() > deadline:
        raise tf.errors.UnavailableError(
            None, None,
            f"TensorBow: worker {self._cluster.index} waited "
            f"{self._start_timeout:g} s for {names} to start")
      if time.monotonic() >= said:
        logging.getLogger("tensorbow").warning(
            "TensorBow: worker %d waits for %s to start", self._cluster.index,
            names)
        said = time.monotonic() + 10.0
      time.sleep(0.2)
