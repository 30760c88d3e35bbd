"""`tensorbow-run`: runs an unmodified TF1 script on `TensorBowSession`.

    tensorbow-run [--replicas N|auto]
                  [--algorithm sma|easgd|ssgd|asgd|adaptive|none]
                  [--alpha A] [--central_momentum M]
                  [--nonfinite propagate|raise|skip]
                  [--workers W [--threads T] |
                   --hosts HOST:PORT,... --worker-index K]
                  script.py [script args...]

With `--workers W` it starts W such processes on this machine as the
workers of one cluster (cli/launch.py): free ports on 127.0.0.1, each
worker's `TF_CONFIG` and intra-op threads (cores / W, or T), output lines
prefixed with the worker's index; it returns the first non-zero exit
status after stopping the others. With `--hosts` it runs, in this
process, worker K of the cluster of those addresses (one per machine).

The script runs in this process (`runpy.run_path`, as `__main__`, with
`sys.argv` set to `[script.py, args...]` and the script's folder first on
`sys.path`, as `python script.py` would). While it runs, the public name
`tf.compat.v1.Session` -- the same class under `tensorflow.compat.v1`,
`import tensorflow.compat.v1 as tf; tf.Session` and the other loaded
`tensorflow...compat.v1` API modules that re-export it -- is replaced by a
stand-in whose constructor returns:

- a plain `tf.compat.v1.Session` when `target` is non-empty (a remote
  master: TensorBow trains on one local device only);
- otherwise `TensorBowSession(target, graph, config, replicas=...)`. Over a
  graph without training runs it behaves as a plain session, so sessions
  the script opens for evaluation or other graphs need no exception.

`tf.compat.v1.InteractiveSession` is replaced alike: its TensorBow session
makes itself the default session until closed, as TensorFlow's does.
`tf.compat.v1.train.ChiefSessionCreator` is replaced alike, by a
`TensorBowSessionCreator` with the same options, both under its public
names and where `MonitoredTrainingSession` and `MonitoredSession` find it:
monitored sessions train with TensorBow, hooks and all. The originals are
put back when the script ends, however it ends, and a line on stderr says
how many TensorBow sessions the script made and how many training runs
they ran (with a warning if none trained).

Limitations:

- Only those names are patched. TensorFlow's other code that builds
  sessions from `tensorflow.python.client.session` (`Supervisor`,
  `SessionManager` and `WorkerSessionCreator` used directly, Keras's
  backend session) still get plain TensorFlow sessions.
- `TensorBowSession` is not a subclass of `tf.compat.v1.Session`. The
  stand-in answers `isinstance(sess, tf.compat.v1.Session)` with True for
  both kinds of session and forwards class attributes (such as
  `Session.reset`), but `type(sess) is tf.compat.v1.Session` is False, and
  TensorFlow's internal `isinstance` checks against the original class
  (which the patch does not touch) reject a `TensorBowSession`.
- A class the script derives from `tf.compat.v1.Session` is derived from the
  original class instead: its sessions are plain TensorFlow sessions.
- A name bound before the patch (a module the script imports that was
  already imported by this process) keeps the original class.
"""
import argparse
import contextlib
import importlib
import logging
import os
import runpy
import sys

import tensorflow as tf

from tensorbow import cluster as tb_cluster
from tensorbow import compat
from tensorbow import monitored
from tensorbow import options as tb_options
from tensorbow import session as tb_session
from tensorbow.cli import chief
from tensorbow.cli import launch

_API_PREFIX = "tensorflow."
_PRIVATE_PREFIX = "tensorflow.python."


class Report(object):
  """What the TensorBow sessions a script made did: each session's counts
  (TensorBowSession.counts, kept without the session)."""

  def __init__(self):
    self.counts = []

  def made(self, session):
    if isinstance(session, tb_session.TensorBowSession):
      self.counts.append(session.counts)
    return session

  def __str__(self):
    sessions = len(self.counts)
    runs = sum(c["training_runs"] for c in self.counts)
    if sessions == 0:
      return ("tensorbow-run: warning: the script made no TensorBowSession; "
              "whatever it trained ran on plain TensorFlow")
    text = (f"tensorbow-run: the script made {sessions} TensorBowSession"
            f"{'s' if sessions != 1 else ''}, which ran {runs} training "
            f"run{'s' if runs != 1 else ''}")
    if runs == 0:
      text += ("; warning: no training run: whatever it trained ran on "
               "plain TensorFlow")
    return text


