"""LeNet-5-like throughput at a small batch: tf.compat.v1.Session vs TensorBow.

The model (conv 5x5x32, pool, conv 5x5x64, pool, fc 512, fc 10; momentum
SGD) is trained on synthetic 28x28 images at `--batch_size` per replica.
Each configuration gets its own graph and session; configurations are run
interleaved, `--repeats` times, and the median (with min and max) of
images/s is reported with its ratio to TensorFlow at the same batch size.

  python -m benchmarks.lenet_throughput --batch_size 4 --replicas 1,2,4

"tf N copies" is plain TensorFlow running N unsynchronised copies of the
model in one `run`: what concurrency alone gives, without SMA. "tf+k" is
plain TensorFlow on the graph with the kernel substitutions TensorBow's
replicas use (tensorbow/rewrite/substitutes.py), so that what TensorBow gains
by its kernels and by running replicas concurrently can be told apart.
Algorithm "sma-whole" is SMA with every dense gradient written out whole,
not taken as its factors into SMA's step (`fuses_outer`).
"""
import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf

import tensorbow as tb
from tensorbow.algorithms import sma
from tensorbow.rewrite import substitutes


def weight(name, shape):
  """A LeNet weight: truncated normal, stddev 0.1."""
  return tf.compat.v1.get_variable(
      name, shape, initializer=tf.compat.v1.truncated_normal_initializer(
          stddev=0.1))


def bias(name, shape):
  """A LeNet bias: 0.1."""
  return tf.compat.v1.get_variable(
      name, shape, initializer=tf.compat.v1.constant_initializer(0.1))


def build_lenet():
  """The graph: placeholders x [None, 28, 28, 1], y [None]; returns ops."""
  x = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1], name="x")
  y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
  h = tf.nn.relu(tf.nn.conv2d(x, weight("conv1/w", [5, 5, 1, 32]), strides=1,
                              padding="SAME") + bias("conv1/b", [32]))
  h = tf.nn.max_pool2d(h, 2, 2, "SAME")
  h = tf.nn.relu(tf.nn.conv2d(h, weight("conv2/w", [5, 5, 32, 64]), strides=1,
                              padding="SAME") + bias("conv2/b", [64]))
  h = tf.nn.max_pool2d(h, 2, 2, "SAME")
  h = tf.reshape(h, [-1, 7 * 7 * 64])
  h = tf.nn.relu(tf.matmul(h, weight("fc1/w", [7 * 7 * 64, 512])) +
                 bias("fc1/b", [512]))
  logits = tf.matmul(h, weight("fc2/w", [512, 10])) + bias("fc2/b", [10])
  loss = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
  train = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
  return x, y, loss, train


class WholeGradientSMA(sma.SMA):
  """SMA whose steps take every gradient whole."""

  def fuses_outer(self, has_state):
    return not has_state


