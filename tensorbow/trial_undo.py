"""A trial of L > 1 that does not pay, undone (DESIGN.md, "What a user
gets", replicas="auto").

Under replicas="auto" the tuner tries more replicas on the user's own
training runs (autotune.py). A trial that does not pay ends with the
session back at one replica, and without more the training would keep
what the trial's runs did: another algorithm's updates (SMA over L
replicas of a share of the batch each), which move it off the path
`tf.compat.v1.Session` takes, by as much as another seed would.

An `Undo` keeps the execution graph's variables as they were when the
session left L = 1 (rollback.Backup) and a copy of the feeds of each
training run from then on. When the session goes back to L = 1 it puts
the variables back and trains those runs again at L = 1, their results
dropped: the training is where one replica would have left it, and the
trial costs what it measured plus its runs once more at L = 1.

It gives up, keeping the trial's updates as before, where its runs
cannot be trained again or the put-back could undo a write or leave a
checkpoint behind: a run took elements of an input pipeline (they are
gone, and the tuner weighs such rows by their statistical efficiency
instead); a plain run that may write a variable came between (an
evaluation does not count), or one that saves a checkpoint (which would
hold the trial's state, where the session no longer is); the trial's
feeds outgrew `MAX_KEPT_BYTES`; or the tuner settled at L > 1, where the
trial paid.
Only one process training alone has its whole state in its variables at
L = 1 (setting._shares); a session of several processes makes no `Undo`.
"""
import copy

import numpy as np

from tensorbow import checkpoint
from tensorbow import rollback

# The most a trial's copied feeds may hold before the undo gives up.
MAX_KEPT_BYTES = 256 << 20


class Undo(object):
  """Puts a session's training back where L = 1 would have left it.

  Args:
    backup: a `rollback.Backup` of the session's execution graph.
  """

  def __init__(self, backup):
    self._backup = backup
    self._runs = None  # the trial's (route, copied feeds); None: no trial
    self._bytes = 0  # what the copied feeds hold
    self._at = None  # the L the last `follow` took

  def follow(self, now, setting, retune, train, settled):
    """Takes `setting` ((L, stream groups, inline)) after `now`: saves the
    variables before L = 1 is left, calls `retune(*setting)`, and on the
    way back to L = 1 puts them back and calls `train(route, values)` for
    each training run of the trial, in order. `settled`: whether the
    tuner has settled (a trial it ends at L > 1 paid)."""
    if now[0] != self._at or (settled and now[0] != 1):
      # L changed by someone else since (the user), or the trial paid.
      self.give_up()
    if setting == now:
      return
    if now[0] == 1 and setting[0] != 1:
      self._backup.save()
      self._runs, self._bytes = [], 0
    retune(*setting)
    self._at = setting[0]
    runs = self._runs
    if setting[0] != 1 or runs is None:
      return
    self._runs = None
    self._backup.restore()
    for route, values in runs:
      train(route, values)

  def trained(self, route, values):
    """Keeps a training run of the trial (`route`, its fed `values`)."""
    if self._runs is None:
      return
    if route.pulled:
      self.give_up()
      return
    kept = [copy.deepcopy(v) for v in values]
    self._bytes += sum(v.nbytes for v in kept if isinstance(v, np.ndarray))
    if self._bytes > MAX_KEPT_BYTES:
      self.give_up()
      return
    self._runs.append((route, kept))

  def plain(self, route):
    """A plain run of `route` comes: one that may write a variable (or
    whose writes cannot be told) makes the undo give up, since a put-back
    would undo its write; so does one that saves a checkpoint, which then
    holds the trial's state, where the session goes on from. Outside a
    trial it returns at once."""
    if self._runs is None:
      return
    written = route.closure.written
    if (written is None or written or
        checkpoint.saves(route.closure.ops)):
      self.give_up()

  def give_up(self):
    """Keeps the trial's updates: nothing is put back."""
    self._runs = None
    self._backup.forget()


class Never(object):
  """No undo: a session without replicas="auto", or of several
  processes. Follows the setting alone."""

  def follow(self, now, setting, retune, train, settled):
    del train, settled
    if setting != now:
      retune(*setting)

  def trained(self, route, values):
    del route, values

  def plain(self, route):
    del route


def make(tuning, alone, session, graph):
  """An `Undo` of `session`'s execution `graph` under replicas="auto"
  (`tuning` not None) in one process (`alone`), else a `Never`."""
  if tuning is None or not alone:
    return Never()
  return Undo(rollback.Backup(session, graph))
