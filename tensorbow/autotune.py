"""Crossbow's auto-tuner: `TensorBowSession(replicas="auto")`.

The session starts with one replica. The tuner times the user's own
training runs: after `warmup` runs at a setting it measures at least
`measure` more, and more until they took `min_seconds` (a run can take
100 microseconds, and a few of them say little), and takes their median
throughput (batch rows per second, the whole `run` call). A setting whose
first `measure` runs are under `reject` times the best is dropped at
once: a short script should not pay long for a search. For the same
reason the search leaves the first setting only once the training runs
have taken `patience` times what trying a setting is expected to cost:
a first run, which builds the plan and holds TensorFlow's first run (as
the search's own first run did), and the warm-up and measured runs at
the speed of the runs so far. A script that ends right after one trial
then paid at most about 1 / `patience` more than at one replica.

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

Every comparison is of goodput, not throughput: the median rows per
second times the median statistical efficiency of those rows (Pollux's
measure, from AdaptDL). Where the replicas split the user's batch, every
L trains the same rows a run and the efficiency is 1. Where each replica
takes its own element of an input pipeline (b rows), L replicas train
L b rows a run, and rows at a larger batch teach less: the efficiency is
(phi + b) / (phi + L b), phi the gradient noise scale, measured from the
replicas' own gradients of each wave (`NoiseScale`). An L that trains
more rows a second but less per row is left.

Then it settles. A run with a different batch size starts the search
again from the current setting. Each decision is one log line and a
record in `decisions`; a change of setting refreshes the central model
from the replicas and seeds the new ones from it, so no update is lost.
A trial that ends back at L = 1 is undone by the session (trial_undo.py).
"""
import bisect
import collections
import logging
import os

import numpy as np

# The least time the runs measured at one setting take, by default.
MIN_SECONDS = 0.5
# How many times a trial's expected cost the training takes before the
# search leaves the first setting, by default.
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
                 "rows_per_second", "next", "reason", "efficiency",
                 "noise_scale", "goodput"])
Decision.__doc__ = """One decision of the tuner: at training run `run`, the
setting measured (L, stream groups, whether a task's ops ran on its own
thread), the batch rows, the throughput measured (None if not measured),
the setting `next` (L, stream groups or None for the default, inline),
why, and what the throughput was weighed by: the statistical efficiency
(median), the gradient noise scale it came from (None where the rows were
a split batch) and their product with the throughput, the goodput."""


class NoiseScale(object):
  """The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et
  al., "An Empirical Model of Large-Batch Training"), from waves of
  replicas that each computed a gradient on its own rows.

  With `small` the mean over the replicas of |g_r|^2 at b rows each and
  `big` = |mean_r g_r|^2 at B = L b rows, E|g_b|^2 = |G|^2 + tr(Sigma) / b
  gives unbiased |G|^2 = (B big - b small) / (B - b) and tr(Sigma) =
  (small - big) / (1/b - 1/B). Each is averaged over the waves before the
  ratio is taken, as the paper does: a single wave's |G|^2 can be
  negative.
  """

  def __init__(self, max_samples=64):
    self._square = self._trace = 0.0
    self.samples = 0
    self.max_samples = max_samples

  @property
  def wanted(self):
    """Whether more waves are worth their cost: reading every replica's
    gradients takes a pass over them per replica."""
    return self.samples < self.max_samples

  def add_kept(self, runtime, plan, sizes):
    """Adds the wave `runtime` holds between its phases (wave.py), of
    training-run plan `plan` (planner.Plan), its replicas having trained
    on `sizes` rows: only where each replica took its own element of an
    input pipeline, at equal rows, and the gradients can be read.
    """
    if not (self.wanted and plan.gradients and len(sizes) > 1 and
            plan.batch_feed >= 0 and plan.elements[plan.batch_feed] and
            len(set(sizes)) == 1 and sizes[0] > 0):
      return
    gradients = []
    try:
      for r in range(len(sizes)):
        kept = runtime.kept_sums([float(q == r) for q in range(len(sizes))])
        gradients.append(np.concatenate([kept[k] for k in plan.gradients]))
    except ValueError:  # other kept tensors differ in shape: no sample
      return
    self.add(gradients, sizes[0])

  def add(self, gradients, rows):
    """Adds a wave: `gradients` per replica (arrays: its gradients,
    flattened and joined), taken on `rows` rows each (equal)."""
    replicas = len(gradients)
    if replicas < 2 or rows < 1:
      raise ValueError(f"a noise scale needs two replicas or more with rows, "
                       f"got {replicas} of {rows} rows")
    small = float(np.mean([np.dot(g, g) for g in gradients]))
    mean = np.mean(gradients, axis=0)
    big = float(np.dot(mean, mean))
    b, whole = float(rows), float(rows * replicas)
    self._square += (whole * big - b * small) / (whole - b)
    self._trace += (small - big) / (1 / b - 1 / whole)
    self.samples += 1

  def value(self):
    """B_simple in rows, inf where the waves so far see no signal over the
    noise (|G|^2 <= 0), or None before any wave."""
    if not self.samples:
      return None
    if self._square <= 0:
      return float("inf")
    return max(self._trace, 0.0) / self._square