def session_class(original, replicas=2, algorithm="sma", alpha=None,
                  central_momentum=0.9, nonfinite="propagate", report=None,
                  interactive=False):
  """A stand-in for `tf.compat.v1.Session` that builds TensorBow sessions.

  Args:
    original: the `tf.compat.v1.Session` class being replaced.
    replicas: passed to `TensorBowSession`.
    algorithm: passed to `TensorBowSession`.
    alpha: passed to `TensorBowSession`.
    central_momentum: passed to `TensorBowSession`.
    nonfinite: passed to `TensorBowSession`.

    report: a `Report` told of every session made, or None.
    interactive: whether the sessions are `InteractiveSession`s (they make
      themselves the default session, and their graph the default graph
      if given).

  Returns:
    A class whose constructor takes `(target="", graph=None, config=None)`
    like `tf.compat.v1.Session` and returns an `original` session for a
    non-empty `target`, a `TensorBowSession` otherwise.
  """
  report = report or Report()
  made = interactive_session if interactive else tb_session.TensorBowSession
  options = dict(replicas=replicas, algorithm=algorithm, alpha=alpha,
                 central_momentum=central_momentum, nonfinite=nonfinite)

  class _Meta(type):
    """Makes the stand-in pass for `tf.compat.v1.Session` in scripts."""

    def __new__(mcs, name, bases, namespace):
      if any(type(b) is mcs for b in bases):
        # A script's own Session subclass: derive it from the original.
        bases = tuple(original if type(b) is mcs else b for b in bases)
        return type(original)(name, bases, namespace)
      return super().__new__(mcs, name, bases, namespace)

    def __instancecheck__(cls, instance):
      return isinstance(instance, (original, tb_session.TensorBowSession))

    def __subclasscheck__(cls, subclass):
      return issubclass(subclass, (original, tb_session.TensorBowSession))

    def __getattr__(cls, name):
      return getattr(original, name)

  class Session(metaclass=_Meta):
    """`tf.compat.v1.Session` as replaced by `tensorbow-run`."""
    tensorbow_original = original

    def __new__(cls, target="", graph=None, config=None):
      if target:
        return original(target, graph, config)
      return report.made(made(target, graph, config, **options))

  Session.__qualname__ = Session.__name__ = original.__name__
  return Session


def interactive_session(target="", graph=None, config=None, **options):
  """A TensorBowSession made as `tf.compat.v1.InteractiveSession` makes
  itself: the default session until closed (and its graph, if given, the
  default graph), so `Tensor.eval()` and `Operation.run()` use it."""
  sess = tb_session.TensorBowSession(target, graph, config, **options)
  contexts = ([graph.as_default()] if graph is not None else []) + [
      sess.as_default()]
  for context in contexts:
    context.__enter__()
  close = sess.close

  def close_interactive():
    close()
    while contexts:
      contexts.pop().__exit__(None, None, None)

  sess.close = close_interactive
  return sess


def creator_class(original, report=None, **options):
  """A stand-in for `tf.compat.v1.train.ChiefSessionCreator`.

  Args:
    original: the `ChiefSessionCreator` class being replaced.
    **options: passed to `TensorBowSession`.

  Returns:
    A subclass of `TensorBowSessionCreator` (so of `original`) with
    `original`'s constructor; a creator with a remote `master` makes plain
    TensorFlow sessions, as the `Session` stand-in does.
  """

  class ChiefSessionCreator(monitored.TensorBowSessionCreator):
    """`tf.compat.v1.train.ChiefSessionCreator` as replaced by
    `tensorbow-run`."""

    def __init__(self, scaffold=None, master="", config=None,
                 checkpoint_dir=None, checkpoint_filename_with_path=None):
      super().__init__(scaffold, master, config, checkpoint_dir,
                       checkpoint_filename_with_path, **options)

    def _get_session_manager(self):
      if self._master:
        return compat.base_session_manager(original, self)
      return super()._get_session_manager()

    def create_session(self):
      session = super().create_session()
      return report.made(session) if report is not None else session

  return ChiefSessionCreator


def worker_creator_class(original, report=None, **options):
  """A stand-in for `tf.compat.v1.train.WorkerSessionCreator` on a worker
  of a cluster (`MonitoredTrainingSession(is_chief=False)`).

  TensorFlow's waits for the chief to initialise variables it shares
  with the worker; a TensorBow worker's variables are its own, so that
  wait would never end. The stand-in initialises them as the chief's
  creator does (no checkpoint: MonitoredTrainingSession gives a worker
  none); the chief's model is taken before the first wave.
  """
  chief = creator_class(original, report, **options)

  class WorkerSessionCreator(chief):
    """`tf.compat.v1.train.WorkerSessionCreator` as replaced by
    `tensorbow-run` on a cluster."""

    def __init__(self, scaffold=None, master="", config=None,
                 max_wait_secs=30 * 60):
      del max_wait_secs  # nothing to wait for
      super().__init__(scaffold, master, config)

  return WorkerSessionCreator


