"""What a worker of a cluster adds to each wave of a setting: the
`hooks.Job` of its cluster as the setting found it.

Before a wave's replicas are seeded (`opening`), the variables due to be
seeded take the chief's values; after the seeding (`before`), the
algorithm's state takes the chief's where a worker joined, and the base
that the workers' central models start the wave from is kept, so that
what is summed after the wave (`sums`) is each worker's move. An
algorithm's merge across the workers goes through `reduce`.
"""
from tensorbow import hooks


def make(workers, session, replica_state):
  """The `hooks.Job` of `workers` (a `scaleout.Workers`) for a setting on
  `session` (the `tf.compat.v1.Session` on the execution graph) whose
  replicas are `replica_state` (a `replicas.ReplicaState`)."""
  runs = replica_state.runs

  def sums(number, summed, arrays):
    return workers.sync(runs, session, number, summed, arrays)

  return hooks.Job(
      workers=workers.workers,
      hooks=(_FromChief(workers, session, replica_state),),
      reduce=workers.reduce, sums=sums, checked=workers.checked,
      seconds=lambda: workers.seconds,
      checkpoint_worker=lambda: workers.checkpoint_worker)


class _FromChief(hooks.WaveHook):
  """The chief's model and algorithm state taken before a wave, and the
  base of the workers' common move kept.

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
