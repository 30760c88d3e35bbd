"""`TensorBowSession`'s options, declared once, checked before anything is
built, and the settings a session trains with.

`OPTIONS` is the one table of the session's options: each one's name,
default and meaning, and the check of its value where it needs no other
option. The session's signature (`session_signature`), `SessionOptions`
and its docstring (the meanings `TensorBowSession`'s docstring points to),
`check_options` and `tensorbow-run`'s flags (cli/options.py: `--name`,
read as the default's type, unless the option needs a flag of its own)
are all made from it, so an option is added, or its default changed, in
one row.
"""
import collections
import inspect
import os
import textwrap

import tensorflow as tf

from tensorbow import algorithms
from tensorbow import devices as tb_devices

ALGORITHMS = algorithms.NAMES
NONFINITE = ("propagate", "raise", "skip")
AUTO = "auto"

# What one setting of a session trains with; replicas="auto" changes it.
Settings = collections.namedtuple("Settings", [
    "replicas",  # L
    "algorithm",  # an algorithms.Algorithm, resolved for L
    "nonfinite",  # one of NONFINITE
    "stream_groups",  # the runtime's concurrent tasks
    "inline",  # each task's ops on its stream group's thread, as made
               # (retune may change the runtime's alone)
])


# The checks of one option's value on its own: (name, value) -> None.
# Each raises ValueError naming the option, the value and what is accepted.
def _is_number(value):
  return not isinstance(value, bool) and isinstance(value, (int, float))


def _replicas(name, value):
  if value != AUTO and (isinstance(value, bool) or
                        not isinstance(value, int) or value < 1):
    raise ValueError(f"{name} must be an int >= 1 or {AUTO!r}, got "
                     f"{value!r}")


def _nonfinite(name, value):
  if value not in NONFINITE:
    raise ValueError(f"{name} must be one of {NONFINITE}, got {value!r}")


def _seconds(name, value):
  if not _is_number(value) or not value > 0:
    raise ValueError(f"{name} must be a number of seconds > 0, got "
                     f"{value!r}")


def _heartbeat_seconds(name, value):
  if not _is_number(value) or not value >= 1.0:
    raise ValueError(f"{name} must be a number of seconds >= 1 (several "
                     f"heartbeats), got {value!r}")


def _true_or_false(name, value):
  if not isinstance(value, bool):
    raise ValueError(f"{name} must be True or False, got {value!r}")


def _path_or_none(name, value):
  if value is not None and not (isinstance(value, (str, os.PathLike)) and
                                os.fspath(value)):
    raise ValueError(f"{name} must be a path or None, got {value!r}")


def _seconds_or_none(name, value):
  if value is not None and (not _is_number(value) or
                            not 0 < value < float("inf")):
    raise ValueError(f"{name} must be a number of seconds > 0 or None, got "
                     f"{value!r}")


Option = collections.namedtuple("Option", [
    "name",  # TensorBowSession's keyword, SessionOptions' field
    "default",
    "meaning",  # what it means, as SessionOptions' docstring (and the help
                # of a flag made from the row) shows it
    "check",  # (name, value) -> raises ValueError for a value out of range
              # on its own; None: checked with other options (_check), by
              # algorithms.resolve or by devices.check
    "kind",  # the type of a value where a default of None does not tell
             # it: bool, int, float or str (None: str), read as such by
             # the flag tensorbow-run makes from the row
], defaults=[None])

