"""Where a wave's CPU time goes: the allocators and the thread pools.

Trains LeNet (batch `--batch_size` per replica, L = `--replicas`, graph
mode); once warm, `perf record` samples it for `--seconds`, then the
samples of
`perf report` by category of symbol: the allocators (malloc and free,
TensorFlow's and TensorBow's BFC allocators, page faults), memory copies,
the thread pools (Eigen's pool that TensorFlow's ops share, futexes and
the scheduler), and the rest. Needs `perf` and permission to use it.

  python -m benchmarks.perf_wave --replicas 2 --batch_size 4 --seconds 10
  python -m benchmarks.perf_wave --workload ...   # what perf runs
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATEGORIES = collections.OrderedDict([
    ("allocators", re.compile(
        r"malloc|free|_int_|tcache|BFCAllocator|cpu_allocator|AllocateRaw|"
        r"DeallocateRaw|aligned_alloc|memalign|mmap|munmap|brk|page_fault|"
        r"clear_page|do_anonymous_page|alloc_pages|TensorBuffer")),
    ("memory copies", re.compile(r"memcpy|memmove|copy_user")),
    ("thread pools", re.compile(
        r"ThreadPoolTempl|EventCount|futex|sched_yield|__lll_|pthread_cond|"
        r"schedule\b|__schedule|pick_next|try_to_wake|finish_task_switch|"
        r"RunQueue|Barrier|BlockingCounter|condition_variable")),
])


def workload(args):
  """Trains for args.seconds; prints images/s."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  from models import lenet  # pylint: disable=g-import-not-at-top

  tf.compat.v1.disable_eager_execution()
  graph = tf.Graph()
  with graph.as_default():
    model = lenet.build((28, 28, 1), 10, 0.01)
    init = tf.compat.v1.global_variables_initializer()
  rows = args.batch_size * args.replicas
  rng = np.random.RandomState(0)
  feed = {model.x: rng.rand(rows, 28, 28, 1).astype(np.float32),
          model.y: rng.randint(0, 10, rows).astype(np.int64)}
  with tb.TensorBowSession(graph=graph, replicas=args.replicas) as sess:
    sess.run(init)
    for _ in range(20):
      sess.run(model.train_op, feed)
    print("warm", flush=True)
    steps, start = 0, time.perf_counter()
    # Longer than perf samples, so that it samples training only.
    while time.perf_counter() - start < args.seconds + 3:
      sess.run(model.train_op, feed)
      steps += 1
    elapsed = time.perf_counter() - start
  print(f"images/s {steps * rows / elapsed:.0f}", flush=True)


def profile(args):
  """Runs the workload under perf; returns {category: share of samples}."""
  with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "perf.data")
    cmd = [sys.executable, "-m", "benchmarks.perf_wave", "--workload",
           "--replicas", str(args.replicas), "--batch_size",
           str(args.batch_size), "--seconds", str(args.seconds)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # Run from the checkout's root, where `benchmarks` and `models` are.
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                             env=env, cwd=CHECKOUT)
    if child.stdout.readline().strip() != "warm":
      raise RuntimeError("the workload did not start")
    subprocess.run(["perf", "record", "-F", "499", "-g", "-o", data, "-p",
                    str(child.pid), "--", "sleep", str(args.seconds)],
                   capture_output=True, check=True)
    out = child.stdout.read()
    child.wait()
    report = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "--no-children", "-g",
         "none", "--sort", "symbol", "--percent-limit", "0"],
        capture_output=True, text=True, check=True).stdout
  shares = collections.OrderedDict((c, 0.0) for c in CATEGORIES)
  shares["other"] = 0.0
  total = 0.0
  for line in report.splitlines():
    m = re.match(r"\s+([\d.]+)%\s+\[[.kHu]\]\s+(.*)", line)
    if not m:
      continue
    share, symbol = float(m.group(1)), m.group(2)
    total += share
    for name, pattern in CATEGORIES.items():
      if pattern.search(symbol):
        shares[name] += share
        break
    else:
      shares["other"] += share
  shares = collections.OrderedDict(
      (k, 100.0 * v / total) for k, v in shares.items())
  speed = re.search(r"images/s (\d+)", out)
  return shares, int(speed.group(1)) if speed else None


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--batch_size", type=int, default=4)
  parser.add_argument("--seconds", type=float, default=10)
  parser.add_argument("--workload", action="store_true",
                      help="run the training loop only (what perf records)")
  args = parser.parse_args(argv)
  if args.workload:
    workload(args)
    return 0
  shares, speed = profile(args)
  print(f"LeNet L={args.replicas} b={args.batch_size}: {speed} images/s "
        "under perf")
  for name, share in shares.items():
    print(f"  {name:15s} {share:5.1f} % of samples")
  return 0


if __name__ == "__main__":
  sys.exit(main())
