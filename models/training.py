"""Training a reference model in `models/`: what a model script, the main
job (examples/demo.py) and the benchmarks call.

`run` loads the data a `Config` names, builds the model and calls `train`,
which puts the parts together the same way for every model:

- models/config.py: the run's `Config` and the session it names
  (`tf.compat.v1.Session` or `tensorbow.TensorBowSession`); a TensorBow
  step feeds `batch_size * replicas` rows, so each replica trains on
  `batch_size` rows, the batch size the user chose for accuracy;
- models/contract.py: what a model's `build` returns;
- models/loop.py: the steps, the evaluations and when to stop;
- models/records.py: the JSON-lines log and TensorBoard scalars;
- models/progress.py: the progress bar;
- models/flags.py and models/script.py: the command line of the model
  scripts (`python -m models.lenet --help`).

Besides `train` and `run`, callers (the main job, the benchmarks, the
tests) take a run's `Config` and a few of its helpers from here: `__all__`.
"""
import sys

import tensorflow as tf

from models import loop
from models import progress as tb_progress
from models import records
from models.config import build_session
from models.config import Config
from models.config import effective_replicas
from models.config import load_data
from models.config import rows_per_step
from models.loop import evaluate
from models.records import LOG_KEYS
from tensorbow.session import TensorBowSession

__all__ = ["Config", "LOG_KEYS", "build_session", "evaluate", "load_data",
           "rows_per_step", "run", "train"]


def train(model, dataset, config, model_name, verbose=True, stream=None):
  """Trains `model` on `dataset` as `config` says; logs and evaluates.

  Each step runs `sess.run([model.train_op, model.loss], feed)` on
  `rows_per_step(...)` shuffled training rows (the last partial batch of an
  epoch is dropped). After every epoch, and EVALS_PER_EPOCH_WITH_TARGET
  times per epoch when `config.target_accuracy` is set, the test accuracy of
  the central model is measured (`evaluate`) and a record is written to the
  JSON-lines log and TensorBoard (models/records.py says what a record
  holds). Training stops after `config.epochs` epochs, after
  `config.max_steps` steps, after `config.max_seconds` of wall time, or at
  the first evaluation reaching `config.target_accuracy`, whichever comes
  first; the model is evaluated then if it was not at that step.

  Args:
    model: the model's namespace (x, y, training, loss, train_op, accuracy;
      see models/contract.py), built in its own graph.
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
    ValueError: the batch does not fit the training set, nothing bounds
      the run, or TensorBowSession refuses the config's options.
  """
  stream = sys.stderr if stream is None else stream
  plan = loop.schedule(config, len(dataset.train_images))
  replicas = effective_replicas(config.session, config.replicas)
  graph = model.loss.graph
  with graph.as_default():
    init = tf.compat.v1.global_variables_initializer()
  progress = tb_progress.Progress(stream, plan.steps_per_epoch, config.epochs,
                                  verbose)
  with records.RunLog(config.log_dir,
                      records.run_name(model_name, config, replicas),
                      records.run_fields(config, replicas, model_name),
                      progress) as log:
    progress.line(_banner(model_name, config, dataset, replicas, plan,
                          log.path))
    sess = build_session(config.session, config.replicas, config.algorithm,
                         graph)
    try:
      outcome = loop.run(sess, init, model, dataset, plan, config.seed, log,
                         progress)
    finally:
      history, final_replicas = _session_end(sess)
  final = outcome.final
  progress.line(f"stopped ({outcome.stop_reason}) after {outcome.tally.steps} "
                f"steps, {final['epoch']:.2f} epochs, "
                f"{final['wall_time']:.1f} s: test accuracy "
                f"{final['test_accuracy']:.4f}")
  return {"test_accuracy": final["test_accuracy"], "epochs": final["epoch"],
          "steps": outcome.tally.steps, "images_seen": outcome.tally.images,
          "wall_time": final["wall_time"], "stop_reason": outcome.stop_reason,
          "log_path": log.path, "tensorboard_dir": log.tensorboard_dir,
          "adaptive_history": history, "final_replicas": final_replicas,
          "images_per_sec": outcome.tally.images_per_sec()}


def _banner(model_name, config, dataset, replicas, plan, log_path):
  """The line a run starts with: data, session, rows a step, log."""
  setting = (f"{replicas} replica(s) x batch {config.batch_size}"
             if replicas != "auto" else 'replicas="auto"')
  return (f"{model_name} on {config.data}: {len(dataset.train_images)} "
          f"training and {len(dataset.test_images)} test images; session "
          f"{config.session}, {setting} = {plan.rows} rows a step, "
          f"{plan.steps_per_epoch} steps an epoch; log {log_path}")


def _session_end(sess):
  """Closes `sess`; returns what it ended with: (Adaptive SGD's history,
  L), ([], 1) for TensorFlow's session."""
  try:
    if isinstance(sess, TensorBowSession):
      return sess.adaptive_history(), sess.replicas
    return [], 1
  finally:
    sess.close()


def run(build, model_name, synthetic_image_shape, config, dataset=None):
  """What a model script's `main` does: load, build, train.

  Args:
    build: the script's `build(image_shape, num_classes, learning_rate)`.
    model_name: names the run.
    synthetic_image_shape: the image shape of --data=synthetic.
    config: a `Config` (`models.flags.parse` reads one from the command
      line).
    dataset: the `models.data.Dataset`; None loads what `config` names.

  Returns:
    `train`'s dict.
  """
  if dataset is None:
    dataset = load_data(config, synthetic_image_shape)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(config.seed)
    net = build(dataset.train_images.shape[1:], dataset.num_classes,
                config.learning_rate)
  return train(net, dataset, config, model_name)