# Every option of TensorBowSession, in its signature's order. A row is the
# whole of an option's declaration: the session's signature, SessionOptions
# and its docstring, and tensorbow-run's flag are made from it.
OPTIONS = (
    Option("replicas", 2, "L, the number of model replicas (learners), "
           ">= 1, or 'auto' to tune it", _replicas),
    Option("algorithm", "sma", "what keeps the replicas together: an "
           "instance from `tensorbow.algorithms` or its name (ALGORITHMS): "
           "'sma' (synchronous model averaging), 'easgd' (elastic "
           "averaging), 'ssgd' (synchronous SGD), 'asgd' (asynchronous SGD "
           "over the shared model), 'adaptive' (Adaptive SGD), 'local_sgd' "
           "(each replica trains alone and every `period` runs the central "
           "model takes an outer step on their average move: DiLoCo, "
           "post-local SGD), 'lookahead' (local SGD's outer step as "
           "Lookahead takes it: every 5 runs the slow weights move half "
           "way to the fast ones, at any L, one included) or 'none' "
           "(independent replicas; the central "
           "model is replica 0's, for measuring the cost of "
           "synchronisation)", None),
    Option("alpha", None, "the SMA correction factor (None: 1 / replicas; "
           "or give it to `algorithms.SMA`)", None),
    Option("central_momentum", 0.9, "the momentum of the central model, in "
           "[0, 1)", None),
    Option("nonfinite", "propagate", "what a training run does with an "
           "infinity or NaN in a replica's fetches or in what its optimizer "
           "applies (NONFINITE): 'propagate' (as TensorFlow), 'raise' "
           "(InvalidArgumentError, nothing committed) or 'skip' (those "
           "replicas are left out of the wave's update and re-seeded from "
           "the central model, with a warning)", _nonfinite),
    Option("cluster_timeout", 60.0, "with workers named by `TF_CONFIG`, the "
           "seconds a wave waits for the other workers before it fails",
           _seconds),
    Option("heartbeat_timeout", 3.0, "with workers, the seconds a worker may "
           "send no heartbeat before the others fail naming it "
           "(scaleout/heartbeat.py)", _heartbeat_seconds),
    Option("devices", None, "None or one device (TensorFlow places the "
           "model), or the devices to spread the replicas over, such as "
           "['/cpu:0', '/cpu:1'] (with `ConfigProto(device_count={'CPU': "
           "2})`): each keeps its own copy of the central model for its "
           "replicas, and after each wave the copies' moves are summed "
           "('sma', 'easgd' and 'ssgd')", None),
    Option("prefetch", True, "whether a training run fed by an input "
           "pipeline (a `tf.data` iterator's `get_next()`, a queue's "
           "dequeue) pulls the next wave's elements while its wave computes "
           "(False: when it asks)", _true_or_false),
    Option("retain_memory", True, "whether the session sets the process's "
           "C allocator (glibc) to keep the blocks of up to 1 GiB it frees "
           "for reuse rather than return them to the system at once, so "
           "TensorFlow's copies of a large graph constant (arrays given to "
           "`from_tensor_slices`) do not fault on every page; it lasts for "
           "the process (allocator.py; `tensorbow-run --retain-memory`, "
           "its default, sets it before the script starts)", _true_or_false),
    Option("timeline", None, "a path for a Chrome trace of the training "
           "runs (observe.py)", _path_or_none),
    Option("logdir", None, "a directory for TensorBoard scalars of the "
           "training runs (observe.py)", _path_or_none),
    Option("progress", None, "the seconds between progress lines "
           "(observe.py)", _seconds_or_none),
    Option("min_workers", None, "with workers, how many must remain for the "
           "survivors of a lost one to go on without it (None: the others "
           "fail)", None),
    Option("membership_log", None, "with `min_workers`, a file of the job's "
           "changes of membership (written if absent, else replayed; "
           "scaleout/__init__.py)", _path_or_none),
    Option("join", None, "with `min_workers`, the addresses a running job's "
           "workers started at, to join that job", None),
    Option("max_workers", None, "with `min_workers`, how many workers an "
           "elastic job takes in at most", None),
    Option("elastic_timeout", None, "with `min_workers`, the seconds fewer "
           "than `min_workers` wait for workers to join", None),
)


