"""What joins a wave, at eight fixed points, and what a job of several
processes adds to it.

A wave (wave.py) calls each of its process's hooks, in the order the
trainer gives them, at these points, in this order (`Joined.run`, which
runs the wave's steps between them):

* `opening(opened)`: the wave is opened; its replicas are not seeded
  yet (the model other processes hand this one is taken here);
* `before(opened)`: the wave's replicas are seeded; none of its tasks
  has run;
* `leave_out(skipped, remaining)`: replicas `skipped` take no part in
  the coming central update, `remaining` do (some replicas sit the wave
  out, or computed non-finite values); called only when some do and some
  do not, before the writes;
* `between(opened, weights)`: in an atomic wave, every replica has
  computed and nothing is written yet; `weights` are the rows each
  computing replica commits with;
* `merge(opened, ran)`: the wave's writes are done: the replicas merge
  into the central model, if the algorithm merges after this wave;
* `after(opened, ran)`: the merge is done and the wave's sums taken;
* `failed()`: the wave's writes failed: what keeps the replicas
  together restarts (the central model is as it was before the wave);
* `undo()`: the wave did not end (a worker of the job was lost): what
  `before` kept is put back, in the hooks' order.

`opening`, `before`, `merge` and `after` are called only while the
setting's replicas are in use (one replica training the user's own
variables has none to keep).

A hook holds its collaborators from construction and returns nothing to
the wave: it is told, it does not channel. An algorithm's hooks
(`Algorithm.wave_hooks`) are made from the setting's `Setting`.

A `Job` is what the processes training one model add to each wave of a
setting, over the membership the setting was made for: its hooks, and
the sums over the processes. One process is a whole job (`ALONE`): it
adds no hook and has no sum over processes to make (its sums are its
own, its algorithm merges its own replicas, none of its time is spent
summing), and it checks the fed values for its own replicas only. A
merge across processes goes through the job's `reduce`.
"""
import collections

from tensorbow import feeds

# What an algorithm's hooks are made with, once per setting: the
# `tf.compat.v1.Session` on the execution graph, the setting's
# `runtime.Runtime`, its `rewrite.builder.Builder`, its
# `replicas.ReplicaState` (whose `runs` make the algorithm's runs once,
# algorithm_runs.py) and the setting's `Job`.
Setting = collections.namedtuple(
    "Setting", ["session", "runtime", "builder", "replica_state", "job"])

# What the processes training one model add to each wave of a setting:
Job = collections.namedtuple("Job", [
    "workers",  # how many processes train together
    "hooks",  # the `WaveHook`s they join each wave with
    # (wave number, arrays) -> the arrays summed over the processes: what
    # an algorithm's merge across them goes through; None: one process.
    "reduce",
    # (wave number, names of the variables merged as sums over rows,
    # arrays) -> after the wave merged, the processes' central models (and
    # those variables) made equal; returns the arrays (the wave's fetched
    # sums over rows) summed over the processes. None: one process.
    "sums",
    # (plan, fed values, L) -> the values checked for L replicas of every
    # process; this process's part of a batch feed.
    "checked",
    # () -> the seconds spent in sums over the processes so far; None:
    # one process.
    "seconds",
    # () -> whose replica state file a checkpoint has beside it: this
    # process's place among them now (a joiner's changes when it is taken
    # in); None: one process, whose file is nobody's in particular.
    "checkpoint_worker",
    # () -> (start, end, what) of each sum over the processes since the
    # last call, in seconds of time.monotonic (for a timeline); None: one
    # process.
    "take_sums",
])


class Dropped(Exception):
  """Raised by a job's hook or sum when the wave cannot end (one of the
  job's processes was lost, or others join): the trainer puts back what
  the wave wrote and took (the hooks' `undo`), and it runs again once the
  job is formed anew (scaleout.MembershipChanged)."""


