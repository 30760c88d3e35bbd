"""Input pulled while the wave computes: TensorBowSession(prefetch=True/False).

A `tf.data` pipeline whose `map` does real TensorFlow work on each image
(`--work` rounds of a 28 x 28 mix and a tanh, made in the graph from the
element's index) feeds a small MLP (784-256-10, momentum SGD) trained by
TensorBowSession; with `drop_remainder` each replica takes a batch of its
own. With prefetch the next wave's batches are pulled while the wave
computes; without, each wave pulls its own first. The pipeline comes in
two forms: "plain", with tf.data's default optimisations off, so that a
batch is made only when pulled (as from a queue without runners, or a
reader in the graph), and "tf.data", with them on (a parallel map and a
prefetch of tf.data's own, which already make batches ahead). Every
setting has its own graph and session; they run interleaved, `--repeats`
times; the table gives the median (min, max) milliseconds a wave, the
process's CPU milliseconds a wave, and waves per second. Before them, the
pipeline alone (plain runs of `get_next()`) and the wave alone (the model
fed a fixed batch) are timed, to show the two costs are alike.

  python -m benchmarks.prefetch --replicas 2 --batch_size 16 --work 20
"""
import argparse
import os
import platform
import statistics
import time

import numpy as np
import tensorflow as tf

import tensorbow as tb

SIZE = 28 * 28


def make_pipeline(batch_size, work, tf_data_defaults=False):
  """An endless dataset of (images [batch, 784], labels [batch]) batches.

  Each image is made by its own `map` call, as a decoder or augmentation
  would be: `work` rounds of a 28 x 28 mix and a tanh, small ops that run
  one after another on one core."""
  mix = tf.constant((np.random.RandomState(0).randn(28, 28) /
                     np.sqrt(28)).astype(np.float32))

  def make(index):
    seed = tf.stack([index, tf.constant(7, tf.int64)])
    image = tf.random.stateless_uniform([28, 28], seed)
    for _ in range(work):
      image = tf.tanh(tf.matmul(image, mix) + image)
    label = tf.random.stateless_uniform([], seed, maxval=10, dtype=tf.int64)
    return tf.reshape(image, [SIZE]), label

  data = tf.data.Dataset.range(1 << 62).map(make).batch(
      batch_size, drop_remainder=True)
  if not tf_data_defaults:
    # Else tf.data makes the map parallel (map_parallelization) and adds a
    # prefetch behind the batch (inject_prefetch), both autotuned: it
    # would make batches ahead by itself, on threads of its own.
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    data = data.with_options(options)
  return data


def model(images, labels):
  """The MLP's training op."""
  def dense(x, units, name):
    w = tf.compat.v1.get_variable(
        f"{name}/w", [x.shape.as_list()[1], units],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.05))
    b = tf.compat.v1.get_variable(f"{name}/b", [units],
                                  initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(x, w) + b

  hidden = tf.nn.relu(dense(images, 256, "hidden"))
  logits = dense(hidden, 10, "logits")
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=labels, logits=logits))
  return tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)


class Config(object):
  """One setting: its graph, session and training op.

  Args:
    name: its label.
    replicas: L.
    batch_size: rows of a batch (each replica's).
    work: rounds of arithmetic an image costs the pipeline.
    pipeline: "plain" (a map that runs only when a batch is pulled),
      "tf.data" (tf.data's default optimisations: a parallel map and a
      prefetch of its own) or None: the model fed a fixed batch (every
      replica takes it whole), to time the wave alone.
    prefetch: TensorBowSession's prefetch.
  """

  def __init__(self, name, replicas, batch_size, work, pipeline,
               prefetch=True):
    self.name = name
    self.pipeline = pipeline
    self.graph = tf.Graph()
    self.feed = {}
    with self.graph.as_default():
      if pipeline is None:
        images = tf.compat.v1.placeholder(tf.float32, [batch_size, SIZE])
        labels = tf.compat.v1.placeholder(tf.int64, [batch_size])
        rng = np.random.RandomState(1)
        self.feed = {images: rng.rand(batch_size, SIZE).astype(np.float32),
                     labels: rng.randint(0, 10, batch_size)}
      else:
        data = make_pipeline(batch_size, work, pipeline == "tf.data")
        images, labels = tf.compat.v1.data.make_one_shot_iterator(
            data).get_next()
        self.next_batch = images.op
      self.train = model(images, labels)
      init = tf.compat.v1.global_variables_initializer()
    self.session = tb.TensorBowSession(graph=self.graph, replicas=replicas,
                                       prefetch=prefetch)
    self.session.run(init)
    self.samples = []  # ms a wave
    self.cpu = []  # the process's CPU ms a wave

  def measure(self, waves, warmup=3):
    for _ in range(warmup):
      self.session.run(self.train, self.feed)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(waves):
      self.session.run(self.train, self.feed)
    self.cpu.append(1000.0 * (time.process_time() - cpu) / waves)
    self.samples.append(1000.0 * (time.perf_counter() - start) / waves)

  def pull_ms(self, pulls, warmup=3):
    """Milliseconds a batch costs the pipeline alone (a plain run)."""
    for _ in range(warmup):
      self.session.run(self.next_batch)
    start = time.perf_counter()
    for _ in range(pulls):
      self.session.run(self.next_batch)
    return 1000.0 * (time.perf_counter() - start) / pulls


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--work", type=int, default=20,
                      help="rounds of a 28 x 28 mix an image costs")
  parser.add_argument("--waves", type=int, default=100)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--tf_mode", choices=("graph", "v1"), default="graph",
                      help="graph: eager execution disabled alone; v1: "
                      "disable_v2_behavior()")
  args = parser.parse_args()
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()

  def config(name, pipeline, prefetch=True):
    return Config(name, args.replicas, args.batch_size, args.work, pipeline,
                  prefetch)

  alone = config("wave alone (fed)", None)
  pairs = [(config(f"{p} prefetch=True", p, True),
            config(f"{p} prefetch=False", p, False))
           for p in ("plain", "tf.data")]
  pulls = {on.pipeline: off.pull_ms(args.waves) for on, off in pairs}
  for _ in range(args.repeats):
    alone.measure(args.waves)
    for pair in pairs:
      for c in pair:
        c.measure(args.waves)
  print(f"prefetch benchmark ({args.tf_mode} mode): L={args.replicas}, "
        f"batch {args.batch_size} per replica, work {args.work}, "
        f"{args.repeats} interleaved repeats of {args.waves} waves; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores, TF_ENABLE_ONEDNN_OPTS="
        f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', '(unset)')}")
  per_wave = args.replicas  # each replica takes a batch of its own
  print("pipeline alone, a wave's batches: " + ", ".join(
      f"{p} {ms * per_wave:.2f} ms" for p, ms in pulls.items()) +
        f"; the wave alone: {statistics.median(alone.samples):.2f} ms")
  print(f"{'config':<24}{'median ms/wave':>16}{'min':>8}{'max':>8}"
        f"{'cpu ms':>8}{'waves/s':>9}{'vs off':>8}")
  for pair in pairs:
    base = statistics.median(pair[1].samples)
    for c in pair:
      median = statistics.median(c.samples)
      print(f"{c.name:<24}{median:>16.2f}{min(c.samples):>8.2f}"
            f"{max(c.samples):>8.2f}{statistics.median(c.cpu):>8.2f}"
            f"{1000.0 / median:>9.1f}{base / median:>8.2f}")
  for c in [alone] + [c for pair in pairs for c in pair]:
    c.session.close()


if __name__ == "__main__":
  main()
