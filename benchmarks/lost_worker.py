"""How long the other workers take to learn that one was lost, and with
`--min-workers` to go on without it; what a worker that joins costs.

    PYTHONPATH=. .venv/bin/python -m benchmarks.lost_worker \
        [--workers 3] [--how kill,stop,go-on,join] [--repeats 3] [--after 10]

Each repeat starts W workers on this machine (free ports of 127.0.0.1,
`TF_CONFIG` each, one intra-op thread), each training LeNet with 2
replicas of 16 synthetic rows, SMA, until stopped. Once worker 1 has
printed wave `--after`, it is killed (SIGKILL: its port closes) or stopped
(SIGSTOP: its port still takes connections, it answers nothing), and the
clock starts; for every other worker it stops when that worker's process
has exited, and the table gives the median over the survivors and the
repeats, with whether every survivor named worker 1 in its error.
`go-on` runs the workers with `min_workers` W - 1 and kills worker 1: the
clock stops at each survivor's first wave done among the survivors (the
wave under way, run again). It also gives the median wave of worker 0
before the kill with and without `min_workers` (whose backup before
each wave is its cost), the two jobs run one after the other. `join`
runs W workers with `min_workers` W and, after worker 0's wave
`--after`, starts one more that asks to join (`join`): it gives the
seconds from that process's start to the first wave of W + 1 workers
(its start-up, its runs before that wave, the agreement), and worker 0's
wave that took it in, against its median wave before and after. The
ways are interleaved in each repeat.
"""
import threading
import argparse
import os
import platform
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(heartbeat_timeout, min_workers, join=None):
  """One worker: trains until stopped, printing each wave; with `join`
  (the job's addresses), one that asks that job to take it in."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_v2_behavior()
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  from models import lenet  # pylint: disable=g-import-not-at-top
  tf.compat.v1.set_random_seed(0)
  model = lenet.build((28, 28, 1), 10, 0.01)
  from tensorbow.scaleout import cluster  # pylint: disable=g-import-not-at-top
  workers = len(join) if join else cluster.from_environ().num_workers
  rng = np.random.RandomState(0)
  rows = 2 * 16 * workers
  feed = {model.x: rng.rand(rows, 28, 28, 1).astype(np.float32),
          model.y: rng.randint(0, 10, rows)}
  with tb.TensorBowSession(replicas=2, heartbeat_timeout=heartbeat_timeout,
                           min_workers=min_workers, join=join) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    wave = 0
    while True:
      sess.run(model.train_op, feed)
      wave += 1
      print(f"wave {wave} workers {sess.scale_out.workers}", flush=True)


def _start(addresses, k, heartbeat_timeout, min_workers=None, join=False):
  # A survivor that goes on is not read for errors: its stderr is dropped
  # so that a full pipe cannot hold it up.
  from tensorbow.cli import launch  # pylint: disable=g-import-not-at-top
  from tensorbow.scaleout import cluster  # pylint: disable=g-import-not-at-top
  env = launch.worker_environ(
      cluster.Cluster(addresses, 0 if join else k), 1,
      dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
  if join:
    del env["TF_CONFIG"]  # it asks the job instead
  return subprocess.Popen(
      [sys.executable, "-m", "benchmarks.lost_worker", "--worker",
       "--heartbeat_timeout", str(heartbeat_timeout)] +
      (["--min_workers", str(min_workers)] if min_workers else []) +
      (["--join", ",".join(addresses)] if join else []),
      env=env, cwd=ROOT, stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL if min_workers else subprocess.PIPE,
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
      if line.startswith(f"wave {after} ".encode()):
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


def _timed_lines(child, lines):
  """Appends (time.monotonic(), line) for each line `child` prints."""
  for line in iter(child.stdout.readline, b""):
    lines.append((time.monotonic(), line.strip()))


def _wave_ms(lines, first, last):
  """The median wave of `lines` between waves `first` and `last`, in ms."""
  at = {int(line.split()[1]): t for t, line in lines
        if line.startswith(b"wave ")}
  return 1000 * float(np.median(
      [at[w] - at[w - 1] for w in range(first + 1, last + 1)]))


def measure_go_on(workers, after, heartbeat_timeout):
  """([seconds from the SIGKILL of worker 1 to each survivor's first wave
  done among the survivors], worker 0's median wave before it in ms with
  min_workers, and without)."""
  from tensorbow.cli import launch  # pylint: disable=g-import-not-at-top
  waves = []
  for min_workers in (workers - 1, None):
    addresses = launch.free_addresses(workers)
    children = [_start(addresses, k, heartbeat_timeout, min_workers)
                for k in range(workers)]
    lines = [[] for _ in children]
    readers = [threading.Thread(target=_timed_lines, args=(c, l),
                                daemon=True)
               for c, l in zip(children, lines)]
    try:
      for reader in readers:
        reader.start()
      while not any(l.startswith(f"wave {after} ".encode())
                    for _, l in lines[1]):
        time.sleep(0.01)
      waves.append(_wave_ms(lines[0], 3, after - 1))
      if min_workers is None:
        break
      os.killpg(children[1].pid, signal.SIGKILL)
      killed = time.monotonic()
      took = []
      for k in range(workers):
        if k == 1:
          continue
        deadline = killed + 60
        while time.monotonic() < deadline:
          later = [t for t, l in list(lines[k])
                   if t > killed and l.startswith(b"wave ") and
                   l.endswith(f" workers {workers - 1}".encode())]
          if later:
            took.append(later[0] - killed)
            break
          time.sleep(0.01)
        else:
          raise RuntimeError(f"worker {k} did not go on within 60 s")
    finally:
      for child in children:
        if child.poll() is None:
          os.killpg(child.pid, signal.SIGKILL)
        child.wait()
  return took, waves[0], waves[1]


def measure_join(workers, after, heartbeat_timeout):
  """(seconds from a joiner's start to the first wave of workers + 1,
  worker 0's wave that took it in, its median wave before, and after, in
  ms, and that wave's number: the joiner ran as many runs less one on its
  own first)."""
  from tensorbow.cli import launch  # pylint: disable=g-import-not-at-top
  addresses = launch.free_addresses(workers)
  children = [_start(addresses, k, heartbeat_timeout, workers)
              for k in range(workers)]
  lines = []
  reader = threading.Thread(target=_timed_lines, args=(children[0], lines),
                            daemon=True)
  try:
    reader.start()
    while not any(l.startswith(f"wave {after} ".encode()) for _, l in lines):
      time.sleep(0.01)
    started = time.monotonic()
    children.append(_start(addresses, workers, heartbeat_timeout, workers,
                           join=True))
    more = f" workers {workers + 1}".encode()
    deadline = started + 120
    while time.monotonic() < deadline:
      joined = [(t, l) for t, l in list(lines) if l.endswith(more)]
      if len(joined) > 10:
        break
      time.sleep(0.01)
    else:
      raise RuntimeError("no join within 120 s")
    k = int(joined[0][1].split()[1])
    at = dict((int(l.split()[1]), t) for t, l in lines)
    return (joined[0][0] - started, 1000 * (at[k] - at[k - 1]),
            _wave_ms(lines, 3, k - 1), _wave_ms(lines, k + 1, k + 10), k)
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
  parser.add_argument("--min_workers", type=int, default=None,
                      help=argparse.SUPPRESS)
  parser.add_argument("--join", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    worker(args.heartbeat_timeout, args.min_workers,
           args.join and args.join.split(","))
    return
  hows = args.how.split(",")
  print(f"machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; {args.workers} workers, LeNet 2 x 16 "
        f"each, worker 1 lost after wave {args.after}, heartbeat timeout "
        f"{args.heartbeat_timeout:g} s, {args.repeats} repeats")
  results = {how: ([], True) for how in hows}
  waves = ([], [])
  joins = []
  for _ in range(args.repeats):
    for how in hows:
      if how == "join":
        joins.append(measure_join(args.workers, args.after,
                                  args.heartbeat_timeout))
        continue
      if how == "go-on":
        took, elastic, plain = measure_go_on(args.workers, args.after,
                                             args.heartbeat_timeout)
        results[how] = (results[how][0] + took, True)
        waves[0].append(elastic)
        waves[1].append(plain)
        continue
      took, named = measure(args.workers, how, args.after,
                            args.heartbeat_timeout)
      results[how] = (results[how][0] + took, results[how][1] and named)
  print("| worker 1 | survivors' exit (go-on: next wave done) after it, "
        "median s | slowest s | every error named it |")
  print("|---|---|---|---|")
  for how in hows:
    if how == "join":
      continue
    took, named = results[how]
    said = {"kill": "SIGKILL", "stop": "SIGSTOP",
            "go-on": f"SIGKILL, min_workers {args.workers - 1}"}[how]
    print(f"| {said} | {np.median(took):.2f} | {max(took):.2f} | "
          f"{'yes' if named else 'no'} |")
  if waves[0]:
    print(f"worker 0's median wave before the kill: {np.median(waves[0]):.1f}"
          f" ms with min_workers, {np.median(waves[1]):.1f} ms without "
          f"({np.median(waves[0]) / np.median(waves[1]):.3f}x)")
  if joins:
    took, join_wave, before, later, k = (np.array(v) for v in zip(*joins))
    print(f"a worker joining {args.workers}: from its start to the first "
          f"wave of {args.workers + 1}: median {np.median(took):.2f} s "
          f"(slowest {took.max():.2f}); worker 0's wave that took it in: "
          f"median {np.median(join_wave):.0f} ms (slowest "
          f"{join_wave.max():.0f}); its median wave before "
          f"{np.median(before):.1f} ms, after {np.median(later):.1f} ms; it "
          f"joined at wave {np.median(k):.0f} (median)")


if __name__ == "__main__":
  main()
