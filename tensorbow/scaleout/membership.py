"""How the workers that survive a lost one agree to go on without it
(DESIGN.md, "Two levels": elasticity).

TensorFlow's collectives sum over a fixed group of a fixed cluster, whose
leader is its task 0. A cluster that lost a worker therefore cannot sum
again: the survivors form a new one, each with a new server on a port of
its own choosing. They agree on it over the heartbeats they still
exchange (`heartbeat.py`): each heartbeat of a survivor carries its
`Proposal`: which change it is, the wave to run again, the workers it
sees going on and its new port. Once every worker it names proposes the
same workers, a survivor knows the new cluster: those workers in their
old order, at their new ports. A survivor that sees another lost too
narrows its proposal, and the others follow.

A process joins the same way (`Joiner`): it asks the job's workers, at
the heartbeat ports of the addresses the job started with, and waits. The
workers learn of it through their sums and form, before the same wave,
a cluster of themselves and the joiners their chief proposes (last, in
the order asked); the chief then answers each joiner with that cluster
and the wave the joiner trains first.

`Log` keeps every change of membership with its wave, and replays the
changes of a run: before each wave it names, the workers it says left
leave (with status 0), and the others form their cluster as then.
"""
import collections
import json
import logging
import os
import socket
import time
import uuid

import tensorflow as tf

from tensorbow import options as tb_options
from tensorbow.scaleout import heartbeat as tb_heartbeat


class Proposal(collections.namedtuple("Proposal", [
    "change",  # which change of membership this is: 1, 2, ...
    "wave",  # the wave the new membership runs first
    "members",  # the old indices of the workers that go on, sorted
    "port",  # the proposer's port in the new cluster
    "joined",  # the addresses of the joiners taken in, in order
], defaults=[()])):
  """What a survivor's heartbeats carry while the survivors agree."""
  __slots__ = ()

  def text(self):
    """The proposal as one line of JSON (`parse` reads it back)."""
    return json.dumps([self.change, self.wave, list(self.members),
                       self.port, list(self.joined)])

  @classmethod
  def parse(cls, text):
    """The Proposal of `text`, or None: not one."""
    try:
      change, wave, members, port, joined = json.loads(text)
      return cls(int(change), int(wave), tuple(int(m) for m in members),
                 int(port), tuple(str(j) for j in joined))
    except (ValueError, TypeError):
      return None


def free_port(host):
  """A TCP port free now on `host`."""
  with socket.socket(tb_heartbeat.family(host), socket.SOCK_STREAM) as s:
    s.bind((host.strip("[]"), 0))
    return s.getsockname()[1]


def agree(beats, cluster, lost, change, wave, timeout, lost_after,
          joined=None, needed=0, waiting=0.0):
  """The workers that go on after workers `lost` (indices in `cluster`)
  were lost during `wave`, or take joiners in before it, agreed with them
  over heartbeats `beats`.

  Args:
    beats: this worker's `heartbeat.Heartbeat` of `cluster`.
    cluster: the cluster that lost them.
    lost: the indices this worker found lost.
    change: which change of membership this is (1 for the first).
    wave: the wave the new membership is to run first.
    timeout: seconds to agree in.
    lost_after: seconds of silence that lose a worker.
    joined: `joined(going)`: the addresses of the joiners this worker
      takes in if it is the lowest of `going` workers that go on (None:
      none); the others take those the lowest proposes.
    needed: how many workers, joiners included, the new cluster needs.
    waiting: seconds the survivors wait for joiners while fewer than
      `needed` agree (then they return fewer).

  Returns:
    (old indices of the workers that go on, their new addresses and then
    the joiners').

  Raises:
    tf.errors.UnavailableError: no agreement within `timeout`, the others
      going on without this worker, or a survivor at another wave.
  """
  me = cluster.index
  host = cluster.workers[me].rpartition(":")[0]
  port = free_port(host)
  members = tuple(i for i in range(cluster.num_workers) if i not in lost)
  start = time.monotonic()
  deadline = start + timeout + waiting
  taken = ()
  while True:
    beats.propose(Proposal(change, wave, members, port, taken).text())
    heard = _heard(beats, change, members)
    # The lowest going on says whom they take in.
    leader = _taken_by_lowest(joined, me, members, heard, taken)
    if leader != taken:
      taken = leader
      continue
    going = _going_on(beats, cluster, members, heard, lost_after)
    if going != members:
      members = going  # another was lost: propose again
      continue
    others = [i for i in members if i != me]
    agreed = _all_agree(heard, others, members, taken)
    if (agreed and len(members) + len(taken) < needed and
        time.monotonic() < start + waiting):
      agreed = False  # too few: they wait for a joiner
    elif agreed:
      return _agreed_cluster(cluster, wave, members, others, heard, port,
                             taken)
    if time.monotonic() > deadline:
      raise _no_agreement(cluster, timeout, members, others, heard)
    time.sleep(tb_heartbeat.INTERVAL / 2)


