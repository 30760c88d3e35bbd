"""Training runs: waves of learning tasks, and the replicas' life cycle
around the plain runs between them (DESIGN.md).

A `Trainer` takes a training run's input-pipeline elements, holds the
session's lock, plans the run once per signature (planner.py), has its
feeds checked and cut (feeds.py) and trains its wave (wave.py), which
prepares it, runs it on the C++ runtime (atomic: every replica computes,
then every replica commits) and merges the fetches. Around plain runs
the trainer refreshes the user-named slots, marks written variables for
re-seeding and has the replicas' own state saved or loaded beside a
checkpoint.
"""
import collections
import contextlib
import time

import tensorflow as tf

from tensorbow import feeds
from tensorbow import hooks
from tensorbow import options as tb_options
from tensorbow import prefetch
from tensorbow import scaling
from tensorbow import seeding
from tensorbow import session_lock
from tensorbow import wave

# A training run's results, rows trained on and batch its graph was built
# for (fed, or an input pipeline's element): the auto-tuner weighs by them;
# and (start, end, what) of each sum over the processes it made (for a
# timeline; [] in one process).
Trained = collections.namedtuple("Trained",
                                 ["results", "rows", "batch", "sums"])


def _refuse_sparse(route, num_replicas):
  """Raises UnimplementedError if a training run of `num_replicas` > 1
  over `route` is fed a SparseTensor: its rows cannot be split."""
  if route.sparse and num_replicas > 1:
    sparse = route.sparse[0]
    raise tf.errors.UnimplementedError(
        None, None, "TensorBow cannot split a SparseTensor feed across "
        f"replicas (fed: {sparse.indices.op.name}, {sparse.values.op.name}"
        f", {sparse.dense_shape.op.name}) in a training run: feed the "
        "batch dense, or train one replica")


def _hooks(setting, algorithm, noise):
  """The hooks of a setting's waves (`setting`: its `hooks.Setting`) as
  one `hooks.Joined`, in the order they are called: the noise sample, the
  job's (what other processes hand this one, and with elasticity the
  backup, which keeps the replicas before the algorithm's runs change
  them and puts them back before its barriers restart), then the
  algorithm's own (Algorithm.wave_hooks)."""
  joined = []
  if noise is not None:
    joined.append(hooks.NoiseSample(noise, setting.runtime))
  return hooks.Joined(joined + list(setting.job.hooks) +
                      list(algorithm.wave_hooks(setting)))


