"""The elements a training run takes from its input pipeline, and the next
wave's, pulled while the current wave computes (DESIGN.md, "Input
pipelines").

A training run fed by a `tf.data` iterator's `get_next()` or a queue's
dequeue takes its wave's elements here (waves.Trainer), in plain runs of
the TensorFlow session outside the session's lock. Per pipeline (the
tensors a run pulls, `Closure.pulled`) a `Prefetcher` keeps:

- *carried* elements: taken by a training run that did not train on them
  (it was refused, or met the end of the input after taking some); they
  begin the next wave;
- elements *pulled ahead*: right after a wave takes its elements, the
  prefetcher's thread pulls as many again for the next wave, while the
  wave computes (one wave's worth ahead, never more), with the error the
  pull met, if any.

The thread is started by the first pull and kept: TensorFlow runs a new
thread's first steps markedly slower (per-thread state warming up), which
a thread per pull paid on every wave. It ends when the session closes, or
after _IDLE_SECONDS without a pull, so a session left unclosed is not
kept alive by it.

Elements pulled ahead are still the pipeline's as far as the user can
tell: before a plain run that takes from the pipeline the pull is stopped
and the run is fed the first of them (or raises the error the pull met
where it would have met it); before one that re-initialises an iterator
they are dropped, as a synchronous pull would never have taken them. A
run that reads the element's shape is not fed it (fed, its dequeue would
still run: rewrite/pipelines.py, shape_reader): it takes its own, out of
order, with a warning. Runs that neither take from nor reset the pipeline
(enqueues, evaluation on feeds) do not wait for a pull.

A pull that reads some of the run's feeds (a feedable iterator's string
handle, `Closure.pull_feeds`) takes where those feeds say: it is given
them, what it took is kept apart per fed value, and nothing is pulled
ahead for it, since the next run may feed another handle.
"""
import collections
import logging
import threading

import numpy as np
import tensorflow as tf

from tensorbow import feeds
from tensorbow.rewrite import pipelines as tb_pipelines

_logger = logging.getLogger("tensorbow")
# How long close() waits for a pull still running once the TensorFlow
# session is closed (which cancels a dequeue that is waiting).
_JOIN_SECONDS = 60.0
# How long the thread waits for a pull before it ends.
_IDLE_SECONDS = 10.0


# What a training run took from its pipeline: its elements, and the run's
# feeds the pulls read ({name: value}), which say where they took from.
Taken = collections.namedtuple("Taken", ["elements", "feeds"])


def with_elements(fed_values, taken, by_element):
  """(one replica's feed values, the wave's) of a training run fed
  `fed_values` that took `taken`: the first element, or, `by_element`,
  each replica its own (feeds.Elements)."""
  first = fed_values + taken.elements[0]
  if not by_element:
    return first, first
  return first, fed_values + [
      feeds.Elements(e[i] for e in taken.elements)
      for i in range(len(taken.elements[0]))]


class _Held(object):
  """What one pipeline's training runs took and what was pulled for them.

  Attributes:
    names: the pulled tensors' names (with the pull's feeds, the key).
    ops: names of the ops that take the elements.
    pipelines: names of the iterators and queues they take from.
    carried: elements taken by a training run and not trained on.
    ahead: elements pulled ahead, after `carried` in the input's order.
    error: what the pull ahead met after `ahead` (an OpError), or None.
    pull: the pull ahead in flight (a `_Pull`), or None.
  """

  def __init__(self, names, ops, pipelines):
    self.names = names
    self.ops = ops
    self.pipelines = pipelines
    self.carried = []
    self.ahead = []
    self.error = None
    self.pull = None


class _Pull(object):
  """A pull ahead, queued or running: whether it is asked to stop between
  elements."""

  def __init__(self):
    self.stop = False


