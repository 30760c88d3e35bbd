"""The command line of the model scripts in `models/`: their flags, the
`Config` the parsed flags describe, and the `__main__` that trains it
(models/training.py).
"""
import sys

from absl import app
from absl import flags
import tensorflow as tf

from models import config as run_config
from models import loop
from models import training


def define_flags(**defaults):
  """Defines the command-line flags of the model scripts (once per process).

  Args:
    **defaults: per-script defaults overriding `run_config.Config`'s, by
      field name (e.g. `learning_rate=0.1, data="cifar10"`).

  Raises:
    ValueError: a default names no flag.
  """
  unknown = set(defaults) - set(run_config.Config._fields)
  if unknown:
    raise ValueError(f"no such flags: {sorted(unknown)}")
  values = run_config.Config()._replace(**defaults)
  if "session" in flags.FLAGS:
    # Already defined (a second script's module in the same process): only
    # move the defaults.
    for name, value in values._asdict().items():
      flags.FLAGS.set_default(name, value)
    return
  flags.DEFINE_enum("session", values.session, run_config.SESSIONS,
                    "tf: tf.compat.v1.Session; tensorbow: TensorBowSession.")
  flags.DEFINE_integer("replicas", values.replicas,
                       "TensorBow replicas (ignored with --session=tf).",
                       lower_bound=1)
  flags.DEFINE_enum("algorithm", values.algorithm, run_config.ALGORITHMS,
                    "TensorBow's algorithm: sma (synchronous model "
                    "averaging) or none (independent replicas).")
  flags.DEFINE_integer("batch_size", values.batch_size,
                       "Rows per replica per step; a TensorBow step feeds "
                       "batch_size * replicas rows.", lower_bound=1)
  flags.DEFINE_float("learning_rate", values.learning_rate,
                     "The optimizer's learning rate.")
  flags.DEFINE_integer("epochs", values.epochs,
                       "Stop after this many epochs.", lower_bound=0)
  flags.DEFINE_integer("max_steps", values.max_steps,
                       "Stop after this many steps (default: no limit).",
                       lower_bound=0)
  flags.DEFINE_float("target_accuracy", values.target_accuracy,
                     "Stop once the test accuracy reaches this (evaluating "
                     f"{loop.EVALS_PER_EPOCH_WITH_TARGET} times per "
                     "epoch).",
                     lower_bound=0.0, upper_bound=1.0)
  flags.DEFINE_enum("data", values.data, run_config.DATA_SETS,
                    "The data set.")
  flags.DEFINE_string("data_dir", values.data_dir,
                      "The data set's folder (default: fashion_mnist's "
                      "Debian location; mnist and cifar10 need it).")
  if "log_dir" in flags.FLAGS:
    # absl.logging defines --log_dir ("directory to write logfiles into");
    # this loop's logs go there too, so the flag is shared, not redefined.
    flags.FLAGS.set_default("log_dir", values.log_dir)
    flags.FLAGS["log_dir"].help = (
        "Where the JSON-lines log and TensorBoard events go (and absl's log "
        "files, if enabled).")
    flags.declare_key_flag("log_dir")
  else:
    flags.DEFINE_string("log_dir", values.log_dir,
                        "Where the JSON-lines log and TensorBoard events go.")
  flags.DEFINE_integer("seed", values.seed,
                       "Seeds the weights, the shuffling and synthetic data.",
                       lower_bound=0)
  flags.DEFINE_integer("train_size", values.train_size,
                       "Keep only the first N training examples (synthetic: "
                       "generate N).", lower_bound=1)
  flags.DEFINE_integer("test_size", values.test_size,
                       "Keep only the first N test examples (synthetic: "
                       "generate N).", lower_bound=1)
  flags.DEFINE_integer("evals_per_epoch", values.evals_per_epoch,
                       "Evaluate N times an epoch (default: once, or "
                       f"{loop.EVALS_PER_EPOCH_WITH_TARGET} times with "
                       "--target_accuracy).", lower_bound=1)
  flags.DEFINE_float("max_seconds", values.max_seconds,
                     "Stop after this many seconds of wall time.",
                     lower_bound=0.0)


def config_from_flags(flag_values=None):
  """The `run_config.Config` that parsed flags describe (`flags.FLAGS` by
  default)."""
  flag_values = flags.FLAGS if flag_values is None else flag_values
  return run_config.Config(**{name: getattr(flag_values, name)
                              for name in run_config.Config._fields})


# ---- Sessions ---------------------------------------------------------------


def run_script(build, model_name, synthetic_image_shape, defaults):
  """The `__main__` of a model script: graph mode, the flags, absl's app.

  Args:
    build: the script's `build(image_shape, num_classes, learning_rate)`.
    model_name: names the run.
    synthetic_image_shape: the image shape of --data=synthetic.
    defaults: the script's flag defaults (see `define_flags`).
  """
  tf.compat.v1.disable_eager_execution()
  define_flags(**defaults)
  # The script's --help lists these flags as its own.
  for flag in flags.FLAGS.get_flags_for_module(__name__):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  app.run(lambda argv: main(argv, build, model_name, synthetic_image_shape))


def main(argv, build, model_name, synthetic_image_shape):
  """The body of a model script's `main(argv)` (under `absl.app.run`).

  Args:
    argv: the arguments absl left over; there must be none.
    build: the script's `build(image_shape, num_classes, learning_rate)`.
    model_name: names the run.
    synthetic_image_shape: the image shape of --data=synthetic.

  Raises:
    absl.app.UsageError: positional arguments.
    SystemExit: the data set cannot be loaded (the message says why,
      without a traceback).
  """
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = config_from_flags()
  try:
    dataset = run_config.load_data(config, synthetic_image_shape)
  except (ValueError, OSError) as e:
    # A missing --data_dir or file is the user's to fix, not a crash.
    sys.exit(f"{model_name}: cannot load {config.data}: {e}")
  training.run(build, model_name, synthetic_image_shape, config, dataset)
