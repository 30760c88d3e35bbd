"""An algorithm's side of a wave, as a wave hook (hooks.py).

Before a wave the algorithm's run (SMA's phase, a pooled schedule's
scale) goes with the workers' common base in one TensorFlow run; between
compute and commit the algorithm works on what the runtime kept
(`Algorithm.before_commit`); after a pooled wave its schedule counts the
updates and, at the end of its period, the replicas merge; a wave that did
not end restarts the algorithm's barriers. The runs themselves are made
once by the replica state's `AlgorithmRuns` (algorithm_runs.py).
"""
import numpy as np

from tensorbow import hooks


class AlgorithmWave(hooks.WaveHook):
  """The wave-time side of a setting's algorithm.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    runtime: the setting's `runtime.Runtime`.
    replica_state: the setting's `replicas.ReplicaState`.
    algorithm: the setting's `algorithms.base.Algorithm`.
    scale: the session's `scaleout.Alone` (or `Workers`): what crosses
      processes.
  """

  def __init__(self, session, runtime, replica_state, algorithm, scale):
    self._session = session
    self._runtime = runtime
    self._state = replica_state
    self._algorithm = algorithm
    self._scale = scale
    self._schedule = None  # a pooled algorithm's (Algorithm.schedule)

  def schedule_for(self, plan):
    """A pooled algorithm's schedule, made at its first wave over `plan`
    (None: the algorithm is not pooled)."""
    if self._algorithm.pooled and self._schedule is None:
      self._schedule = self._algorithm.schedule(plan.replicas)
    return self._schedule

  def schedule_history(self):
    """A pooled algorithm's schedule's history (Algorithm.schedule)."""
    return list(self._schedule.history) if self._schedule else []

  def before(self, opened):
    """The algorithm's run before wave `opened` (with the workers' common
    base in the same run) and a pooled schedule's scale run."""
    runs = self._state.runs
    prepare = runs.wave_run(opened.number, opened.sizes)
    sync = self._scale.worker_sync(runs, opened.plan.summed)
    if sync:  # the workers' common base, in the same run
      prepare = (([sync[0]] + list(prepare[0]), prepare[1])
                 if prepare is not None else ([sync[0]], {}))
    if prepare is not None:
      self._session.run(*prepare)
      runs.prepared()
    factors = self._schedule.factors() if self._schedule else None
    scale = factors is not None and runs.scale_run(factors)
    if scale:
      self._session.run(*scale)

  def between(self, opened, weights):
    """The algorithm's work on what the runtime kept of wave `opened`,
    summed over processes only where there are several
    (Algorithm.before_commit)."""
    workers = self._scale.commit_sum(opened.number)
    self._algorithm.before_commit(
        self._runtime, weights, **({} if workers is None else
                                   {"workers": workers}))

  def after(self, opened, ran):
    """A pooled algorithm's schedule counts the run's updates (one per
    replica in `ran.updates`); at the end of its period the replicas
    merge."""
    if self._schedule is None or not self._schedule.record(ran.updates):
      return
    drift = self._state.runs.drift_tensor()
    weights = self._schedule.merge(
        self._session.run(drift) if drift is not None else np.zeros([0]))
    merge = self._state.runs.merge_weighted_run(weights)
    if merge is not None:
      self._session.run(*merge)

  def undo(self):
    self.reset_barriers()

  def reset_barriers(self):
    """Restarts the algorithm's barriers after a wave that did not end."""
    reset = self._state.reset_op()
    if reset is not None:
      self._session.run(reset)

  def leave_out(self, skipped, remaining):
    """Leaves replicas `skipped` out of the coming commit's central
    update, `remaining` taking part."""
    if remaining == 0 or not skipped or not self._state.in_use:
      return
    run = self._state.runs.participants_run(skipped, remaining)
    if run is not None:
      self._session.run(*run)

  def merge(self, number, sizes):
    """The algorithm's merge after completed wave `number` of replicas of
    `sizes` rows: over every process's replicas where the algorithm can,
    else over this process's."""
    runs = self._state.runs
    if not self._scale.merge(runs, self._session, number, sizes):
      merge = runs.merge_run(number, sizes)
      if merge is not None:
        self._session.run(*merge)
