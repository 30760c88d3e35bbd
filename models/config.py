"""What one training run of a reference model is: its `Config`, and what
the `Config` alone decides: the session, the rows a step feeds, the data.

The command line (models/flags.py) builds a `Config`; the loop
(models/loop.py) and the records (models/records.py) read it;
`models.training.train` puts them together.
"""
import collections

import tensorflow as tf

from models import data as tb_data
from tensorbow import options as tb_options
from tensorbow.session import TensorBowSession

SESSIONS = ("tf", "tensorbow")
DATA_SETS = ("fashion_mnist", "mnist", "cifar10", "synthetic")
# Every algorithm name `TensorBowSession(algorithm=)` takes.
ALGORITHMS = tb_options.ALGORITHMS
AUTO = tb_options.AUTO

Config = collections.namedtuple("Config", [
    "session", "replicas", "algorithm", "batch_size", "learning_rate",
    "epochs", "max_steps", "target_accuracy", "data", "data_dir", "log_dir",
    "seed", "train_size", "test_size", "evals_per_epoch", "max_seconds"])
Config.__new__.__defaults__ = (
    "tensorbow", 2, "sma", 32, 0.01, 1, None, None, "synthetic", None,
    "/tmp/tensorbow_logs", 0, None, None, None, None)
Config.__doc__ = """What one training run does; the fields mirror the flags
(models/flags.py).

Attributes:
  session: "tf" (tf.compat.v1.Session) or "tensorbow" (TensorBowSession).
  replicas: TensorBow's replicas, or "auto" (the session tunes L, and a
    step feeds `batch_size` rows in all); ignored by "tf", which trains
    one model.
  algorithm: TensorBow's algorithm: one of ALGORITHMS, or an instance
    from `tensorbow.algorithms`.
  batch_size: rows per replica per step.
  learning_rate: the optimizer's learning rate (used by the model's build).
  epochs: stop after this many passes over the training set (None: no
    limit).
  max_steps: stop after this many steps (None: no limit).
  target_accuracy: stop once the test accuracy reaches it (None: no target).
  data: the data set's name (see `models.data.load_dataset`).
  data_dir: its folder, or None for the default.
  log_dir: where the JSON-lines log and TensorBoard events go.
  seed: seeds the initial weights, the shuffling and synthetic data.
  train_size: keep only this many training examples (None: all).
  test_size: keep only this many test examples (None: all).
  evals_per_epoch: evaluate this many times an epoch (None: once, or
    loop.EVALS_PER_EPOCH_WITH_TARGET times with a target accuracy).
  max_seconds: stop after the first step that ends this many seconds of
    wall time (evaluations included) into the run, and evaluate there
    (None: no limit).
"""


def build_session(session, replicas, algorithm, graph):
  """A session over `graph`: plain TensorFlow or TensorBow.

  Args:
    session: "tf" for `tf.compat.v1.Session`, "tensorbow" for
      `TensorBowSession`.
    replicas: TensorBow's replicas (ignored for "tf").
    algorithm: TensorBow's algorithm (ignored for "tf").
    graph: the `tf.Graph` to run.

  Returns:
    The session; feed it `rows_per_step(session, replicas, batch_size)` rows
    per training step.

  Raises:
    ValueError: an unknown `session`, or options TensorBowSession refuses.
  """
  if session == "tf":
    return tf.compat.v1.Session(graph=graph)
  if session == "tensorbow":
    return TensorBowSession(graph=graph, replicas=replicas,
                            algorithm=algorithm)
  raise ValueError(f"session must be one of {SESSIONS}, got {session!r}")


def effective_replicas(session, replicas):
  """Models trained at once: `replicas` for TensorBow, 1 for TensorFlow."""
  return replicas if session == "tensorbow" else 1


def rows_per_step(session, replicas, batch_size):
  """Rows fed per step so that every replica trains on `batch_size` rows
  (with replicas="auto", `batch_size` rows shared by the replicas)."""
  if session == "tensorbow" and replicas == AUTO:
    return batch_size
  return batch_size * effective_replicas(session, replicas)


def load_data(config, synthetic_image_shape=None):
  """The data set `config` names, truncated to its train/test sizes.

  Args:
    config: a `Config`.
    synthetic_image_shape: the image shape of synthetic data (the model's
      natural input: (28, 28, 1) for the MNIST models, (32, 32, 3) for
      ResNet-32); ignored for real data sets.

  Returns:
    A `models.data.Dataset`.
  """
  return tb_data.load_dataset(
      config.data, data_dir=config.data_dir,
      image_shape=synthetic_image_shape if config.data == "synthetic" else None,
      train_size=config.train_size, test_size=config.test_size,
      seed=config.seed)
