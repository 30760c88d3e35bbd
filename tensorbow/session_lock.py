"""The session's lock, and the training runs that must let go of it
(DESIGN.md, "Memory and concurrency").

Training runs are serialised and a wave keeps the session's state (the
replicas, their seeds, the route cache, the execution graph) to itself.
But some programs make a training run wait, inside TensorFlow, on what
only another thread's run provides: a token from a queue a queue runner
fills, a gradient taken from an accumulator (`SyncReplicasOptimizer`'s
chief), a barrier, a staging area. Held across that wait, the session's
lock deadlocks the run the wave waits for. So a wave whose ops may wait
on other runs lets go of the state lock while its tasks run, keeping only
the waves' lock; plain runs meanwhile read the central model as the wave
found it, as TensorFlow's concurrent runs would.

Such a wave may wait for ever once nothing will provide what it waits
on: the session's close cancels it, as TensorFlow's close cancels a
blocked run, and waits for its thread to leave with TensorFlow's
`CancelledError` before the runtime the wave runs on goes (`closing`).
"""
import contextlib
import threading

import tensorflow as tf

# Ops that block until another run changes a shared resource: a queue's
# dequeues (and enqueues into a full queue), a reader's (it dequeues file
# names), an accumulator's take, a barrier's take, a staging area's take.
WAITING_OPS = frozenset([
    "QueueDequeue", "QueueDequeueV2", "QueueDequeueMany",
    "QueueDequeueManyV2", "QueueDequeueUpTo", "QueueDequeueUpToV2",
    "QueueEnqueue", "QueueEnqueueV2", "QueueEnqueueMany",
    "QueueEnqueueManyV2", "ReaderRead", "ReaderReadV2", "ReaderReadUpTo",
    "ReaderReadUpToV2", "AccumulatorTakeGradient",
    "ResourceAccumulatorTakeGradient", "SparseAccumulatorTakeGradient",
    "BarrierTakeMany", "Unstage", "StagePeek", "MapUnstage",
    "MapUnstageNoKey", "MapPeek", "OrderedMapUnstage",
    "OrderedMapUnstageNoKey", "OrderedMapPeek",
])
# How long a session's close waits for a wave it cancelled to end: TensorFlow
# cancels a blocked op at once, so only a wave that ignores it waits this.
CANCELLED_WAVE_SECONDS = 10.0
# A gradient accumulator's take: the aggregation step of a protocol among
# a job's processes (SyncReplicasOptimizer's chief), which one replica
# takes for the process.
_PER_PROCESS_TAKES = frozenset([
    "AccumulatorTakeGradient", "ResourceAccumulatorTakeGradient",
    "SparseAccumulatorTakeGradient",
])


def waiting_ops(ops):
  """The names, sorted, of the ops among `ops`, or run before them through
  a control edge (a token's dequeue that gates a step), that may wait on
  another run (WAITING_OPS)."""
  found = set()
  for op in ops:
    found.update(o.name for o in [op] + list(op.control_inputs)
                 if o.type in WAITING_OPS)
  return tuple(sorted(found))


def per_process_takes(ops):
  """The ops among `ops` that take from a gradient accumulator
  (_PER_PROCESS_TAKES), in their order."""
  return tuple(op for op in ops if op.type in _PER_PROCESS_TAKES)


def refuse_per_process(takes, replicas):
  """Raises if a training run whose accumulator takes are `takes`
  (per_process_takes) has any and trains more than one replica in all.

  Raises:
    tf.errors.UnimplementedError: naming the accumulator's take.
  """
  if replicas <= 1 or not takes:
    return
  op = takes[0]
  raise tf.errors.UnimplementedError(
      None, None,
      f"TensorBow cannot train op '{op.name}' ({op.type}) with "
      f"{replicas} replicas: a gradient accumulator's take, such as "
      "SyncReplicasOptimizer's, aggregates the gradients of a job's "
      "processes, one apply each, and its token queue is a protocol "
      "among processes, not among replicas; train it with replicas=1, "
      "or give the optimizer inside it to TensorBow alone")


class SessionLock(object):
  """The session's state lock (reentrant, used with `with`), and the
  waves' lock that serialises training runs.

  Attributes:
    waiting: True while a wave whose ops may wait on other runs is
      running its tasks without the state lock: what the state lock
      guards may then be taken, but the replicas are mid-update.
  """

  def __init__(self):
    self._state = threading.RLock()
    self._waves = threading.RLock()
    self._waits = False  # the wave in flight's ops may wait on other runs
    self.waiting = False

  def __enter__(self):
    self._state.acquire()
    return self

  def __exit__(self, *exc_info):
    self._state.release()

  def during_wave(self, waits, body):
    """`body()` holding both locks for a wave: its result. `waits`, the
    names of its ops that may wait on other runs (waiting_ops), let
    `running` let go of the state lock."""
    with self._waves, self._state:
      self._waits = bool(waits)
      try:
        return body()
      finally:
        self._waits = False

  @contextlib.contextmanager
  def running(self):
    """Around a wave's tasks: the state lock is let go if its ops may wait
    on other runs (taken again after). A lock taken again by the same
    thread (reentrant) stays held."""
    if not self._waits:
      yield
      return
    self.waiting = True
    self._state.release()
    try:
      yield
    finally:
      self._state.acquire()
      self.waiting = False

  @contextlib.contextmanager
  def closing(self, cancel, seconds=CANCELLED_WAVE_SECONDS):
    """Around a session's close, holding the state lock: a wave that let
    go of it (`waiting`) is first cancelled by `cancel` (TensorFlow's
    close, which cancels a blocked run) and waited for, at most `seconds`,
    so that its thread leaves with TensorFlow's error, its wave undone,
    before what it runs on is closed; a wave that holds the lock is waited
    for to its end."""
    with self._state:
      cancelled = self.waiting
      if cancelled:
        cancel()
    if cancelled and self._waves.acquire(timeout=seconds):
      self._waves.release()
    with self._state:
      yield