def _aliases(name, original):
  """The loaded TensorFlow API modules whose attribute `name` is `original`
  (`tf.compat.v1`, `tf.compat.v2.compat.v1`, ...).

  They are TensorFlow's module wrappers: setting an attribute on one also
  sets it on the generated module it wraps and refreshes its cache.
  """
  found = []
  for module_name, module in list(sys.modules.items()):
    if (module is None or not module_name.startswith(_API_PREFIX) or
        module_name.startswith(_PRIVATE_PREFIX)):
      continue
    if (getattr(module, name, None) is original and
        all(m is not module for m in found)):
      found.append(module)
  return found


@contextlib.contextmanager
def patch_session(replicas=2, algorithm="sma", alpha=None,
                  central_momentum=0.9, nonfinite="propagate", report=None):
  """Replaces `tf.compat.v1.Session` and `ChiefSessionCreator` by TensorBow
  stand-ins, then restores them.

  Besides the public names, TensorFlow's `monitored_session` module gets
  the creator stand-in: it is what `MonitoredTrainingSession` and a
  `MonitoredSession` without a `session_creator` use. On a cluster
  (`TF_CONFIG`), `WorkerSessionCreator` is replaced too
  (`worker_creator_class`).

  Args:
    replicas: passed to `TensorBowSession`.
    algorithm: passed to `TensorBowSession`.
    alpha: passed to `TensorBowSession`.
    central_momentum: passed to `TensorBowSession`.
    nonfinite: passed to `TensorBowSession`.

  Yields:
    The `Session` stand-in class (see `session_class`).

  Raises:
    RuntimeError: `tf.compat.v1.Session` is already patched.
    ValueError: for an option out of range.
  """
  # `import tensorflow.compat.v1` loads a new copy of that API module unless
  # one is in sys.modules already; load it now so the script's gets patched.
  importlib.import_module("tensorflow.compat.v1")
  original = tf.compat.v1.Session
  if "tensorbow_original" in vars(original):
    raise RuntimeError("tf.compat.v1.Session is already replaced by "
                       "tensorbow-run's stand-in; patch_session does not nest")
  options = dict(replicas=replicas, algorithm=algorithm, alpha=alpha,
                 central_momentum=central_momentum, nonfinite=nonfinite)
  job = tb_cluster.from_environ()
  tb_options.check_options(**options,
                           workers=1 if job is None else job.num_workers)
  report = report or Report()
  stand_in = session_class(original, report=report, **options)
  interactive = tf.compat.v1.InteractiveSession
  creator = compat.monitored_session.ChiefSessionCreator
  patches = [(m, "Session", original, stand_in)
             for m in _aliases("Session", original)]
  patches += [(m, "InteractiveSession", interactive, session_class(
      interactive, report=report, interactive=True, **options))
              for m in _aliases("InteractiveSession", interactive)]
  creator_stand_in = creator_class(creator, report=report, **options)
  patches += [(m, "ChiefSessionCreator", creator, creator_stand_in)
              for m in _aliases("ChiefSessionCreator", creator) +
              [compat.monitored_session]]
  patches += chief.patches(job)
  if job is not None:
    worker = compat.monitored_session.WorkerSessionCreator
    worker_stand_in = worker_creator_class(creator, report=report, **options)
    patches += [(m, "WorkerSessionCreator", worker, worker_stand_in)
                for m in _aliases("WorkerSessionCreator", worker) +
                [compat.monitored_session]]
  try:
    for module, name, _, new in patches:
      setattr(module, name, new)
    yield stand_in
  finally:
    for module, name, old, _ in patches:
      setattr(module, name, old)


def _number(text, kind, accept, accepted):
  try:
    value = kind(text)
  except ValueError:
    value = None
  if value is None or not accept(value):
    raise argparse.ArgumentTypeError(f"must be {accepted}, got {text}")
  return value


def _replicas(text):
  if text == "auto":
    return text
  return _number(text, int, lambda v: v >= 1, "an int >= 1 or 'auto'")


def _alpha(text):
  return _number(text, float, lambda v: 0.0 < v <= 1.0, "in (0, 1]")


def _momentum(text):
  return _number(text, float, lambda v: 0.0 <= v < 1.0, "in [0, 1)")


def _workers(text):
  return _number(text, int, lambda v: v >= 1, "an int >= 1")


def _hosts(text):
  hosts = [h.strip() for h in text.split(",") if h.strip()]
  try:
    tb_cluster.Cluster(hosts, 0)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return hosts


