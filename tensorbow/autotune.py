"""Crossbow's auto-tuner: `TensorBowSession(replicas="auto")`.

The session starts with one replica. The tuner times the user's own
training runs: after `warmup` runs at an L it measures `measure` more
and takes their median throughput (batch rows per second, the whole
`run` call). While the last L added improved on the best throughput so
far by at least `gain`, it adds one more replica (at most `max_replicas`
and at most the batch's rows); when one does not, it goes back to the
best L and settles. A run with a different batch size starts the search
again from the current L. Each decision is one log line and a record in
`decisions`; a change of L refreshes the central model from the replicas
and seeds the new ones from it, so no update is lost.
"""
import collections
import logging
import statistics
import time

Decision = collections.namedtuple(
    "Decision", ["run", "replicas", "rows", "rows_per_second", "next",
                 "reason"])


class AutoTuner(object):
  """Chooses a session's L from the throughput of its training runs."""

  def __init__(self, warmup=2, measure=5, gain=1.1, max_replicas=16):
    self.warmup = warmup
    self.measure = measure
    self.gain = gain
    self.max_replicas = max_replicas
    self.decisions = []
    self._runs = 0
    self._rows = None  # the batch size being tuned for
    self._samples = []  # throughputs at the current L
    self._best = None  # (L, rows per second)
    self._settled = False

  def train(self, session, route, fed_values, options, run_metadata):
    """`session`'s training run, timed; then L changes if the search says
    so."""
    start = time.perf_counter()
    result = session._trainer.train(route, fed_values, options,  # pylint: disable=protected-access
                                    run_metadata)
    seconds = time.perf_counter() - start
    rows = session._trainer.last_rows  # pylint: disable=protected-access
    following = self.observe(session.replicas, rows, seconds)
    if following is not None and following != session.replicas:
      session._set_replicas(following)  # pylint: disable=protected-access
    return result

  def observe(self, replicas, rows, seconds):
    """Records a training run of `rows` rows at `replicas` replicas that
    took `seconds`; returns the L for the next run, or None to keep it."""
    self._runs += 1
    if rows != self._rows:
      if self._rows is not None:
        self._decide(replicas, rows, None, replicas,
                     "batch size changed: tuning again")
      self._rows, self._samples, self._best = rows, [], None
      self._settled = False
    if self._settled:
      return None
    self._samples.append(rows / max(seconds, 1e-9))
    if len(self._samples) < self.warmup + self.measure:
      return None
    throughput = statistics.median(self._samples[self.warmup:])
    self._samples = []
    limit = min(self.max_replicas, max(1, rows))
    if self._best is None or throughput >= self.gain * self._best[1]:
      gained = self._best is None
      self._best = (replicas, throughput)
      if replicas + 1 > limit:
        self._settled = True
        return self._decide(replicas, rows, throughput, replicas,
                            f"settled: {limit} is the most replicas")
      return self._decide(
          replicas, rows, throughput, replicas + 1,
          "first measurement" if gained else
          f"at least {self.gain:g}x the best so far: adding a replica")
    self._settled = True
    best = self._best[0]
    return self._decide(
        replicas, rows, throughput, best,
        f"under {self.gain:g}x L={best}'s {self._best[1]:.0f} rows/s: "
        f"settled at L={best}")

  def _decide(self, replicas, rows, throughput, following, reason):
    self.decisions.append(Decision(self._runs, replicas, rows, throughput,
                                   following, reason))
    logging.getLogger("tensorbow").info(
        "TensorBow auto-tuner, run %d: L=%d, %s rows, %s rows/s -> L=%d (%s)",
        self._runs, replicas, rows,
        "-" if throughput is None else f"{throughput:.0f}", following, reason)
    return following
