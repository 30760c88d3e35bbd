"""What a user can look at while a session trains: a timeline, TensorBoard
scalars and a progress line (`TensorBowSession(timeline=, logdir=,
progress=)`, `tensorbow-run --timeline --logdir --progress`).

A session holds one observer for its life, told of each training run
after it ends (`wave`): `Quiet` when none of the three is asked for, which
does nothing, else a `Recorder`:

- *Timeline*: a Chrome trace-event file (JSON, for chrome://tracing or
  Perfetto), written as the run goes and closed with the session. The
  process is the worker; a track per stream group holds its learning
  tasks (computation and commit, by replica) and synchronisation tasks; a
  "waves" track holds each training run; a "workers" track the sums over
  the workers and the membership, at the start and at each change. Times
  are the wall clock, so that the files of several workers on one machine
  line up (`merge`).
- *TensorBoard*: an event file in `logdir` with, every `SCALARS_EVERY`
  seconds, `wave_ms` and `images_per_second` over the waves since the
  last write (training time only), `replicas` (L, as `auto` chose it) and
  `workers`, at the step of the last wave; and every `DISTANCE_EVERY`
  seconds each replica's distance from the
  central model (`replica_distance/<r>`, the L2 norm over the model
  variables), which costs a read of every replica.
- *Progress*: a line on stderr every `progress` seconds: waves, images a
  second since the last line, L and workers.
"""
import json
import os
import sys
import time

import tensorflow as tf

DISTANCE_EVERY = 10.0  # seconds between reads of the replicas' distances
SCALARS_EVERY = 1.0  # seconds between writes of the other scalars
# Track ids of a worker's timeline beside its stream groups' (0, 1, ...).
WAVES_TRACK = 1000
WORKERS_TRACK = 1001


def make(timeline, logdir, progress, index, workers):
  """The observer of a session with these options (None: off) in process
  `index` of `workers` training together."""
  if timeline is None and logdir is None and progress is None:
    return Quiet()
  return Recorder(timeline, logdir, progress, index, workers)


def worker_path(path, index, workers):
  """Where worker `index` of `workers` writes the timeline `path` names:
  the path itself for one process, else with ".worker<index>" before the
  extension."""
  if workers == 1:
    return path
  stem, ext = os.path.splitext(path)
  return f"{stem}.worker{index}{ext}"


def merge(paths, out):
  """Writes the timelines at `paths` (one per worker) as one file `out`."""
  events = []
  for path in paths:
    events.extend(read(path))
  with open(out, "w") as f:
    json.dump(events, f)


def read(path):
  """The events of a timeline file, closed or not (a process that died
  leaves its array open, which Chrome's viewer accepts)."""
  with open(path) as f:
    text = f.read().rstrip()
  if not text.endswith("]"):
    text += "]"
  return json.loads(text)


class Quiet(object):
  """No timeline, no TensorBoard, no progress: does nothing."""

  def wave(self, start, end, rows, replicas, runtime, sums, distances):
    del start, end, rows, replicas, runtime, sums, distances

  def membership(self, change):
    """The workers changed: `change` as membership.Log records it."""
    del change

  def close(self):
    pass