class Config(object):
  """One measured configuration: its own graph, session and feeds.

  Args:
    name: its label.
    replicas: None for tf.compat.v1.Session; L for TensorBowSession.
    batch_size: rows per replica.
    algorithm: TensorBow's algorithm.
    copies: for tf.compat.v1.Session, this many independent copies of the
      model trained in one `run` (no synchronisation): the bound plain
      TensorFlow reaches by concurrency alone.
    faster_kernels: for tf.compat.v1.Session, run the graph with the
      kernel substitutions of TensorBow's replicas.
  """

  def __init__(self, name, replicas, batch_size, algorithm="sma", copies=1,
               faster_kernels=False):
    self.name = name
    self.graph = tf.Graph()
    rng = np.random.RandomState(0)
    self.feed = {}
    trains = []
    with self.graph.as_default():
      for c in range(copies):
        with tf.compat.v1.variable_scope(f"copy{c}" if copies > 1 else ""):
          x, y, _, train = build_lenet()
        trains.append(train)
        n = batch_size * (replicas or 1)
        self.feed[x] = rng.rand(n, 28, 28, 1).astype(np.float32)
        self.feed[y] = rng.randint(0, 10, n).astype(np.int64)
      self.train = tf.group(*trains, name="train_all")
      init = tf.compat.v1.global_variables_initializer()
    if faster_kernels:
      graph = tf.Graph()
      with graph.as_default():
        tf.compat.v1.import_graph_def(substitutes.faster_graph_def(self.graph),
                                      name="")
      self.feed = {graph.get_tensor_by_name(t.name): v
                   for t, v in self.feed.items()}
      self.train = graph.get_operation_by_name(self.train.name)
      init = graph.get_operation_by_name(init.name)
      self.graph = graph
    if replicas is None:
      self.session = tf.compat.v1.Session(graph=self.graph)
      self.images_per_run = batch_size * copies
    else:
      if algorithm == "sma-whole":
        algorithm = WholeGradientSMA(alpha=1.0 / replicas)
      self.session = tb.TensorBowSession(graph=self.graph, replicas=replicas,
                                         algorithm=algorithm)
      self.images_per_run = batch_size * replicas
    self.session.run(init)
    self.samples = []

  def measure(self, seconds, warmup=3):
    for _ in range(warmup):
      self.session.run(self.train, self.feed)
    runs = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
      self.session.run(self.train, self.feed)
      runs += 1
    elapsed = time.perf_counter() - start
    self.samples.append(runs * self.images_per_run / elapsed)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch_size", type=int, default=4)
  parser.add_argument("--replicas", default="1,2,4")
  parser.add_argument("--algorithm", default="sma",
                      help="comma-separated TensorBow algorithms")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=3.0)
  parser.add_argument("--copies", default="2,4",
                      help="also time tf.compat.v1.Session running this many "
                      "unsynchronised model copies in one run")
  parser.add_argument("--faster_tf", default="1,2",
                      help="also time tf.compat.v1.Session on the graph with "
                      "TensorBow's kernel substitutions, with this many "
                      "copies")
  parser.add_argument("--tf_batch", type=int, default=0,
                      help="the batch of the TensorFlow run the ratios are "
                      "taken against, and of a TensorBow L = 1 run (default "
                      "--batch_size): e.g. 32 against 2 replicas of 16")
  parser.add_argument("--json", default="")
  parser.add_argument("--tf_mode", choices=("graph", "v1"), default="graph",
                      help="graph: eager execution disabled alone (resource "
                      "variables); v1: disable_v2_behavior() (reference "
                      "variables, as most TF1 scripts run)")
  args = parser.parse_args()
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()

  configs = [Config("tf", None, args.batch_size)]
  if args.tf_batch and args.tf_batch != args.batch_size:
    configs = [Config(f"tf b{args.tf_batch}", None, args.tf_batch),
               Config(f"tensorbow L=1 b{args.tf_batch}", 1, args.tf_batch),
               Config(f"tf b{args.batch_size}", None, args.batch_size)]
  for c in [int(v) for v in args.copies.split(",") if v]:
    configs.append(Config(f"tf {c} copies", None, args.batch_size, copies=c))
  for c in [int(v) for v in args.faster_tf.split(",") if v]:
    configs.append(Config(f"tf+k {c} cop." if c > 1 else "tf+k", None,
                          args.batch_size, copies=c, faster_kernels=True))
  algorithms = args.algorithm.split(",")
  for algorithm in algorithms:
    for r in [int(v) for v in args.replicas.split(",")]:
      label = f" {algorithm}" if len(algorithms) > 1 else ""
      configs.append(Config(f"tensorbow L={r}{label}", r, args.batch_size,
                            algorithm))
  for _ in range(args.repeats):
    for c in configs:
      c.measure(args.seconds)
  tf_median = statistics.median(configs[0].samples)
  print(f"LeNet ({args.tf_mode} mode), batch {args.batch_size} per replica "
        f"(ratios against {configs[0].name}), oneDNN "
        f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')}, "
        f"{args.repeats} "
        f"interleaved repeats of {args.seconds:.0f} s, algorithm "
        f"{args.algorithm}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores")
  print(f"{'config':<22}{'median img/s':>14}{'min':>10}{'max':>10}"
        f"{'vs tf':>8}")
  rows = []
  for c in configs:
    median = statistics.median(c.samples)
    rows.append({"config": c.name, "median": median, "min": min(c.samples),
                 "max": max(c.samples), "ratio": median / tf_median})
    print(f"{c.name:<22}{median:>14.0f}{min(c.samples):>10.0f}"
          f"{max(c.samples):>10.0f}{median / tf_median:>8.2f}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"batch_size": args.batch_size, "tf_mode": args.tf_mode,
                 "tf_batch": args.tf_batch or args.batch_size,
                 "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
                 "rows": rows}, f, indent=1)


if __name__ == "__main__":
  main()
