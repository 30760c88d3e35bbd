"""How long the other workers take to learn that one was lost.

    PYTHONPATH=. .venv/bin/python -m benchmarks.lost_worker \
        [--workers 3] [--how kill,stop] [--repeats 3] [--after 10]

Each repeat starts W workers on this machine (free ports of 127.0.0.1,
`TF_CONFIG` each, one intra-op thread), each training LeNet with 2
replicas of 16 synthetic rows, SMA, until stopped. Once worker 1 has
printed wave `--after`, it is killed (SIGKILL: its port closes) or stopped
(SIGSTOP: its port still takes connections, it answers nothing), and the
clock starts; for every other worker it stops when that worker's process
has exited, and the table gives the median over the survivors and the
repeats, with whether every survivor named worker 1 in its error.
Both ways are interleaved in each repeat.
"""
import argparse
import os
import platform
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(heartbeat_timeout):
  """One worker: trains until stopped, printing each wave."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_v2_behavior()
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  from models import lenet  # pylint: disable=g-import-not-at-top
  tf.compat.v1.set_random_seed(0)
  model = lenet.build((28, 28, 1), 10, 0.01)
  from tensorbow.scaleout import cluster  # pylint: disable=g-import-not-at-top
  workers = cluster.from_environ().num_workers
  rng = np.random.RandomState(0)
  rows = 2 * 16 * workers
  feed = {model.x: rng.rand(rows, 28, 28, 1).astype(np.float32),
          model.y: rng.randint(0, 10, rows)}
  with tb.TensorBowSession(replicas=2,
                           heartbeat_timeout=heartbeat_timeout) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    wave = 0
    while True:
      sess.run(model.train_op, feed)
      wave += 1
      print(f"wave {wave}", flush=True)


def _start(addresses, k, heartbeat_timeout):
  from tensorbow.cli import launch  # pylint: disable=g-import-not-at-top
  from tensorbow.scaleout import cluster  # pylint: disable=g-import-not-at-top
  env = launch.worker_environ(
      cluster.Cluster(addresses, k), 1,
      dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
  return subprocess.Popen(
      [sys.executable, "-m", "benchmarks.lost_worker", "--worker",
       "--heartbeat_timeout", str(heartbeat_timeout)],
      env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      start_new_session=True)


def measure(workers, how, after, heartbeat_timeout):
  """([seconds from the signal to each survivor's exit], whether every
  survivor's error named worker 1)."""
  from tensorbow.cli import launch  # pylint: disable=g-import-not-at-top
  addresses = launch.free_addresses(workers)
  children = [_start(addresses, k, heartbeat_timeout)
              for k in range(workers)]
  try:
    for line in iter(children[1].stdout.readline, b""):
      if line.strip() == f"wave {after}".encode():
        break
    os.killpg(children[1].pid,
              signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    signalled = time.monotonic()
    took, named = [], True
    survivors = [c for k, c in enumerate(children) if k != 1]
    for child in survivors:
      # Drained, so that a full pipe cannot hold a survivor up.
      _, err = child.communicate(timeout=120)
      took.append(time.monotonic() - signalled)
      named &= (f"worker 1 ({addresses[1]})" in err.decode() and
                child.returncode != 0)
    return took, named
  finally:
    for child in children:
      if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
      child.wait()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workers", type=int, default=3)
  parser.add_argument("--how", default="kill,stop")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--after", type=int, default=10,
                      help="the wave of worker 1 after which it is lost")
  parser.add_argument("--heartbeat_timeout", type=float, default=3.0)
  parser.add_argument("--worker", action="store_true",
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    worker(args.heartbeat_timeout)
    return
  hows = args.how.split(",")
  print(f"machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; {args.workers} workers, LeNet 2 x 16 "
        f"each, worker 1 lost after wave {args.after}, heartbeat timeout "
        f"{args.heartbeat_timeout:g} s, {args.repeats} repeats")
  results = {how: ([], True) for how in hows}
  for _ in range(args.repeats):
    for how in hows:
      took, named = measure(args.workers, how, args.after,
                            args.heartbeat_timeout)
      results[how] = (results[how][0] + took, results[how][1] and named)
  print("| worker 1 | survivors' exit after it, median s | slowest s | "
        "every error named it |")
  print("|---|---|---|---|")
  for how in hows:
    took, named = results[how]
    print(f"| {'SIGKILL' if how == 'kill' else 'SIGSTOP'} | "
          f"{np.median(took):.2f} | {max(took):.2f} | "
          f"{'yes' if named else 'no'} |")


if __name__ == "__main__":
  main()
