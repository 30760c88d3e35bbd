"""TF's convolution gradients against the forms TensorBow's replicas use.

For stride 1 and 'SAME' padding with an odd kernel, the input gradient is a
forward convolution of the output gradient with the filter flipped and its
channels swapped, and the filter gradient a convolution of the padded input
(batch and channels swapped) with the output gradient as the filter
(tensorbow/rewrite/substitutes.py builds both). Each is timed against TF's own
Conv2DBackpropInput / Conv2DBackpropFilter in one session, interleaved, as
the median of `--repeats` measurements of `--seconds` each, one
Session.run per op; the forward convolution is timed for scale.

  python -m benchmarks.conv_shapes --batch_sizes 4,16,64
"""
import argparse
import statistics

import numpy as np
import tensorflow as tf

from benchmarks.suite import harness
from tensorbow.rewrite import substitutes

# name: (height = width, input channels, filters, kernel size)
SHAPES = {
    "lenet_conv1": (28, 1, 32, 5),
    "lenet_conv2": (14, 32, 64, 5),
    "resnet_16": (32, 16, 16, 3),
    "resnet_32": (16, 32, 32, 3),
    "resnet_64": (8, 64, 64, 3),
}


def _build(batch, size, channels, filters, k, rng):
  """The forward convolution and TF's two gradients: {label: op name}."""
  x = tf.Variable(rng.randn(batch, size, size, channels).astype(np.float32))
  w = tf.Variable(rng.randn(k, k, channels, filters).astype(np.float32))
  dy = tf.Variable(rng.randn(batch, size, size, filters).astype(np.float32))
  x, w, dy = x.value(), w.value(), dy.value()
  forward = tf.nn.conv2d(x, w, 1, "SAME")
  dx = tf.compat.v1.nn.conv2d_backprop_input(tf.shape(x), w, dy, [1] * 4,
                                             "SAME")
  dw = tf.compat.v1.nn.conv2d_backprop_filter(x, tf.shape(w), dy, [1] * 4,
                                              "SAME")
  return {"forward": forward.op, "dX": dx.op, "dW": dw.op}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch_sizes", default="4,16,64")
  parser.add_argument("--shapes", default=",".join(SHAPES))
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=0.3)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  rng = np.random.RandomState(0)
  graph = tf.Graph()
  cases = []
  with graph.as_default():
    for name in args.shapes.split(","):
      for batch in [int(b) for b in args.batch_sizes.split(",")]:
        cases.append(((name, batch), _build(batch, *SHAPES[name], rng)))
    init = tf.compat.v1.global_variables_initializer()
  # The same graph with the replicas' forms under the same names.
  faster = tf.Graph()
  with faster.as_default():
    tf.compat.v1.import_graph_def(substitutes.faster_graph_def(graph), name="")
  runs = []  # (key, label, session, op)
  sessions = [tf.compat.v1.Session(graph=g) for g in (graph, faster)]
  for sess in sessions:
    sess.run(sess.graph.get_operation_by_name(init.name))
  for key, ops in cases:
    runs.append((key, "forward", sessions[0], ops["forward"]))
    for label in ("dX", "dW"):
      runs.append((key, label + " tf", sessions[0], ops[label]))
      if substitutes.applies(ops[label]):
        runs.append((key, label + " TB", sessions[1],
                     faster.get_operation_by_name(ops[label].name)))
  samples = {}
  for _ in range(args.repeats):
    for key, label, sess, op in runs:
      samples.setdefault((key, label), []).append(
          harness.milliseconds_per_run(sess, op, args.seconds))
  print(f"median ms per Session.run over {args.repeats} interleaved repeats "
        "('-': not substituted)")
  labels = ("forward", "dX tf", "dX TB", "dW tf", "dW TB")
  print(f"{'shape':<13}{'batch':>6}" + "".join(f"{l:>9}" for l in labels))
  for key, _ in cases:
    cells = []
    for label in labels:
      s = samples.get((key, label))
      cells.append(f"{statistics.median(s):>9.2f}" if s else f"{'-':>9}")
    print(f"{key[0]:<13}{key[1]:>6}" + "".join(cells))


if __name__ == "__main__":
  main()
