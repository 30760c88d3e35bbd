"""What every benchmark suite shares: models, measured configurations, stats.

A `Throughput` is one configuration (a model, a session kind, replicas, an
algorithm, a batch size per replica) with its own graph and session, fed
synthetic images of the model's shape. Suites build a group of them and
call `interleave`, which measures each in turn, repeat after repeat, so
that a noisy machine slows every configuration alike; the median and the
spread of the repeats are reported, with ratios taken within the group.
Every other repeat runs the group in reverse, so that two neighbours are
measured once in each order and a ratio of their samples taken in the same
repeat (`paired_ratio`) is not biased by drift within a repeat.
"""
import importlib
import math
import os
import platform
import statistics
import subprocess
import time

import numpy as np
import tensorflow as tf

from models import training
from tensorbow.session import TensorBowSession

# Image shapes the reference models are measured at (synthetic data).
IMAGE_SHAPES = {
    "logistic_regression": (28, 28, 1),
    "lenet": (28, 28, 1),
    "mlp": (28, 28, 1),
    "resnet32": (32, 32, 3),
}
NUM_CLASSES = 10


def load_model(name):
  """The reference model `models.<name>`.

  Raises:
    ValueError: for a model that is not one of IMAGE_SHAPES.
  """
  if name not in IMAGE_SHAPES:
    raise ValueError(f"unknown model {name!r}; choose from "
                     f"{sorted(IMAGE_SHAPES)}")
  return importlib.import_module(f"models.{name}")


def machine():
  """What the numbers were measured on."""
  model = platform.processor() or platform.machine()
  try:
    out = subprocess.run(["lscpu"], capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():
      if line.startswith("Model name:"):
        model = line.split(":", 1)[1].strip()
  except OSError:
    pass
  return {"cpu": model, "cores": os.cpu_count(),
          "tensorflow": tf.__version__,
          "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")}


def summary(samples):
  """Median, min, max and count of a list of samples."""
  return {"median": statistics.median(samples), "min": min(samples),
          "max": max(samples), "repeats": len(samples)}


def op_times(run_metadata):
  """(node name, op type, microseconds) of each op a traced run records.

  The time is from the op's start to its end on its thread.
  """
  for device in run_metadata.step_stats.dev_stats:
    for node in device.node_stats:
      label = node.timeline_label
      op_type = (label.split("=")[1].split("(")[0].strip() if "=" in label
                 else "")
      yield (node.node_name, op_type,
             node.op_end_rel_micros - node.op_start_rel_micros)


def median_interval(samples, confidence=0.95):
  """A distribution-free confidence interval of the samples' median.

  The interval between the k-th smallest and the k-th largest sample
  holds the median with probability 1 - 2 P(Binomial(n, 1/2) < k); k is
  the largest for which that is at least `confidence`. Returns (low,
  high), or None when even the full range is not enough (n < 6 at 95 %).
  """
  n = len(samples)
  tail, k = 0.0, 0  # tail = P(Binomial(n, 1/2) < k + 1) after the loop.
  while True:
    tail += math.comb(n, k) / 2 ** n
    if 1 - 2 * tail < confidence:
      break
    k += 1
  if k == 0:
    return None
  ordered = sorted(samples)
  return ordered[k - 1], ordered[n - k]


def paired_ratio(numerator, denominator, confidence=0.95):
  """Median of the repeat-by-repeat ratios of two configurations' samples.

  Returns {"median", "interval", "repeats"}; "interval" is
  median_interval's, or None with too few repeats.
  """
  if len(numerator.samples) != len(denominator.samples):
    raise ValueError(f"{numerator.name} has {len(numerator.samples)} "
                     f"samples, {denominator.name} "
                     f"{len(denominator.samples)}")
  ratios = [a / b for a, b in zip(numerator.samples, denominator.samples)]
  return {"median": statistics.median(ratios),
          "interval": median_interval(ratios, confidence),
          "repeats": len(ratios)}


