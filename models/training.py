"""The training loop shared by the reference models in `models/`.

The scripts `models/logistic_regression.py`, `models/mlp.py`,
`models/lenet.py` and `models/resnet32.py` each build a TF1 graph
(placeholders, variables, an optimizer's train op) and hand it to this
module, which does the rest the same way for all of them:

- the run's `Config`: which session (`tf.compat.v1.Session` or
  `tensorbow.TensorBowSession`), how many replicas, the batch size per
  replica, the data set, when to stop, where to log (the command line that
  sets it is `models/script.py`);
- the session (`build_session`) and the batches: a TensorBow step feeds
  `batch_size * replicas` rows, so each replica trains on `batch_size` rows,
  the batch size the user chose for accuracy;
- the loop (`train`): `sess.run([train_op, loss])` per step, the central
  model's test accuracy after every epoch (and more often when aiming at a
  target accuracy), a progress bar, a JSON-lines log and TensorBoard
  scalars per run.

A model hands over a namespace (`build(image_shape, num_classes,
learning_rate)` in each script) with at least:
  x: float32 placeholder [None, height, width, channels], the images.
  y: int64 placeholder [None], the labels.
  training: a boolean scalar, False by default
    (`tf.compat.v1.placeholder_with_default(False, [])`); training steps
    feed True, evaluation leaves it False. It is not a batch feed (rank 0),
    so under TensorBow every replica gets it whole.
  loss: the scalar training loss.
  train_op: the optimizer's op; it must depend (tf.control_dependencies) on
    whatever the model needs run each step, such as batch norm's
    tf.compat.v1.GraphKeys.UPDATE_OPS.
  accuracy: the scalar fraction of correct predictions in a batch.
"""
import collections
import datetime
import json
import math
import os
import re
import sys
import time
import types

import tensorflow as tf

from models import data as tb_data
from models import progress as tb_progress
from tensorbow.session import TensorBowSession

SESSIONS = ("tf", "tensorbow")
DATA_SETS = ("fashion_mnist", "mnist", "cifar10", "synthetic")
ALGORITHMS = ("sma", "none")

# Test images per evaluation run: bounds the activations held at once (a
# ResNet-32 on 10,000 CIFAR-10 images at once needs gigabytes).
EVAL_CHUNK = 1000
# With a target accuracy, evaluate this many times per epoch, so the run
# stops soon after the target is reached.
EVALS_PER_EPOCH_WITH_TARGET = 4

# The keys of every JSON-lines record (the final one adds "event": "final"
# and "stop_reason").
LOG_KEYS = ("epoch", "step", "wall_time", "images_seen", "train_loss",
            "test_accuracy", "images_per_sec", "session", "replicas",
            "batch_size", "algorithm", "model")

Config = collections.namedtuple("Config", [
    "session", "replicas", "algorithm", "batch_size", "learning_rate",
    "epochs", "max_steps", "target_accuracy", "data", "data_dir", "log_dir",
    "seed", "train_size", "test_size", "evals_per_epoch", "max_seconds"])
Config.__new__.__defaults__ = (
    "tensorbow", 2, "sma", 32, 0.01, 1, None, None, "synthetic", None,
    "/tmp/tensorbow_logs", 0, None, None, None, None)
Config.__doc__ = """What one training run does; the fields mirror the flags
(models/script.py).

Attributes:
  session: "tf" (tf.compat.v1.Session) or "tensorbow" (TensorBowSession).
  replicas: TensorBow's replicas, or "auto" (the session tunes L, and a
    step feeds `batch_size` rows in all); ignored by "tf", which trains
    one model.
  algorithm: TensorBow's algorithm, "sma" or "none".
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
    EVALS_PER_EPOCH_WITH_TARGET times with a target accuracy).
  max_seconds: stop after the first step that ends this many seconds of
    wall time (evaluations included) into the run, and evaluate there
    (None: no limit).
"""


# ---- The model contract -----------------------------------------------------


def model_inputs(image_shape):
  """The placeholders every model takes (see the module docstring).

  Args:
    image_shape: (height, width, channels) of an image.

  Returns:
    (x, y, training): float32 images [None, *image_shape], int64 labels
    [None], and the boolean training flag, False unless fed.
  """
  shape = [None] + [int(d) for d in image_shape]
  x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
  y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
  training = tf.compat.v1.placeholder_with_default(False, [], name="training")
  return x, y, training


