"""The training loop of the reference models (models/training.py puts it
together with the session and the records): steps over shuffled batches,
the central model's test accuracy on a schedule, and the reasons to stop.

A `Schedule` says, from a run's `Config` and its training set's size, how
many rows a step feeds, when to evaluate and when to stop; `run` trains by
it, writing a record (models/records.py) at every evaluation.
"""
import collections
import math
import time

from models import config as run_config
from models import contract
from models import data as tb_data
from models import records

# Test images per evaluation run: bounds the activations held at once (a
# ResNet-32 on 10,000 CIFAR-10 images at once needs gigabytes).
EVAL_CHUNK = 1000
# With a target accuracy, evaluate this many times per epoch, so the run
# stops soon after the target is reached.
EVALS_PER_EPOCH_WITH_TARGET = 4


class Schedule(collections.namedtuple("Schedule", [
    "rows",  # fed per step
    "steps_per_epoch",  # the last partial batch of an epoch is dropped
    "max_steps",  # the config's max_steps or epochs, whichever is fewer
    "step_limit",  # the config's max_steps alone
    "max_seconds",
    "target_accuracy",
    "eval_every",  # steps
])):
  """When a run evaluates and stops (`schedule` makes one)."""
  __slots__ = ()

  def stop_before_training(self):
    """Why the run stops before its first step, or None."""
    if self.max_steps == 0:
      return "max_steps" if self.step_limit == 0 else "epochs"
    return None

  def stop_after_step(self, step, loss, seconds):
    """Why the run stops after `step` steps, the last with `loss`, ended
    `seconds` into the run; None to go on."""
    if not math.isfinite(loss):
      return "loss_not_finite"
    if self.max_steps is not None and step >= self.max_steps:
      return ("max_steps" if self.step_limit is not None and
              step >= self.step_limit else "epochs")
    if self.max_seconds is not None and seconds >= self.max_seconds:
      return "max_seconds"
    return None

  def evaluates_after(self, step):
    """Whether the test accuracy is measured after `step` steps (it also
    is when the run stops)."""
    return step % self.eval_every == 0 or step % self.steps_per_epoch == 0

  def reached(self, accuracy):
    """Whether `accuracy` meets the target (False without one)."""
    return (self.target_accuracy is not None and
            accuracy >= self.target_accuracy)


def schedule(config, num_train):
  """The `Schedule` of `config` on `num_train` training examples.

  Raises:
    ValueError: a step needs more rows than there are, or nothing bounds
      the run.
  """
  rows = run_config.rows_per_step(config.session, config.replicas,
                                  config.batch_size)
  if rows > num_train:
    replicas = run_config.effective_replicas(config.session, config.replicas)
    raise ValueError(
        f"a step needs {rows} training examples (batch_size "
        f"{config.batch_size} x {replicas} replicas) but there are "
        f"{num_train}")
  if (config.epochs is None and config.max_steps is None and
      config.target_accuracy is None and config.max_seconds is None):
    raise ValueError("nothing stops the run: set epochs, max_steps, "
                     "target_accuracy or max_seconds")
  steps_per_epoch = num_train // rows
  limits = [s for s in (
      config.max_steps,
      None if config.epochs is None else config.epochs * steps_per_epoch)
            if s is not None]
  evals = config.evals_per_epoch or (
      1 if config.target_accuracy is None else EVALS_PER_EPOCH_WITH_TARGET)
  return Schedule(rows=rows, steps_per_epoch=steps_per_epoch,
                  max_steps=min(limits) if limits else None,
                  step_limit=config.max_steps,
                  max_seconds=config.max_seconds,
                  target_accuracy=config.target_accuracy,
                  eval_every=max(1, steps_per_epoch // evals))


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


# What `run` ends with: why it stopped, its steps counted (records.Tally)
# and its final record.
Outcome = collections.namedtuple("Outcome", ["stop_reason", "tally", "final"])


def run(sess, init, model, dataset, plan, seed, log, progress):
  """Initialises the model, then trains it until `plan` stops it.

  Each step runs `sess.run([model.train_op, model.loss], feed)` on
  `plan.rows` shuffled training rows. After the steps `plan` says, and
  when stopping, the central model's test accuracy is measured
  (`evaluate`) and a record written; a run stopped before any step
  evaluates once. The last record is written again, marked final.

  Args:
    sess: the session, new; `init` initialises its variables.
    init: the variables' initializer (timed with the run).
    model: the model's namespace (models/contract.py).
    dataset: a `models.data.Dataset`.
    plan: the run's `Schedule`.
    seed: seeds the order of the batches.
    log: the run's `records.RunLog`.
    progress: the run's `models.progress.Progress`.

  Returns:
    An `Outcome`.
  """
  return _Run(sess, model, dataset, plan, log, progress).train(init, seed)


class _Run(object):
  """One run of `run`: what its steps and evaluations share."""

  def __init__(self, sess, model, dataset, plan, log, progress):
    self._sess = sess
    self._model = model
    self._dataset = dataset
    self._plan = plan
    self._log = log
    self._progress = progress
    self._tally = records.Tally()
    self._start = time.monotonic()  # wall time counts from here

  def train(self, init, seed):
    """`run`'s loop: steps until a stop reason, evaluating on schedule."""
    self._sess.run(init)
    self._progress.begin()
    batches = tb_data.batches(self._dataset.train_images,
                              self._dataset.train_labels, self._plan.rows,
                              seed=seed)
    stop_reason = self._plan.stop_before_training()
    last = None
    while stop_reason is None:
      _, x, y = next(batches)
      stop_reason = self._step(x, y)
      if stop_reason is not None or self._plan.evaluates_after(
          self._tally.steps):
        last = self._record()
        if stop_reason is None and self._plan.reached(last["test_accuracy"]):
          stop_reason = "target_accuracy"
    if last is None:  # Stopped before any step.
      last = self._record()
    return Outcome(stop_reason, self._tally,
                   self._log.final(last, stop_reason))

  def _step(self, x, y):
    """Trains on one batch; returns why the run stops after it, or None."""
    start = time.monotonic()
    _, loss = self._sess.run([self._model.train_op, self._model.loss],
                             contract.train_feed(self._model, x, y))
    end = time.monotonic()
    loss = float(loss)
    self._tally.add(len(x), end - start, loss)
    self._progress.step(self._tally.steps, len(x), self._tally.mean_loss(),
                        end)
    return self._plan.stop_after_step(self._tally.steps, loss,
                                      end - self._start)

  def _record(self):
    """Measures the test accuracy and writes the record; returns it."""
    accuracy = evaluate(self._sess, self._model, self._dataset.test_images,
                        self._dataset.test_labels)
    return self._log.record(self._tally, self._plan.steps_per_epoch,
                            time.monotonic() - self._start, accuracy)
