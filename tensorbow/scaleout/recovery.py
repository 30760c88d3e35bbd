"""A worker's training runs through the changes of its job's membership,
in one loop (as Horovod's elastic `run_fn`).

A joiner's training runs before the job's wave it joins at only catch up
(`catch_up`: its script reaches the job's batch while the job trains on).
Then each training run is tried until it trains: a wave that lost a
worker, or before which others join, raises `MembershipChanged` (a
`hooks.Dropped`) once the trainer has put back what it wrote and took
(the job's hooks undo it: the backup, job.py); this worker agrees with
the others on the cluster that goes on (`Workers.reform`,
membership.py), the change is recorded, and the session's `reset` makes
its setting anew for that cluster before the run is tried again. The
session hands this loop what to run; the loop knows nothing of the
session.
"""
from tensorbow import hooks


class Recovery(object):
  """The loop of one worker's session.

  Args:
    workers: the session's `scaleout.Workers`.
    record: called with each change as the membership log records it
      (the observer's `membership`).
  """

  def __init__(self, workers, record):
    self._workers = workers
    self._record = record

  def train(self, number, train_once, catch_up, reset):
    """Training run `number`: `catch_up()` while this joiner has not been
    taken in by then, else `train_once()` until it returns, the cluster
    formed anew and `reset()` called after each change of membership.

    Returns:
      What `catch_up` or `train_once` returned.

    Raises:
      tf.errors.UnavailableError: fewer than `min_workers` remain after a
        loss, or the survivors could not agree.
    """
    if self._workers.catching_up(number):
      return catch_up()
    while True:
      try:
        return train_once()
      except hooks.Dropped as change:  # scaleout.MembershipChanged
        self._record(self._workers.reform(change))
        reset()