def model(x, y, training, logits, loss, train_op, **extra):
  """The namespace a model's `build` returns, its batch accuracy added.

  Args:
    x, y, training: `model_inputs`.
    logits: [None, num_classes].
    loss: the scalar training loss.
    train_op: the optimizer's op.
    **extra: more tensors the model exposes.

  Returns:
    A `types.SimpleNamespace` with those fields and `accuracy`.
  """
  accuracy = tf.reduce_mean(
      tf.cast(tf.equal(tf.argmax(logits, 1), y), tf.float32))
  return types.SimpleNamespace(x=x, y=y, training=training, logits=logits,
                               loss=loss, train_op=train_op,
                               accuracy=accuracy, **extra)


# ---- Flags ------------------------------------------------------------------


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
    ValueError: an unknown `session`.
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
  if session == "tensorbow" and replicas == "auto":
    return batch_size
  return batch_size * effective_replicas(session, replicas)


# ---- Loading data from flags ------------------------------------------------


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


# ---- Progress ---------------------------------------------------------------


# ---- Training ---------------------------------------------------------------


def evaluate(sess, model, images, labels, chunk=EVAL_CHUNK):
  """The model's accuracy on (images, labels), in test mode.

  A plain run per chunk (no optimizer in it), so under TensorBow it reads
  the central model.

  Args:
    sess: the session.
    model: the model's namespace (x, y, training, accuracy).
    images: [N, ...] images.
    labels: [N] labels.
    chunk: examples per run.

  Returns:
    The fraction of correct predictions, a float (nan for no examples).
  """
  if len(images) == 0:
    return float("nan")
  correct = 0.0
  for start in range(0, len(images), chunk):
    x = images[start:start + chunk]
    accuracy = sess.run(model.accuracy, {model.x: x,
                                         model.y: labels[start:start + chunk],
                                         model.training: False})
    correct += float(accuracy) * len(x)
  return correct / len(images)


def _train_feed(model, x, y):
  """The feed of one training step: the batch, in training mode."""
  return {model.x: x, model.y: y, model.training: True}


