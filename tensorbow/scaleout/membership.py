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

import tensorflow as tf

from tensorbow.scaleout import heartbeat as tb_heartbeat


class Proposal(collections.namedtuple("Proposal", [
    "change",  # which change of membership this is: 1, 2, ...
    "wave",  # the wave the new membership runs first
    "members",  # the old indices of the workers that go on, sorted
    "port",  # the proposer's port in the new cluster
])):
  """What a survivor's heartbeats carry while the survivors agree."""
  __slots__ = ()

  def text(self):
    return json.dumps([self.change, self.wave, list(self.members),
                       self.port])

  @classmethod
  def parse(cls, text):
    """The Proposal of `text`, or None: not one."""
    try:
      change, wave, members, port = json.loads(text)
      return cls(int(change), int(wave), tuple(int(m) for m in members),
                 int(port))
    except (ValueError, TypeError):
      return None


def free_port(host):
  """A TCP port free now on `host`."""
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  with socket.socket(family, socket.SOCK_STREAM) as s:
    s.bind((host.strip("[]"), 0))
    return s.getsockname()[1]


def agree(beats, cluster, lost, change, wave, timeout, lost_after):
  """The workers that go on after workers `lost` (indices in `cluster`)
  were lost during `wave`, agreed with them over heartbeats `beats`.

  Args:
    beats: this worker's `heartbeat.Heartbeat` of `cluster`.
    cluster: the cluster that lost them.
    lost: the indices this worker found lost.
    change: which change of membership this is (1 for the first).
    wave: the wave the new membership is to run first.
    timeout: seconds to agree in.
    lost_after: seconds of silence that lose a worker.

  Returns:
    (old indices of the workers that go on, their new addresses).

  Raises:
    tf.errors.UnavailableError: no agreement within `timeout`, the others
      going on without this worker, or a survivor at another wave.
  """
  me = cluster.index
  host = cluster.workers[me].rpartition(":")[0]
  port = free_port(host)
  members = tuple(i for i in range(cluster.num_workers) if i not in lost)
  deadline = time.monotonic() + timeout
  while True:
    beats.propose(Proposal(change, wave, members, port).text())
    heard = {i: Proposal.parse(t) for i, t in beats.proposals().items()}
    heard = {i: p for i, p in heard.items()
             if p is not None and p.change == change and i in members}
    silent = beats.silent()
    seen = set(members) - {i for i, s in silent.items() if s >= lost_after}
    for p in heard.values():
      seen &= set(p.members)
    if me not in seen:
      raise _unavailable(cluster, f"the others went on without worker {me} "
                         f"({cluster.workers[me]})")
    if tuple(sorted(seen)) != members:
      members = tuple(sorted(seen))  # another was lost: propose again
      continue
    others = [i for i in members if i != me]
    if all(i in heard and heard[i].members == members for i in others):
      waves = sorted({wave} | {heard[i].wave for i in others})
      if len(waves) > 1:
        raise _unavailable(cluster, f"the survivors were at waves {waves}: "
                           "one finished a wave the others did not")
      ports = {**{i: heard[i].port for i in others}, me: port}
      return members, [f"{cluster.workers[i].rpartition(':')[0]}:{ports[i]}"
                       for i in members]
    if time.monotonic() > deadline:
      waiting = [f"worker {i} ({cluster.workers[i]})" for i in others
                 if i not in heard or heard[i].members != members]
      raise _unavailable(cluster, f"no agreement within {timeout:g} s with "
                         + ", ".join(waiting))
    time.sleep(tb_heartbeat.INTERVAL / 2)


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
      those that go on, "left": those that left}, workers by their
      index in `TF_CONFIG`.

  Raises:
    ValueError: a file that is not such a list.
  """

  def __init__(self, path=None):
    self.path = path
    self.changes = []  # {"wave", "workers", "left"} as they happened
    self.replay = None  # the changes of the file, to replay
    if path is not None and os.path.exists(path):
      with open(path) as f:
        text = f.read()
      try:
        replay = [{"wave": int(c["wave"]),
                   "workers": [int(w) for w in c["workers"]],
                   "left": [int(w) for w in c["left"]]}
                  for c in json.loads(text or "[]")]
      except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path} is no membership log: {e}") from None
      self.replay = replay

  def due(self, wave):
    """The change the replayed log makes before `wave`, or None."""
    if self.replay is None or len(self.changes) >= len(self.replay):
      return None
    change = self.replay[len(self.changes)]
    return change if change["wave"] == wave else None

  def record(self, wave, members, lost, index):
    """Workers `lost` left and `members` go on from `wave`, this worker
    now their `index`: says so on the "tensorbow" logger, and the chief
    writes the log unless it replays one."""
    self.changes.append({"wave": wave, "workers": list(members),
                         "left": list(lost)})
    logging.getLogger("tensorbow").warning(
        "TensorBow: membership: from wave %d, workers %s go on without %s "
        "(%d workers; this is now worker %d)", wave,
        ",".join(map(str, members)), ",".join(map(str, lost)), len(members),
        index)
    if self.path is not None and self.replay is None and index == 0:
      written = f"{self.path}.tmp"
      with open(written, "w") as f:
        json.dump(self.changes, f)
      os.replace(written, self.path)
