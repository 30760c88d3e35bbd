"""TF's MatMul A·Bᵀ against (B·Aᵀ)ᵀ, the equivalent TensorBow's replicas use.

A is [M, K] (a small batch of gradients), B is [N, K] (a tall weight); the
defaults are LeNet's fc1 input gradient (K = 512, N = 3136). Both forms
are timed in one session, interleaved, as the median of `--repeats`
measurements of `--seconds` each (tensorbow/rewrite/kernels.py).

  python benchmarks/matmul_shapes.py --rows 1,4,16,64,256
"""
import argparse
import statistics
import time

import numpy as np
import tensorflow as tf


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", default="1,4,16,64,256", help="values of M")
  parser.add_argument("--k", type=int, default=512)
  parser.add_argument("--n", type=int, default=3136)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=0.5)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  rng = np.random.RandomState(0)
  b = tf.Variable(rng.rand(args.n, args.k).astype(np.float32))
  cases = []
  for m in [int(v) for v in args.rows.split(",")]:
    a = tf.constant(rng.rand(m, args.k).astype(np.float32))
    direct = tf.reduce_sum(tf.matmul(a, b, transpose_b=True))
    swapped = tf.reduce_sum(tf.transpose(tf.matmul(b, a, transpose_b=True)))
    cases.append((m, direct, swapped))
  samples = {}
  with tf.compat.v1.Session() as sess:
    sess.run(b.initializer)
    for _ in range(args.repeats):
      for m, direct, swapped in cases:
        for label, op in (("A.B^T", direct), ("(B.A^T)^T", swapped)):
          for _ in range(3):
            sess.run(op)
          runs, start = 0, time.perf_counter()
          while time.perf_counter() - start < args.seconds:
            sess.run(op)
            runs += 1
          samples.setdefault((m, label), []).append(
              (time.perf_counter() - start) / runs * 1e3)
  print(f"K={args.k}, N={args.n}: median ms per product over "
        f"{args.repeats} interleaved repeats")
  print(f"{'M':>5}{'A.B^T':>12}{'(B.A^T)^T':>12}{'speed-up':>10}")
  for m, _, _ in cases:
    direct = statistics.median(samples[(m, "A.B^T")])
    swapped = statistics.median(samples[(m, "(B.A^T)^T")])
    print(f"{m:>5}{direct:>12.3f}{swapped:>12.3f}{direct / swapped:>10.2f}")


if __name__ == "__main__":
  main()
