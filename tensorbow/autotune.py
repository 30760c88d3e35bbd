"""Crossbow's auto-tuner: `TensorBowSession(replicas="auto")`.

The session starts with one replica. The tuner times the user's own
training runs: after `warmup` runs at a setting it measures at least
`measure` more, and more until they took `min_seconds` (a run can take
100 microseconds, and a few of them say little), and takes their median
throughput (batch rows per second, the whole `run` call). A setting whose
first `measure` runs are under `reject` times the best is dropped at
once: a short script should not pay long for a search. For the same
reason the search leaves the first setting only once the training runs
have taken `patience` times the first run, which holds building the
plan and TensorFlow's first run, as trying another setting does again.

1. L: while the last L added improved on the best throughput so far by
   at least `gain`, it adds one more replica (at most `max_replicas`, at
   most the batch's rows, and only while memory allows: the process's
   resident memory grew by some amount with the last replica added, and
   the system must have `memory_margin` times that available); when one
   does not, it goes back to the best L.
2. Stream groups (how many tasks run at once, each with TensorFlow's
   intra-op pool): at that L it tries every other count from 1 to
   min(L, cores) and keeps one that beats the best by `gain_groups`.
3. Threads: it tries the other way of running a task's ops, on
   TensorFlow's inter-op pool (its default) or all on the task's own
   thread, and keeps it if it beats the best by `gain_groups`. (The
   intra-op pool is one per process in TensorFlow, fixed by the first
   session: it cannot be split between tasks.)

Then it settles. A run with a different batch size starts the search
again from the current setting. Each decision is one log line and a
record in `decisions`; a change of setting refreshes the central model
from the replicas and seeds the new ones from it, so no update is lost.
"""
import collections
import logging
import os

import numpy as np

# The least time the runs measured at one setting take, by default.
MIN_SECONDS = 0.5
# How many first runs' time the training takes before the search leaves
# the first setting, by default.
PATIENCE = 30.0


def process_memory():
  """(resident bytes of this process, bytes the system has available), from
  /proc; None for what cannot be read."""
  resident = available = None
  try:
    with open("/proc/self/statm") as f:
      resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          available = int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return resident, available


Decision = collections.namedtuple(
    "Decision", ["run", "replicas", "stream_groups", "inline", "rows",
                 "rows_per_second", "next", "reason"])
Decision.__doc__ = """One decision of the tuner: at training run `run`, the
setting measured (L, stream groups, whether a task's ops ran on its own
thread), the batch rows, the throughput measured (None if not measured),
the setting `next` (L, stream groups or None for the default, inline) and
why."""


def _threads(inline):
  return "ops on the task's thread" if inline else "TensorFlow's inter-op pool"