class Recorder(Quiet):
  """Writes a session's timeline, TensorBoard scalars and progress lines.

  Args:
    timeline: the trace file's path, or None.
    logdir: TensorBoard's directory, or None.
    progress: seconds between progress lines, or None.
    index, workers: this process's place among the workers, and their
      number.
    clock: seconds of the clock the waves are timed by (that of the
      runtime's task timings, CLOCK_MONOTONIC); wall: the wall clock.
  """

  def __init__(self, timeline, logdir, progress, index=0, workers=1,
               clock=time.monotonic, wall=time.time, out=None):
    self._clock, self._wall = clock, wall
    self._offset = wall() - clock()  # monotonic to wall-clock seconds
    self._index, self._workers = index, workers  # at the start
    self._members = workers  # workers now
    self._opened = False
    self._timeline, self._logdir = timeline, logdir
    # Opened at the first training run: a session that never trains (one
    # that only evaluates) leaves another's files alone.
    self._trace = self._events = None
    self._flushed = self._wrote = clock()
    self._pending = (0, 0, 0.0)  # waves, rows and seconds not yet written
    self._replicas = None  # L at the latest wave
    self._groups = set()  # the stream groups with a track
    self._runtime = self._last_task = None  # whose timings were read
    self._progress = progress
    self._out = out or sys.stderr
    self._waves = 0
    self._said = self._read_distances = clock()
    self._said_rows = self._rows = 0

  def _wants_distances(self):
    """Whether the replicas' distances are due."""
    return (self._logdir is not None and
            self._clock() - self._read_distances >= DISTANCE_EVERY)

  def wave(self, start, end, rows, replicas, runtime, sums, distances):
    """A training run from `start` to `end` (clock seconds) of `rows` rows
    on `replicas` replicas, its tasks' timings in `runtime`'s
    (`Runtime.task_timings`); `sums`: the (start, end, what) of its sums
    over the workers; `distances`: () -> each replica's distance from the
    central model, asked when due (every DISTANCE_EVERY seconds with a
    logdir), or None."""
    if not self._opened:
      self._open()
    self._waves += 1
    self._rows += rows
    if self._trace is not None:
      self._trace_wave(start, end, rows, replicas, self._new_timings(runtime),
                       sums)
    if self._events is not None:
      waves, rows_in, seconds = self._pending
      self._pending = (waves + 1, rows_in + rows, seconds + end - start)
      self._replicas = replicas
      if end - self._wrote >= SCALARS_EVERY:
        self._write_pending()
        self._wrote = end
      if distances is not None and self._wants_distances():
        self._read_distances = self._clock()
        self._scalars({f"replica_distance/{r}": d
                       for r, d in enumerate(distances())})
    if self._progress is not None and end - self._said >= self._progress:
      rate = (self._rows - self._said_rows) / max(end - self._said, 1e-9)
      self._out.write(
          f"TensorBow: worker {self._index} of {self._members}, wave "
          f"{self._waves}, {rate:.0f} images/s over the last "
          f"{end - self._said:.0f} s, L={replicas}\n")
      self._out.flush()
      self._said, self._said_rows = end, self._rows

  def membership(self, change):
    """An instant on the workers track, and the workers counted from now."""
    if not self._opened:
      self._open()
    self._members = len(change["workers"])
    if self._trace is not None:
      self._event(
          "i", f"membership: from wave {change['wave']}, workers "
          f"{','.join(map(str, change['workers']))} go on", self._clock(),
          0.0, WORKERS_TRACK, s="p", args=dict(change))

  def close(self):
    if self._trace is not None:
      self._event("i", "session closed", self._clock(), 0.0, WORKERS_TRACK,
                  s="p")
      self._trace.write("\n]\n")
      self._trace.close()
      self._trace = None
    if self._events is not None:
      self._write_pending()
      self._events.close()
      self._events = None

  def _open(self):
    self._opened = True
    if self._timeline is not None:
      self._trace = open(
          worker_path(self._timeline, self._index, self._workers), "w")
      self._trace.write("[")
      self._separator = "\n"
      self._tracks(self._workers)
    if self._logdir is not None:
      directory = (self._logdir if self._workers == 1 else
                   os.path.join(self._logdir, f"worker{self._index}"))
      tf.io.gfile.makedirs(directory)
      self._events = tf.io.TFRecordWriter(os.path.join(
          directory, f"events.out.tfevents.{int(self._wall())}.tensorbow."
          f"{os.getpid()}"))
      self._write_event(tf.compat.v1.Event(wall_time=self._wall(),
                                           file_version="brain.Event:2"))

  # ---- The timeline ------------------------------------------------------

  def _tracks(self, workers):
    self._put(self._meta("process_name", f"worker {self._index}" +
                         (f" of {workers}" if workers > 1 else "")))
    self._put(self._meta("thread_name", "waves", WAVES_TRACK))
    self._put(self._meta("thread_name", "workers", WORKERS_TRACK))
    self._event("i", f"workers: {workers}", self._clock(), 0.0,
                WORKERS_TRACK, s="p", args={"workers": workers,
                                            "index": self._index})

  def _new_timings(self, runtime):
    """The task timings `runtime` recorded since the last read: those of
    waves after the last seen, read from the end, more until one is
    old (a setting of L has a runtime of its own)."""
    if runtime is not self._runtime:
      self._runtime, self._last_task = runtime, None
    last = 16
    while True:
      timings = runtime.task_timings(last)
      new = [t for t in timings
             if self._last_task is None or t[0] > self._last_task]
      if len(new) < len(timings) or len(timings) < last:
        break
      last *= 4
    if new:
      self._last_task = max(t[0] for t in new)
    return new

  def _trace_wave(self, start, end, rows, replicas, timings, sums):
    self._event("X", f"wave {self._waves}", start, end - start, WAVES_TRACK,
                args={"rows": rows, "replicas": replicas})
    for _, replica, group, task_rows, phase, t0, t1 in timings:
      if group not in self._groups:
        self._groups.add(group)
        self._put(self._meta("thread_name", f"stream group {group}", group))
      name = ("synchronisation" if replica < 0 else
              f"replica {replica} " + ("commit" if phase else "compute"))
      self._event("X", name, t0, t1 - t0, group,
                  args={"wave": self._waves, "rows": task_rows})
    for t0, t1, what in sums:
      self._event("X", "sum over the workers", t0, t1 - t0, WORKERS_TRACK,
                  args={"what": what})
    if self._waves == 1 or end - self._flushed >= 1.0:  # what a process
      self._trace.flush()  # that dies leaves, up to a second before
      self._flushed = end

  def _meta(self, kind, label, tid=0):
    return {"ph": "M", "name": kind, "pid": self._index, "tid": tid,
            "ts": 0, "dur": 0, "args": {"name": label}}

  def _event(self, ph, name, start, seconds, tid, args=None, **extra):
    self._put(dict({"ph": ph, "name": name, "pid": self._index, "tid": tid,
                    "ts": int((start + self._offset) * 1e6),
                    "dur": int(seconds * 1e6), "args": args or {}},
                   **extra))

  def _put(self, event):
    self._trace.write(self._separator + json.dumps(event))
    self._separator = ",\n"

  # ---- TensorBoard -------------------------------------------------------

  def _write_pending(self):
    waves, rows, seconds = self._pending
    if waves:
      self._scalars({"wave_ms": 1e3 * seconds / waves,
                     "images_per_second": rows / max(seconds, 1e-9),
                     "replicas": self._replicas, "workers": self._members})
      self._pending = (0, 0, 0.0)

  def _scalars(self, values):
    self._write_event(tf.compat.v1.Event(
        wall_time=self._clock() + self._offset, step=self._waves,
        summary=tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=tag, simple_value=float(v))
            for tag, v in values.items()])))

  def _write_event(self, event):
    self._events.write(event.SerializeToString())