def _heard(beats, change, members):
  """The proposals of `members` for this change that `beats` heard, by
  worker index: what the others say this round. A text that is no
  proposal, or a proposal of another change, does not count."""
  heard = {i: Proposal.parse(t) for i, t in beats.proposals().items()}
  return {i: p for i, p in heard.items()
          if p is not None and p.change == change and i in members}


def _taken_by_lowest(joined, me, members, heard, taken):
  """The joiners the workers `members` take in: the lowest of them says
  whom, so that all take in the same. If this worker (`me`) is the
  lowest, those `joined(len(members))` names (none without `joined`);
  else those the lowest proposes, or still `taken` while it is unheard."""
  lowest = members[0]
  if me == lowest:
    return tuple(joined(len(members))) if joined else ()
  if lowest in heard:
    return heard[lowest].joined
  return taken


def _going_on(beats, cluster, members, heard, lost_after):
  """The workers of `members` that go on, sorted: those not silent for
  `lost_after` seconds on `beats` and named by every proposal `heard`, so
  that a worker one survivor lost is dropped by all.

  Raises:
    tf.errors.UnavailableError: this worker is not among them: the others
      went on without it.
  """
  me = cluster.index
  silent = beats.silent()
  seen = set(members) - {i for i, s in silent.items() if s >= lost_after}
  for p in heard.values():
    seen &= set(p.members)
  if me not in seen:
    raise _unavailable(cluster, f"the others went on without worker {me} "
                       f"({cluster.workers[me]})")
  return tuple(sorted(seen))


def _all_agree(heard, others, members, taken):
  """Whether every one of `others` proposes what this worker does: the
  workers `members` go on and take the joiners `taken` in."""
  return all(i in heard and heard[i].members == members and
             heard[i].joined == taken for i in others)


def _agreed_cluster(cluster, wave, members, others, heard, port, taken):
  """What `agree` returns once all agreed: (`members`, their new
  addresses, this worker's at `port` and the `others`' at the ports they
  proposed, and then the joiners' `taken`).

  Raises:
    tf.errors.UnavailableError: a survivor proposed another wave than
      `wave`.
  """
  waves = sorted({wave} | {heard[i].wave for i in others})
  if len(waves) > 1:
    raise _unavailable(cluster, f"the survivors were at waves {waves}: "
                       "one finished a wave the others did not")
  ports = {**{i: heard[i].port for i in others}, cluster.index: port}
  return members, [f"{cluster.workers[i].rpartition(':')[0]}:{ports[i]}"
                   for i in members] + list(taken)


def _no_agreement(cluster, timeout, members, others, heard):
  """The error of no agreement within `timeout` seconds, naming those of
  `others` that were not heard proposing the workers `members`."""
  slow = [f"worker {i} ({cluster.workers[i]})" for i in others
          if i not in heard or heard[i].members != members]
  return _unavailable(cluster, f"no agreement within {timeout:g} s with "
                      + ", ".join(slow))


class Joiner(object):
  """A process asking the job that started at addresses `job` to take it
  in, at an address of its own on the way to them (`address`).

  It first asks where the job is (`ask(probe=n)`: the wave the job runs
  now), so that its script can catch up while the job trains on, then to
  be taken in (`ask()`).
  """

  def __init__(self, job, interval=tb_heartbeat.INTERVAL):
    self.job = list(job)
    host = _host_towards(self.job[0])
    self.address = f"{host}:{free_port(host)}"
    self._token = uuid.uuid4().hex
    self._interval = interval
    self._peers = [tb_heartbeat.socket_address(w) for w in self.job]
    self._family = tb_heartbeat.family(host)

  def ask(self, timeout, probe=None):
    """Asks until one of the job's workers answers: its chief, at the
    next sum of the job's.

    Args:
      timeout: seconds to wait for an answer.
      probe: None, to be taken in; else the number of this probe (each
        probe asks anew): where the job is.

    Returns:
      A probe's answer: {"wave": the wave the job runs, "workers": how
      many}. To be taken in: {"workers": the new cluster's addresses,
      "index": this process's place in it, "wave": the first it trains,
      "changes": the membership log so far, "first": each worker's first
      index, "ever": how many there have been, "group_key": the last
      collective group key the workers took}.

    Raises:
      tf.errors.UnavailableError: no answer within `timeout`, or a refusal
        (the job has `max_workers` workers, or is not elastic).
    """
    request = {"address": self.address, "token": self._token}
    if probe is not None:
      request["probe"] = probe
    message = (tb_heartbeat.tag(self.job) + b" " + tb_heartbeat.JOIN +
               b"|" + json.dumps(request).encode())
    deadline = time.monotonic() + timeout
    with socket.socket(self._family, socket.SOCK_DGRAM) as sock:
      sock.settimeout(self._interval)
      while time.monotonic() < deadline:
        for peer in self._peers:
          try:
            sock.sendto(message, peer)
          except OSError:
            pass  # a worker gone; another may answer
        try:
          data = sock.recv(65536)
        except OSError:
          continue
        if data.startswith(tb_heartbeat.ANSWER):
          answer = json.loads(data[len(tb_heartbeat.ANSWER):])
          if "refused" in answer:
            raise tf.errors.UnavailableError(
                None, None, f"TensorBow: the job at {','.join(self.job)} "
                f"did not take this process in: {answer['refused']}")
          return answer
    raise tf.errors.UnavailableError(
        None, None, f"TensorBow: no worker of the job at "
        f"{','.join(self.job)} took this process in within {timeout:g} s "
        "(is the job running, with min_workers?)")


