"""The command line of the model scripts (`python -m models.lenet --help`):
one flag per field of `models.config.Config`, parsed into a `Config`.

`--algorithm` takes every name `TensorBowSession(algorithm=)` takes
(`tensorbow.options.ALGORITHMS`) and `--replicas` an int or "auto",
checked by the session's own check (`tensorbow.options.check_options`), so
a value the session would refuse is an argparse error with the session's
message. A parser is built per call: no flag is defined process-wide.
"""
import argparse

from models import config as run_config
from models import loop
from tensorbow import options as tb_options


def read_replicas(text):
  """--replicas: "auto", or an int the session takes.

  Raises:
    argparse.ArgumentTypeError: the session's message for anything else.
  """
  try:
    value = text if text == run_config.AUTO else int(text)
  except ValueError:
    value = text
  try:
    tb_options.check_options(replicas=value)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return value


def _at_least(kind, lowest):
  """A flag type: `kind` values >= `lowest`."""
  def read(text):
    try:
      value = kind(text)
    except ValueError:
      value = None
    if value is None or not value >= lowest:
      raise argparse.ArgumentTypeError(
          f"must be {'an int' if kind is int else 'a number'} >= {lowest}, "
          f"got {text!r}")
    return value
  return read


def _fraction(text):
  """A flag type: a float in [0, 1]."""
  value = _at_least(float, 0.0)(text)
  if value > 1.0:
    raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
  return value


# (Config field, add_argument keywords but dest and default). The flags
# are the fields' names, as --batch_size.
_FLAGS = (
    ("session", dict(choices=run_config.SESSIONS,
                     help="tf: tf.compat.v1.Session; tensorbow: "
                     "TensorBowSession")),
    ("replicas", dict(type=read_replicas, metavar="{L,auto}",
                      help="TensorBow's replicas L, an int >= 1, or 'auto' "
                      "to let the session tune L (a step then feeds "
                      "batch_size rows in all); ignored with --session=tf")),
    ("algorithm", dict(choices=run_config.ALGORITHMS,
                       help="how TensorBow keeps the replicas together "
                       "(tensorbow.algorithms; none: independent "
                       "replicas)")),
    ("batch_size", dict(type=_at_least(int, 1),
                        help="rows per replica per step; a TensorBow step "
                        "feeds batch_size * replicas rows")),
    ("learning_rate", dict(type=float,
                           help="the optimizer's learning rate")),
    ("epochs", dict(type=_at_least(int, 0),
                    help="stop after this many epochs")),
    ("max_steps", dict(type=_at_least(int, 0),
                       help="stop after this many steps (default: no "
                       "limit)")),
    ("target_accuracy", dict(
        type=_fraction, help="stop once the test accuracy reaches this "
        f"(evaluating {loop.EVALS_PER_EPOCH_WITH_TARGET} times an epoch; "
        "default: no target)")),
    ("data", dict(choices=run_config.DATA_SETS, help="the data set")),
    ("data_dir", dict(help="the data set's folder (default: "
                      "fashion_mnist's Debian location; mnist and cifar10 "
                      "need it)")),
    ("log_dir", dict(help="where the JSON-lines log and TensorBoard events "
                     "go")),
    ("seed", dict(type=_at_least(int, 0),
                  help="seeds the weights, the shuffling and synthetic "
                  "data")),
    ("train_size", dict(type=_at_least(int, 1),
                        help="keep only the first N training examples "
                        "(synthetic: generate N; default: all)")),
    ("test_size", dict(type=_at_least(int, 1),
                       help="keep only the first N test examples "
                       "(synthetic: generate N; default: all)")),
    ("evals_per_epoch", dict(
        type=_at_least(int, 1), help="evaluate N times an epoch (default: "
        f"once, or {loop.EVALS_PER_EPOCH_WITH_TARGET} times with "
        "--target_accuracy)")),
    ("max_seconds", dict(type=_at_least(float, 0.0),
                         help="stop after this many seconds of wall time "
                         "(default: no limit)")),
)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """The description (a script's docstring, with its example commands) as
  written, and each flag's default unless None (its help says what None
  means)."""

  def _get_help_string(self, action):
    if action.default is None or action.default == argparse.SUPPRESS:
      return action.help
    return f"{action.help} (default: {action.default})"


def parser(prog=None, description=None, **defaults):
  """The model scripts' argument parser.

  Args:
    prog: the command's name in usage and errors.
    description: what the command does.
    **defaults: per-script defaults overriding `Config`'s, by field name
      (e.g. `learning_rate=0.1, data="cifar10"`).

  Returns:
    An `argparse.ArgumentParser` whose namespace `config_from_args` reads.

  Raises:
    ValueError: a default names no flag.
  """
  unknown = set(defaults) - set(run_config.Config._fields)
  if unknown:
    raise ValueError(f"no such flags: {sorted(unknown)}")
  values = run_config.Config()._replace(**defaults)
  result = argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=_HelpFormatter)
  for field, kwargs in _FLAGS:
    result.add_argument("--" + field, dest=field,
                        default=getattr(values, field), **kwargs)
  return result


def config_from_args(args):
  """The `Config` of a namespace `parser` parsed."""
  return run_config.Config(**{name: getattr(args, name)
                              for name in run_config.Config._fields})


def parse(argv, prog=None, description=None, **defaults):
  """The `Config` that command-line arguments `argv` describe.

  Args:
    argv: the arguments, without the program's name.
    prog, description, **defaults: as for `parser`.

  Raises:
    SystemExit: (argparse's, status 2, after printing the usage and what
      is wrong) for an unknown flag, a positional argument or a value out
      of range.
  """
  return config_from_args(
      parser(prog, description, **defaults).parse_args(argv))
