"""The execution graph and the first training run against L.

For each L, in a process of its own: a reference model is built, a
TensorBowSession initialises it and runs one training run (batch
`--batch_size` per replica, synthetic images), then a second. Reported:
the ops of the user's graph and of `sess.execution_graph` after the first
run, the first run's time (copying the learning part, TensorFlow's graph
preparation, one wave) and the second's, and the process's resident memory
after the second run, less what it was before the session was made.

  python -m benchmarks.graph_size --model resnet32 --batch_size 16 \\
      --replicas 2,32 --repeats 2
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import time

import numpy as np


def _rss_mb():
  with open("/proc/self/statm") as f:
    pages = int(f.read().split()[1])
  return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(model_name, batch_size, replicas):
  """One configuration, in this process; returns a dict."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  from benchmarks.suite import harness  # pylint: disable=g-import-not-at-top

  tf.compat.v1.disable_eager_execution()
  shape = harness.IMAGE_SHAPES[model_name]
  module = importlib.import_module(f"models.{model_name}")
  graph = tf.Graph()
  with graph.as_default():
    model = module.build(shape, harness.NUM_CLASSES, 0.01)
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(0)
  rows = batch_size * replicas
  feed = {model.x: rng.rand(rows, *shape).astype(np.float32),
          model.y: rng.randint(0, harness.NUM_CLASSES, rows).astype(np.int64),
          model.training: True}
  user_ops = len(graph.get_operations())
  rss_before = _rss_mb()
  with tb.TensorBowSession(graph=graph, replicas=replicas) as sess:
    sess.run(init)
    start = time.perf_counter()
    sess.run(model.train_op, feed)
    first = time.perf_counter() - start
    execution_ops = len(sess.execution_graph.get_operations())
    start = time.perf_counter()
    sess.run(model.train_op, feed)
    second = time.perf_counter() - start
    rss = _rss_mb() - rss_before
  return dict(model=model_name, batch_size=batch_size, replicas=replicas,
              user_ops=user_ops, execution_ops=execution_ops,
              first_run_s=first, second_run_s=second, rss_mb=rss)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="resnet32")
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--replicas", default="2,32")
  parser.add_argument("--repeats", type=int, default=1)
  parser.add_argument("--out", help="JSON file for the results")
  parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  counts = [int(n) for n in args.replicas.split(",")]
  if args.one:
    print(json.dumps(measure(args.model, args.batch_size, counts[0])))
    return 0
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  rows = []
  for _ in range(args.repeats):
    for n in counts:
      out = subprocess.run(
          [sys.executable, "-m", "benchmarks.graph_size", "--one",
           "--model", args.model, "--batch_size", str(args.batch_size),
           "--replicas", str(n)],
          capture_output=True, text=True, env=env, check=True).stdout
      row = json.loads(out.strip().splitlines()[-1])
      rows.append(row)
      print(f"L={n:3d}: user ops {row['user_ops']}, execution ops "
            f"{row['execution_ops']}, first run {row['first_run_s']:.2f} s, "
            f"second {row['second_run_s']:.2f} s, +{row['rss_mb']:.0f} MB",
            flush=True)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(rows, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