def request_of(text):
  """(the address it will serve at, its probe number or None) of a
  request to join (its text), or None: no such request."""
  try:
    request = json.loads(text)
    address, probe = str(request["address"]), request.get("probe")
  except (ValueError, TypeError, KeyError, AttributeError):
    return None
  if not tb_options.is_address(address) or not (
      probe is None or isinstance(probe, int)):
    return None
  return address, probe


def _host_towards(address):
  """This machine's address on the way to `address` ("host:port")."""
  host, _ = tb_heartbeat.socket_address(address)
  family = tb_heartbeat.family(host)
  with socket.socket(family, socket.SOCK_DGRAM) as s:
    s.connect((host, 9))  # no datagram is sent: it only picks a route
    mine = s.getsockname()[0]
  return f"[{mine}]" if family == socket.AF_INET6 else mine


def _unavailable(cluster, why):
  return tf.errors.UnavailableError(
      None, None, f"TensorBow: worker {cluster.index} of "
      f"{cluster.num_workers} cannot go on after losing a worker: {why}")


class Log(object):
  """Every change of a job's membership, with its wave: what a re-run
  needs to reproduce the run.

  Args:
    path: None, or a file: if it exists, the changes it holds are
      replayed (`due`); else the chief writes each change to it. A JSON
      list of {"wave": the first wave of the new membership, "workers":
      those that go on, "left": those that left, and "joined": those
      taken in, if any}, workers by their index in `TF_CONFIG` (a
      joiner's: the next unused).
    changes: a joiner's: the job's changes so far (the file is the
      chief's to write, not replayed).

  Raises:
    ValueError: a file that is not such a list.
  """

  def __init__(self, path=None, changes=None):
    self.path = path
    # {"wave", "workers", "left"[, "joined"]} as they happened
    self.changes = list(changes or [])
    self.replay = None  # the changes of the file, to replay
    if path is not None and changes is None and os.path.exists(path):
      with open(path) as f:
        text = f.read()
      try:
        replay = [dict({"wave": int(c["wave"]),
                        "workers": [int(w) for w in c["workers"]],
                        "left": [int(w) for w in c["left"]]},
                       **({"joined": [int(w) for w in c["joined"]]}
                          if c.get("joined") else {}))
                  for c in json.loads(text or "[]")]
      except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path} is no membership log: {e}") from None
      self.replay = replay

  def adopt(self, changes):
    """A joiner's: the job's changes so far are `changes`."""
    self.changes = list(changes)

  def due(self, wave):
    """The change the replayed log makes before `wave`, or None.

    Raises:
      tf.errors.UnimplementedError: the change takes joiners in (a replay
        does not wait for them).
    """
    if self.replay is None or len(self.changes) >= len(self.replay):
      return None
    change = self.replay[len(self.changes)]
    if change["wave"] != wave:
      return None
    if change.get("joined"):
      raise tf.errors.UnimplementedError(
          None, None, f"TensorBow: {self.path} takes workers "
          f"{change['joined']} in before wave {wave}: replaying a join is "
          "not built")
    return change

  def record(self, wave, members, lost, index, joined=()):
    """Workers `lost` left, `joined` joined and `members` (those joined
    last) go on from `wave`, this worker now their `index`: says so on the
    "tensorbow" logger, and the chief writes the log unless it replays
    one."""
    self.changes.append({"wave": wave, "workers": list(members),
                         "left": list(lost)})
    if joined:
      self.changes[-1]["joined"] = list(joined)
    logging.getLogger("tensorbow").warning(
        "TensorBow: membership: from wave %d, workers %s go on%s%s (%d "
        "workers; this is now worker %d)", wave, ",".join(map(str, members)),
        f" without {','.join(map(str, lost))}" if lost else "",
        f", {','.join(map(str, joined))} joined" if joined else "",
        len(members), index)
    if self.path is not None and self.replay is None and index == 0:
      written = f"{self.path}.tmp"
      with open(written, "w") as f:
        json.dump(self.changes, f)
      os.replace(written, self.path)
