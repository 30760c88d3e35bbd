"""Memory bandwidth of the optimizer apply ops against a plain add.

An apply op over a large variable does a few flops per float it moves, so
its time is the bytes it reads and writes over the machine's memory
bandwidth. This times, on float32 buffers of `--floats` elements:

* `AssignAddVariableOp` (var += grad: 2 reads, 1 write, in place): the
  bandwidth TensorFlow's element-wise kernels reach here, the reference;
* TF's `ResourceApplyMomentum` (reads var, accum, grad; writes var, accum);
* TensorBow's `TensorBowResourceApplySmaMomentumWithCentral` as the first
  and last replica of a wave (reads var, accum, grad, z, z_prev; writes var,
  accum, next; then swaps buffers): the SMA step of DESIGN.md, "Synchronous
  model averaging".

and prints each one's ms and GB/s (bytes it must move / time). The default
size, 4x LeNet's fc1, puts every working set well beyond the L3 cache, as
in training, where the other layers evict it between steps.

  python -m benchmarks.apply_bandwidth --floats 6422528 --repeats 5
"""
import argparse
import statistics

import numpy as np
import tensorflow as tf

from tensorbow import ops as tb_ops
from benchmarks.suite import harness

tf1 = tf.compat.v1
FC1 = 3136 * 512


def _graph(n):
  """{label: (op, floats moved per element)} and the initializer."""
  rng = np.random.RandomState(0)
  var = lambda name, scale: tf1.get_variable(
      name, initializer=(rng.standard_normal(n) * scale).astype(np.float32),
      use_resource=True)
  w, accum, grad = var("w", 1.0), var("accum", 0.0), var("grad", 1e-3)
  z, z_prev, next_ = var("z", 1.0), var("z_prev", 1.0), var("next", 0.0)
  c = lambda v: tf.constant(v, tf.float32)
  ops = {
      "AssignAdd (reference)": (tf.raw_ops.AssignAddVariableOp(
          resource=w.handle, value=grad.read_value()), 3),
      "TF ApplyMomentum": (tf.raw_ops.ResourceApplyMomentum(
          var=w.handle, accum=accum.handle, lr=c(1e-6), grad=grad.read_value(),
          momentum=c(0.9)), 5),
      "TensorBow SMA momentum": (
          tb_ops.resource_apply_sma_momentum_with_central(
              w.handle, accum.handle, z.handle, z_prev.handle, next_.handle,
              c(0.1), c(1e-6), grad.read_value(), c(0.9), c(0.0), replica=0,
              num_replicas=1, barrier="bandwidth"), 8),
  }
  # (Central momentum 0 keeps z from drifting over thousands of waves; the
  # kernel reads z_prev all the same.)
  return ops, tf1.global_variables_initializer()


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--floats", type=int, default=4 * FC1)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=0.5)
  args = parser.parse_args()
  tf1.disable_eager_execution()
  graph = tf.Graph()
  with graph.as_default():
    ops, init = _graph(args.floats)
  samples = {label: [] for label in ops}
  with tf1.Session(graph=graph) as sess:
    sess.run(init)
    for _ in range(args.repeats):
      for label, (op, _) in ops.items():
        samples[label].append(
            harness.milliseconds_per_run(sess, op, args.seconds))
  megabytes = args.floats * 4 / 1e6
  print(f"{args.floats} floats ({megabytes:.1f} MB a buffer), median of "
        f"{args.repeats} interleaved repeats")
  print(f"{'op':26s} {'ms':>7s} {'buffers':>8s} {'GB/s':>6s}")
  for label, (_, streams) in ops.items():
    ms = statistics.median(samples[label])
    print(f"{label:26s} {ms:7.3f} {streams:8d} "
          f"{streams * megabytes / ms:6.1f}")


if __name__ == "__main__":
  main()