def describe():
  """Every option of `OPTIONS` with its default and meaning, a paragraph
  each, as `SessionOptions`' docstring (`help()`) lists them."""
  lines = []
  for option in OPTIONS:
    lines += textwrap.wrap(f"{option.name}={option.default!r}: "
                           f"{option.meaning}.", 70, subsequent_indent="  ",
                           break_long_words=False, break_on_hyphens=False)
  return "\n".join(lines)


# The options that only keep several replicas together: with one replica
# training the user's own variables they have no effect.
_KEEPING_REPLICAS = ("algorithm", "alpha", "central_momentum")

# The options of an elastic job of workers (scaleout.from_environ's).
_ELASTIC = ("min_workers", "membership_log", "join", "max_workers",
            "elastic_timeout")


class SessionOptions(collections.namedtuple(
    "SessionOptions", [o.name for o in OPTIONS],
    defaults=[o.default for o in OPTIONS])):
  """Every `TensorBowSession` option, with its default (`OPTIONS`);
  `devices` a sequence of device names or None.

  Raises:
    TypeError: for a keyword that is not an option, named as Python names
      it for `TensorBowSession()`.
  """
  __slots__ = ()

  def __new__(cls, *args, **options):
    for name in options:
      if name not in cls._fields:
        raise TypeError(f"TensorBowSession() got an unexpected keyword "
                        f"argument {name!r}")
    return super().__new__(cls, *args, **options)

  def session_kwargs(self):
    """The keyword arguments of `TensorBowSession` (and of
    `TensorBowSessionCreator`) these options are."""
    return self._asdict()

  def check(self, workers=1):
    """Checks the options as the session will, for `workers` workers.

    Returns:
      The algorithm resolved for `replicas` on each of `workers` workers
      (for "auto", for the one replica it starts with).

    Raises:
      ValueError: for options the session would refuse, such as more
        devices than replicas.
    """
    devices = tb_devices.check(self.devices)
    return _check(self, workers, len(devices) if devices else 1)

  def algorithm_spec(self):
    """The algorithm these options name (`algorithms.resolve`), to be
    resolved for each L the session trains with.

    Raises:
      ValueError: an unknown algorithm, or SMA's arguments given both to
        the session and to an `algorithms.SMA` instance.
    """
    return algorithms.resolve(self.algorithm, self.alpha,
                              self.central_momentum)

  def without_effect_alone(self, given):
    """The options among `given` (the names of those passed) that have no
    effect while one replica trains the user's own variables, as
    tf.compat.v1.Session does (DESIGN.md, "L = 1 is plain training"),
    each written as passed: the algorithm and SMA's settings, unless at
    their defaults (an algorithm that means the default's)."""
    default = SessionOptions()
    named = []
    for name in _KEEPING_REPLICAS:
      value = getattr(self, name)
      if name not in given or value == getattr(default, name):
        continue
      if name == "algorithm" and algorithms.resolve(value) == (
          algorithms.resolve(default.algorithm)):
        continue
      named.append(f"{name}={value!r}")
    return named

  def elastic(self):
    """{option: value} of the options of an elastic job of workers, as
    `scaleout.from_environ` takes them."""
    return {name: getattr(self, name) for name in _ELASTIC}

  def session_config(self, config):
    """`config` (a ConfigProto or None) with at least as many logical
    CPUs as `devices` names: a script written for one device need not
    ask for the CPU devices its replicas are spread over (as
    `tensorbow-run --devices` spreads them)."""
    needed = tb_devices.cpus_needed(self.devices)
    has = config.device_count.get("CPU", 1) if config is not None else 1
    if needed <= has:
      return config
    more = tf.compat.v1.ConfigProto()
    if config is not None:
      more.CopyFrom(config)
    more.device_count["CPU"] = needed
    return more


# help(SessionOptions) gives every option's meaning, from its row.
SessionOptions.__doc__ += "\n  Options:\n" + textwrap.indent(
    describe(), "    ") + "\n"


