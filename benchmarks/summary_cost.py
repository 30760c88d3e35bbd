"""What fetching summaries every step costs a TensorBow training run.

    .venv/bin/python -m benchmarks.summary_cost \
        [--session tensorbow|tf] [--replicas 4] [--batch 4] [--repeats 5]
        [--steps 50]

LeNet (models/lenet.py) on synthetic 28x28 images, batch `--batch` per
replica. Each repeat times, interleaved, `--steps` training runs fetching
[loss, train_op] and as many fetching a merged summary too (the loss as a
scalar, every weight and bias as a histogram, as a SummarySaverHook
would). Prints per configuration the median steps/s over the repeats and
the median of the per-repeat ratios.
"""
import argparse
import statistics
import time

import numpy as np
import tensorflow as tf

import tensorbow as tb
from models import lenet


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--session", choices=["tensorbow", "tf"],
                      default="tensorbow")
  parser.add_argument("--replicas", type=int, default=4)
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--steps", type=int, default=50)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  graph = tf.Graph()
  with graph.as_default():
    model = lenet.build((28, 28, 1), 10, 0.01)
    summaries = [tf.compat.v1.summary.scalar("loss", model.loss)] + [
        tf.compat.v1.summary.histogram(v.op.name, v)
        for v in tf.compat.v1.trainable_variables()]
    merged = tf.compat.v1.summary.merge(summaries)
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(0)
  rows = args.batch * args.replicas
  feed = {model.x: rng.rand(rows, 28, 28, 1).astype(np.float32),
          model.y: rng.randint(0, 10, rows).astype(np.int64)}
  fetches = {"plain": [model.loss, model.train_op],
             "summaries": [model.loss, model.train_op, merged]}
  rates = {k: [] for k in fetches}
  if args.session == "tf":  # the whole batch, one model
    session = tf.compat.v1.Session(graph=graph)
  else:
    session = tb.TensorBowSession(graph=graph, replicas=args.replicas)
  with session as sess:
    sess.run(init)
    for f in fetches.values():
      for _ in range(5):
        sess.run(f, feed)
    for _ in range(args.repeats):
      for name, f in fetches.items():
        start = time.perf_counter()
        for _ in range(args.steps):
          sess.run(f, feed)
        rates[name].append(args.steps / (time.perf_counter() - start))
  ratios = [s / p for s, p in zip(rates["summaries"], rates["plain"])]
  for name, r in rates.items():
    print(f"{name}: median {statistics.median(r):.1f} steps/s "
          f"({min(r):.1f}-{max(r):.1f})")
  print(f"summaries / plain: median {statistics.median(ratios):.3f} "
        f"({min(ratios):.3f}-{max(ratios):.3f}) over {args.repeats} "
        f"interleaved repeats, {args.session}, {rows} rows per run")


if __name__ == "__main__":
  main()
