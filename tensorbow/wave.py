"""One wave as data: what it trains on and what it gave back.

The trainer (waves.py) runs a training run as one wave, in this order:
prepare (the runs before it), compute, between (what is decided once every
replica has computed), commit, after (the algorithm's merge and the sums
over processes) and merge (one result per fetch). This module holds the
records it passes from one step to the next and the steps that need no
session: how a wave's batch is cut into shards and sizes, which replicas
commit after non-finite values, and each replica's outputs put back in
fetch order.
"""
import collections
import logging

import numpy as np
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


def open_wave(number, plan, values, taken, algorithm, in_use, schedule):
  """The `Wave` of training run `number` over `plan` fed `values`.

  Args:
    number: the training run's number, from 1.
    plan: its `planner.Plan`.
    values: the checked feeds, in the order of the plan's feeds.
    taken: the input pipeline's elements taken for it (None: none).
    algorithm: the setting's `algorithms.base.Algorithm`.
    in_use: whether the setting's replicas are in use.
    schedule: a pooled algorithm's schedule (None: not pooled); it is
      told the wave's rows.

  Returns:
    A `Wave`.
  """
  rows, batch = _rows_and_batch(plan, values, taken)
  # An empty batch is no pool's: replica 0 trains on it alone.
  pooled = (algorithm.pooled and in_use and plan.batch_feed >= 0 and
            not plan.elements[plan.batch_feed] and rows > 0)
  shards, sizes, trained, borrowed = feeds.wave_shards(
      plan, values, algorithm.replicas_equal)
  sat_out = list(range(trained + borrowed, plan.replicas))
  per_replica = None
  if pooled:
    sizes = list(schedule.batch_sizes(rows))
  else:
    per_replica = [[s[r] for s in shards]
                   for r in range(trained + borrowed)]
    if schedule is not None:
      schedule.batch_sizes(sum(sizes))
  return Wave(number, plan, values, per_replica, sizes, trained, sat_out,
              pooled, rows, batch, schedule, in_use)


def _rows_and_batch(plan, values, taken):
  """(rows trained on, batch the graph was built for): the fed batch, or
  one replica's element of an input pipeline."""
  if plan.batch_feed < 0:
    if taken is None:
      return 0, 0
    one = next((len(v) for v in taken.elements[0] if np.ndim(v)), 0)
    return one, one
  fed = values[plan.batch_feed]
  if plan.elements[plan.batch_feed]:
    return feeds.total_rows(fed), len(fed[0])
  return feeds.total_rows(fed), len(fed)


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


class WaveSteps(object):
  """The steps of a wave that run against the session: prepare, run
  (compute, between, commit), merge. The trainer (waves.py) takes the
  elements, holds the lock, opens the wave and calls them in that order;
  what joins the wave (the algorithm, the backup, the noise sample) is
  called at the hooks' points (hooks.py).

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

  def schedule_history(self):
    """A pooled algorithm's schedule's history (Algorithm.schedule)."""
    return list(self._schedule.history) if self._schedule else []

  def open(self, number, plan, values, taken):
    """The `Wave` of training run `number` over `plan` fed the checked
    `values` (`taken`: the input pipeline's elements, None: none). A pooled
    algorithm's schedule is made at its first wave."""
    if self._algorithm.pooled and self._schedule is None:
      self._schedule = self._algorithm.schedule(plan.replicas)
    return open_wave(number, plan, values, taken, self._algorithm,
                     self._state.in_use, self._schedule)

  def prepare(self, opened):
    """The runs before wave `opened`: the hooks' `opening` (the model
    other processes hand this one), the seeding, then the hooks' `before`
    (the backup, the algorithm's state other processes hand this one, the
    algorithm's run)."""
    if opened.in_use:
      self._hooks.opening(opened)
      self._seeding.seed()
      self._hooks.before(opened)

  def run(self, opened, options, run_metadata):
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
    """A wave whose writes run only once every replica has computed; the
    replicas sitting out and those with non-finite values are left out.

    Returns:
      (per replica computed its fetches, whether it committed).
    """
    plan = opened.plan
    try:
      computed, nonfinite = self._runtime.compute(
          plan.calls, opened.per_replica, plan.dtypes, plan.batch_feed,
          len(plan.atomic.internal), self._nonfinite != "propagate",
          options, run_metadata, by_group=plan.by_group)
      committed = self._between(opened, nonfinite)
    except BaseException:
      # Nothing was written: the wave is dropped.
      self._runtime.discard()
      raise
    written = self._commit(plan, committed, options, run_metadata)
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

  def _commit(self, plan, committed, options, run_metadata):
    """An atomic wave's writes, by the replicas `committed`: per replica
    its fetches. Where an op after a write may fail, what the commit may
    write is kept first and put back if it does."""
    snapshot = (rollback.snapshot(self._session, self._state, plan.snapshot)
                if plan.snapshot else None)
    try:
      sync_call = plan.sync_call
      if plan.sync_calls is not None and True in committed:
        sync_call = plan.sync_calls[committed.index(True)]
      return self._runtime.commit(plan.commit_calls, committed, sync_call,
                                  options, run_metadata,
                                  by_group=plan.by_group)
    except tf.errors.OpError:
      if snapshot is not None:
        self._session.run(*self._state.restore_snapshot_run(plan.snapshot,
                                                            snapshot))
        self._hooks.failed()
      else:
        self._after_failed_writes()
      raise

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

  def merge(self, opened, fetched, ran):
    """{fetch position: value} of wave `opened` that `ran`, `fetched` the
    handler's fetches; with replicas, after the algorithm's merge and the
    sums over processes."""
    merged = fetches.merge_fetches(
        opened.plan, fetched, ran.outputs, ran.sizes,
        None if opened.pooled else (opened.trained, ran.committed))
    if opened.in_use:
      self._hooks.merge(opened, ran)
      merged.update(self._summed(opened.number, opened.plan.summed,
                                 fetches.sums_over_rows(opened.plan, merged)))
      self._hooks.after(opened, ran)
    return merged

  def _summed(self, number, summed, sums):
    """After completed wave `number` merged: what keeps the processes'
    central models, and the variables `summed`, equal.

    Returns:
      `sums` ({fetch position: this process's sum over rows}) summed over
      every process.
    """
    positions = sorted(sums)
    # In float64: exact for counts, one all-reduce for all.
    totals = [np.asarray(sums[i], np.float64) for i in positions]
    if self._job.sums is not None:
      totals = self._job.sums(number, summed, totals)
    return {i: fetches.in_dtype_of(sums[i], total)
            for i, total in zip(positions, totals)}

  def central(self, plan, values):
    """{fetch position: value} of the fetches read after a wave: from the
    central model (variables, twins of sums) and the fed `values` echoed."""
    central = {}
    if plan.central_fetches:
      central.update(zip(plan.central_fetches, self._session.run(
          list(plan.central_fetches.values()))))
    for i, j in plan.echoed:
      central[i] = fetches.echoed(values[j], plan.combine[i])
    return central