def session_signature(function=None):
  """The signature of a function that takes `TensorBowSession`'s options
  as keywords only, with their defaults (`OPTIONS`).

  Args:
    function: None, or a function whose parameters come first but for the
      `**options` it takes the options with, such as
      `TensorBowSession.__init__(self, target="", graph=None, config=None,
      **options)`.

  Returns:
    An `inspect.Signature`: `function`'s parameters (none without it) and
    then every option, keyword-only, with its default.
  """
  first = [] if function is None else [
      p for p in inspect.signature(function).parameters.values()
      if p.kind != inspect.Parameter.VAR_KEYWORD]
  return inspect.Signature(first + [
      inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY,
                        default=o.default) for o in OPTIONS])


def _check_signature():
  """`check_options`' parameters: the options with their defaults but
  `devices` their number (1), and the cluster's `workers` (1) after
  `nonfinite`, in the order session.py gives them positionally."""
  parameters = [
      inspect.Parameter(o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                        default=1 if o.name == "devices" else o.default)
      for o in OPTIONS]
  parameters.insert(
      [p.name for p in parameters].index("nonfinite") + 1,
      inspect.Parameter("workers", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                        default=1))
  return inspect.Signature(parameters)


_CHECK_SIGNATURE = _check_signature()


def check_options(*args, **kwargs):
  """Checks `TensorBowSession`'s options for a cluster of `workers`
  workers, the replicas spread over `devices` devices.

  Args:
    *args, **kwargs: as `check_options.__signature__` says: the options
      of `OPTIONS` in its order with its defaults, but `devices` the
      number of devices (1), and `workers` (1) after `nonfinite`.

  Returns:
    The algorithm resolved for `replicas` on each of `workers` workers
    (for "auto", for the one replica it starts with).

  Raises:
    TypeError: for an argument `check_options` does not take (an unknown
      keyword named as Python names it).
    ValueError: for an option out of range.
  """
  try:
    bound = _CHECK_SIGNATURE.bind(*args, **kwargs)
  except TypeError as e:
    raise TypeError(f"check_options() {e}") from None
  bound.apply_defaults()
  options = dict(bound.arguments)
  workers, devices = options.pop("workers"), options.pop("devices")
  return _check(SessionOptions(**options), workers, devices)


check_options.__signature__ = _CHECK_SIGNATURE


def _check(options, workers, devices):
  """Checks `options` (a `SessionOptions`, its `devices` aside) for
  `workers` workers and `devices` devices; returns the algorithm as
  `check_options` does."""
  for option in OPTIONS:
    if option.check is not None:
      option.check(option.name, getattr(options, option.name))
  replicas, nonfinite = options.replicas, options.nonfinite
  _check_membership(options.min_workers, options.membership_log, workers)
  workers = _check_joining(options.join, options.max_workers,
                           options.min_workers, workers)
  _check_elastic_timeout(options.elastic_timeout, options.min_workers)
  resolved = options.algorithm_spec().resolved(
      (1 if replicas == AUTO else replicas) * workers)
  resolved.check(nonfinite=nonfinite)
  if workers > 1:
    _check_workers(replicas, resolved, workers)
  if devices > 1:
    _check_devices(replicas, resolved, nonfinite, workers, devices)
  return resolved


def _check_membership(min_workers, membership_log, workers):
  """Raises ValueError for `min_workers` out of range for a cluster of
  `workers` workers, or a `membership_log` no membership change writes."""
  # Alone, the bound waits for the cluster a worker's TF_CONFIG names.
  if min_workers is not None and (
      isinstance(min_workers, bool) or not isinstance(min_workers, int) or
      min_workers < 1 or 1 < workers < min_workers):
    raise ValueError(f"min_workers must be None or an int >= 1 and at most "
                     f"the workers of the cluster ({workers}), got "
                     f"{min_workers!r}")
  if membership_log is not None and min_workers is None:
    raise ValueError("membership_log needs min_workers: only workers that "
                     "go on without a lost one change their membership")


