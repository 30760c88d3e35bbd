"""Training runs that wait on what another thread's run provides, run in a
child process by test_waiting_runs.py so that a hang is killed, not left.

`python waiting_runs_scripts.py MODE SCENARIO REPLICAS` prints one JSON
line: the values the scenario recorded, with REPLICAS 0 meaning
`tf.compat.v1.Session` (the reference). MODE is "v1" or "graph".

Each scenario is one of the ways a TF1 program makes a training run wait
on state only another run provides: a token queue a queue runner fills,
`SyncReplicasOptimizer`'s accumulators and token queue, several Python
threads sharing the session; and a session closed, or a process
exiting, while such a run is still blocked.
"""
import json
import sys
import threading
import time

import numpy as np
import tensorflow as tf

LR = 0.05
X = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
Y = np.array([[2.0], [3.0], [5.0], [9.0]], np.float32)
STEPS = 3
# Seconds a blocked run is left waiting before the session closes, and
# the most its thread may then take to end.
WAIT = 1.0
BOUND = 10.0


def _session(replicas):
  """A session on the default graph: TensorFlow's for 0 replicas."""
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  return (tf.compat.v1.Session() if replicas == 0 else
          tb.TensorBowSession(replicas=replicas))


def _creator(replicas):
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  return (tf.compat.v1.train.ChiefSessionCreator() if replicas == 0 else
          tb.TensorBowSessionCreator(replicas=replicas))


def _model():
  """(x, y, w, loss): least squares, one weight."""
  x = tf.compat.v1.placeholder(tf.float32, [None, 1], name="x")
  y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
  w = tf.compat.v1.get_variable("w", initializer=[[0.5]])
  loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
  return x, y, w, loss


def sync_replicas(replicas, num_tokens=0):
  """SyncReplicasOptimizer with its chief's hook, in a MonitoredSession:
  per run, the loss, the global step and `w` after it. With no initial
  token (`num_tokens=0`) each run returns once the chief applied its
  gradient, so the values are TensorFlow's exactly."""
  x, y, w, loss = _model()
  opt = tf.compat.v1.train.SyncReplicasOptimizer(
      tf.compat.v1.train.GradientDescentOptimizer(LR), 1,
      total_num_replicas=1)
  step = tf.compat.v1.train.get_or_create_global_step()
  train = opt.minimize(loss, global_step=step)
  hook = opt.make_session_run_hook(is_chief=True, num_tokens=num_tokens)
  record = []
  # A short grace: the chief's queue runner waits on the accumulator for a
  # gradient that never comes, in TensorFlow too; closing cancels it.
  with tf.compat.v1.train.MonitoredSession(
      _creator(replicas), hooks=[hook], stop_grace_period_secs=1) as s:
    for _ in range(STEPS):
      value, _ = s.run([loss, train], {x: X, y: Y})
      # The token the run took was enqueued after the chief's apply.
      after = s.run([step, w])
      record.append([float(value), int(after[0]), float(after[1][0, 0])])
  return record


def sync_replicas_issue(replicas):
  """The issue's snippet (an initial token): the first run's loss, and
  that a second returns."""
  return sync_replicas(replicas, num_tokens=-1)[:1]


def token_queue(replicas, gated=True):
  """A queue runner fills a token queue from the global step; each
  training run waits for a token (a control dependency) before its step
  (`gated`, else it takes none): per run, the loss and `w` after it."""
  x, y, w, loss = _model()
  step = tf.compat.v1.train.get_or_create_global_step()
  tokens = tf.queue.FIFOQueue(2, [tf.int64], shapes=[[]], name="tokens")
  runner = tf.compat.v1.train.QueueRunner(
      tokens, [tokens.enqueue(tf.identity(step))])
  with tf.control_dependencies([tokens.dequeue()] if gated else []):
    train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
        loss, global_step=step)
  record = []
  with _session(replicas) as s:
    s.run(tf.compat.v1.global_variables_initializer())
    coord = tf.compat.v1.train.Coordinator()
    threads = runner.create_threads(s, coord=coord, start=True)
    for _ in range(STEPS):
      value, _ = s.run([loss, train], {x: X, y: Y})
      record.append([float(value), float(s.run(w)[0, 0])])
    coord.request_stop()
    s.run(tokens.close(cancel_pending_enqueues=True))
    coord.join(threads, stop_grace_period_secs=10)
  return record


