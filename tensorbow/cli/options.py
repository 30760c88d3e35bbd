"""The `TensorBowSession` options a `tensorbow-run` command sets: one
`SessionOptions` (tensorbow/options.py), built once from the parsed
command line, handed to the patches (patches.py) and, with `--workers W`,
written back into each worker's command line by the same flags that
parsed it.

Every row of `tensorbow.options.OPTIONS` has a flag, made from the row
alone (`_plain_flag`): `--name` (underscores as hyphens), read as the
type of its default (or of the row's `kind`) and written back the same
way, its help the row's meaning with the session's default. Only an
option that needs more (its own flag name, a parser that checks a range
or reads a list, help of its own) has a row in `_SPECIAL`. Each flag
knows how its text is read (with an argparse error naming the value
received and what is accepted) and how it is written back, so a flag
cannot be parsed one way and rebuilt another.
"""
import argparse
import collections
import os

import tensorflow as tf

from tensorbow import options as tb_options


# The session's options, with their defaults, as tensorbow/options.py
# declares them (callers name them cli.options.SessionOptions too).
SessionOptions = tb_options.SessionOptions


def number(text, kind, accept, accepted):
  """`text` read as `kind` if `accept` takes it.

  Raises:
    argparse.ArgumentTypeError: "must be {accepted}, got {text}".
  """
  try:
    value = kind(text)
  except ValueError:
    value = None
  if value is None or not accept(value):
    raise argparse.ArgumentTypeError(f"must be {accepted}, got {text}")
  return value


def _replicas(text):
  if text == tb_options.AUTO:
    return text
  return number(text, int, lambda v: v >= 1,
                f"an int >= 1 or {tb_options.AUTO!r}")


