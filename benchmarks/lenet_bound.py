"""What bounds LeNet at batch 4 per replica, in plain TensorFlow.

Each configuration is plain `tf.compat.v1.Session` on synthetic data,
interleaved, `--repeats` times; the median images/s is reported with its
ratio to TensorFlow's batch-4 step:

* `tf bN`: the model of lenet_throughput.py at batch N, what TensorFlow's
  kernels reach per image at larger batches on this machine.
* `tf b4, fc1 frozen`: the batch-4 step without fc1's weight gradient and
  update (fc1's weight left out of the optimizer): the most that any way of
  updating that 3136 x 512 weight faster could save.
* `vectorised L=k`: k replicas of the model, each with its own weights,
  momentum and batch of 4, trained as one graph whose convolutions are
  grouped (replica r's channels are group r) and whose dense layers are
  batched products: what running the replicas' small steps as larger
  kernels could reach, without synchronising them.

  python -m benchmarks.lenet_bound --replicas 4,8,16
"""
import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf

from benchmarks.lenet_throughput import bias
from benchmarks.lenet_throughput import build_lenet
from benchmarks.lenet_throughput import weight

BATCH = 4


def _session(graph, init, train, feed, images):
  sess = tf.compat.v1.Session(graph=graph)
  sess.run(init)
  return dict(sess=sess, train=train, feed=feed, images=images, samples=[])


def plain(batch, frozen=()):
  """LeNet at `batch`, the variables named in `frozen` not trained."""
  graph = tf.Graph()
  with graph.as_default():
    minimize = tf.compat.v1.train.MomentumOptimizer.minimize

    def without_frozen(self, loss, **kwargs):
      kwargs["var_list"] = [v for v in tf.compat.v1.trainable_variables()
                            if v.op.name not in frozen]
      return minimize(self, loss, **kwargs)

    tf.compat.v1.train.MomentumOptimizer.minimize = without_frozen
    try:
      x, y, _, train = build_lenet()
    finally:
      tf.compat.v1.train.MomentumOptimizer.minimize = minimize
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(0)
  feed = {x: rng.rand(batch, 28, 28, 1).astype(np.float32),
          y: rng.randint(0, 10, batch)}
  return _session(graph, init, train, feed, batch)


def vectorised(replicas):
  """`replicas` LeNets of their own weights, BATCH rows each, one step."""
  n = replicas
  graph = tf.Graph()
  # Fixed weights: a max-pool window whose two largest inputs round apart
  # differently in grouped and plain convolutions routes a gradient to
  # another position, so a check against plain steps holds for some
  # weights and not others.
  graph.seed = 0
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [n * BATCH, 28, 28, 1])
    y = tf.compat.v1.placeholder(tf.int64, [n * BATCH])
    # Row i of replica r is image i of channel group r.
    h = tf.transpose(tf.reshape(x, [n, BATCH, 28, 28]), [1, 2, 3, 0])
    h = tf.nn.relu(tf.nn.conv2d(h, weight("conv1/w", [5, 5, 1, n * 32]), 1,
                                "SAME") + bias("conv1/b", [n * 32]))
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.nn.relu(tf.nn.conv2d(h, weight("conv2/w", [5, 5, 32, n * 64]), 1,
                                "SAME") + bias("conv2/b", [n * 64]))
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = tf.reshape(tf.transpose(tf.reshape(h, [BATCH, 7, 7, n, 64]),
                                [3, 0, 1, 2, 4]), [n, BATCH, 7 * 7 * 64])
    h = tf.nn.relu(tf.matmul(h, weight("fc1/w", [n, 7 * 7 * 64, 512])) +
                   bias("fc1/b", [n, 1, 512]))
    logits = tf.matmul(h, weight("fc2/w", [n, 512, 10])) + bias(
        "fc2/b", [n, 1, 10])
    # The sum of the replicas' mean losses: each weight gets its own
    # replica's gradient.
    loss = tf.reduce_sum(tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(y, [n, BATCH]), logits=logits), axis=1))
    train = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(0)
  feed = {x: rng.rand(n * BATCH, 28, 28, 1).astype(np.float32),
          y: rng.randint(0, 10, n * BATCH)}
  return _session(graph, init, train, feed, n * BATCH)


def grouped_conv_gradients():
  """Whether this TensorFlow build computes a grouped convolution's
  gradients on the CPU: with oneDNN it does; Eigen's kernels (oneDNN off,
  as on CPUs without AVX-512) refuse them."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.ones([1, 4, 4, 2])
    kernel = tf.ones([3, 3, 1, 2])
    y = tf.nn.conv2d(x, kernel, [1, 1, 1, 1], "SAME")
    grads = tf.gradients(tf.reduce_sum(y), [x, kernel])
  with tf.compat.v1.Session(graph=graph) as sess:
    try:
      sess.run(grads)
    except tf.errors.InvalidArgumentError:
      return False
  return True


def measure(config, seconds):
  runs = 0
  start = time.perf_counter()
  while time.perf_counter() - start < seconds:
    config["sess"].run(config["train"], config["feed"])
    runs += 1
  config["samples"].append(
      runs * config["images"] / (time.perf_counter() - start))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batches", default="16,64")
  parser.add_argument("--replicas", default="4,8,16")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=2.0)
  parser.add_argument("--json", default="")
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  configs = {"tf b4": plain(BATCH)}
  for b in [int(v) for v in args.batches.split(",") if v]:
    configs[f"tf b{b}"] = plain(b)
  configs["tf b4, fc1 frozen"] = plain(BATCH, frozen=("fc1/w",))
  replicas = [int(v) for v in args.replicas.split(",") if v]
  if replicas and not grouped_conv_gradients():
    print("vectorised L=k left out: this TensorFlow cannot compute grouped "
          "convolutions' gradients on this CPU (oneDNN off)")
    replicas = []
  for r in replicas:
    configs[f"vectorised L={r}"] = vectorised(r)
  for config in configs.values():
    for _ in range(3):
      config["sess"].run(config["train"], config["feed"])
  for _ in range(args.repeats):
    for config in configs.values():
      measure(config, args.seconds)
  base = statistics.median(configs["tf b4"]["samples"])
  print(f"LeNet bounds (graph mode), {args.repeats} interleaved repeats of "
        f"{args.seconds:.0f} s; {platform.processor() or platform.machine()}"
        f", {os.cpu_count()} cores")
  print(f"{'config':<22}{'median img/s':>14}{'min':>10}{'max':>10}"
        f"{'vs tf b4':>10}")
  rows = []
  for name, config in configs.items():
    samples = config["samples"]
    median = statistics.median(samples)
    rows.append(dict(config=name, median=median, min=min(samples),
                     max=max(samples), ratio=median / base))
    print(f"{name:<22}{median:>14.0f}{min(samples):>10.0f}"
          f"{max(samples):>10.0f}{median / base:>10.2f}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
  main()
