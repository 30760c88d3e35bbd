"""Taking workers into a running job (DESIGN.md, "Two levels":
elasticity): the chief's side, `Door`, and a joiner's until it is taken
in, `Arrival`.

A joiner asks over UDP at the heartbeat ports of the addresses the job
started with (membership.Joiner); the heartbeats of that cluster run for
every original worker's life, and keep each request until it is
answered (heartbeat.py). The chief's `Door` answers a probe (where the
job is: its wave and size) on the heartbeat's thread, at once, and a
request it must refuse with its next sum; a request to be taken in waits
for the membership change its sums set off (scaleout.Workers), whose
agreement names the joiners the lowest worker takes in (`taking_in`),
and is answered after it (`answer`).

A joiner probes first and runs its script's training runs up to the
job's wave as evaluations; `Arrival.ask` probes again there and, once
the job is at most CLOSE waves ahead (or after PROBES probes), asks to be
taken in: the job waits only for those last few runs.
"""
import json
import threading

import tensorflow as tf

from tensorbow.scaleout import cluster as tb_cluster
from tensorbow.scaleout import membership

CLOSE = 2  # waves the job may be ahead when a joiner asks to be taken in
PROBES = 8  # probes before a joiner asks however far ahead the job is


class Door(object):
  """Where processes ask a job to take them in: `heartbeats()`, the
  heartbeat.Heartbeat of the cluster the job started as; `elastic`:
  whether it may (min_workers); `max_workers`: how many it takes at most
  (None: any)."""

  def __init__(self, heartbeats, elastic, max_workers):
    self._heartbeats = heartbeats
    self._elastic = elastic
    self._max_workers = max_workers
    self._lock = threading.Lock()
    self._job = None  # (workers, wave) while this is the chief
    self._watching = False

  def _requests(self):
    beats = self._heartbeats()
    return beats, [(membership.request_of(r), r) for r in beats.requests()]

  def at(self, workers, wave, chief):
    """The job has `workers` workers and runs `wave`; this worker is its
    chief if `chief` (only the chief answers)."""
    with self._lock:
      self._job = (workers, wave) if chief else None

  def asked(self):
    """Whether a process asks to be taken in (called with every sum);
    refuses requests the job may not take. Probes are answered on the
    heartbeat's thread, from the first call on."""
    if not self._watching:  # the heartbeats run once a sum has
      self._watching = True
      self._heartbeats().watch(lambda silent: self._answer(probes=True))
    return self._answer(probes=False)

  def _answer(self, probes):
    """Answers the probes (`probes`) or refuses the requests the job may
    not take; returns whether a request to be taken in waits."""
    with self._lock:
      job = self._job
    if job is None:
      return False
    workers, wave = job
    why = ("the job was started without min_workers" if not self._elastic
           else None if self._max_workers is None or
           workers < self._max_workers else
           f"the job has max_workers={self._max_workers} workers")
    beats, requests = self._requests()
    asking = False
    for asked, request in requests:
      if asked is not None and asked[1] is not None:  # where the job is
        if probes:
          beats.answer(request, json.dumps(
              {"refused": why} if why else {"wave": wave,
                                            "workers": workers}))
      elif not probes and (asked is None or why):
        beats.answer(request, json.dumps({"refused": why or "no request"}))
      elif not probes:
        asking = True
    return asking

  def taking_in(self, going):
    """{address in the new cluster: request} of the processes asking that
    the lowest of `going` workers takes in now, in the order asked, up to
    max_workers."""
    room = (None if self._max_workers is None else
            max(self._max_workers - going, 0))
    _, requests = self._requests()
    return dict([(asked[0], r) for asked, r in requests
                 if asked is not None and asked[1] is None][:room])

  def answer(self, taking, cluster, told):
    """Tells each process of `taking` (taking_in's) its place in the new
    `cluster`, with `told` (the first wave, the log: Arrival.taken_in)."""
    beats = self._heartbeats()
    for address, request in taking.items():
      beats.answer(request, json.dumps(dict(
          told, workers=cluster.workers,
          index=cluster.workers.index(address),
          group_key=tb_cluster.last_group_key())))


class Arrival(object):
  """A joiner until it is taken in: `joiner` (membership.Joiner) found
  the job at `wave`; `timeout`: seconds it waits for an answer."""

  def __init__(self, joiner, wave, timeout):
    self._joiner = joiner
    self._wave = wave
    self._timeout = timeout
    self._probes = 0

  def due(self, wave):
    """Whether the joiner's script has reached the job's wave last told."""
    return wave >= self._wave

  def ask(self, wave, cluster):
    """At `wave`, a due one: None if the job moved on by more than CLOSE
    waves since (it catches up to there), else the answer that takes it
    into a cluster the size of `cluster` (its provisional one, what the
    session's setting was made for), at its place.

    Raises:
      tf.errors.UnavailableError: no answer, a refusal, or a job that
        changed size while the joiner caught up with it.
    """
    self._probes += 1
    now = self._joiner.ask(self._timeout, probe=self._probes)["wave"]
    if now > wave + CLOSE and self._probes < PROBES:
      self._wave = now
      return None
    answer = self._joiner.ask(self._timeout)
    if (len(answer["workers"]) != cluster.num_workers or
        answer["index"] != cluster.index or answer["wave"] < wave):
      raise tf.errors.UnavailableError(
          None, None, f"TensorBow: the job went from {cluster.index} to "
          f"{len(answer['workers']) - 1} workers, or past wave {wave}, while "
          "this process caught up with it: start it again")
    tb_cluster.follow_group_key(answer["group_key"])
    return answer