def _alpha(text):
  return number(text, float, lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def _momentum(text):
  return number(text, float, lambda v: 0.0 <= v < 1.0, "in [0, 1)")


def _seconds(text):
  # NaN and infinity are floats too, but no timeout.
  return number(text, float, lambda v: 0.0 < v < float("inf"),
                "a number of seconds > 0")


def _seconds_or_none(text):
  return number(text, float, lambda v: 0.0 <= v < float("inf"),
                "a number of seconds >= 0")


def _path(text):
  if not text:
    raise argparse.ArgumentTypeError("must be a path, got ''")
  return os.path.abspath(text)  # the workers' too, whatever their cwd


def count(text):
  """`text` read as an int >= 1 (argparse's type for a count)."""
  return number(text, int, lambda v: v >= 1, "an int >= 1")


def addresses(text):
  """`text` read as comma-separated "host:port" addresses, as a tuple."""
  found = tuple(a.strip() for a in text.split(",") if a.strip())
  if not found or not all(tb_options.is_address(a) for a in found):
    raise argparse.ArgumentTypeError(
        f"must be HOST:PORT,HOST:PORT,..., got {text!r}")
  return found


def _heartbeat(text):
  return number(text, float, lambda v: 1.0 <= v < float("inf"),
                "a number of seconds >= 1")


def _devices(text):
  """A comma-separated list of device names, as a tuple; a count N names
  the logical CPUs /cpu:0 to /cpu:N-1."""
  if text.strip().isdigit():
    count = number(text, int, lambda v: v >= 1, "a count >= 1 or names")
    return tuple(f"/cpu:{d}" for d in range(count))
  names = tuple(n.strip() for n in text.split(","))
  accepted = ("a count of CPUs or a comma-separated list of device names "
              "such as /cpu:0,/cpu:1")
  if not all(names):
    raise argparse.ArgumentTypeError(f"must be {accepted}, got {text!r}")
  for name in names:
    try:
      tf.DeviceSpec.from_string(name)
    except ValueError:
      raise argparse.ArgumentTypeError(
          f"must be {accepted}; {name!r} is not a device name") from None
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise argparse.ArgumentTypeError(
        f"names {', '.join(twice)} twice in {text!r}")
  return names


# How a flag's value is written back (None: the flag is left out, its
# default being None).
def _text(value):
  return str(value)


def _float(value):
  return repr(float(value))  # repr: the same float once read back


def _names(value):
  return ",".join(value)


class _Flag(collections.namedtuple("_Flag", [
    "field",  # SessionOptions' field
    "flag",  # the command line's flag
    "kwargs",  # argparse's add_argument keywords but dest and default;
               # "{default}" in the help is the session's default, shown
    "text",  # value -> the flag's text (for argv)
])):
  """One session option on the command line."""

  def shown(self, value):
    """`value` as the flag's help shows a default: the flag of a
    --flag/--no-flag pair, a float as %g ("60", "0.9"), else its text."""
    if self.text is None:
      return self.write(value)[0]
    return f"{value:g}" if isinstance(value, float) else str(value)

  def write(self, value):
    """The argv that gives `value`."""
    if value is None:
      return []
    if self.text is None:  # a --flag/--no-flag pair
      return [self.flag if value else "--no-" + self.flag[2:]]
    return [self.flag, self.text(value)]


# The options whose flag is not the one their row makes (_plain_flag),
# in the order of the command's help and of a worker's argv; the others'
# follow in OPTIONS' order.
_SPECIAL = (
    _Flag("replicas", "--replicas", dict(
        type=_replicas, help="number of model replicas L, or 'auto' to "
        "tune it (default: {default})"), _text),
    _Flag("algorithm", "--algorithm", dict(
        choices=tb_options.ALGORITHMS,
        help="synchronisation of the replicas (default: {default})"), _text),
    _Flag("alpha", "--alpha", dict(
        type=_alpha, help="SMA correction factor (default: 1/replicas)"),
          _float),
    _Flag("central_momentum", "--central_momentum", dict(
        type=_momentum, help="momentum of the central model (default: "
        "{default})"), _float),
    _Flag("nonfinite", "--nonfinite", dict(
        choices=tb_options.NONFINITE, help="what a training run does with "
        "an infinity or NaN (default: {default}, as TensorFlow)"), _text),
    _Flag("cluster_timeout", "--cluster-timeout", dict(
        type=_seconds, metavar="SECONDS", help="on a cluster of workers, "
        "the seconds a wave waits for the others before it fails "
        "(default: {default})"), _float),
    _Flag("heartbeat_timeout", "--heartbeat-timeout", dict(
        type=_heartbeat, metavar="SECONDS", help="on a cluster of workers, "
        "the seconds a worker may send no heartbeat before the others fail "
        "naming it (default: {default}; a worker that dies is known within "
        "about a second)"), _float),
    _Flag("min_workers", "--min-workers", dict(
        type=count, metavar="M", help="on a cluster of workers, go on "
        "without a lost worker while at least M remain: the wave under way "
        "runs again among the survivors (default: a lost worker ends the "
        "job)"), _text),
    _Flag("membership_log", "--membership-log", dict(
        type=_path, metavar="FILE", help="with --min-workers, the job's "
        "changes of membership with their waves: written to FILE if it does "
        "not exist, else replayed (the workers it says left leave at its "
        "waves), which with the same seeds and data gives the same models "
        "to the bit"), _text),
    _Flag("max_workers", "--max-workers", dict(
        type=count, metavar="M", help="with --min-workers, take processes "
        "that ask to join (--join) in while the job has fewer than M "
        "workers (default: any number)"), _text),
    _Flag("elastic_timeout", "--elastic-timeout", dict(
        type=_seconds_or_none, metavar="SECONDS", help="with --min-workers, "
        "the seconds fewer than M survivors wait for workers to join (with "
        "--host-discovery, the launcher's) before they fail (default: they "
        "fail at once)"), _float),
    _Flag("join", "--join", dict(
        type=addresses, metavar="HOST:PORT,...", help="with --min-workers, "
        "join the running job whose workers started at these addresses "
        "(--hosts', or those tensorbow-run --workers prints): this process "
        "trains with them from a wave on"), _names),
    _Flag("devices", "--devices", dict(
        type=_devices, metavar="N|DEVICE,DEVICE,...", help="spread the "
        "replicas over these devices of each session, such as "
        "/cpu:0,/cpu:1, or N logical CPUs (a session gets the CPU devices "
        "named, whatever its ConfigProto asks); default: one device as "
        "TensorFlow places it"), _names),
    _Flag("prefetch", "--prefetch", dict(
        action=argparse.BooleanOptionalAction, help="pull the next wave's "
        "input pipeline elements while a wave computes (default: "
        "{default})"), None),
    _Flag("timeline", "--timeline", dict(
        type=_path, metavar="FILE", help="write a Chrome trace of the "
        "training runs (chrome://tracing, Perfetto); with --workers, one "
        "file of every worker"), _text),
    _Flag("logdir", "--logdir", dict(
        type=_path, metavar="DIR", help="write TensorBoard scalars of the "
        "training runs: wave time, images/s, L, workers, each replica's "
        "distance from the central model"), _text),
    _Flag("progress", "--progress", dict(
        type=_seconds, metavar="SECONDS", help="print a progress line this "
        "often (waves, images/s, L)"), _float),
)


# How a flag made from an option's row (_plain_flag) reads its text and
# writes a value back, by the type of the option's value (None: a
# --flag/--no-flag pair).
_READ = {
    bool: None,  # a --flag/--no-flag pair
    int: (lambda text: number(text, int, lambda v: True, "an int"), _text),
    float: (lambda text: number(text, float, lambda v: True, "a number"),
            _float),
    str: (str, _text),
}


def _plain_flag(option):
  """The flag of `option`, a row of `OPTIONS` with no row in `_SPECIAL`:
  `--name`, read as its default's type (a None default: its `kind`, else
  text).

  Raises:
    TypeError: for a default of another type (its flag needs a row in
      `_SPECIAL`).
  """
  kind = type(option.default) if option.default is not None else (
      option.kind or str)
  if kind not in _READ:
    read = ", ".join(k.__name__ for k in _READ)
    raise TypeError(f"option {option.name!r} is a {kind.__name__}, but a "
                    f"flag made from its row reads {read}: give its flag a "
                    f"row in cli/options.py's _SPECIAL")
  flag = "--" + option.name.replace("_", "-")
  shown = "" if option.default is None else " (default: {default})"
  # The meaning as it reads: no format field of str.format or argparse.
  meaning = option.meaning.replace("{", "{{").replace("}", "}}")
  help_ = meaning.replace("%", "%%") + shown
  if _READ[kind] is None:
    return _Flag(option.name, flag, dict(
        action=argparse.BooleanOptionalAction, help=help_), None)
  read, text = _READ[kind]
  return _Flag(option.name, flag, dict(type=read, help=help_), text)


def _flags():
  """Every option's flag: `_SPECIAL`'s, then those made from `OPTIONS`."""
  special = {f.field for f in _SPECIAL}
  return _SPECIAL + tuple(_plain_flag(o) for o in tb_options.OPTIONS
                          if o.name not in special)


def argv(options):
  """The flags that parse back to `options`, a `SessionOptions`
  (`from_args`)."""
  return [text for flag in _flags()
          for text in flag.write(getattr(options, flag.field))]


def flag_argv(field, value):
  """The command line's flag that sets `SessionOptions`' `field` to
  `value`, as argv (such as ["--replicas", "4"])."""
  [flag] = [f for f in _flags() if f.field == field]
  return flag.write(value)


def add_flags(parser):
  """Adds a flag for every field of `SessionOptions` to `parser`, with
  the session's default, shown in its help."""
  defaults = tb_options.SessionOptions()
  group = parser.add_argument_group("TensorBowSession options")
  for flag in _flags():
    default = getattr(defaults, flag.field)
    kwargs = dict(flag.kwargs, help=flag.kwargs["help"].format(
        default=flag.shown(default)))
    group.add_argument(flag.flag, dest=flag.field, default=default, **kwargs)


def from_args(args):
  """The `SessionOptions` of a namespace parsed by a parser `add_flags`
  made."""
  made = tb_options.SessionOptions
  return made(**{f: getattr(args, f) for f in made._fields})
