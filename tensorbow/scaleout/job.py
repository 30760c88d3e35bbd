"""What a worker of a cluster adds to each wave of a setting: the
`hooks.Job` of its cluster as the setting found it.

Before a wave's replicas are seeded (`opening`), the variables due to be
seeded take the chief's values; after the seeding (`before`), the
algorithm's state takes the chief's where a worker joined, and the base
of the variables merged as sums over rows (counters, metrics) is kept,
so that what is summed after the wave (`sums`, with the fetched sums) is
each worker's move. An algorithm keeps the workers' central models one
through `reduce` (SMA's hooks, sma_wave.py). With elasticity the
replicas' state is kept before each wave, first of the job's hooks, and
put back if the wave is dropped (recovery.py).
"""
from tensorbow import hooks


def make(workers, session, replica_state, backup):
  """The `hooks.Job` of `workers` (a `scaleout.Workers`) for a setting on
  `session` (the `tf.compat.v1.Session` on the execution graph) whose
  replicas are `replica_state` (a `replicas.ReplicaState`); `backup`: with
  elasticity, the session's `rollback.Backup` (else None)."""
  runs = replica_state.runs

  def sums(number, summed, arrays):
    return workers.sync(runs, session, number, summed, arrays)

  kept = () if backup is None else (Backup(backup, replica_state),)
  return hooks.Job(
      workers=workers.workers,
      hooks=kept + (_FromChief(workers, session, replica_state),),
      reduce=workers.reduce, sums=sums, checked=workers.checked,
      seconds=lambda: workers.seconds,
      checkpoint_worker=lambda: workers.checkpoint_worker,
      take_sums=workers.take_sums)


class _FromChief(hooks.WaveHook):
  """The chief's model and algorithm state taken before a wave, and the
  base of the variables summed over the workers kept.

  Args:
    workers: the session's `scaleout.Workers`.
    session: the `tf.compat.v1.Session` on the execution graph.
    replica_state: the setting's `replicas.ReplicaState`.
  """

  def __init__(self, workers, session, replica_state):
    self._workers = workers
    self._session = session
    self._state = replica_state

  def opening(self, opened):
    self._workers.take_model(self._state, self._session, opened.number)

  def before(self, opened):
    self._workers.take_state(self._state, self._session, opened.number)
    base = self._state.runs.worker_sync(opened.plan.summed)
    if base:
      self._session.run(base[0])


class Backup(hooks.WaveHook):
  """With elasticity, the replicas' state kept before a wave and put back
  if the wave was dropped (rollback.Backup).

  Args:
    backup: the session's `rollback.Backup`.
    replica_state: the setting's `replicas.ReplicaState`.
  """

  def __init__(self, backup, replica_state):
    self._backup = backup
    self._state = replica_state

  def before(self, opened):
    self._backup.save(self._state.replicated_parts())

  def after(self, opened, ran):
    self._backup.forget()

  def undo(self):
    self._backup.restore()