def efficiency(noise_scale, rows, replicas):
  """The statistical efficiency of training at `replicas` x `rows` rows a
  step rather than `rows`, per row (Pollux): (phi + rows) / (phi +
  replicas rows), phi the noise scale (inf: 1)."""
  if noise_scale == float("inf"):
    return 1.0
  return (noise_scale + rows) / (noise_scale + replicas * rows)


def _sorted_median(values):
  """The median of `values`, sorted already, as np.median gives it: read
  in constant time, where np.median takes time growing with the list."""
  middle = len(values) // 2
  if len(values) % 2:
    return values[middle]
  return (values[middle - 1] + values[middle]) / 2.0


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
    self._pinned = None  # why L is kept at 1 for good, once it is
    self._start(None)

  def _start(self, rows):
    """Starts the search for a batch of `rows` rows."""
    self._rows = rows  # the batch size being tuned for
    self._resident = {}  # L -> resident bytes when L was measured
    self._samples = []  # throughputs at the current setting
    self._efficiencies = []  # and their rows' statistical efficiency
    self._noise_scale = None  # the latest noise scale they came from
    self._measured = 0.0  # seconds of its runs after the warm-up
    self._first_run = None  # seconds of the search's first run
    # and of the runs after it, at the first setting, kept sorted: the
    # median is read at every run until the search leaves that setting
    self._run_seconds = []
    self._trained = 0.0  # seconds of training runs since the search began
    self._best = None  # (L, stream groups, inline, rows per second)
    self._phase = "replicas"  # then "groups", "threads", "settled"

  @property
  def settled(self):
    return self._phase == "settled"

  @property
  def pinned(self):
    """Why the tuner keeps L = 1 for good, or None."""
    return self._pinned

  def pin(self, setting, reason):
    """Keeps L = 1 for good from the next training run, at `setting` (L,
    stream groups, inline) now, because of `reason` (a feed no setting
    can split); returns the setting of the next run. Recorded once."""
    following = (1,) + tuple(setting[1:])
    if self._pinned is None:
      self._pinned = reason
      self._decide(setting, self._rows or 0, None, following,
                   f"kept at L=1: {reason}", run=self._runs + 1)
    return following

  def note(self, setting, reason):
    """Records `reason` at the next training run, at `setting` (L, stream
    groups, inline), which it keeps: something of the setting the user
    should know (an option it leaves without effect)."""
    self._decide(setting, self._rows or 0, None, tuple(setting), reason,
                 run=self._runs + 1)

  def observe(self, replicas, groups, rows, seconds, inline=False,
              batch=None, efficiency=None, noise_scale=None):
    """Records a training run of `rows` rows at `replicas` replicas on
    `groups` stream groups, its ops on the tasks' threads if `inline`, that
    took `seconds`; returns (L, stream groups or None, inline) for the next
    run, or None to keep them. `batch`: the rows of each replica's own
    element of an input pipeline (None: the run's batch was split).
    `efficiency`: the statistical efficiency of the run's rows (None: 1),
    from gradient noise scale `noise_scale` if given.
    """
    setting = (replicas, groups, inline)
    self._runs += 1
    if self._pinned is not None:
      return None
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
    self._efficiencies.append(1.0 if efficiency is None else efficiency)
    self._noise_scale = noise_scale
    if len(self._samples) > self.warmup:
      self._measured += seconds
    if self._first_run is None:
      self._first_run = seconds
    elif self._best is None:
      bisect.insort(self._run_seconds, seconds)
    self._trained += seconds
    first = self.warmup + self.measure
    if len(self._samples) < first or (
        self._best is None and
        self._trained < self.patience * self._trial_cost()):
      return None
    if self._measured < self.min_seconds and not (
        len(self._samples) == first and self._best is not None and
        self._measurement()[-1] < self.reject * self._best[-1]):
      return None
    measured = self._measurement()
    self._samples, self._efficiencies, self._measured = [], [], 0.0
    if self._phase == "replicas":
      self._resident[replicas], self._available = self._memory()
      return self._next_replicas(setting, rows, measured)
    if self._phase == "groups":
      return self._next_groups(setting, rows, measured)
    return self._next_threads(setting, rows, measured)

  def _trial_cost(self):
    """Seconds trying another setting is expected to take: a first run as
    the search's first took, then its warm-up and measured runs at the
    median speed of the runs since."""
    runs = (_sorted_median(self._run_seconds) if self._run_seconds else
            self._first_run)
    return self._first_run + (self.warmup + self.measure) * runs

  def _measurement(self):
    """(rows/s, statistical efficiency, noise scale, goodput) of the runs
    measured at the current setting: the medians after the warm-up."""
    throughput = float(np.median(self._samples[self.warmup:]))
    efficiency = float(np.median(self._efficiencies[self.warmup:]))
    return (throughput, efficiency, self._noise_scale,
            throughput * efficiency)

  def _next_replicas(self, setting, rows, measured):
    replicas, _, inline = setting
    limit = (min(self.max_replicas, max(1, rows)) if self._split
             else self.max_replicas)
    goodput = measured[-1]
    if self._best is None or goodput >= self.gain * self._best[-1]:
      first = self._best is None
      self._best = setting + (goodput,)
      reason = (self._memory_short(replicas) if replicas < limit else
                f"{limit} is the most replicas")
      if reason is None:
        return self._decide(
            setting, rows, measured, (replicas + 1, None, inline),
            "first measurement" if first else
            f"goodput at least {self.gain:g}x the best so far: adding a "
            "replica")
    else:
      reason = (f"goodput under {self.gain:g}x L={self._best[0]}'s "
                f"{self._best[-1]:.0f} rows/s")
    best_l, best_groups, best_inline, _ = self._best
    self._untried = [g for g in range(1, min(best_l, self.cores) + 1)
                     if g != best_groups]
    if not self._untried:
      return self._try_threads(setting, rows, measured, reason)
    self._phase = "groups"
    return self._decide(setting, rows, measured,
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

  def _next_groups(self, setting, rows, measured):
    if measured[-1] >= self.gain_groups * self._best[-1]:
      self._best = setting + (measured[-1],)
    if self._untried:
      best_l, _, best_inline, _ = self._best
      return self._decide(setting, rows, measured,
                          (best_l, self._untried.pop(0), best_inline),
                          "trying stream groups")
    return self._try_threads(setting, rows, measured,
                             f"{self._best[1]} stream groups")

  def _try_threads(self, setting, rows, measured, reason):
    """At the best L and stream groups, tries the other way of running a
    task's ops: on TensorFlow's inter-op pool, or all on the task's own
    thread (which saves a hand-over per op where ops are small)."""
    best_l, best_groups, best_inline, _ = self._best
    self._phase = "threads"
    return self._decide(
        setting, rows, measured, (best_l, best_groups, not best_inline),
        f"{reason}: L={best_l} on {best_groups} stream groups, trying "
        f"{_threads(not best_inline)}")

  def _next_threads(self, setting, rows, measured):
    if measured[-1] >= self.gain_groups * self._best[-1]:
      self._best = setting + (measured[-1],)
    self._phase = "settled"
    best_l, best_groups, best_inline, best = self._best
    return self._decide(
        setting, rows, measured, (best_l, best_groups, best_inline),
        f"settled at L={best_l} on {best_groups} stream groups, "
        f"{_threads(best_inline)} (goodput {best:.0f} rows/s)")

  def _decide(self, setting, rows, measured, following, reason, run=None):
    """Records a decision at training run `run` (None: the last observed);
    `measured` as _measurement gives it, or None."""
    throughput, efficiency, noise, goodput = measured or (None,) * 4
    run = self._runs if run is None else run
    self.decisions.append(Decision(run, *setting, rows, throughput,
                                   following, reason, efficiency, noise,
                                   goodput))
    logging.getLogger("tensorbow").info(
        "TensorBow auto-tuner, run %d: L=%d on %d stream groups%s, %s rows, "
        "%s rows/s x efficiency %s = goodput %s -> %s (%s)", run,
        setting[0], setting[1],
        ", ops on the task's thread" if setting[2] else "", rows,
        "-" if throughput is None else f"{throughput:.0f}",
        "-" if efficiency is None else f"{efficiency:.3f}" + (
            "" if noise is None else f" (noise scale {noise:.1f} rows)"),
        "-" if goodput is None else f"{goodput:.0f}", following, reason)
    return following


class Tuning(object):
  """replicas="auto" in one session: the tuner, the gradient noise scale
  it weighs an input pipeline's rows by, and what each training run tells
  them. Settings are (L, stream groups, inline) triples.

  Args:
    tuner: the `AutoTuner` (default: a new one).
  """

  def __init__(self, tuner=None):
    self.tuner = tuner or AutoTuner()
    self.noise = NoiseScale()

  def before_wave(self, route, setting):
    """The setting a training run over `route` (routing.Route) must take,
    at `setting` now: L = 1 for good once a run is fed what no setting can
    split (a SparseTensor); else `setting`."""
    if route.sparse:
      return self.tuner.pin(
          setting, f"a SparseTensor feed ({route.sparse[0].values.op.name}) "
          "cannot be split across replicas")
    return setting

  def after_wave(self, trained, seconds, setting):
    """The setting of the next training run, after one at `setting` that
    gave `trained` (waves.Trained) in `seconds`."""
    # Each replica's own element of `batch` rows: L b rows a run, weighed
    # by their statistical efficiency.
    batch = trained.batch if trained.batch != trained.rows else None
    noise = self.noise.value() if batch is not None else None
    following = self.tuner.observe(
        *setting[:2], trained.rows, seconds, setting[2], batch=batch,
        efficiency=(None if noise is None else
                    efficiency(noise, batch, setting[0])),
        noise_scale=noise)
    return setting if following is None else following


def unsplittable(tuning, refused, setting):
  """The setting a training run refused at `setting` for a batch that
  cannot split (`refused`, a batch_sizes.UnsplittableBatch: the user's
  graph fixes the batch size) is taken again at: with replicas="auto"
  (`tuning`, an autotune.Tuning, else None) L = 1 for good, recorded in
  the tuner's decisions.

  Raises:
    batch_sizes.UnsplittableBatch: `refused`, without replicas="auto" or
      at L = 1 already.
  """
  if tuning is None or setting[0] == 1:
    raise refused
  return tuning.tuner.pin(setting, "the batch cannot be split across "
                          f"replicas: {refused.message}")
