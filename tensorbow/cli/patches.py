"""The stand-ins `tensorbow-run` puts in TensorFlow's place while a script
runs, and the patch that puts them there and back (`patch_session`).

The public name `tf.compat.v1.Session` -- the same class under
`tensorflow.compat.v1`, `import tensorflow.compat.v1 as tf; tf.Session` and
the other loaded `tensorflow...compat.v1` API modules that re-export it --
is replaced by a stand-in whose constructor returns:

- a plain `tf.compat.v1.Session` when `target` is non-empty (a remote
  master: TensorBow trains on one local device only);
- otherwise `TensorBowSession(target, graph, config, **options)`, the
  options being one `options.SessionOptions`. Over a graph without
  training runs it behaves as a plain session, so sessions the script
  opens for evaluation or other graphs need no exception.

`tf.compat.v1.InteractiveSession` is replaced alike, its sessions being
`TensorBowInteractiveSession`s: the subclass of `TensorBowSession` that,
as TensorFlow's subclass of its own session, is the default session from
construction until closed. `tf.compat.v1.train.ChiefSessionCreator` is
replaced by a `TensorBowSessionCreator` with the same options, both under
its public names and where `MonitoredTrainingSession` and
`MonitoredSession` find it: monitored sessions train with TensorBow, hooks
and all. On a cluster (`TF_CONFIG`) `WorkerSessionCreator` is replaced
too, and a worker other than the chief writes no checkpoint files or
summaries (chief.py).

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
import contextlib
import importlib
import sys

import tensorflow as tf

from tensorbow.scaleout import cluster as tb_cluster
from tensorbow import compat
from tensorbow import monitored
from tensorbow import session as tb_session
from tensorbow.cli import chief
from tensorbow.cli import options as cli_options

_API_PREFIX = "tensorflow."
_PRIVATE_PREFIX = "tensorflow.python."


class TensorBowInteractiveSession(tb_session.TensorBowSession):
  """A `TensorBowSession` that, as `tf.compat.v1.InteractiveSession`, makes
  itself the default session when made, and its graph (if given) the
  default graph, so `Tensor.eval()` and `Operation.run()` use it; `close`
  restores the defaults, once.

  Args:
    target, graph, config: as for `tf.compat.v1.InteractiveSession`.
    **options: passed to `TensorBowSession`.
  """

  def __init__(self, target="", graph=None, config=None, **options):
    super().__init__(target, graph, config, **options)
    self._explicitly_closed = False
    # Entered here and left in close, as TensorFlow's InteractiveSession.
    self._default_session = self.as_default()
    self._default_session.__enter__()
    self._default_graph = graph.as_default() if graph is not None else None
    if self._default_graph is not None:
      self._default_graph.__enter__()

  def close(self):
    """Closes the session and stops it being the default session."""
    super().close()
    if self._explicitly_closed:
      return
    self._explicitly_closed = True
    if self._default_graph is not None:
      self._default_graph.__exit__(None, None, None)
    self._default_session.__exit__(None, None, None)


def session_class(original, made, options, report=None):
  """A stand-in for `tf.compat.v1.Session` or `InteractiveSession`.

  Args:
    original: the class being replaced.
    made: what the stand-in makes for a local target: `TensorBowSession`
      or `TensorBowInteractiveSession`.
    options: an `options.SessionOptions`.
    report: told of every session made (`report.made(session)`), or None.

  Returns:
    A class whose constructor takes `(target="", graph=None, config=None)`
    like `original` and returns an `original` session for a non-empty
    `target`, a `made` session otherwise; its instances, and subclasses,
    are `original`'s and `made`'s.
  """
  kwargs = options.session_kwargs()

  class _Meta(type):
    """Makes the stand-in pass for `original` in scripts."""

    def __new__(mcs, name, bases, namespace):
      if any(type(b) is mcs for b in bases):
        # A script's own Session subclass: derive it from the original.
        bases = tuple(original if type(b) is mcs else b for b in bases)
        return type(original)(name, bases, namespace)
      return super().__new__(mcs, name, bases, namespace)

    def __instancecheck__(cls, instance):
      return isinstance(instance, (original, made))

    def __subclasscheck__(cls, subclass):
      return issubclass(subclass, (original, made))

    def __getattr__(cls, name):
      return getattr(original, name)

  class Session(metaclass=_Meta):
    """`tf.compat.v1.Session` as replaced by `tensorbow-run`."""
    tensorbow_original = original

    def __new__(cls, target="", graph=None, config=None):
      if target:
        return original(target, graph, config)
      return _told(report, made(target, graph,
                                options.session_config(config), **kwargs))

  Session.__qualname__ = Session.__name__ = original.__name__
  return Session


def creator_class(original, options, report=None):
  """A stand-in for `tf.compat.v1.train.ChiefSessionCreator`.

  Args:
    original: the `ChiefSessionCreator` class being replaced.
    options: an `options.SessionOptions`.
    report: told of every session made, or None.

  Returns:
    A subclass of `TensorBowSessionCreator` (so of `original`) with
    `original`'s constructor; a creator with a remote `master` makes plain
    TensorFlow sessions, as the `Session` stand-in does.
  """
  kwargs = options.session_kwargs()

  class ChiefSessionCreator(monitored.TensorBowSessionCreator):
    """`tf.compat.v1.train.ChiefSessionCreator` as replaced by
    `tensorbow-run`."""

    def __init__(self, scaffold=None, master="", config=None,
                 checkpoint_dir=None, checkpoint_filename_with_path=None):
      super().__init__(scaffold, master,
                       config if master else options.session_config(config),
                       checkpoint_dir, checkpoint_filename_with_path,
                       **kwargs)

    def _get_session_manager(self):
      if self._master:
        return compat.base_session_manager(original, self)
      return super()._get_session_manager()

    def create_session(self):
      return _told(report, super().create_session())

  return ChiefSessionCreator


def worker_creator_class(original, options, report=None):
  """A stand-in for `tf.compat.v1.train.WorkerSessionCreator` on a worker
  of a cluster (`MonitoredTrainingSession(is_chief=False)`).

  TensorFlow's waits for the chief to initialise variables it shares
  with the worker; a TensorBow worker's variables are its own, so that
  wait would never end. The stand-in initialises them as the chief's
  creator does (no checkpoint: MonitoredTrainingSession gives a worker
  none); the chief's model is taken before the first wave.

  Args:
    original: the `ChiefSessionCreator` class the chief's stand-in
      replaces.
    options: an `options.SessionOptions`.
    report: told of every session made, or None.
  """
  chief_creator = creator_class(original, options, report)

  class WorkerSessionCreator(chief_creator):
    """`tf.compat.v1.train.WorkerSessionCreator` as replaced by
    `tensorbow-run` on a cluster."""

    def __init__(self, scaffold=None, master="", config=None,
                 max_wait_secs=30 * 60):
      del max_wait_secs  # nothing to wait for
      super().__init__(scaffold, master, config)

  return WorkerSessionCreator


def _told(report, session):
  """`session`, `report` told of it."""
  return report.made(session) if report is not None else session


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
def patch_session(options=None, report=None):
  """Replaces `tf.compat.v1.Session`, `InteractiveSession` and the session
  creators by TensorBow stand-ins, then restores them.

  Besides the public names, TensorFlow's `monitored_session` module gets
  the creator stand-in: it is what `MonitoredTrainingSession` and a
  `MonitoredSession` without a `session_creator` use. On a cluster
  (`TF_CONFIG`), `WorkerSessionCreator` is replaced too
  (`worker_creator_class`), and chief.py's patches apply.

  Args:
    options: the `options.SessionOptions` of every session made (None:
      the defaults).
    report: told of every session made (`report.made(session)`), or None.

  Yields:
    The `Session` stand-in class (see `session_class`).

  Raises:
    RuntimeError: `tf.compat.v1.Session` is already patched.
    ValueError: for an option out of range, or a TF_CONFIG the options
      cannot train on.
  """
  options = cli_options.SessionOptions() if options is None else options
  # `import tensorflow.compat.v1` loads a new copy of that API module unless
  # one is in sys.modules already; load it now so the script's gets patched.
  importlib.import_module("tensorflow.compat.v1")
  original = tf.compat.v1.Session
  if "tensorbow_original" in vars(original):
    raise RuntimeError("tf.compat.v1.Session is already replaced by "
                       "tensorbow-run's stand-in; patch_session does not nest")
  job = tb_cluster.from_environ()
  options.check(1 if job is None else job.num_workers)
  stand_in = session_class(original, tb_session.TensorBowSession, options,
                           report)
  interactive = tf.compat.v1.InteractiveSession
  creator = compat.monitored_session.ChiefSessionCreator
  patches = [(m, "Session", original, stand_in)
             for m in _aliases("Session", original)]
  interactive_stand_in = session_class(
      interactive, TensorBowInteractiveSession, options, report)
  patches += [(m, "InteractiveSession", interactive, interactive_stand_in)
              for m in _aliases("InteractiveSession", interactive)]
  creator_stand_in = creator_class(creator, options, report)
  patches += [(m, "ChiefSessionCreator", creator, creator_stand_in)
              for m in _aliases("ChiefSessionCreator", creator) +
              [compat.monitored_session]]
  patches += chief.patches(job)
  if job is not None:
    worker = compat.monitored_session.WorkerSessionCreator
    worker_stand_in = worker_creator_class(creator, options, report)
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