def _parser():
  parser = argparse.ArgumentParser(
      prog="tensorbow-run",
      description="Run an unmodified TF1 script with tf.compat.v1.Session "
      "replaced by tensorbow.TensorBowSession (sessions with a remote target "
      "stay plain TensorFlow sessions).")
  parser.add_argument("--replicas", type=_replicas, default=2,
                      help="number of model replicas L (default: 2)")
  parser.add_argument("--algorithm", choices=tb_options.ALGORITHMS,
                      default="sma",
                      help="synchronisation of the replicas (default: sma)")
  parser.add_argument("--alpha", type=_alpha, default=None,
                      help="SMA correction factor (default: 1/replicas)")
  parser.add_argument("--central_momentum", type=_momentum, default=0.9,
                      help="momentum of the central model (default: 0.9)")
  parser.add_argument("--nonfinite", choices=tb_options.NONFINITE,
                      default="propagate",
                      help="what a training run does with an infinity or NaN "
                      "(default: propagate, as TensorFlow)")
  parser.add_argument("--workers", type=_workers, default=1,
                      help="start this many workers of one cluster on this "
                      "machine (default: 1, this process alone)")
  parser.add_argument("--threads", type=_workers, default=None,
                      help="with --workers: intra-op threads per worker "
                      "(default: cores / workers)")
  parser.add_argument("--hosts", type=_hosts, default=None,
                      help="HOST:PORT,...: the workers of a cluster on "
                      "several machines; this process is --worker-index")
  parser.add_argument("--worker-index", type=int, default=None,
                      help="with --hosts: this process's worker")
  parser.add_argument("script", help="the TF1 Python script to run")
  parser.add_argument("script_args", nargs=argparse.REMAINDER,
                      help="arguments passed to the script")
  return parser


def main(argv=None):
  """Runs the `tensorbow-run` command line.

  Args:
    argv: the arguments after the program name; None means `sys.argv[1:]`.

  Returns:
    0 once the script has finished; with --workers, the workers' status
    (launch.run_workers).

  Raises:
    SystemExit: on a bad argument or a missing script (status 2), or when
      the script exits. Whatever the script raises propagates.
  """
  parser = _parser()
  args = parser.parse_args(argv)
  if not os.path.isfile(args.script):
    parser.error(f"script not found: {args.script}")
  if args.hosts is not None:
    if args.workers != 1:
      parser.error("give --workers or --hosts, not both")
    try:
      job = tb_cluster.Cluster(args.hosts, args.worker_index)
    except ValueError as e:
      parser.error(f"--worker-index: {e}")
    os.environ["TF_CONFIG"] = tb_cluster.to_environ(job)
  elif args.worker_index is not None:
    parser.error("--worker-index needs --hosts")
  if args.workers > 1:
    return launch.run_workers(_worker_command(args), args.workers,
                              args.threads)
  print(f"tensorbow-run: {args.script} runs with TensorBowSession, "
        f"{args.replicas} replicas (algorithm {args.algorithm})",
        file=sys.stderr, flush=True)
  saved_argv, saved_path = sys.argv, list(sys.path)
  sys.argv = [args.script] + list(args.script_args)
  sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
  report = Report()
  try:
    with patch_session(args.replicas, args.algorithm, args.alpha,
                       args.central_momentum, args.nonfinite, report), \
        _tuner_log(args.replicas == "auto"):
      runpy.run_path(args.script, run_name="__main__")
  finally:
    sys.argv = saved_argv
    sys.path[:] = saved_path
    print(report, file=sys.stderr, flush=True)
  return 0


def _worker_command(args):
  """The argv of one worker of `tensorbow-run --workers`."""
  command = [sys.executable, "-m", "tensorbow.run",
             "--replicas", str(args.replicas), "--algorithm", args.algorithm,
             "--central_momentum", repr(args.central_momentum),
             "--nonfinite", args.nonfinite]
  if args.alpha is not None:
    command += ["--alpha", repr(args.alpha)]
  return command + [args.script] + list(args.script_args)


@contextlib.contextmanager
def _tuner_log(shown):
  """Shows the auto-tuner's decisions (INFO on the "tensorbow" logger) on
  stderr while the script runs, if `shown`."""
  if not shown:
    yield
    return
  logger = logging.getLogger("tensorbow")
  handler = logging.StreamHandler(sys.stderr)
  handler.setFormatter(logging.Formatter("tensorbow-run: %(message)s"))
  handler.setLevel(logging.INFO)
  level = logger.level
  logger.addHandler(handler)
  if logger.getEffectiveLevel() > logging.INFO:
    logger.setLevel(logging.INFO)
  try:
    yield
  finally:
    logger.removeHandler(handler)
    logger.setLevel(level)


if __name__ == "__main__":
  sys.exit(main())
