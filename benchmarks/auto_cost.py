"""What replicas="auto" adds to a training run that stays at L = 1.

    PYTHONPATH=. .venv/bin/python -m benchmarks.auto_cost [--runs 500] \
        [--repeats 5] [--tf_mode v1]

Three sessions train the same small perceptron (batch 32 fed, a short
run, so that what is added per run shows): `tf.compat.v1.Session`,
`TensorBowSession(replicas=1)` and `TensorBowSession(replicas="auto")`.
Each repeat times `--runs` training runs of each, the three in turn, on
sessions kept from one repeat to the next, as one script's session goes
on (the tuner's records grow with the runs until it leaves its first
setting, which its patience keeps it from doing in so few runs: the auto
session's decisions are printed, and a run with one measures the search,
not what auto adds). Prints the median microseconds a run of each and the
ratios auto / L = 1 and L = 1 / TensorFlow, with each repeat's.

It also times the tuner's own bookkeeping (`AutoTuner.observe`) per run
after `--runs` runs of 5 ms that followed a first run of 1 s, outside any
session.
"""
import argparse
import random
import statistics
import time

import numpy as np
import tensorflow as tf

ROWS = 32


def _model(seed):
  """(graph, x, y, train, init) of a two-layer perceptron."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(seed)
    x = tf.compat.v1.placeholder(tf.float32, [None, 64])
    y = tf.compat.v1.placeholder(tf.int64, [None])
    w1 = tf.compat.v1.get_variable("w1", [64, 32])
    w2 = tf.compat.v1.get_variable("w2", [32, 10])
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=logits))
    train = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, train, init


def _sessions():
  """{name: (session, x, y, train)}, initialised."""
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  makers = {
      "tf": lambda g: tf.compat.v1.Session(graph=g),
      "L=1": lambda g: tb.TensorBowSession(graph=g, replicas=1),
      "auto": lambda g: tb.TensorBowSession(graph=g, replicas="auto"),
  }
  sessions = {}
  for name, make in makers.items():
    graph, x, y, train, init = _model(0)
    sess = make(graph)
    sess.run(init)
    sessions[name] = (sess, x, y, train)
  return sessions


def _per_run(session, x, y, train, runs, batch):
  start = time.perf_counter()
  for _ in range(runs):
    session.run(train, {x: batch[0], y: batch[1]})
  return (time.perf_counter() - start) / runs


def _tuner_alone(runs):
  """Seconds of AutoTuner.observe per run over `runs` runs of 5 ms after
  a first of 1 s (the search stays at L = 1 meanwhile)."""
  from tensorbow import autotune  # pylint: disable=g-import-not-at-top
  tuner = autotune.AutoTuner(memory=lambda: (None, None))
  rng = random.Random(0)
  seconds = [1.0] + [0.005 + rng.random() * 1e-3 for _ in range(runs - 1)]
  start = time.perf_counter()
  for s in seconds:
    tuner.observe(1, 1, ROWS, s)
  return (time.perf_counter() - start) / runs


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", type=int, default=500)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--tf_mode", choices=["v1", "graph"], default="v1")
  args = parser.parse_args()
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  rng = np.random.RandomState(0)
  batch = (rng.randn(ROWS, 64).astype(np.float32),
           rng.randint(0, 10, ROWS).astype(np.int64))
  sessions = _sessions()
  for sess, x, y, train in sessions.values():  # past the first runs
    _per_run(sess, x, y, train, 50, batch)
  times = {name: [] for name in sessions}
  for _ in range(args.repeats):
    for name, (sess, x, y, train) in sessions.items():
      times[name].append(_per_run(sess, x, y, train, args.runs, batch))
  decisions = sessions["auto"][0].tuning_decisions()
  for sess, _, _, _ in sessions.values():
    sess.close()
  print(f"{args.repeats} repeats of {args.runs} runs, {args.tf_mode} mode; "
        f"auto's decisions: {[(d.run, d.reason) for d in decisions]}")
  for name, seconds in times.items():
    print(f"{name:5s} median {statistics.median(seconds) * 1e6:8.1f} us a "
          f"run (repeats: "
          f"{', '.join(f'{s * 1e6:.1f}' for s in seconds)})")
  for a, b in (("auto", "L=1"), ("L=1", "tf")):
    ratios = [p / q for p, q in zip(times[a], times[b])]
    print(f"{a} / {b}: median {statistics.median(ratios):.3f} "
          f"(repeats: {', '.join(f'{r:.3f}' for r in ratios)})")
  print(f"AutoTuner.observe alone: {_tuner_alone(args.runs) * 1e6:.1f} us "
        f"a run over {args.runs} runs")


if __name__ == "__main__":
  main()
