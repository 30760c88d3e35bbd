"""One wave: what it trains on, its steps, and what it gave back.

The trainer (waves.py) plans a training run and cuts its feeds
(feeds.py), then runs it as one wave (`WaveSteps.train`), in this order:
the wave is opened (the `Wave` record), its hooks' points run around its
steps (hooks.Joined.run: opening, the seeding, before, the tasks, merge,
the fetches merged and summed, after), and the central fetches are read.
The tasks are a pooled algorithm's chunks, tasks that write as they go,
or an atomic wave: compute, between (what is decided once every replica
has computed: who commits, the hooks' `between`), commit, in one call of
the runtime. Pure steps sit beside: which replicas commit after
non-finite values, with what weights, and each replica's outputs put
back in fetch order.
"""
import collections
import functools
import logging

import tensorflow as tf

from tensorbow import feeds
from tensorbow import fetches
from tensorbow import rollback

# What one wave trains on. `number` counts training runs from 1; `plan` is
# its planner.Plan and `values` the checked feeds; `per_replica` each
# training replica's shards (None for a pooled algorithm, which cuts the
# batch itself); `sizes` each replica's rows; the first `trained` replicas
# train, `sat_out` sit out; `rows` and `batch` are the rows trained on and
# the batch the graph was built for (what the auto-tuner weighs by);
# `schedule` is a pooled algorithm's schedule (Algorithm.schedule; None:
# the algorithm is not pooled), which the wave's hooks tell what ran;
# `in_use`: whether the setting's replicas are in use (one replica
# training the user's own variables has none to seed, merge or sum).
Wave = collections.namedtuple("Wave", [
    "number", "plan", "values", "per_replica", "sizes", "trained",
    "sat_out", "pooled", "rows", "batch", "schedule", "in_use"])

# What a wave gave back: per replica (or per chunk of a pooled wave) its
# fetches, the rows each computed on, whether each committed (None: the
# wave's writes were not held back) and the replica of each update.
Ran = collections.namedtuple("Ran",
                             ["outputs", "sizes", "committed", "updates"])


def open_wave(number, plan, cut, algorithm, in_use, schedule):
  """The `Wave` of training run `number` over `plan`.

  Args:
    number: the training run's number, from 1.
    plan: its `planner.Plan`.
    cut: its feeds checked and cut (a `feeds.Cut`).
    algorithm: the setting's `algorithms.base.Algorithm`.
    in_use: whether the setting's replicas are in use.
    schedule: a pooled algorithm's schedule (None: not pooled); it is
      told the wave's rows.

  Returns:
    A `Wave`.
  """
  rows = cut.rows
  # An empty batch is no pool's: replica 0 trains on it alone.
  pooled = (algorithm.pooled and in_use and plan.batch_feed >= 0 and
            not plan.elements[plan.batch_feed] and rows > 0)
  computing = cut.trained + cut.borrowed
  sat_out = list(range(computing, plan.replicas))
  per_replica, sizes = None, cut.sizes
  if pooled:
    sizes = list(schedule.batch_sizes(rows))
  else:
    per_replica = [[s[r] for s in cut.shards] for r in range(computing)]
    if schedule is not None:
      schedule.batch_sizes(sum(sizes))
  return Wave(number, plan, cut.values, per_replica, sizes, cut.trained,
              sat_out, pooled, rows, cut.batch, schedule, in_use)


def commit_weights(opened):
  """Each computing replica's weight in the commit: its rows; an empty
  batch is replica 0's alone."""
  rows = opened.sizes[:len(opened.per_replica)]
  return rows if any(rows) else [1] + rows[1:]


def committed_replicas(plan, nonfinite, policy):
  """Which replicas commit after a wave's compute found non-finite values.

  Args:
    plan: the wave's `planner.Plan` (names what each check watched).
    nonfinite: per computing replica, the checks that saw a non-finite
      value (empty: none).
    policy: the session's `nonfinite` option ("raise" or "skip"; with
      "propagate" nothing was checked).

  Returns:
    (per replica whether it commits, the replicas left out).

  Raises:
    InvalidArgumentError: with policy "raise", if any replica saw one.
  """
  bad = [r for r, where in enumerate(nonfinite) if where]
  if not bad:
    return [True] * len(nonfinite), bad
  what = "; ".join(
      f"replica {r}: {', '.join(plan.described[i] for i in nonfinite[r])}"
      for r in bad)
  if policy == "raise":
    raise tf.errors.InvalidArgumentError(
        None, None,
        f"TensorBow: a training run produced non-finite values "
        f"({what}); nothing was committed")
  logging.warning("TensorBow: replicas left out of a training run for "
                  "non-finite values (%s); they are re-seeded from the "
                  "central model", what)
  return [not where for where in nonfinite], bad


