"""What joins a wave in one process, at four fixed points.

A wave (wave.py) calls each of its process's hooks, in the order the
trainer gives them, at:

* `before(opened)`: the wave is opened and its replicas seeded; none of
  its tasks has run;
* `between(opened, weights)`: in an atomic wave, every replica has
  computed and nothing is written yet; `weights` are the rows each
  computing replica commits with;
* `after(opened, ran)`: the wave's writes and the algorithm's merge are
  done, and its sums taken;
* `undo()`: the wave did not end (a worker of the job was lost): what
  `before` kept is put back, in the hooks' order.

`before` and `after` are called only while the setting's replicas are in
use (one replica training the user's own variables has none to keep).

A hook holds its collaborators from construction and returns nothing to
the wave: it is told, it does not channel. `reduce` is the sum over the
processes of a job that a merge across processes goes through; one
process is the whole job, so it is the identity.
"""


class WaveHook(object):
  """A hook that does nothing at every point; a hook overrides those it
  needs."""

  def before(self, opened):
    """Before wave `opened` (a `wave.Wave`) runs its tasks."""

  def between(self, opened, weights):
    """Between an atomic wave's compute and its commit, the computing
    replicas to commit with `weights` (their rows)."""

  def after(self, opened, ran):
    """After wave `opened` ran (`ran`, a `wave.Ran`) and merged."""

  def undo(self):
    """The wave did not end: puts back what `before` kept."""


def reduce(arrays):
  """`arrays` summed over the processes of one process's job: themselves."""
  return arrays


class Backup(WaveHook):
  """With elasticity, the replicas' state kept before a wave and put back
  if the wave lost a worker (rollback.Backup).

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


class NoiseSample(WaveHook):
  """replicas="auto"'s noise scale, given the gradients the replicas of
  an atomic wave computed and the runtime kept (autotune.NoiseScale).

  Args:
    noise: the session's `autotune.NoiseScale`.
    runtime: the setting's `runtime.Runtime`, which kept them.
  """

  def __init__(self, noise, runtime):
    self._noise = noise
    self._runtime = runtime

  def between(self, opened, weights):
    self._noise.add_kept(self._runtime, opened.plan, weights)