class Throughput(object):
  """One configuration whose training images per second are measured.

  Args:
    model: a name from IMAGE_SHAPES.
    session: "tf" or "tensorbow".
    batch_size: rows per replica (per step for "tf"; per run for
      replicas="auto").
    replicas: TensorBow's L, or "auto" (ignored for "tf").
    algorithm: TensorBow's algorithm.
    learning_rate: the model's learning rate (small: synthetic data).
  """

  def __init__(self, model, session, batch_size, replicas=1,
               algorithm="sma", learning_rate=0.001):
    self.model = model
    self.session_kind = session
    self.batch_size = batch_size
    self.replicas = replicas if session == "tensorbow" else 1
    self.algorithm = algorithm if session == "tensorbow" else None
    self.samples = []
    self.graph = tf.Graph()
    with self.graph.as_default():
      tf.compat.v1.set_random_seed(0)
      self.net = load_model(model).build(IMAGE_SHAPES[model], NUM_CLASSES,
                                         learning_rate)
      init = tf.compat.v1.global_variables_initializer()
    if session == "tf":
      self.session = tf.compat.v1.Session(graph=self.graph)
    else:
      self.session = TensorBowSession(graph=self.graph,
                                      replicas=self.replicas,
                                      algorithm=algorithm)
    self.rows = batch_size * (1 if replicas == "auto" else self.replicas)
    rng = np.random.RandomState(0)
    self.feed = {
        self.net.x: rng.rand(self.rows, *IMAGE_SHAPES[model]).astype(
            np.float32),
        self.net.y: rng.randint(0, NUM_CLASSES, self.rows).astype(np.int64),
        self.net.training: True,
    }
    self.session.run(init)
    self.step()  # TensorBow rewrites the graph at its first training run.

  @property
  def name(self):
    if self.session_kind == "tf":
      return f"{self.model} tf b{self.batch_size}"
    return (f"{self.model} tensorbow L={self.replicas} {self.algorithm} "
            f"b{self.batch_size}")

  def step(self):
    self.session.run(self.net.train_op, self.feed)

  def settle(self, max_seconds=600):
    """Trains until replicas="auto" has settled; returns the steps taken."""
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < max_seconds:
      self.step()
      steps += 1
      decisions = self.session.tuning_decisions()
      if decisions and "settled" in decisions[-1].reason:
        return steps
    raise RuntimeError(f"{self.name}: the auto-tuner did not settle in "
                       f"{max_seconds} s ({steps} runs)")

  def measure(self, seconds, min_steps=3, warmup=2):
    """Appends one sample: images/s over at least `seconds` and `min_steps`."""
    for _ in range(warmup):
      self.step()
    steps = 0
    start = time.perf_counter()
    while steps < min_steps or time.perf_counter() - start < seconds:
      self.step()
      steps += 1
    self.samples.append(steps * self.rows / (time.perf_counter() - start))

  def close(self):
    self.session.close()

  def record(self):
    """This configuration and its measured images/s, for the JSON output."""
    chosen = {}
    if self.replicas == "auto":
      # What the tuner settled at (settle() ran first).
      replicas, groups, inline = self.session.tuning_decisions()[-1].next
      chosen = dict(chosen_replicas=replicas, chosen_stream_groups=groups,
                    chosen_inline=inline)
    return dict(model=self.model, session=self.session_kind,
                replicas=self.replicas, algorithm=self.algorithm, **chosen,
                batch_size=self.batch_size, samples=list(self.samples),
                **summary(self.samples))


def milliseconds_per_run(sess, fetches, seconds):
  """Mean ms of `sess.run(fetches)` over `seconds`, after 3 warm-up runs."""
  for _ in range(3):
    sess.run(fetches)
  runs, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    sess.run(fetches)
    runs += 1
  return (time.perf_counter() - start) / runs * 1e3


def interleave(configs, repeats, seconds, log=None):
  """Measures `configs` in turn, `repeats` times; returns their records.

  Odd repeats (counting from 0) go through `configs` in reverse order.
  """
  for r in range(repeats):
    for c in (configs if r % 2 == 0 else configs[::-1]):
      c.measure(seconds)
      if log is not None:
        log(f"repeat {r + 1}/{repeats} {c.name}: {c.samples[-1]:.1f} img/s")
  return [c.record() for c in configs]


def time_to_accuracy(model, session, batch_size, replicas, target,
                     max_epochs, learning_rate, dataset, seed=0,
                     log_dir="/tmp/tensorbow_bench_logs"):
  """Trains until `target` test accuracy (or `max_epochs`); one run.

  Returns:
    `training.train`'s dict plus the configuration.
  """
  config = training.Config(
      session=session, replicas=replicas, algorithm="sma",
      batch_size=batch_size, learning_rate=learning_rate, epochs=max_epochs,
      target_accuracy=target, data="fashion_mnist", log_dir=log_dir,
      seed=seed)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(seed)
    net = load_model(model).build(dataset.train_images.shape[1:],
                                  dataset.num_classes, learning_rate)
  result = training.train(net, dataset, config, model, verbose=False)
  return dict(result, model=model, session=session,
              replicas=replicas if session == "tensorbow" else 1,
              batch_size=batch_size, target=target,
              reached=result["stop_reason"] == "target_accuracy")
