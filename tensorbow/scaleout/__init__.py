"""What crosses processes, behind one object the session holds for its
life (docs/DESIGN.md, "Two levels").

`Workers` is a worker of a `TF_CONFIG` cluster (`scaleout/cluster.py`),
which sums over the workers with its `Reducer`; a process that trains
alone has none (`from_environ` gives None), and the session takes one
process's parts instead (setting.ALONE, hooks.ALONE, preemption.ALONE).
The session's settings see a worker as a `setting.Processes`
(`processes`), its preemption as a `preemption.Agreement`. Each
setting's waves are joined by its `job` (a `hooks.Job`): one
process's is `hooks.ALONE`, with no hook; a worker's (job.py) takes the
chief's model and state before a wave, sums the counters' moves and the
fetched sums after it, and gives an algorithm its `reduce`, through
which it keeps the workers' central models one (SMA's moves, synchronous
SGD's gradients, local SGD's exchange). `seconds` is the time spent
summing, which the scaling model counts as synchronisation; the job's
`take_sums`: when each sum ran (for a timeline).

Around the waves: `catching_up` says a joiner's training run is to run
as a plain run; the `agreement` (preemption.Agreement) says after a wave
whether every worker saves now (one was asked to stop) and whether this
one goes on without those asked, and that a Saver's save is worker 0's
to write. Nothing else in a session or a trainer knows of other
processes.

With `min_workers`, a worker lost during a wave is a change of
membership, not a failure: the sum raises `MembershipChanged`, the
trainer puts the wave's writes back, and `reform` agrees with the
survivors on a new cluster of themselves (membership.py), over which the
session runs the same wave again.

A process that asks to join (`from_environ(join=...)`) is a change too.
It first asks where the job is, and its training runs up to that wave
only evaluate (`catching_up`: its script reaches the job's batch) while
the job trains on; near it, it asks to be taken in. The chief's sums say
it has joiners, and before the next wave every worker raises
`MembershipChanged`, nothing written yet, and forms the cluster with
them. At the joiner's first wave every worker takes the chief's model
(`take_model`) and algorithm state (`take_state`).
"""
import logging

from tensorbow import feeds
from tensorbow import hooks
from tensorbow import preemption
from tensorbow import rollback
from tensorbow import setting as tb_setting
from tensorbow.scaleout import cluster as tb_cluster
from tensorbow.scaleout import job as tb_job
from tensorbow.scaleout import joining
from tensorbow.scaleout import membership
from tensorbow.scaleout import recovery as tb_recovery


def from_environ(timeout, heartbeat_timeout, requested=None, environ=None,
                 min_workers=None, membership_log=None, join=None,
                 max_workers=None, elastic_timeout=None):
  """This process's `Workers` if `TF_CONFIG` (in `environ`, default
  os.environ) names a cluster or it joins one; None: it trains alone, and
  nothing crosses processes.

  Args:
    timeout: seconds a sum waits for the other workers.
    heartbeat_timeout: seconds of silence that lose one.
    requested: `requested()`, whether this process was asked to stop
      (preemption.py), told to the others with every sum.
    min_workers: how many must remain for the survivors of a loss to go
      on (None: a loss fails the others).
    membership_log: the file of the changes of membership to write or
      replay (membership.Log).
    join: the addresses a job's workers started at: this process asks
      that job to take it in, waiting up to `timeout` seconds.
    max_workers: how many workers a job takes in at most (None: any).
    elastic_timeout: seconds fewer than `min_workers` survivors wait for
      workers to join (None: they fail at once).
  """
  elastic = dict(max_workers=max_workers, elastic_timeout=elastic_timeout)
  if join is not None:
    joiner = membership.Joiner(join)
    logging.getLogger("tensorbow").warning(
        "TensorBow: asks the job at %s to take this process in",
        ",".join(join))
    job = joiner.ask(timeout, probe=0)
    # Until taken in: the job's size with this process last, what the
    # session's setting is made for.
    provisional = tb_cluster.Cluster(
        ["0.0.0.0:0"] * job["workers"] + [joiner.address], job["workers"])
    return Workers(provisional, timeout, heartbeat_timeout, requested,
                   min_workers, membership.Log(membership_log, []),
                   arrival=joining.Arrival(joiner, job["wave"], timeout),
                   **elastic)
  found = tb_cluster.from_environ(environ)
  return (None if found is None else
          Workers(found, timeout, heartbeat_timeout, requested, min_workers,
                  membership.Log(membership_log), **elastic))