class AutoTuner(object):
  """Chooses a session's L, stream groups and threads from the throughput
  of its training runs."""

  def __init__(self, warmup=2, measure=5, gain=1.1, gain_groups=1.05,
               max_replicas=16, cores=None, memory_margin=2.0,
               memory=process_memory, min_seconds=None, reject=0.8,
               patience=None):
    self.warmup = warmup
    self.measure = measure
    self.min_seconds = MIN_SECONDS if min_seconds is None else min_seconds
    self.reject = reject
    self.patience = PATIENCE if patience is None else patience
    self.gain = gain
    self.gain_groups = gain_groups
    self.max_replicas = max_replicas
    self.cores = cores or os.cpu_count() or 1
    self.memory_margin = memory_margin
    self._memory = memory
    self._available = None  # bytes available at the last measurement
    self.decisions = []
    self._runs = 0
    self._untried = []  # stream-group counts still to try
    self._split = True  # whether the batch is split across the replicas
    self._start(None)

  def _start(self, rows):
    """Starts the search for a batch of `rows` rows."""
    self._rows = rows  # the batch size being tuned for
    self._resident = {}  # L -> resident bytes when L was measured
    self._samples = []  # throughputs at the current setting
    self._measured = 0.0  # seconds of its runs after the warm-up
    self._first_run = None  # seconds of the search's first run
    self._trained = 0.0  # seconds of training runs since the search began
    self._best = None  # (L, stream groups, inline, rows per second)
    self._phase = "replicas"  # then "groups", "threads", "settled"

  @property
  def settled(self):
    return self._phase == "settled"

  def observe(self, replicas, groups, rows, seconds, inline=False,
              batch=None):
    """Records a training run of `rows` rows at `replicas` replicas on
    `groups` stream groups, its ops on the tasks' threads if `inline`, that
    took `seconds`; returns (L, stream groups or None, inline) for the next
    run, or None to keep them. `batch`: the rows of each replica's own
    element of an input pipeline (None: the run's batch was split).
    """
    setting = (replicas, groups, inline)
    self._runs += 1
    # Each replica its own element of `batch` rows: L is not bounded by
    # the rows, and a change of L is no change of batch.
    self._split = batch is None
    if (rows if batch is None else batch) != self._rows:
      if self._rows is not None:
        self._decide(setting, rows, None, setting,
                     "batch size changed: tuning again")
      self._start(rows if batch is None else batch)
    if self.settled:
      return None
    self._samples.append(rows / max(seconds, 1e-9))
    if len(self._samples) > self.warmup:
      self._measured += seconds
    if self._first_run is None:
      self._first_run = seconds
    self._trained += seconds
    first = self.warmup + self.measure
    if len(self._samples) < first or (
        self._best is None and
        self._trained < self.patience * self._first_run):
      return None
    if self._measured < self.min_seconds and not (
        len(self._samples) == first and self._best is not None and
        np.median(self._samples[self.warmup:]) <
        self.reject * self._best[-1]):
      return None
    throughput = float(np.median(self._samples[self.warmup:]))
    self._samples, self._measured = [], 0.0
    if self._phase == "replicas":
      self._resident[replicas], self._available = self._memory()
      return self._next_replicas(setting, rows, throughput)
    if self._phase == "groups":
      return self._next_groups(setting, rows, throughput)
    return self._next_threads(setting, rows, throughput)

  def _next_replicas(self, setting, rows, throughput):
    replicas, _, inline = setting
    limit = (min(self.max_replicas, max(1, rows)) if self._split
             else self.max_replicas)
    if self._best is None or throughput >= self.gain * self._best[-1]:
      first = self._best is None
      self._best = setting + (throughput,)
      reason = (self._memory_short(replicas) if replicas < limit else
                f"{limit} is the most replicas")
      if reason is None:
        return self._decide(
            setting, rows, throughput, (replicas + 1, None, inline),
            "first measurement" if first else
            f"at least {self.gain:g}x the best so far: adding a replica")
    else:
      reason = (f"under {self.gain:g}x L={self._best[0]}'s "
                f"{self._best[-1]:.0f} rows/s")
    best_l, best_groups, best_inline, _ = self._best
    self._untried = [g for g in range(1, min(best_l, self.cores) + 1)
                     if g != best_groups]
    if not self._untried:
      return self._try_threads(setting, rows, throughput, reason)
    self._phase = "groups"
    return self._decide(setting, rows, throughput,
                        (best_l, self._untried.pop(0), best_inline),
                        reason + f": L={best_l}, trying stream groups")

  def _memory_short(self, replicas):
    """Why memory does not allow replica `replicas` + 1, or None."""
    now, before = self._resident.get(replicas), self._resident.get(
        replicas - 1)
    if now is None or before is None or self._available is None:
      return None
    need = max(now - before, 0)
    if self._available >= self.memory_margin * need:
      return None
    return (f"memory: a replica took {need / 2**20:.0f} MB, "
            f"{self._available / 2**20:.0f} MB available (under "
            f"{self.memory_margin:g}x)")

  def _next_groups(self, setting, rows, throughput):
    if throughput >= self.gain_groups * self._best[-1]:
      self._best = setting + (throughput,)
    if self._untried:
      best_l, _, best_inline, _ = self._best
      return self._decide(setting, rows, throughput,
                          (best_l, self._untried.pop(0), best_inline),
                          "trying stream groups")
    return self._try_threads(setting, rows, throughput,
                             f"{self._best[1]} stream groups")

  def _try_threads(self, setting, rows, throughput, reason):
    """At the best L and stream groups, tries the other way of running a
    task's ops: on TensorFlow's inter-op pool, or all on the task's own
    thread (which saves a hand-over per op where ops are small)."""
    best_l, best_groups, best_inline, _ = self._best
    self._phase = "threads"
    return self._decide(
        setting, rows, throughput, (best_l, best_groups, not best_inline),
        f"{reason}: L={best_l} on {best_groups} stream groups, trying "
        f"{_threads(not best_inline)}")

  def _next_threads(self, setting, rows, throughput):
    if throughput >= self.gain_groups * self._best[-1]:
      self._best = setting + (throughput,)
    self._phase = "settled"
    best_l, best_groups, best_inline, best = self._best
    return self._decide(
        setting, rows, throughput, (best_l, best_groups, best_inline),
        f"settled at L={best_l} on {best_groups} stream groups, "
        f"{_threads(best_inline)} ({best:.0f} rows/s)")

  def _decide(self, setting, rows, throughput, following, reason):
    self.decisions.append(Decision(self._runs, *setting, rows, throughput,
                                   following, reason))
    logging.getLogger("tensorbow").info(
        "TensorBow auto-tuner, run %d: L=%d on %d stream groups%s, %s rows, "
        "%s rows/s -> %s (%s)", self._runs, setting[0], setting[1],
        ", ops on the task's thread" if setting[2] else "", rows,
        "-" if throughput is None else f"{throughput:.0f}", following,
        reason)
    return following