class Trainer(object):
  """Runs the training waves of one setting of a session.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    settings: the setting's `options.Settings`.
    plans: the setting's `planner.Planner` (plans each training run once).
    runtime: the setting's `runtime.Runtime`, which runs the waves.
    builder: the setting's `rewrite.builder.Builder` (names user errors).
    replica_state: the setting's `replicas.ReplicaState`.
    user_graph: the user's `tf.Graph`.
    lock: the session's lock.
    check_open: raises if the session was closed.
    job: the setting's `hooks.Job`: what the processes training together
      add to its waves (None: one process, hooks.ALONE).
    inputs: the session's `prefetch.Prefetcher` of input pipelines'
      elements (None: one of its own that pulls only when a wave asks).
    noise: the session's `autotune.NoiseScale`, given the replicas'
      gradients of the waves it wants (replicas="auto"); None: no sample.
  """

  def __init__(self, session, settings, plans, runtime, builder,
               replica_state, user_graph, lock, check_open, job=None,
               inputs=None, noise=None):
    self._session = session
    self._num_replicas = settings.replicas  # L
    self._plans = plans
    self._runtime = runtime
    self._builder = builder
    # Whether the replicas are spread over devices (devices=).
    self._placed = builder.placement is not None
    self._state = replica_state
    self._user_graph = user_graph
    self._lock = lock
    self._check_open = check_open
    # Whether replicas sitting a wave out borrow replica 0's shards.
    self._replicas_equal = settings.algorithm.replicas_equal
    self._job = job or hooks.ALONE
    self._seeding = seeding.Seeding(
        session, replica_state, tb_options.checkpoint_config(settings),
        self._job.checkpoint_worker)
    self._needs_refresh = False
    self._waves = 0  # training runs completed
    # Waves timed, their seconds computing and synchronising (scaling.py).
    self._timing = [0, 0.0, 0.0]
    self._inputs = inputs or prefetch.Prefetcher(session, ahead=False)
    self._steps = wave.WaveSteps(
        session, runtime, replica_state, settings.algorithm,
        settings.nonfinite, self._job, self._seeding,
        _hooks(hooks.Setting(session, runtime, builder, replica_state,
                             self._job), settings.algorithm, noise))

  @property
  def plans(self):
    """{training-run signature: planner.Plan} of the runs planned."""
    return self._plans.plans

  def schedule_history(self):
    """A pooled algorithm's schedule's history (Algorithm.schedule)."""
    return self._steps.schedule_history()

  def scaling_report(self, members, predicted=None):
    """The scaling model (scaling.report) over the waves so far, for
    `members` devices or workers and the numbers of them in `predicted`
    (None: scaling.PREDICTED)."""
    return scaling.report(
        members, *self._timing, self._state.model_bytes(),
        scaling.PREDICTED if predicted is None else predicted)

  def refresh(self, reads=None):
    """Brings user-named slots up to date before a plain run that reads
    variables `reads` (None: any) runs; one that reads no replicated
    variable (a queue runner's enqueue) does not wait for a wave."""
    state = self._state
    if (not self._needs_refresh or not state.in_use or
        (reads is not None and not state.replicates_any(reads))):
      return
    with self._lock:
      # Not while a wave waiting on other runs updates the replicas.
      if self._needs_refresh and not self._lock.waiting:
        refresh = state.refresh_op()
        if refresh is not None:
          self._session.run(refresh)
        self._needs_refresh = False

  def after_saver(self, kind, prefix):
    """A Saver's "save" or "restore" of checkpoint `prefix` ran."""
    with self._lock:
      self._waves = self._seeding.after_saver(kind, prefix, self._waves)

  @property
  def waves(self):
    """The training runs completed."""
    return self._waves

  def skipped(self):
    """Counts a training run that ran as a plain run (a joiner's, before
    the job's wave it joins at)."""
    self._waves += 1

  def carry(self, previous):
    """Trains on from `previous` (the Trainer of the session's setting
    before this one): its replicas' state and its count of waves."""
    self._seeding.carry(previous.replica_state())
    self._waves = previous.waves

  def config(self):
    """What a checkpoint's replica state must have been saved with."""
    return self._seeding.config()

  def replica_distances(self):
    """Each replica's L2 distance from the central model ([] with none)."""
    distances = self._state.distances() if self._state.in_use else None
    return [] if distances is None else list(self._session.run(distances))

  def replica_state(self):
    """{key: value} of every replica's state (seeded first if due)."""
    return self._seeding.replica_state()

  def reseed(self, written):
    """A plain run wrote variables `written` (None: maybe any): their
    replicas are set from the central model before the next wave (without
    the lock if none is replicated: a queue runner's epoch counter)."""
    if written is not None and not written:
      return
    if written is not None:
      # What a restore loaded no longer applies to these.
      self._seeding.wrote(written)
      if not self._state.replicates_any(written):
        return
    with self._lock:
      if written is None:
        self._seeding.wrote(None)
      self._state.reseed(written)

  def train(self, route, fed_values, options, run_metadata):
    """A wave over `route`'s plan; `fed_values` in the order of route.fed.

    Reads top-down: the input pipeline's elements are taken; then, under
    the session's lock, the run is planned and its feeds checked and cut,
    its wave trained (wave.WaveSteps.train) and timed.

    Returns:
      A `Trained`.

    Raises:
      UnimplementedError: a SparseTensor fed to a training run of several
        replicas.
    """
    _refuse_sparse(route, self._num_replicas)
    taken, first, fed_values = self._take(route, list(fed_values), options)
    return self._lock.during_wave(
        route.closure.waits,
        lambda: self._wave(route, fed_values, first, taken, options,
                           run_metadata))

  def _wave(self, route, fed_values, first, taken, options, run_metadata):
    """The wave over `route`, under the session's lock: a `Trained`."""
    with self._dropped_on_loss(route, taken):
      start, synced = time.perf_counter(), self._summing()
      plan, cut = self._open(route, fed_values, first, taken)
      fetched = route.handler.fetches()
      opened, merged = self._steps.train(self._waves + 1, plan, cut,
                                         fetched, self._running, options,
                                         run_metadata)
      self._time(plan, start, self._summing() - synced)
    results = [merged[i] for i in range(len(fetched))]
    sums = [] if self._job.take_sums is None else self._job.take_sums()
    return Trained(route.handler.build_results(self, results), opened.rows,
                   opened.batch, sums)

  def _take(self, route, fed_values, options):
    """(elements taken, one replica's values, the wave's values): an input
    pipeline's elements for the wave over `route` (None, and `fed_values`
    twice, when it pulls none). Taken outside the lock: the runs that fill
    a queue are plain runs of this session."""
    if not route.pulled:
      return None, fed_values, fed_values
    self._check_open()
    plan = self.plans.get(route.signature)
    by_element = (any(plan.elements) if plan is not None else
                  self._plans.takes_elements(route.pulled))
    count = self._num_replicas if by_element else 1
    taken = self._inputs.take(route, fed_values, count, options)
    # The next wave's elements come while this one computes.
    self._inputs.pull_ahead(route, count, options)
    first, values = prefetch.with_elements(fed_values, taken, by_element)
    return taken, first, values

  def _open(self, route, fed_values, first, taken):
    """(plan, `feeds.Cut`) of the run over `route` fed `fed_values`,
    `first` the values of one replica's element: planned, its feeds
    checked and cut. If that fails, nothing ran and the elements `taken`
    go to the next wave."""
    try:
      self._check_open()
      plan = self._plans.plan_for(route, first)
      if route.closure.takes:
        session_lock.refuse_per_process(
            route.closure.takes, self._num_replicas * self._job.workers)
      return plan, feeds.cut(plan, fed_values, self._num_replicas,
                             self._job.checked, taken, self._replicas_equal)
    except BaseException:
      if taken is not None:
        self._inputs.put_back(route, taken)
      raise

  def _running(self, tasks):
    """Runs a wave's tasks (`tasks()`, a `wave.Ran`) and counts the wave.
    From here the user-named slots are to be refreshed, even after an
    interrupt; the state lock is let go while ops that may wait on other
    runs run (session_lock.py); a failed op is named as the user's
    (Builder.user_error)."""
    self._needs_refresh = True
    with self._lock.running():
      try:
        ran = tasks()
      except tf.errors.OpError as e:
        if not self._state.in_use:
          raise
        raise self._builder.user_error(e, self._user_graph) from None
    self._waves += 1
    return ran

  def _summing(self):
    """The seconds spent in sums over the processes so far."""
    return 0.0 if self._job.seconds is None else self._job.seconds()

  def _time(self, plan, start, synced):
    """Counts a wave started at `start` that spent `synced` seconds in sums
    over processes (and its devices' synchronisation) for scaling.py."""
    if self._placed and plan.sync_call >= 0:
      synced += self._runtime.last_sync_seconds()
    self._timing[0] += 1
    self._timing[1] += time.perf_counter() - start - synced
    self._timing[2] += synced

  @contextlib.contextmanager
  def _dropped_on_loss(self, route, taken):
    """Around a wave: if its job dropped it (hooks.Dropped: a worker was
    lost or joins), puts back its writes, its count and the elements
    `taken`."""
    waves, timing = self._waves, list(self._timing)
    try:
      yield
    except hooks.Dropped:
      self._steps.undo()
      self._waves, self._timing = waves, timing
      if taken:
        self._inputs.put_back(route, taken)
      raise
