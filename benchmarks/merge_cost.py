"""What merging a training run's fetches costs: LeNet at 2 x 16 fetching
its loss, its accuracy and its count of correct predictions with the
train op, as training loops that log do (issue #60).

Prints one JSON line: images/s over `--seconds` of training runs after a
warm-up, with the TensorBow it ran (`tensorbow.__file__`), so that two
checkouts can be run in turn and compared:

  PYTHONPATH=. python benchmarks/merge_cost.py --seconds 3
  PYTHONPATH=/path/to/other/checkout python benchmarks/merge_cost.py

The model is `lenet_throughput.build_lenet` on synthetic images.
"""
import argparse
import json
import time

import numpy as np
import tensorflow as tf

import tensorbow as tb
from benchmarks import lenet_throughput


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--rows", type=int, default=16,
                      help="rows a replica")
  parser.add_argument("--seconds", type=float, default=3.0)
  parser.add_argument("--warmup", type=int, default=20)
  parser.add_argument("--tf_mode", choices=["v1", "graph"], default="v1")
  args = parser.parse_args(argv)
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    x, y, loss, train = lenet_throughput.build_lenet()
    # The mean's input is the cross entropy, whose first input the logits.
    logits = loss.op.inputs[0].op.inputs[0]
    correct = tf.equal(tf.argmax(logits, 1), y)
    fetches = [loss, tf.reduce_mean(tf.cast(correct, tf.float32)),
               tf.reduce_sum(tf.cast(correct, tf.int32)), train]
    init = tf.compat.v1.global_variables_initializer()
  batch = args.replicas * args.rows
  rng = np.random.RandomState(0)
  feed = {x: rng.rand(batch, 28, 28, 1).astype(np.float32),
          y: rng.randint(0, 10, batch)}
  with tb.TensorBowSession(graph=graph, replicas=args.replicas) as sess:
    sess.run(init)
    for _ in range(args.warmup):
      sess.run(fetches, feed)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
      sess.run(fetches, feed)
      runs += 1
    seconds = time.perf_counter() - start
  print(json.dumps({"tensorbow": tb.__file__, "replicas": args.replicas,
                    "rows": args.rows, "tf_mode": args.tf_mode,
                    "images_per_second": runs * batch / seconds}))


if __name__ == "__main__":
  main()