class Prefetcher(object):
  """Takes a session's training runs' elements from their pipelines.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    ahead: whether to pull the next wave's elements while a wave computes
      (TensorBowSession's `prefetch`); without it every element is taken
      when a wave asks for it.
  """

  def __init__(self, session, ahead=True):
    self._session = session
    self._ahead = ahead
    self._cond = threading.Condition()
    self._held = {}  # pulled names -> _Held
    self._closed = False
    self._queued = collections.deque()  # (_Held, _Pull, count, options)
    self._thread = None  # the thread pulling ahead, once started
    self._warned = set()

  def take(self, route, fed_values, count, options):
    """A `Taken` of `count` elements for a training run over `route` fed
    `fed_values` (in the order of route.fed), each a list of values in
    the order of route.closure.pulled.

    Elements it carried come first, then those pulled ahead (waiting for
    a pull in flight to finish), then new ones from the pipeline. If the
    input ends (OutOfRangeError) or a pull fails first, the error is
    raised and the elements taken so far are carried to the next run.
    """
    # What the pulls read of the run's feeds (a feedable iterator's
    # handle) decides where they take from.
    pull_feeds = {t.name: v for t, v in zip(route.fed, fed_values)
                  if t.name in route.closure.pull_feeds}
    held = self._held_for(route.closure, pull_feeds)
    others = self._stop_pulls(held.pipelines, but=held)
    with self._cond:
      for other in others:
        if other.ahead:
          self._warn_out_of_order(other)
      self._wait_for(held)
      taken = held.carried + held.ahead
      carried, held.carried, held.ahead = len(held.carried), [], []
      error, held.error = held.error, None
      if len(taken) >= count:  # more than a wave: L was lowered
        rest = taken[count:]
        held.carried = rest[:max(carried - count, 0)]
        held.ahead = rest[len(held.carried):]
        held.error = error
        return Taken(taken[:count], pull_feeds)
      if error is not None and not isinstance(
          error, tf.errors.DeadlineExceededError):
        # A deadline was the wave's before; this run pulls under its own.
        held.carried = taken
        raise error
    try:
      while len(taken) < count:
        taken.append(self._session.run(list(held.names), pull_feeds,
                                       options=options))
    except BaseException:
      self.put_back(route, Taken(taken, pull_feeds))
      raise
    return Taken(taken, pull_feeds)

  def put_back(self, route, taken):
    """What a training run over `route` took (a `Taken`) and did not train
    on: it begins the next wave so fed."""
    if not taken.elements:
      return
    held = self._held_for(route.closure, taken.feeds)
    with self._cond:
      held.carried = list(taken.elements) + held.carried

  def pull_ahead(self, route, count, options):
    """Starts pulling the elements of `route`'s next wave, `count` of them
    less those already held, on the prefetcher's thread; none for a pull
    that reads the run's feeds."""
    if not self._ahead or route.closure.pull_feeds:
      return
    held = self._held_for(route.closure)
    with self._cond:
      wanted = count - len(held.carried) - len(held.ahead)
      if (self._closed or held.pull is not None or held.error is not None or
          wanted <= 0):
        return
      held.pull = _Pull()
      self._queued.append((held, held.pull, wanted, options))
      if self._thread is None:
        self._thread = threading.Thread(target=self._work,
                                        name="tensorbow-prefetch",
                                        daemon=True)
        self._thread.start()
      self._cond.notify_all()

  def serve(self, closure):
    """Before a plain run with closure `closure`: hands it what was pulled
    ahead from the pipelines it takes from or resets.

    Returns:
      {tensor name: value} to feed the run: the first element pulled
      ahead for the ops it takes from, which it then takes instead of the
      pipeline.

    Raises:
      The error a pull ahead met where the run would have met it.
    """
    uses = closure.pipelines
    touched = set(uses.takes.values()) | uses.resets | uses.saves
    if not touched or not self._held:
      return {}
    stopped = self._stop_pulls(touched)
    fed = {}
    with self._cond:
      for held in stopped:
        if held.pipelines & uses.resets:
          # Started afresh: what came next from the old position never will.
          held.ahead, held.error = [], None
        elif not held.pipelines & set(uses.takes.values()):
          pass  # saved only
        elif held.ops <= uses.takes.keys():
          if tb_pipelines.shape_reader(closure.ops, held.names) is not None:
            if held.ahead:
              self._warn_once(
                  f"TensorBow: a run reads the shape of the elements of an "
                  f"input pipeline ({', '.join(sorted(held.pipelines))}) "
                  "pulled ahead for the next training run; fed one, "
                  "TensorFlow would still take another, so it takes its "
                  "own, out of the pipeline's order. Pass prefetch=False "
                  "to TensorBowSession to take elements only when a wave "
                  "asks for them")
          elif held.ahead:
            fed.update(zip(held.names, held.ahead.pop(0)))
          elif held.error is not None:
            error, held.error = held.error, None
            if not isinstance(error, tf.errors.DeadlineExceededError):
              raise error
        elif held.ahead:
          self._warn_out_of_order(held)
        if held.pipelines & uses.saves and held.ahead:
          self._warn_once(
              f"TensorBow: an iterator's position is saved "
              f"({', '.join(sorted(held.pipelines & uses.saves))}) after "
              "elements were pulled ahead for the next training run; "
              "restored, it starts after them. Pass "
              "prefetch=False to TensorBowSession to save it where the "
              "training runs are")
    return fed

  def give_back(self, fed):
    """A plain run fed `fed` by `serve` was refused before it ran: the
    element goes back to the front."""
    if not fed:
      return
    with self._cond:
      for held in self._held.values():
        if all(n in fed for n in held.names):
          held.ahead.insert(0, [fed[n] for n in held.names])

  def stop(self):
    """Asks every pull in flight to stop, and starts no more (the session
    is closing)."""
    with self._cond:
      self._closed = True
      for held in self._held.values():
        if held.pull is not None:
          held.pull.stop = True
      self._cond.notify_all()

  def join(self):
    """After stop(): waits for the thread to end, once the TensorFlow
    session is closed (which cancels a pull waiting on an empty queue)."""
    with self._cond:
      thread = self._thread
    if thread is None:
      return
    thread.join(_JOIN_SECONDS)
    if thread.is_alive():
      _logger.warning("TensorBow: a pull from an input pipeline was still "
                      "running %.0f s after the session closed",
                      _JOIN_SECONDS)

  def _held_for(self, closure, feeds=None):
    """The `_Held` of `closure`'s pulls fed `feeds`, made if new."""
    key = (closure.pulled, _fed_key(feeds))
    with self._cond:
      held = self._held.get(key)
      if held is None:
        ops = frozenset(n.rsplit(":", 1)[0] for n in closure.pulled)
        held = self._held[key] = _Held(
            closure.pulled, ops,
            frozenset(closure.pipelines.takes.get(op) for op in ops) -
            {None})
      return held

  def _stop_pulls(self, pipelines, but=None):
    """Stops the pulls ahead from any of `pipelines` (other than `but`'s),
    once their element in flight is in; returns the pipelines' `_Held`s."""
    with self._cond:
      touched = [h for h in self._held.values()
                 if h.pipelines & pipelines and h is not but]
      for held in touched:
        if held.pull is not None:
          held.pull.stop = True
      for held in touched:
        self._wait_for(held)
    return touched

  def _wait_for(self, held):
    """Waits, holding self._cond, until `held` has no pull in flight."""
    while held.pull is not None:
      self._cond.wait()

  def _work(self):
    """The thread: runs the pulls queued, until closed or idle."""
    while True:
      with self._cond:
        while not self._queued and not self._closed:
          if not self._cond.wait(_IDLE_SECONDS) and not self._queued:
            break
        if not self._queued:  # closed or idle
          self._thread = None
          return
        job = self._queued.popleft()
      self._pull(*job)

  def _pull(self, held, pull, count, options):
    """A pull ahead: `count` elements, one run each, stopping early if
    asked."""
    error = None
    try:
      for _ in range(count):
        if pull.stop:
          break
        element = self._session.run(list(held.names), options=options)
        with self._cond:
          held.ahead.append(element)
    except Exception as e:  # pylint: disable=broad-except
      # Raised where a synchronous pull would have met it (take, serve).
      error = e
    finally:
      with self._cond:
        if not self._closed:
          held.error = error
        held.pull = None
        self._cond.notify_all()

  def _warn_out_of_order(self, held):
    """Another run takes from `held`'s pipelines with other ops: it cannot
    be fed what was pulled ahead, which `held`'s run trains on later."""
    self._warn_once(
        f"TensorBow: a run takes from an input pipeline "
        f"({', '.join(sorted(held.pipelines))}) through other ops than the "
        f"training run whose next elements were pulled ahead "
        f"({', '.join(sorted(held.ops))}); that run trains on them later, "
        "out of the pipeline's order. Pass prefetch=False to "
        "TensorBowSession to take elements only when a wave asks for them")

  def _warn_once(self, message):
    if message not in self._warned:
      self._warned.add(message)
      _logger.warning(message)


def _fed_key(feeds):
  """A hashable key of the values `feeds` ({name: value}) a pull reads:
  small ones such as a string handle."""
  return tuple((name, np.asarray(value).dtype.str, np.shape(value),
                np.asarray(value).tobytes())
               for name, value in sorted((feeds or {}).items()))
