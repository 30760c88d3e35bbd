"""What a training run of a reference model writes (models/training.py):
one record per evaluation to a JSON-lines log, the same numbers as
TensorBoard scalars, and a line of progress.

A record (one JSON object a line, LOG_KEYS) holds: "epoch" (epochs done,
fractional between epoch ends), "step", "wall_time" (seconds since the
session was made, evaluations and TensorBow's one-off graph rewrite
included: what time-to-accuracy counts), "images_seen", "train_loss" (the
mean step loss since the previous record), "test_accuracy",
"images_per_sec" (training images per second of training time since the
previous record, evaluations excluded), and the run's "session",
"replicas" (1 for "tf"), "batch_size" (per replica), "algorithm" (None for
"tf") and "model". The last record repeats the final evaluation with
"event": "final" and "stop_reason". `models/plot.py` reads these logs.
"""
import datetime
import json
import os
import re

import tensorflow as tf

# The keys of every record (the final one adds "event": "final" and
# "stop_reason").
LOG_KEYS = ("epoch", "step", "wall_time", "images_seen", "train_loss",
            "test_accuracy", "images_per_sec", "session", "replicas",
            "batch_size", "algorithm", "model")
# Record key -> TensorBoard tag, for the numbers TensorBoard plots.
_SCALARS = (("test_accuracy", "test_accuracy"), ("train_loss", "train_loss"),
            ("images_per_sec", "images_per_sec"), ("epoch", "epoch"))


def run_name(model_name, config, replicas):
  """The name of a run's log file and TensorBoard folder: the model, data,
  session, L and batch, and the time it started."""
  stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
  name = (f"{model_name}_{config.data}_{config.session}_r{replicas}_"
          f"b{config.batch_size}_{stamp}")
  return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def run_fields(config, replicas, model_name):
  """The fields every record of a run repeats."""
  if config.session != "tensorbow":
    algorithm = None
  elif isinstance(config.algorithm, str):
    algorithm = config.algorithm
  else:  # An Algorithm instance is logged as its repr.
    algorithm = repr(config.algorithm)
  return {"session": config.session, "replicas": replicas,
          "batch_size": config.batch_size, "algorithm": algorithm,
          "model": model_name}


class Tally(object):
  """The training steps of a run: counted in all, and since the last record
  (what a record's "train_loss" and "images_per_sec" average over)."""

  def __init__(self):
    self.steps = 0
    self.images = 0
    self.seconds = 0.0  # of training runs alone
    self._images_since = 0
    self._seconds_since = 0.0
    self._loss_sum = 0.0
    self._loss_count = 0

  def add(self, images, seconds, loss):
    """Counts one step of `images` rows that took `seconds` and gave
    `loss`."""
    self.steps += 1
    self.images += images
    self.seconds += seconds
    self._images_since += images
    self._seconds_since += seconds
    self._loss_sum += loss
    self._loss_count += 1

  def mean_loss(self):
    """The mean step loss since the last record (None before a step)."""
    return self._loss_sum / self._loss_count if self._loss_count else None

  def images_per_sec(self):
    """Training images per second of training time, over the whole run
    (None before a step)."""
    return self.images / self.seconds if self.seconds > 0 else None

  def take(self):
    """(mean loss, images per second) since the last record, rounded as
    records hold them; starts the next record's count."""
    taken = (self.mean_loss(),
             round(self._images_since / self._seconds_since, 2)
             if self._seconds_since > 0 else None)
    self._images_since, self._seconds_since = 0, 0.0
    self._loss_sum, self._loss_count = 0.0, 0
    return taken


class RunLog(object):
  """A run's JSON-lines log and TensorBoard events, and its progress lines.

  Use as a context manager; the files are closed on exit.
  """

  def __init__(self, log_dir, name, fields, progress):
    """Opens `<log_dir>/<name>.jsonl` and TensorBoard's `<log_dir>/<name>/`.

    Args:
      log_dir: the folder, made if missing.
      name: the run's name (`run_name`).
      fields: what every record repeats (`run_fields`).
      progress: a `models.progress.Progress` for the records' lines.
    """
    os.makedirs(log_dir, exist_ok=True)
    self.path = os.path.join(log_dir, name + ".jsonl")
    self.tensorboard_dir = os.path.join(log_dir, name)
    self._fields = fields
    self._progress = progress
    self._writer = tf.compat.v1.summary.FileWriter(self.tensorboard_dir)
    self._file = open(self.path, "w")

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.close()

  def close(self):
    self._file.close()
    self._writer.close()

  def record(self, tally, steps_per_epoch, wall_time, accuracy):
    """Writes the record of an evaluation after `tally.steps` steps.

    Args:
      tally: the run's `Tally`; its count since the last record restarts.
      steps_per_epoch: steps in an epoch.
      wall_time: seconds since the run started.
      accuracy: the test accuracy measured.

    Returns:
      The record, a dict (LOG_KEYS).
    """
    train_loss, images_per_sec = tally.take()
    rec = dict(epoch=round(tally.steps / steps_per_epoch, 4),
               step=tally.steps, wall_time=round(wall_time, 3),
               images_seen=tally.images, train_loss=train_loss,
               test_accuracy=accuracy, images_per_sec=images_per_sec,
               **self._fields)
    self._write(rec)
    self._writer.add_summary(tf.compat.v1.Summary(value=[
        tf.compat.v1.Summary.Value(tag=tag, simple_value=rec[key])
        for key, tag in _SCALARS if rec[key] is not None]),
                             global_step=tally.steps)
    self._writer.flush()
    self._progress.line(
        f"epoch {rec['epoch']:.2f} step {rec['step']}: test accuracy "
        f"{accuracy:.4f}, train loss {_text(train_loss, '.4f')}, "
        f"{_text(images_per_sec, '.1f')} img/s, {rec['wall_time']:.1f} s")
    return rec

  def final(self, record, stop_reason):
    """Writes `record` again, marked final with the reason the run stopped
    (readers wanting one summary line take the last; plots see the same
    point twice); returns it."""
    rec = dict(record, event="final", stop_reason=stop_reason)
    self._write(rec)
    return rec

  def _write(self, rec):
    self._file.write(json.dumps(rec) + "\n")
    self._file.flush()


def _text(value, spec):
  return "-" if value is None else format(value, spec)