def _check_elastic_timeout(elastic_timeout, min_workers):
  """Raises ValueError for `elastic_timeout` out of range, or given to a
  job that is not elastic (no `min_workers`)."""
  if elastic_timeout is not None and (
      isinstance(elastic_timeout, bool) or
      not isinstance(elastic_timeout, (int, float)) or
      not 0 <= elastic_timeout < float("inf") or min_workers is None):
    raise ValueError(f"elastic_timeout must be None or a number of seconds "
                     f">= 0, with min_workers, got {elastic_timeout!r}")


def is_address(text):
  """Whether `text` is a worker's "host:port" address."""
  host, _, port = text.rpartition(":")
  return bool(host) and port.isdigit()


def _check_workers(replicas, algorithm, workers):
  """Raises ValueError if `replicas` replicas of `algorithm` cannot train
  on each of `workers` workers (two or more) together."""
  if not algorithm.spans_workers:
    raise ValueError(f"algorithm {algorithm.name!r} cannot keep the workers "
                     f"of a cluster together (TF_CONFIG names {workers})")
  if replicas == AUTO:
    raise ValueError(f"replicas={AUTO!r} cannot tune a cluster's workers "
                     "together; give each worker a number of replicas")

def _check_joining(join, max_workers, min_workers, workers):
  """Raises ValueError for `join` or `max_workers` out of range; returns
  the workers to check the other options for (a joiner's: two or more)."""
  if max_workers is not None and (
      isinstance(max_workers, bool) or not isinstance(max_workers, int) or
      max_workers < max(workers, min_workers or 1, 2)):
    raise ValueError(f"max_workers must be None or an int >= 2, the "
                     f"workers of the cluster ({workers}) and min_workers, "
                     f"got {max_workers!r}")
  if join is None:
    if max_workers is not None and min_workers is None:
      raise ValueError("max_workers needs min_workers: only an elastic job "
                       "takes workers in")
    return workers
  if (isinstance(join, (str, bytes)) or not isinstance(join, (list, tuple))
      or not join or not all(isinstance(a, str) and is_address(a)
                             for a in join)):
    raise ValueError(f"join must be the addresses (\"host:port\") a job's "
                     f"workers started at, got {join!r}")
  if min_workers is None:
    raise ValueError("join needs min_workers: only an elastic job takes "
                     "workers in")
  if workers > 1:
    raise ValueError(f"join is for a process outside the job, but TF_CONFIG "
                     f"names a cluster of {workers} workers")
  return 2


def check_session_options(workers=1, devices=None, **options):
  """Checks `TensorBowSession`'s keyword options as the session takes them
  (`devices` a list of device names or None, not their number) for
  `workers` workers; returns the algorithm as `check_options` does.

  Raises:
    TypeError: for an option `TensorBowSession` does not take.
    ValueError: for an option out of range.
  """
  return SessionOptions(devices=devices, **options).check(workers)


def _check_devices(replicas, algorithm, nonfinite, workers, devices):
  """Raises ValueError if `replicas` replicas of `algorithm` cannot be
  spread over `devices` devices."""
  if replicas == AUTO:
    raise ValueError(f"replicas={AUTO!r} cannot tune replicas spread over "
                     "devices; give their number")
  if replicas < devices:
    raise ValueError(f"{devices} devices need at least as many replicas, got "
                     f"replicas={replicas}")
  if not algorithm.spans_devices:
    raise ValueError(f"algorithm {algorithm.name!r} cannot keep replicas on "
                     "several devices together")
  if nonfinite == "skip":
    raise ValueError("nonfinite='skip' cannot leave replicas out of a wave "
                     "spread over several devices")


def checkpoint_config(settings):
  """What a checkpoint's replica state is saved with (waves.Trainer)."""
  algorithm, replicas = settings.algorithm, settings.replicas
  return {"replicas": replicas, "algorithm": algorithm.name,
          "alpha": float(getattr(algorithm, "alpha", 1.0 / replicas)),
          "central_momentum": float(getattr(algorithm, "central_momentum",
                                            0.9))}