def ungated(replicas):
  """token_queue's runs taking no token: its reference."""
  return token_queue(replicas, gated=False)


def four_threads(replicas, threads=4):
  """`threads` Python threads each take STEPS training runs of one
  session at once (`threads=1`: one thread takes them all, in turn):
  the global step and `w` at the end."""
  x, y, w, loss = _model()
  step = tf.compat.v1.train.get_or_create_global_step()
  train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
      loss, global_step=step)
  with _session(replicas) as s:
    s.run(tf.compat.v1.global_variables_initializer())
    errors = []

    def steps(count):
      try:
        for _ in range(count):
          s.run(train, {x: X, y: Y})
      except Exception as e:  # pylint: disable=broad-except
        errors.append(repr(e))

    workers = [threading.Thread(target=steps, args=(STEPS * 4 // threads,))
               for _ in range(threads)]
    for t in workers:
      t.start()
    for t in workers:
      t.join()
    if errors:
      raise RuntimeError(errors[0])
    global_step, weight = s.run([step, w])
  return [int(global_step), float(weight[0, 0])]


def one_thread(replicas):
  """four_threads' runs taken by one thread: its reference."""
  return four_threads(replicas, threads=1)


def _blocked_step(replicas):
  """(session, thread, ended): a training run gated on a token queue that
  nothing fills, started in a daemon thread; `ended` gets the name of
  the error it raises (None if it returns) and when."""
  x, y, _, loss = _model()
  tokens = tf.queue.FIFOQueue(2, [tf.int64], shapes=[[]], name="tokens")
  with tf.control_dependencies([tokens.dequeue()]):
    train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss)
  s = _session(replicas)
  s.run(tf.compat.v1.global_variables_initializer())
  ended = {}

  def step():
    try:
      s.run(train, {x: X, y: Y})
      ended["error"] = None
    except Exception as e:  # pylint: disable=broad-except
      ended["error"] = type(e).__name__
    ended["at"] = time.monotonic()

  thread = threading.Thread(target=step, daemon=True)
  thread.start()
  time.sleep(WAIT)  # it waits on the empty queue
  return s, thread, ended


def closed_while_waiting(replicas):
  """Another thread closes the session while a training run waits on an
  empty queue: [the error the run raised, seconds from the close to its
  end, the training runs counted, the error of a run after the close]."""
  s, thread, ended = _blocked_step(replicas)
  closed = time.monotonic()
  s.close()
  thread.join(BOUND)
  try:
    s.run(tf.compat.v1.global_variables_initializer())
    after = None
  except RuntimeError as e:
    after = str(e)
  return [ended.get("error"), ended.get("at", float("inf")) - closed,
          getattr(s, "counts", {}).get("training_runs", 0), after]


def exit_while_waiting(replicas):
  """The process ends while a training run waits on an empty queue,
  the session never closed: whether the run was still waiting."""
  _, thread, _ = _blocked_step(replicas)
  return [thread.is_alive()]


SCENARIOS = {f.__name__: f for f in (sync_replicas, sync_replicas_issue,
                                     token_queue, ungated, four_threads,
                                     one_thread, closed_while_waiting,
                                     exit_while_waiting)}


def main(mode, scenario, replicas):
  getattr(tf.compat.v1, {"v1": "disable_v2_behavior",
                         "graph": "disable_eager_execution"}[mode])()
  try:
    result = {"values": SCENARIOS[scenario](int(replicas))}
  except tf.errors.OpError as e:
    result = {"error": type(e).__name__, "message": e.message}
  print(json.dumps(result), flush=True)


if __name__ == "__main__":
  main(*sys.argv[1:])