def _run_name(model_name, config, replicas):
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
  name = (f"{model_name}_{config.data}_{config.session}_r{replicas}_"
          f"b{config.batch_size}_{stamp}")
  return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def train(model, dataset, config, model_name, verbose=True, stream=None):
  """Trains `model` on `dataset` as `config` says; logs and evaluates.

  Each step runs `sess.run([model.train_op, model.loss], feed)` on
  `rows_per_step(...)` shuffled training rows (the last partial batch of an
  epoch is dropped). After every epoch, and EVALS_PER_EPOCH_WITH_TARGET
  times per epoch when `config.target_accuracy` is set, the test accuracy of
  the central model is measured (`evaluate`) and a record is written to the
  JSON-lines log and TensorBoard. Training stops after `config.epochs`
  epochs, after `config.max_steps` steps, after `config.max_seconds` of
  wall time, or at the first evaluation reaching
  `config.target_accuracy`, whichever comes first; the model is evaluated
  then if it was not at that step.

  A record (one JSON object a line, LOG_KEYS) holds: "epoch" (epochs done,
  fractional between epoch ends), "step", "wall_time" (seconds since the
  session was made, evaluations and TensorBow's one-off graph rewrite
  included: what time-to-accuracy counts), "images_seen", "train_loss" (the
  mean step loss since the previous record), "test_accuracy",
  "images_per_sec" (training images per second of training time since the
  previous record, evaluations excluded), and the run's "session",
  "replicas" (1 for "tf"), "batch_size" (per replica), "algorithm" (None for
  "tf") and "model". The last record repeats the final evaluation with
  "event": "final" and "stop_reason".

  Args:
    model: the model's namespace (x, y, training, loss, train_op, accuracy;
      see the module docstring), built in its own graph.
    dataset: a `models.data.Dataset`.
    config: a `Config`.
    model_name: names the run ("lenet", ...).
    verbose: show progress (on `stream`).
    stream: where progress goes; sys.stderr by default.

  Returns:
    A dict: "test_accuracy" (the final evaluation), "epochs" (epochs done,
    a float), "steps", "images_seen", "wall_time", "stop_reason",
    "log_path" (the JSON-lines file), "tensorboard_dir", "adaptive_history"
    (TensorBowSession.adaptive_history(); [] for TensorFlow),
    "images_per_sec" (training images per second of all the training
    runs' time, evaluations excluded) and "final_replicas" (the L the
    session ended at: what replicas="auto" chose; 1 for TensorFlow).

  Raises:
    ValueError: the batch does not fit the training set, or nothing bounds
      the run.
  """
  stream = sys.stderr if stream is None else stream
  replicas = effective_replicas(config.session, config.replicas)
  rows = rows_per_step(config.session, config.replicas, config.batch_size)
  num_train = len(dataset.train_images)
  if rows > num_train:
    raise ValueError(
        f"a step needs {rows} training examples (batch_size "
        f"{config.batch_size} x {replicas} replicas) but there are "
        f"{num_train}")
  if (config.epochs is None and config.max_steps is None and
      config.target_accuracy is None and config.max_seconds is None):
    raise ValueError("nothing stops the run: set epochs, max_steps, "
                     "target_accuracy or max_seconds")
  steps_per_epoch = num_train // rows
  max_steps = [s for s in (
      config.max_steps,
      None if config.epochs is None else config.epochs * steps_per_epoch)
               if s is not None]
  max_steps = min(max_steps) if max_steps else None
  evals = config.evals_per_epoch or (
      1 if config.target_accuracy is None else EVALS_PER_EPOCH_WITH_TARGET)
  eval_every = max(1, steps_per_epoch // evals)

  graph = model.loss.graph
  with graph.as_default():
    init = tf.compat.v1.global_variables_initializer()

  os.makedirs(config.log_dir, exist_ok=True)
  run_name = _run_name(model_name, config, replicas)
  log_path = os.path.join(config.log_dir, run_name + ".jsonl")
  tensorboard_dir = os.path.join(config.log_dir, run_name)
  common = {"session": config.session, "replicas": replicas,
            "batch_size": config.batch_size,
            # An Algorithm instance is logged as its repr.
            "algorithm": (None if config.session != "tensorbow" else
                          config.algorithm if isinstance(config.algorithm, str)
                          else repr(config.algorithm)),
            "model": model_name}
  progress = tb_progress.Progress(stream, steps_per_epoch, config.epochs,
                                  verbose)
  progress.line(
      f"{model_name} on {config.data}: {num_train} training and "
      f"{len(dataset.test_images)} test images; session {config.session}, "
      + (f"{replicas} replica(s) x batch {config.batch_size}"
         if replicas != "auto" else 'replicas="auto"') +
      f" = {rows} rows a step, {steps_per_epoch} steps an epoch; log "
      f"{log_path}")

  writer = tf.compat.v1.summary.FileWriter(tensorboard_dir)
  sess = build_session(config.session, config.replicas, config.algorithm,
                       graph)
  try:
    with open(log_path, "w") as log:
      start = time.monotonic()
      sess.run(init)
      step = 0
      images_seen = 0
      train_seconds = 0.0  # since the previous record
      images_since = 0
      all_train_seconds = 0.0
      loss_sum, loss_count = 0.0, 0  # since the previous record
      record = None
      stop_reason = None
      window_start, window_images = time.monotonic(), 0  # for the bar

      def write_record(accuracy):
        nonlocal train_seconds, images_since, loss_sum, loss_count
        rec = dict(
            epoch=round(step / steps_per_epoch, 4), step=step,
            wall_time=round(time.monotonic() - start, 3),
            images_seen=images_seen,
            train_loss=loss_sum / loss_count if loss_count else None,
            test_accuracy=accuracy,
            images_per_sec=(round(images_since / train_seconds, 2)
                            if train_seconds > 0 else None),
            **common)
        log.write(json.dumps(rec) + "\n")
        log.flush()
        summary = tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=tag, simple_value=rec[key])
            for tag, key in (("test_accuracy", "test_accuracy"),
                             ("train_loss", "train_loss"),
                             ("images_per_sec", "images_per_sec"),
                             ("epoch", "epoch"))
            if rec[key] is not None])
        writer.add_summary(summary, global_step=step)
        writer.flush()
        loss_text = ("-" if rec["train_loss"] is None else
                     f"{rec['train_loss']:.4f}")
        rate_text = ("-" if rec["images_per_sec"] is None else
                     f"{rec['images_per_sec']:.1f}")
        progress.line(
            f"epoch {rec['epoch']:.2f} step {step}: test accuracy "
            f"{accuracy:.4f}, train loss {loss_text}, {rate_text} img/s, "
            f"{rec['wall_time']:.1f} s")
        train_seconds, images_since, loss_sum, loss_count = 0.0, 0, 0.0, 0
        return rec

      if max_steps == 0:
        stop_reason = "max_steps" if config.max_steps == 0 else "epochs"
      batches = tb_data.batches(dataset.train_images, dataset.train_labels,
                                rows, seed=config.seed)
      while stop_reason is None:
        _, x, y = next(batches)
        t0 = time.monotonic()
        _, loss = sess.run([model.train_op, model.loss],
                           _train_feed(model, x, y))
        t1 = time.monotonic()
        step += 1
        images_seen += len(x)
        images_since += len(x)
        train_seconds += t1 - t0
        all_train_seconds += t1 - t0
        loss = float(loss)
        loss_sum += loss
        loss_count += 1
        window_images += len(x)
        # The bar shows the mean loss since the last record: one step's
        # loss at these batch sizes is mostly noise.
        progress.step(step, window_images / max(t1 - window_start, 1e-9),
                      loss_sum / loss_count)
        if t1 - window_start > 2.0:  # The bar's rate: the last seconds.
          window_start, window_images = t1, 0
        if not math.isfinite(loss):
          stop_reason = "loss_not_finite"
        elif max_steps is not None and step >= max_steps:
          stop_reason = ("max_steps" if config.max_steps is not None and
                         step >= config.max_steps else "epochs")
        elif (config.max_seconds is not None and
              t1 - start >= config.max_seconds):
          stop_reason = "max_seconds"
        if step % eval_every == 0 or step % steps_per_epoch == 0 or (
            stop_reason is not None):
          accuracy = evaluate(sess, model, dataset.test_images,
                              dataset.test_labels)
          record = write_record(accuracy)
          if (stop_reason is None and config.target_accuracy is not None and
              accuracy >= config.target_accuracy):
            stop_reason = "target_accuracy"
      if record is None:  # Stopped before any step.
        record = write_record(evaluate(sess, model, dataset.test_images,
                                       dataset.test_labels))
      # The last evaluation again, marked: readers wanting one summary line
      # take the last; plots see the same point twice.
      final = dict(record, event="final", stop_reason=stop_reason)
      log.write(json.dumps(final) + "\n")
  finally:
    tensorbow = isinstance(sess, TensorBowSession)
    history = sess.adaptive_history() if tensorbow else []
    final_replicas = sess.replicas if tensorbow else 1
    sess.close()
    writer.close()
  progress.line(f"stopped ({stop_reason}) after {step} steps, "
                f"{final['epoch']:.2f} epochs, {final['wall_time']:.1f} s: "
                f"test accuracy {final['test_accuracy']:.4f}")
  return {"test_accuracy": final["test_accuracy"], "epochs": final["epoch"],
          "steps": step, "images_seen": images_seen,
          "wall_time": final["wall_time"], "stop_reason": stop_reason,
          "log_path": log_path, "tensorboard_dir": tensorboard_dir,
          "adaptive_history": history, "final_replicas": final_replicas,
          "images_per_sec": (images_seen / all_train_seconds
                             if all_train_seconds > 0 else None)}


def run(build, model_name, synthetic_image_shape, config, dataset=None):
  """What a model script's `main` does: load, build, train.

  Args:
    build: the script's `build(image_shape, num_classes, learning_rate)`.
    model_name: names the run.
    synthetic_image_shape: the image shape of --data=synthetic.
    config: a `Config` (`models.script.config_from_flags` reads one from
      the command line).
    dataset: the `models.data.Dataset`; None loads what `config` names.

  Returns:
    `train`'s dict.
  """
  if dataset is None:
    dataset = load_data(config, synthetic_image_shape)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(config.seed)
    model = build(dataset.train_images.shape[1:], dataset.num_classes,
                  config.learning_rate)
  return train(model, dataset, config, model_name)
