"""TF's MatMul against TensorBowMatMul on a dense layer's three products.

For a layer y = x·W with W [K, N] and a batch of M rows: the forward
product x·W, the input gradient dY·Wᵀ and the weight gradient xᵀ·dY. The
defaults are LeNet's fc1 (K = 3136, N = 512). Each product is timed in one
session, TF's op and TensorBow's interleaved, as the median of `--repeats`
measurements of `--seconds` each, a Session.run per product (the cost of an
empty run is printed to subtract). See tensorbow/rewrite/substitutes.py.

  python -m benchmarks.matmul_shapes --rows 1,4,16,64,256
"""
import argparse
import statistics

import numpy as np
import tensorflow as tf

from tensorbow import ops as tb_ops
from benchmarks.suite import harness


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", default="1,4,16,64,256", help="values of M")
  parser.add_argument("--k", type=int, default=3136)
  parser.add_argument("--n", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=0.5)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  rng = np.random.RandomState(0)
  w = tf.Variable(rng.rand(args.k, args.n).astype(np.float32))
  cases = []
  for m in [int(v) for v in args.rows.split(",")]:
    x = tf.Variable(rng.rand(m, args.k).astype(np.float32))
    dy = tf.Variable(rng.rand(m, args.n).astype(np.float32))
    for name, (a, b, kwargs) in (("x.W", (x, w, {})),
                                 ("dY.W^T", (dy, w, {"transpose_b": True})),
                                 ("x^T.dY", (x, dy, {"transpose_a": True}))):
      a, b = a.value(), b.value()
      theirs = tf.matmul(a, b, **kwargs).op
      ours = tb_ops.mat_mul(a, b, **kwargs).op
      cases.append((m, name, theirs, ours))
  empty = tf.no_op()
  samples = {}
  with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for _ in range(args.repeats):
      samples.setdefault("empty", []).append(
          harness.milliseconds_per_run(sess, empty, args.seconds))
      for m, name, theirs, ours in cases:
        for label, op in (("tf", theirs), ("tensorbow", ours)):
          samples.setdefault((m, name, label), []).append(
              harness.milliseconds_per_run(sess, op, args.seconds))
  print(f"K={args.k}, N={args.n}: median ms per Session.run over "
        f"{args.repeats} interleaved repeats; an empty run took "
        f"{statistics.median(samples['empty']):.3f} ms")
  print(f"{'M':>5} {'product':<8}{'TF':>10}{'TensorBow':>11}{'speed-up':>10}")
  for m, name, _, _ in cases:
    theirs = statistics.median(samples[(m, name, "tf")])
    ours = statistics.median(samples[(m, name, "tensorbow")])
    print(f"{m:>5} {name:<8}{theirs:>10.3f}{ours:>11.3f}{theirs / ours:>10.2f}")


if __name__ == "__main__":
  main()