def replica_outputs(split, computed, written):
  """Each replica's fetches in fetch order, from what its compute and its
  commit returned (`split`: the plan's `phases` split)."""
  n = len(split.compute_fetches) + len(split.commit_fetches)
  outputs = []
  for r in range(len(computed)):
    values = [None] * n
    for i, v in zip(split.compute_fetches, computed[r]):
      values[i] = v
    for i, v in zip(split.commit_fetches, written[r]):
      values[i] = v
    outputs.append(values)
  return outputs


def _sync_call(plan, committed):
  """The call that synchronises after an atomic wave's commit by the
  replicas `committed` (per replica whether it commits)."""
  if plan.sync_calls is not None and True in committed:
    return plan.sync_calls[committed.index(True)]
  return plan.sync_call


class WaveSteps(object):
  """The steps of a wave that run against the session: prepare, run
  (compute, between, commit), merge. The trainer (waves.py) takes the
  elements, holds the lock, plans the wave and cuts its feeds, then calls
  `train`; what joins the wave (the algorithm, the backup, the noise
  sample) is called at the hooks' points (hooks.Joined.run, which runs
  these steps between them).

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    runtime: the setting's `runtime.Runtime`, which runs the tasks.
    replica_state: the setting's `replicas.ReplicaState`.
    algorithm: the setting's `algorithms.base.Algorithm`.
    nonfinite: the session's `nonfinite` option.
    job: the setting's `hooks.Job`: its sums over the processes.
    seeding: the setting's `seeding.Seeding`.
    hooks: what joins the wave (`hooks.Joined`: its hooks, called in
      order at each point).
  """

  def __init__(self, session, runtime, replica_state, algorithm, nonfinite,
               job, seeding, hooks):
    self._session = session
    self._runtime = runtime
    self._state = replica_state
    self._algorithm = algorithm
    self._nonfinite = nonfinite
    self._job = job
    self._seeding = seeding
    self._hooks = hooks
    self._schedule = None  # a pooled algorithm's, made at its first wave
    # Whether the replicas are in use, once they are: they stay so for the
    # setting's life (ReplicaState.copied), and a wave then asks no more.
    self._in_use = False

  def schedule_history(self):
    """A pooled algorithm's schedule's history (Algorithm.schedule)."""
    return list(self._schedule.history) if self._schedule else []

  def train(self, number, plan, cut, fetched, running, options,
            run_metadata):
    """Training run `number` over `plan` as one wave: opened, then run
    with its hooks at their points (hooks.Joined.run: the seeding, the
    tasks, the fetches merged and summed over the processes), then the
    central fetches read.

    Args:
      number: the training run's number, from 1.
      plan: its `planner.Plan`.
      cut: its feeds checked and cut (a `feeds.Cut`).
      fetched: the handler's fetches.
      running: (tasks) -> tasks(): runs the wave's tasks (the trainer's:
        under the lock as the wave's ops need it).
      options, run_metadata: the run's, as `tf.compat.v1.Session.run`'s.

    Returns:
      (the `Wave`, {fetch position: value}).
    """
    opened = self._open(number, plan, cut)
    merged = self._hooks.run(
        opened, self._seeding.seed,
        functools.partial(running, functools.partial(
            self._tasks, opened, options, run_metadata)),
        functools.partial(self._merged, opened, fetched))
    merged.update(self._central(plan))
    return opened, merged

  def _open(self, number, plan, cut):
    """The `Wave` of training run `number` over `plan` and its `cut`. A
    pooled algorithm's schedule is made at its first wave."""
    if self._algorithm.pooled and self._schedule is None:
      self._schedule = self._algorithm.schedule(plan.replicas)
    self._in_use = self._in_use or self._state.in_use
    return open_wave(number, plan, cut, self._algorithm, self._in_use,
                     self._schedule)

  def _tasks(self, opened, options, run_metadata):
    """The wave's tasks: a pooled algorithm's chunks, an atomic wave
    (compute, between, commit) or tasks that write as they go."""
    plan = opened.plan
    if opened.pooled:
      outputs, sizes, updates = self._pool_wave(plan, opened.values,
                                                opened.sizes, options)
      return Ran(outputs, sizes, None, updates)
    if plan.atomic is not None:
      outputs, committed = self._atomic_wave(opened, options, run_metadata)
    else:
      # Its tasks write as they go: the replicas sitting out go first.
      self._leave_out(opened, opened.sat_out, opened.trained)
      outputs, committed = self._whole_wave(plan, opened.per_replica,
                                            options, run_metadata), None
    return Ran(outputs, opened.sizes, committed, range(opened.trained))

  def _pool_wave(self, plan, values, batch_sizes, options):
    """A pooled algorithm's training run (runtime.run_pool): (per chunk of
    `batch_sizes` rows, in their order, its fetches, rows and replica)."""
    chunks = self._runtime.run_pool(
        plan.calls, [feeds.contiguous(v) for v in values], plan.dtypes,
        plan.batch, batch_sizes, options)
    return ([c[3] for c in chunks], [c[2] - c[1] for c in chunks],
            [c[0] for c in chunks])

  def _whole_wave(self, plan, per_replica, options, run_metadata):
    """A wave of tasks that compute and write in one TensorFlow run."""
    try:
      return self._runtime.run_wave(
          plan.calls, per_replica, plan.dtypes, plan.batch_feed,
          plan.sync_call, options, run_metadata, by_group=plan.by_group)
    except tf.errors.OpError:
      self._after_failed_writes()
      raise

  def _atomic_wave(self, opened, options, run_metadata):
    """A wave whose writes run only once every replica has computed (one
    call of the runtime, `between` deciding who commits); the replicas
    sitting out and those with non-finite values are left out.

    Returns:
      (per replica computed its fetches, whether it committed).
    """
    plan = opened.plan
    decided = []  # (who commits, the snapshot) once `between` has run

    def between(computed, nonfinite):
      del computed
      committed = self._between(opened, nonfinite)
      decided.append((committed, self._snapshot(plan)))
      return plan.commit_calls, committed, _sync_call(plan, committed)

    try:
      computed, written = self._runtime.atomic(
          plan.calls, opened.per_replica, plan.dtypes, plan.batch_feed,
          len(plan.atomic.internal), between, self._nonfinite != "propagate",
          options, run_metadata, by_group=plan.by_group)
    except tf.errors.OpError:
      if decided:  # the commit failed
        self._after_failed_commit(plan, decided[0][1])
      raise
    committed = decided[0][0]
    if not all(committed):
      self._state.reseed_replicas(
          [r for r, c in enumerate(committed) if not c])
    return replica_outputs(plan.atomic, computed, written), committed

  def _between(self, opened, nonfinite):
    """Between an atomic wave's compute and its commit: which replicas
    commit, the hooks' `between` (the noise sample, the algorithm's work
    on what was kept) and the replicas left out of the central update.

    Returns:
      Per computing replica, whether it commits.
    """
    committed, bad = committed_replicas(opened.plan, nonfinite,
                                        self._nonfinite)
    weights = commit_weights(opened)
    self._hooks.between(opened, weights)
    self._leave_out(opened, opened.sat_out + bad,
                    len(opened.per_replica) - len(bad))
    return committed

  def _leave_out(self, opened, skipped, remaining):
    """The hooks' `leave_out`, when replicas `skipped` sit out the coming
    central update of wave `opened` and `remaining` (some) take part."""
    if remaining == 0 or not skipped or not opened.in_use:
      return
    self._hooks.leave_out(skipped, remaining)

  def _snapshot(self, plan):
    """What an atomic wave's commit may write, kept where an op after a
    write may fail (None: nothing to keep)."""
    if not plan.snapshot:
      return None
    return rollback.snapshot(self._session, self._state, plan.snapshot)

  def _after_failed_commit(self, plan, snapshot):
    """After an atomic wave's commit failed: what it wrote is put back
    from `snapshot`, or the replicas go back to the central model."""
    if snapshot is None:
      self._after_failed_writes()
      return
    self._session.run(*self._state.restore_snapshot_run(plan.snapshot,
                                                        snapshot))
    self._hooks.failed()

  def _after_failed_writes(self):
    """After a wave failed while writing: its replicas go back to the
    central model, which it did not change."""
    if self._state.in_use:
      self._state.reseed()
      self._hooks.failed()

  def undo(self):
    """After a wave that did not end (it lost a worker): the hooks put
    back what they kept, in their order."""
    self._hooks.undo()

  def _merged(self, opened, fetched, ran):
    """{fetch position: value} of wave `opened` that `ran`, `fetched` the
    handler's fetches (fetches.of_wave); with replicas in use, its sums
    over rows summed over the processes."""
    over = None
    if opened.in_use:
      over = functools.partial(self._over_processes, opened.number,
                               opened.plan.summed)
    return fetches.of_wave(
        opened.plan, fetched, ran.outputs, ran.sizes,
        None if opened.pooled else (opened.trained, ran.committed),
        opened.values, over)

  def _over_processes(self, number, summed, totals):
    """After completed wave `number` merged: what keeps the processes'
    central models, and the variables `summed`, equal; `totals` (float64
    sums over rows) summed over every process (one process: as they
    are)."""
    if self._job.sums is None:
      return totals
    return self._job.sums(number, summed, totals)

  def _central(self, plan):
    """{fetch position: value} of the fetches read from the central model
    after a wave (variables, twins of sums)."""
    if not plan.central_fetches:
      return {}
    return dict(zip(plan.central_fetches, self._session.run(
        list(plan.central_fetches.values()))))