def workers_named(environ=None):
  """How many workers `TF_CONFIG` (in `environ`, default os.environ) names
  for this process's cluster: 1 without one."""
  found = tb_cluster.from_environ(environ)
  return 1 if found is None else found.num_workers


class MembershipChanged(hooks.Dropped):
  """Workers `lost` were lost during `wave`, or joiners are to be taken
  in before it (`joining`): nothing of it may commit, and it is to run
  again in the new cluster once `reform` has run."""

  def __init__(self, wave, lost, message, joining=False):
    super().__init__(message)
    self.wave, self.lost, self.joining = wave, tuple(lost), joining


class Workers(object):
  """A worker of a cluster: sums over the workers with its `Reducer`.

  Args:
    cluster: this worker's `cluster.Cluster`.
    timeout: seconds a sum waits for the other workers.
    heartbeat_timeout: seconds of silence after which a worker is lost.
    requested, min_workers, max_workers, elastic_timeout: as
      `from_environ`'s.
    log: the job's `membership.Log`.
    arrival: a joiner's `joining.Arrival`; None: a worker of the job as it
      started, whose chief takes joiners in.
  """

  def __init__(self, cluster, timeout,
               heartbeat_timeout=tb_cluster.DEFAULT_HEARTBEAT_TIMEOUT,
               requested=None, min_workers=None, log=None, max_workers=None,
               arrival=None, elastic_timeout=None):
    self.cluster = cluster
    self._timeout = timeout
    self._heartbeat_timeout = heartbeat_timeout
    self._requested = requested
    self._min_workers = min_workers
    self._elastic_timeout = elastic_timeout or 0.0
    self._made = None  # the Reducer, made when first used
    self._backup = None  # with elasticity, made with the first setting
    self._departing = None  # (wave, workers preempted that leave before it)
    self.membership = log or membership.Log()
    # Each one's first index; how many there were.
    self._first = list(range(cluster.num_workers))
    self._ever = cluster.num_workers
    # Where processes ask to join, if this was one of the job as started.
    self._door = (None if arrival else joining.Door(
        lambda: tb_cluster.heartbeat(cluster), self.elastic, max_workers))
    self._arrival = arrival  # a joiner's, until taken in
    # The last wave that took joiners in: all take the chief's state, and
    # a joiner's runs before it only catch up.
    self._joined_at = None

  @property
  def elastic(self):
    """Whether a lost worker is a change of membership (min_workers)."""
    return self._min_workers is not None

  @property
  def workers(self):
    """How many processes train together now."""
    return self.cluster.num_workers

  @property
  def index(self):
    """This one's place among them now."""
    return self.cluster.index

  @property
  def checkpoint_worker(self):
    return self.cluster.index

  @property
  def _reducer(self):
    if self._made is None:
      self._made = tb_cluster.Reducer(
          self.cluster, self._timeout,
          heartbeat_timeout=self._heartbeat_timeout,
          requested=self._requested, joining=self._asked)
    return self._made

  @property
  def seconds(self):
    return self._made.seconds if self._made is not None else 0.0

  def processes(self):
    """This worker as its session's settings see it (a
    `setting.Processes`): one replica trains copies, its central model
    being one of the workers' to be summed."""
    return tb_setting.Processes(
        place=lambda: (self.workers, self.index), replicates_one=True,
        job=self.job)

  def job(self, session, replica_state):
    """What the workers add to each wave of a setting on `session` whose
    replicas are `replica_state` (a `hooks.Job`, job.py)."""
    if self.elastic and self._backup is None:
      # Kept across settings: a wave that lost a worker puts back what it
      # wrote before it runs again.
      self._backup = rollback.Backup(session, session.graph)
    return tb_job.make(self, session, replica_state, self._backup)

  def checked(self, plan, fed_values, replicas):
    """A training run's fed values checked for `replicas` on every worker
    (feeds.check); the part of a batch feed this worker trains."""
    values = feeds.check(plan, fed_values, replicas * self.workers)
    if plan.batch_feed >= 0 and plan.batch[plan.batch_feed]:
      self.cluster.check_rows(len(values[plan.batch_feed]), replicas,
                              plan.names[plan.batch_feed])
    return feeds.worker_part(
        plan, values, lambda rows: self.cluster.part(rows, replicas))

  def take_model(self, state, session, wave):
    """Each worker's script initialises (or writes) the central model on
    its own: before `wave`, the variables due to be seeded take worker
    0's values on every worker. A replayed change of membership comes
    first."""
    if self._door is not None:
      self._door.at(self.workers, wave, self.cluster.is_chief)
    self._scheduled(wave)
    names, tensors = state.central_tensors(state.pending_seed())
    first = names and self._summed(
        wave, self._reducer.from_chief, dict(zip(names, session.run(tensors))),
        f"the chief's model before wave {wave}")
    if first:
      session.run(*state.set_central_run(first))

  def take_state(self, state, session, wave):
    """After the replicas were seeded for `wave`: the algorithm's state
    for the central model becomes worker 0's where a worker joined."""
    if wave != self._joined_at:
      return
    tensors = state.shared_state_tensors()
    keys = sorted(tensors)
    taken = self._summed(
        wave, self._reducer.from_chief,
        dict(zip(keys, session.run([tensors[k] for k in keys]))),
        f"the chief's algorithm state before wave {wave}")
    if taken:
      session.run(*state.set_shared_state_run(taken))

  def recovery(self, record):
    """The loop of this worker's training runs through changes of the
    job's membership (recovery.Recovery), `record` called with each
    change."""
    return tb_recovery.Recovery(self, record)

  def catching_up(self, wave):
    """Whether training run `wave` is to run as a plain run: a joiner's
    before its first wave."""
    if self._arrival is not None and self._arrival.due(wave):
      answer = self._arrival.ask(wave, self.cluster)
      if answer is not None:
        self.cluster = tb_cluster.Cluster(answer["workers"], answer["index"])
        self._first, self._ever = list(answer["first"]), answer["ever"]
        self.membership.adopt(answer["changes"])
        self._joined_at, self._arrival = answer["wave"], None
    return self._arrival is not None or (self._joined_at is not None and
                                         wave < self._joined_at)

  def reduce(self, wave, arrays):
    """`arrays` summed over the workers during `wave` (an all-reduce)."""
    return self._summed(wave, self._reducer.sum, arrays, f"wave {wave}")

  def sync(self, runs, session, wave, summed=(), fetched=()):
    """After `wave`: sums every worker's move of the variables `summed`
    (merged as sums over rows) since the wave's base
    (AlgorithmRuns.worker_sync) and applies it; returns `fetched` (arrays:
    the wave's fetched sums over rows) summed over the workers, in the
    same all-reduces."""
    sync = runs.worker_sync(summed)
    if sync is None:
      return self.reduce(wave, list(fetched)) if fetched else []
    _, added, sums, apply = sync
    totals = self.reduce(wave, session.run(added) + list(fetched))
    session.run(apply, dict(zip(sums, totals)))
    return totals[len(added):]

  def _summed(self, wave, how, values, what):
    """`how(values, what)`: a sum over the workers during `wave`; with
    elasticity, one that lost workers raises MembershipChanged."""
    try:
      return how(values, what)
    except tb_cluster.WorkerLost as e:
      if not self.elastic:
        raise
      raise MembershipChanged(wave, e.lost, e.message) from None

  def reform(self, change):
    """After `change` (a MembershipChanged): agrees with the survivors on
    the workers that go on and becomes one of their new cluster; returns
    the change as the membership log records it.

    Raises:
      tf.errors.UnavailableError: fewer than `min_workers` remain, or the
        survivors could not agree.
    """
    old = self.cluster
    members = [i for i in range(old.num_workers) if i not in change.lost]
    if not self._elastic_timeout:
      self._check_enough(members, change)  # before waiting on the others
    taking = {}

    def take(going):
      # The lowest going on takes in those asking (at most max_workers),
      # and tells those who probe of the job as it will be.
      taking.clear()
      if self._door is not None:
        self._door.at(going, change.wave, True)
        taking.update(self._door.taking_in(going))
      return tuple(taking)

    members, addresses = membership.agree(
        tb_cluster.heartbeat(old), old, change.lost,
        len(self.membership.changes) + 1, change.wave, self._timeout,
        self._heartbeat_timeout, take, self._min_workers,
        self._elastic_timeout)
    self._check_enough(members, change, len(addresses) - len(members))
    lost = [self._first[i] for i in range(old.num_workers)
            if i not in members]
    if self._made is not None:
      self._made.close()
      self._made = None
    self._departing = None
    joined = list(range(self._ever,
                        self._ever + len(addresses) - len(members)))
    self._ever += len(joined)
    self._first = [self._first[i] for i in members] + joined
    self.cluster = tb_cluster.Cluster(addresses, members.index(old.index))
    self.membership.record(change.wave, self._first, lost, self.index,
                           joined)
    if joined:
      self._joined_at = change.wave
      if taking:
        self._door.answer(taking, self.cluster, {
            "wave": change.wave, "changes": self.membership.changes,
            "first": self._first, "ever": self._ever})
    return self.membership.changes[-1]

  def _asked(self):
    """Whether processes ask the chief of the job as started to join
    (called with every sum)."""
    return self._door is not None and self._door.asked()

  def _scheduled(self, wave):
    """Before `wave`: the workers preempted after the last leave, or a
    change the replayed membership log makes then.

    Raises:
      SystemExit(0): the log says this worker left.
      MembershipChanged: the log says others left.
    """
    if self._made is not None and self._made.joining:
      raise MembershipChanged(
          wave, (), f"TensorBow: processes ask to join before wave {wave}",
          joining=True)
    if self._departing is not None and self._departing[0] == wave:
      left = self._departing[1]
      raise MembershipChanged(
          wave, left, f"TensorBow: worker(s) {', '.join(map(str, left))} "
          f"preempted after wave {wave - 1}")
    due = self.membership.due(wave)
    if due is None:
      return
    mine = self._first[self.index]
    said = (f"as the membership log {self.membership.path} says: workers "
            f"{', '.join(map(str, due['left']))} leave before wave {wave}")
    if mine in due["left"]:
      logging.getLogger("tensorbow").warning(
          "TensorBow: worker %d leaves, %s", mine, said)
      raise SystemExit(0)
    raise MembershipChanged(
        wave, [self._first.index(i) for i in due["left"]
               if i in self._first], f"TensorBow: {said}")

  def _check_enough(self, members, change, joined=0):
    """Raises WorkerLost if `members` (indices of the workers that go on
    after `change`) and `joined` joiners are fewer than min_workers."""
    if len(members) + joined < self._min_workers:
      lost = [self._first[i] for i in range(self.cluster.num_workers)
              if i not in members]
      waited = (f" and none joined within {self._elastic_timeout:g} s"
                if self._elastic_timeout else "")
      raise tb_cluster.WorkerLost(
          f"TensorBow: {len(members)} of the job's workers remain after "
          f"losing worker(s) {', '.join(map(str, lost))} during wave "
          f"{change.wave}, fewer than min_workers={self._min_workers}"
          f"{waited}: {change}", change.lost)

  def take_sums(self):
    """(start, end, what) of each sum over the workers since the last call,
    in seconds of time.monotonic."""
    return self._made.take_spans() if self._made is not None else []

  def agreement(self):
    """How this worker agrees with the others on a preemption (a
    `preemption.Agreement`)."""
    return preemption.Agreement(self.preempting, self.go_on_after,
                                self.leaves_save)

  def preempting(self, requested):
    """After a wave: whether every worker saves now. Agreed through the
    sums: every worker learns of any worker's request in the same sum, so
    all save after the same wave."""
    del requested
    return self._made is not None and self._made.stopping

  def go_on_after(self, wave):
    """After preempted `wave` saved: whether this worker goes on without
    those asked to stop (they leave before the next wave), else it stops
    too."""
    asked = sorted(self._made.asked)
    if (not self.elastic or self.index in asked or
        self.workers - len(asked) < self._min_workers):
      return False
    self._departing = (wave + 1, asked)
    return True

  def leaves_save(self):
    """Whether a Saver's save is the chief's to write: this worker keeps
    its replicas' state beside the checkpoint."""
    if self.cluster.is_chief:
      return False
    _log_once(f"TensorBow: worker {self.index} leaves checkpoint writes to "
              "the chief (worker 0) and saves only its replicas' state")
    return True

  def close(self):
    """Stops the sums' server side (the Reducer), if one was made."""
    if self._made is not None:
      self._made.close()


_logged = set()


def _log_once(message):
  if message not in _logged:
    _logged.add(message)
    logging.getLogger("tensorbow").warning(message)
