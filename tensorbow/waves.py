"""Training runs: waves of learning tasks, and the replicas' life cycle
around the plain runs between them (DESIGN.md).

A `Trainer` plans a training run once per signature (planner.py), seeds
the replicas that need it (seeding.py), shards the batch feeds, runs the
wave on the C++ runtime (atomic: every replica computes, then every
replica commits) and merges the fetches. Around plain runs it refreshes
the user-named slots, marks written variables for re-seeding and has
the replicas' own state saved or loaded beside a checkpoint.
"""
import collections
import contextlib
import logging
import time

import numpy as np
import tensorflow as tf

from tensorbow import feeds
from tensorbow import options as tb_options
from tensorbow import prefetch
from tensorbow import rollback
from tensorbow import scaleout
from tensorbow import seeding
from tensorbow import session_lock

# A training run's results, rows trained on and batch its graph was built
# for (fed, or an input pipeline's element): the auto-tuner weighs by them.
Trained = collections.namedtuple("Trained", ["results", "rows", "batch"])


class Trainer(object):
  """Runs the training waves of one setting of a session.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    settings: the setting's `options.Settings`.
    plans: the setting's `planner.Planner` (plans each training run once).
    runtime: the setting's `runtime.Runtime`, which runs the waves.
    builder: the setting's `rewrite.builder.Builder` (names user errors).
    replicas: the setting's `replicas.ReplicaState`.
    user_graph: the user's `tf.Graph`.
    lock: the session's lock.
    check_open: raises if the session was closed.
    scale: the session's `scaleout.ScaleOut`: what crosses processes.
    inputs: the session's `prefetch.Prefetcher` of input pipelines'
      elements (None: one of its own that pulls only when a wave asks).
    noise: the session's `autotune.NoiseScale`, given the replicas'
      gradients of the waves it wants (replicas="auto"); None: no sample.
    backup: with elasticity, the session's `rollback.Backup`: what a wave
      that lost a worker puts back before it runs again.
  """

  def __init__(self, session, settings, plans, runtime, builder, replicas,
               user_graph, lock, check_open, scale=None, inputs=None,
               noise=None, backup=None):
    self._session = session
    self._replicas = settings.replicas
    self._algorithm = settings.algorithm
    self._nonfinite = settings.nonfinite
    self._plans = plans
    self._runtime = runtime
    self._builder = builder
    self._state = replicas
    self._user_graph = user_graph
    self._lock = lock
    self._check_open = check_open
    self._scale = scale or scaleout.Alone()
    self._seeding = seeding.Seeding(
        session, replicas, tb_options.checkpoint_config(settings),
        self._scale)
    self._needs_refresh = False
    self._waves = 0  # training runs completed
    # Waves timed, their seconds computing and synchronising (scaling.py).
    self._timing = [0, 0.0, 0.0]
    self._schedule = None  # a pooled algorithm's (Algorithm.schedule)
    self._inputs = inputs or prefetch.Prefetcher(session, ahead=False)
    self._noise = noise
    self._backup = backup

  @property
  def plans(self):
    """{training-run signature: planner.Plan} of the runs planned."""
    return self._plans.plans

  def schedule_history(self):
    """A pooled algorithm's schedule's history (Algorithm.schedule)."""
    return list(self._schedule.history) if self._schedule else []

  def timing(self):
    """(waves, seconds computing, seconds summing), the model's bytes."""
    return tuple(self._timing) + (self._state.model_bytes(),)

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

  def skipped(self):  # a training run ran as a plain run (a joiner's)
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

    Returns:
      A `Trained`.
    """
    handler = route.handler
    if route.sparse and self._replicas > 1:
      sparse = route.sparse[0]
      raise tf.errors.UnimplementedError(
          None, None, "TensorBow cannot split a SparseTensor feed across "
          f"replicas (fed: {sparse.indices.op.name}, {sparse.values.op.name}"
          f", {sparse.dense_shape.op.name}) in a training run: feed the "
          "batch dense, or train one replica")
    first = fed_values = list(fed_values)
    if route.pulled:
      # Taken outside the lock: the runs that fill a queue are plain runs
      # of this session.
      self._check_open()
      plan = self.plans.get(route.signature)
      by_element = (any(plan.elements) if plan is not None else
                    self._plans.takes_elements(route.pulled))
      count = self._replicas if by_element else 1
      taken = self._inputs.take(route, fed_values, count, options)
      # The next wave's elements come while this one computes.
      self._inputs.pull_ahead(route, count, options)
      first, fed_values = prefetch.with_elements(fed_values, taken,
                                                 by_element)
    with self._lock.wave(route.closure.waits), self._dropped_on_loss(
        route, route.pulled and taken):
      start = time.perf_counter()
      synced = self._scale.seconds
      try:
        self._check_open()
        plan, values = self._checked(route, fed_values, first)
      except BaseException:
        if route.pulled:  # nothing ran: the elements go to the next wave
          self._inputs.put_back(route, taken)
        raise
      rows = (feeds.total_rows(values[plan.batch_feed])
                        if plan.batch_feed >= 0 else 0)
      # What the graph was built for: the fed batch, or one element.
      batch = (
          0 if plan.batch_feed < 0 else
          len(values[plan.batch_feed][0]) if plan.elements[plan.batch_feed]
          else len(values[plan.batch_feed]))
      # One replica's element of an input pipeline, for the tuner.
      if plan.batch_feed < 0 and route.pulled:
        rows = batch = next(
            (len(v) for v in taken.elements[0] if np.ndim(v)), 0)
      # An empty batch is no pool's: replica 0 trains on it alone.
      pooled = (self._algorithm.pooled and self._state.in_use and
                plan.batch_feed >= 0 and not plan.elements[plan.batch_feed]
                and rows > 0)
      if self._algorithm.pooled and self._schedule is None:
        self._schedule = self._algorithm.schedule(plan.replicas)
      shards, sizes, trained, borrowed = feeds.wave_shards(
          plan, values, self._algorithm.replicas_equal)
      sat_out = list(range(trained + borrowed, plan.replicas))
      if pooled:
        shards, sizes = None, list(self._schedule.batch_sizes(rows))
      elif self._schedule is not None:
        self._schedule.batch_sizes(sum(sizes))
      if self._state.in_use:
        self._scale.take_model(self._state, self._session, self._waves + 1)
        self._seeding.seed()
        self._scale.take_state(self._state, self._session, self._waves + 1)
        if self._backup is not None:
          self._backup.save(self._state.replicated_parts())
        prepare = self._state.runs.wave_run(self._waves + 1, sizes)
        sync = self._scale.worker_sync(self._state.runs, plan.summed)
        if sync:  # the workers' common base, in the same run
          prepare = (([sync[0]] + list(prepare[0]), prepare[1])
                     if prepare is not None else ([sync[0]], {}))
        if prepare is not None:
          self._session.run(*prepare)
          self._state.runs.prepared()
        factors = self._schedule.factors() if self._schedule else None
        scale = factors is not None and self._state.runs.scale_run(factors)
        if scale:
          self._session.run(*scale)
      # Before the wave: an interrupt after it must still leave the
      # user-named slots to be refreshed.
      self._needs_refresh = True
      with self._lock.running():
        try:
          updates = range(trained)  # the replica of each update
          per_replica = (None if pooled else
                         [[s[r] for s in shards]
                          for r in range(trained + borrowed)])
          if pooled:
            outputs, sizes, updates = self._pool_wave(plan, values, sizes,
                                                      options)
            committed = None
          elif plan.atomic is not None:
            outputs, committed = self._atomic_wave(
                plan, per_replica, sizes, sat_out, options, run_metadata)
          else:
            # Its tasks write as they go: the replicas sitting out go first.
            self._leave_out(sat_out, trained)
            outputs, committed = self._whole_wave(plan, per_replica, options,
                                                  run_metadata), None
        except tf.errors.OpError as e:
          if not self._state.in_use:
            raise
          raise self._builder.user_error(e, self._user_graph) from None
      self._waves += 1
      fetched = handler.fetches()
      merged = feeds.merge_fetches(plan, fetched, outputs, sizes,
                                   None if pooled else (trained, committed))
      if self._state.in_use:
        merged.update(self._after_wave(sizes, plan.summed,
                                       feeds.sums_over_rows(plan, merged)))
        if self._backup is not None:
          self._backup.forget()
        if self._schedule is not None:
          self._after_pool_wave(updates)
      synced = self._scale.seconds - synced
      if self._builder.placement is not None and plan.sync_call >= 0:
        synced += self._runtime.last_sync_seconds()
      self._timing[0] += 1
      self._timing[1] += time.perf_counter() - start - synced
      self._timing[2] += synced
      merged.update(self._central(plan, values))  # after the sums
    results = [merged[i] for i in range(len(fetched))]
    return Trained(handler.build_results(self, results), rows, batch)

  def _central(self, plan, values):
    """{fetch position: value} of the fetches read after a wave: from the
    central model (variables, twins of sums) and the fed `values` echoed."""
    central = {}
    if plan.central_fetches:
      central.update(zip(plan.central_fetches, self._session.run(
          list(plan.central_fetches.values()))))
    for i, j in plan.echoed:
      central[i] = feeds.echoed(values[j], plan.combine[i])
    return central

  @contextlib.contextmanager
  def _dropped_on_loss(self, route, taken):
    """Around a wave: if it lost a worker (scaleout.MembershipChanged),
    puts back its writes, its count and the elements `taken`."""
    waves, timing = self._waves, list(self._timing)
    try:
      yield
    except scaleout.MembershipChanged:
      self._backup.restore()
      self._reset_barriers()
      self._waves, self._timing = waves, timing
      if taken:
        self._inputs.put_back(route, taken)
      raise

  def _checked(self, route, fed_values, first):
    """(plan, checked values) of a training run over `route` fed
    `fed_values`, `first` the values of one replica's element."""
    plan = self._plans.plan_for(route, first)
    session_lock.refuse_per_process(route.closure.ops,
                                    self._replicas * self._scale.workers)
    return plan, self._scale.checked(plan, fed_values, self._replicas)

  def _pool_wave(self, plan, values, batch_sizes, options):
    """A pooled algorithm's training run (runtime.run_pool): (per chunk of
    `batch_sizes` rows, in their order, its fetches, rows and replica)."""
    chunks = self._runtime.run_pool(
        plan.calls, [feeds.contiguous(v) for v in values], plan.dtypes,
        plan.batch, batch_sizes, options)
    return ([c[3] for c in chunks], [c[2] - c[1] for c in chunks],
            [c[0] for c in chunks])

  def _after_pool_wave(self, replicas):
    """A pooled algorithm's schedule counts the run's updates (`replicas`,
    one per update); at the end of its period the replicas merge."""
    if not self._schedule.record(replicas):
      return
    drift = self._state.runs.drift_tensor()
    weights = self._schedule.merge(
        self._session.run(drift) if drift is not None else np.zeros([0]))
    merge = self._state.runs.merge_weighted_run(weights)
    if merge is not None:
      self._session.run(*merge)

  def _after_wave(self, sizes, summed, sums):
    """The algorithm's work after a completed wave: a merge (over every
    process's replicas where the algorithm can), then what keeps the
    processes' central models, and the variables `summed`, equal.

    Returns:
      `sums` ({fetch position: this process's sum over rows}) summed over
      every process.
    """
    runs = self._state.runs
    if not self._scale.merge(runs, self._session, self._waves, sizes):
      merge = runs.merge_run(self._waves, sizes)
      if merge is not None:
        self._session.run(*merge)
    positions = sorted(sums)
    # In float64: exact for counts, one all-reduce for all.
    totals = self._scale.sync(
        runs, self._session, self._waves, summed,
        [np.asarray(sums[i], np.float64) for i in positions])
    return {i: feeds.in_dtype_of(sums[i], total)
            for i, total in zip(positions, totals)}

  def _whole_wave(self, plan, per_replica, options, run_metadata):
    """A wave of tasks that compute and write in one TensorFlow run."""
    try:
      return self._runtime.run_wave(
          plan.calls, per_replica, plan.dtypes, plan.batch_feed,
          plan.sync_call, options, run_metadata, by_group=plan.by_group)
    except tf.errors.OpError:
      self._after_failed_writes()
      raise

  def _after_failed_writes(self):
    """After a wave failed while writing: its replicas go back to the
    central model, which it did not change."""
    if self._state.in_use:
      self._state.reseed()
      self._reset_barriers()

  def _reset_barriers(self):
    """Restarts the algorithm's barriers after a wave that did not end."""
    reset = self._state.reset_op()
    if reset is not None:
      self._session.run(reset)

  def _atomic_wave(self, plan, per_replica, sizes, sat_out, options,
                   run_metadata):
    """A wave whose writes run only once every replica of `per_replica`
    (`sizes` rows each) has computed; replicas `sat_out` are left out.

    Returns:
      (per replica computed its fetches, whether it committed).
    """
    split = plan.atomic
    runtime = self._runtime
    check = self._nonfinite != "propagate"
    try:
      computed, nonfinite = runtime.compute(
          plan.calls, per_replica, plan.dtypes, plan.batch_feed,
          len(split.internal), check, options, run_metadata,
          by_group=plan.by_group)
      committed = [True] * len(per_replica)
      bad = [r for r, where in enumerate(nonfinite) if where]
      if bad:
        what = "; ".join(
            f"replica {r}: {', '.join(plan.described[i] for i in nonfinite[r])}"
            for r in bad)
        if self._nonfinite == "raise":
          raise tf.errors.InvalidArgumentError(
              None, None,
              f"TensorBow: a training run produced non-finite values "
              f"({what}); nothing was committed")
        logging.warning("TensorBow: replicas left out of a training run for "
                        "non-finite values (%s); they are re-seeded from the "
                        "central model", what)
        committed = [not where for where in nonfinite]
      # Rows weigh; an empty batch is replica 0's alone.
      weights = sizes[:len(per_replica)]
      weights = weights if any(weights) else [1] + weights[1:]
      if self._noise is not None:
        self._noise.add_kept(runtime, plan, weights)
      # Summing over processes is given only where there are several
      # (Algorithm.before_commit).
      workers = self._scale.commit_sum(self._waves + 1)
      self._algorithm.before_commit(
          runtime, weights, **({} if workers is None else
                               {"workers": workers}))
      self._leave_out(sat_out + bad, len(per_replica) - len(bad))
    except BaseException:
      # Nothing was written: the wave is dropped.
      runtime.discard()
      raise
    # Where an op after a write may fail, what the commit may write is
    # kept to be put back.
    snapshot = (rollback.snapshot(self._session, self._state, plan.snapshot)
                if plan.snapshot else None)
    try:
      sync_call = plan.sync_call
      if plan.sync_calls is not None and True in committed:
        sync_call = plan.sync_calls[committed.index(True)]
      written = runtime.commit(plan.commit_calls, committed, sync_call,
                               options, run_metadata, by_group=plan.by_group)
    except tf.errors.OpError:
      if snapshot is not None:
        self._session.run(*self._state.restore_snapshot_run(plan.snapshot,
                                                            snapshot))
        self._reset_barriers()
      else:
        self._after_failed_writes()
      raise
    if not all(committed):
      self._state.reseed_replicas(
          [r for r, c in enumerate(committed) if not c])
    n = len(split.compute_fetches) + len(split.commit_fetches)
    outputs = []
    for r in range(len(per_replica)):
      values = [None] * n
      for i, v in zip(split.compute_fetches, computed[r]):
        values[i] = v
      for i, v in zip(split.commit_fetches, written[r]):
        values[i] = v
      outputs.append(values)
    return outputs, committed

  def _leave_out(self, skipped, remaining):
    """Leaves replicas `skipped` out of the coming commit's central
    update, `remaining` taking part."""
    if remaining == 0 or not skipped or not self._state.in_use:
      return
    run = self._state.runs.participants_run(skipped, remaining)
    if run is not None:
      self._session.run(*run)