class WaveHook(object):
  """A hook that does nothing at every point; a hook overrides those it
  needs."""

  def opening(self, opened):
    """Wave `opened` (a `wave.Wave`) is opened; its replicas are not
    seeded yet."""

  def before(self, opened):
    """Before wave `opened` (a `wave.Wave`) runs its tasks."""

  def leave_out(self, skipped, remaining):
    """Replicas `skipped` take no part in the coming central update,
    `remaining` replicas do."""

  def between(self, opened, weights):
    """Between an atomic wave's compute and its commit, the computing
    replicas to commit with `weights` (their rows)."""

  def merge(self, opened, ran):
    """After wave `opened` wrote (`ran`, a `wave.Ran`): the replicas'
    merge, if one is due."""

  def after(self, opened, ran):
    """After wave `opened` ran (`ran`, a `wave.Ran`) and merged."""

  def failed(self):
    """The wave's writes failed: what keeps the replicas together
    restarts."""

  def undo(self):
    """The wave did not end: puts back what `before` kept."""


class Joined(WaveHook):
  """The hooks of a wave as one: each point calls theirs in their order.

  Args:
    joined: the `WaveHook`s, in the order they are called.
  """

  def __init__(self, joined):
    self._joined = tuple(joined)

  def run(self, opened, seed, tasks, merged):
    """Wave `opened` (a `wave.Wave`) with the hooks at their points, in
    this order: opening, `seed()` (the replicas seeded), before,
    `tasks()` (its tasks, which call `leave_out` and, in an atomic wave,
    `between`; a `wave.Ran`), merge, `merged(ran)` (its fetches merged and
    its sums taken over the processes), after. While the setting's
    replicas are not in use, only the tasks and the merged fetches.

    Returns:
      What `merged` returned.
    """
    if not opened.in_use:
      return merged(tasks())
    self.opening(opened)
    seed()
    self.before(opened)
    ran = tasks()
    self.merge(opened, ran)
    results = merged(ran)
    self.after(opened, ran)
    return results

  def opening(self, opened):
    for hook in self._joined:
      hook.opening(opened)

  def before(self, opened):
    for hook in self._joined:
      hook.before(opened)

  def leave_out(self, skipped, remaining):
    for hook in self._joined:
      hook.leave_out(skipped, remaining)

  def between(self, opened, weights):
    for hook in self._joined:
      hook.between(opened, weights)

  def merge(self, opened, ran):
    for hook in self._joined:
      hook.merge(opened, ran)

  def after(self, opened, ran):
    for hook in self._joined:
      hook.after(opened, ran)

  def failed(self):
    for hook in self._joined:
      hook.failed()

  def undo(self):
    for hook in self._joined:
      hook.undo()


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


class Merge(WaveHook):
  """An algorithm's merge after a wave, in this process: the ops
  `make_ops(builder, states, fed)` makes over the model variables' states
  (`replica_state.runs.fed_run`), fed `value(number, sizes)` after wave
  `number` whose replicas trained on `sizes` rows; None: no merge after
  it.

  Args:
    setting: the setting's `Setting`.
    value: (wave number, sizes) -> the merge's float64 value, or None.
    make_ops: (builder, states, fed) -> the merge's ops.
  """

  def __init__(self, setting, value, make_ops):
    self._session = setting.session
    self._runs = setting.replica_state.runs
    self._value = value
    self._make_ops = make_ops

  def merge(self, opened, ran):
    value = self._value(opened.number, ran.sizes)
    if value is not None:
      self._merge(opened.number, value)

  def _merge(self, number, value):
    """Merges this process's replicas after wave `number`, fed `value`."""
    del number
    run = self._runs.fed_run("merge", value, self._make_ops)
    if run is not None:
      self._session.run(*run)


# One process: a whole job.
ALONE = Job(workers=1, hooks=(), reduce=None, sums=None,
            checked=feeds.check, seconds=None, checkpoint_worker=None,
            take_sums=None)
