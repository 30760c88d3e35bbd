"""The stand-ins `tensorbow-run` puts in TensorFlow's place while a script
runs, and the patch that puts them there and back (`patch_session`).

The public name `tf.compat.v1.Session` -- the same class under
`tensorflow.compat.v1`, `import tensorflow.compat.v1 as tf; tf.Session` and
the other loaded `tensorflow...compat.v1` API modules that re-export it --
is replaced by a stand-in whose constructor returns:

- a plain `tf.compat.v1.Session` when `target` is non-empty (a remote
  master: TensorBow trains on one local device only);
- otherwise `TensorBowSession(target, graph, config, **options)`, the
  options being the launcher's one `options.SessionOptions`. Over a graph
  without training runs it behaves as a plain session, so sessions the
  script opens for evaluation or other graphs need no exception.

`tf.compat.v1.InteractiveSession` is replaced alike, its sessions being
`TensorBowInteractiveSession`s: the subclass of `TensorBowSession` that,
as TensorFlow's subclass of its own session, is the default session from
construction until closed. `tf.compat.v1.train.ChiefSessionCreator` is
replaced by a `TensorBowSessionCreator` with the same options, both under
its public names and where `MonitoredTrainingSession` and
`MonitoredSession` find it: monitored sessions train with TensorBow, hooks
and all. `tf.compat.v1.train.SessionManager` is replaced by a
`TensorBowSessionManager`, under its public names and where `Supervisor`
finds it: `prepare_session` and `recover_session` (a `Supervisor`'s
chief's `managed_session`) make `TensorBowSession`s. On a cluster
(`TF_CONFIG`) `WorkerSessionCreator` is replaced too, and a worker other
than the chief writes no checkpoint files or summaries (chief.py).
`tensorbow.TensorBowSession` and `tensorbow.TensorBowSessionCreator`,
which take options of the script's own, are replaced by subclasses that
add the launcher's (sessions.py).

Limitations:

- Only those names are patched. TensorFlow's other code that builds
  sessions from `tensorflow.python.client.session` (Keras's backend
  session, `SessionManager.wait_for_session`: a `Supervisor` that is not
  the chief, `WorkerSessionCreator` outside a cluster) still gets plain
  TensorFlow sessions; the report names those made through a patched
  class.
- `TensorBowSession` is not a subclass of `tf.compat.v1.Session`. The
  stand-in answers `isinstance(sess, tf.compat.v1.Session)` with True for
  both kinds of session and forwards class attributes (such as
  `Session.reset`), but `type(sess) is tf.compat.v1.Session` is False, and
  TensorFlow's internal `isinstance` checks against the original class
  (which the patch does not touch) reject a `TensorBowSession`.
- A class the script derives from `tf.compat.v1.Session` is derived from the
  original class instead: its sessions are plain TensorFlow sessions.
- A name bound before the patch (a module the script imports that was
  already imported by this process, `from tensorbow.session import
  TensorBowSession`) keeps the original class.
"""
import contextlib
import importlib
import sys

import tensorflow as tf

import tensorbow
from tensorbow.scaleout import cluster as tb_cluster
from tensorbow import compat
from tensorbow import monitored
from tensorbow import session as tb_session
from tensorbow.cli import chief
from tensorbow.cli import options as cli_options
from tensorbow.cli import sessions

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


def session_class(original, made, maker, kind):
  """A stand-in for `tf.compat.v1.Session` or `InteractiveSession`.

  Args:
    original: the class being replaced.
    made: what the stand-in makes for a local target: `TensorBowSession`
      or `TensorBowInteractiveSession`.
    maker: the launcher's `sessions.Maker`.
    kind: the name the script makes sessions through, for the report.

  Returns:
    A class whose constructor takes `(target="", graph=None, config=None)`
    like `original` and returns an `original` session for a non-empty
    `target`, a `made` session otherwise; its instances, and subclasses,
    are `original`'s and `made`'s.
  """

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
        return maker.told(original(target, graph, config), kind)
      kwargs = maker.kwargs({}, kind)
      return maker.told(
          made(target, graph, maker.config(config, kwargs), **kwargs), kind)

  Session.__qualname__ = Session.__name__ = original.__name__
  return Session


CHIEF_CREATOR_KIND = "tf.compat.v1.train.ChiefSessionCreator"
WORKER_CREATOR_KIND = "tf.compat.v1.train.WorkerSessionCreator"
MANAGER_KIND = "tf.compat.v1.train.SessionManager"


def creator_class(original, maker, kind=CHIEF_CREATOR_KIND):
  """A stand-in for `tf.compat.v1.train.ChiefSessionCreator`.

  Args:
    original: the `ChiefSessionCreator` class being replaced.
    maker: the launcher's `sessions.Maker`.
    kind: the name the script makes sessions through, for the report.

  Returns:
    A subclass of `TensorBowSessionCreator` (so of `original`) with
    `original`'s constructor; a creator with a remote `master` makes plain
    TensorFlow sessions, as the `Session` stand-in does.
  """
  kwargs = maker.kwargs({}, kind)

  class ChiefSessionCreator(monitored.TensorBowSessionCreator):
    """`tf.compat.v1.train.ChiefSessionCreator` as replaced by
    `tensorbow-run`."""

    def __init__(self, scaffold=None, master="", config=None,
                 checkpoint_dir=None, checkpoint_filename_with_path=None):
      super().__init__(scaffold, master,
                       config if master else maker.config(config, kwargs),
                       checkpoint_dir, checkpoint_filename_with_path,
                       **kwargs)

    def _get_session_manager(self):
      if self._master:
        return compat.base_session_manager(original, self)
      return super()._get_session_manager()

    def create_session(self):
      if self._master:  # TensorFlow's session manager's: it tells
        return super().create_session()
      return maker.told(super().create_session(), kind)

  return ChiefSessionCreator


def worker_creator_class(original, maker):
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
    maker: the launcher's `sessions.Maker`.
  """
  chief_creator = creator_class(original, maker, WORKER_CREATOR_KIND)

  class WorkerSessionCreator(chief_creator):
    """`tf.compat.v1.train.WorkerSessionCreator` as replaced by
    `tensorbow-run` on a cluster."""

    def __init__(self, scaffold=None, master="", config=None,
                 max_wait_secs=30 * 60):
      del max_wait_secs  # nothing to wait for
      super().__init__(scaffold, master, config)

  return WorkerSessionCreator


def session_manager_class(maker):
  """A stand-in for `tf.compat.v1.train.SessionManager`, which
  `Supervisor` makes its sessions with.

  Args:
    maker: the launcher's `sessions.Maker`.

  Returns:
    A subclass of `monitored.TensorBowSessionManager` (so of
    TensorFlow's) with TensorFlow's constructor: `prepare_session` and
    `recover_session` make a `TensorBowSession` for a local master, a
    plain session for a remote one; `wait_for_session` makes TensorFlow's
    (it waits for another process to make the model ready, which a
    TensorBowSession's own variables never are).
  """
  kwargs = maker.kwargs({}, MANAGER_KIND)

  class SessionManager(monitored.TensorBowSessionManager):
    """`tf.compat.v1.train.SessionManager` as replaced by
    `tensorbow-run`."""

    def __init__(self, local_init_op=None, ready_op=None,
                 ready_for_local_init_op=None, graph=None,
                 recovery_wait_secs=30, local_init_run_options=None,
                 local_init_feed_dict=None):
      super().__init__(
          kwargs, local_init_op=local_init_op, ready_op=ready_op,
          ready_for_local_init_op=ready_for_local_init_op, graph=graph,
          recovery_wait_secs=recovery_wait_secs,
          local_init_run_options=local_init_run_options,
          local_init_feed_dict=local_init_feed_dict)

    def make_session(self, master, graph, config):
      if master:
        return maker.told(compat.PlainSession(master, graph, config),
                          MANAGER_KIND)
      return maker.told(
          super().make_session(master, graph, maker.config(config, kwargs)),
          MANAGER_KIND)

    def wait_for_session(self, master, config=None,
                         max_wait_secs=float("Inf")):
      return maker.told(
          super().wait_for_session(master, config, max_wait_secs),
          MANAGER_KIND)

  return SessionManager


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
  """Replaces `tf.compat.v1.Session`, `InteractiveSession`, the session
  creators, `SessionManager`, `tensorbow.TensorBowSession` and
  `tensorbow.TensorBowSessionCreator` by stand-ins, then restores them.

  Besides the public names, TensorFlow's `monitored_session` module gets
  the creator stand-in: it is what `MonitoredTrainingSession` and a
  `MonitoredSession` without a `session_creator` use; and the module
  that defines `SessionManager` gets its stand-in, which `Supervisor`
  uses. On a cluster (`TF_CONFIG`), `WorkerSessionCreator` is replaced
  too (`worker_creator_class`), and chief.py's patches apply.

  Args:
    options: the launcher's `options.SessionOptions`, which every session
      made gets (None: the defaults); the script's own options to
      TensorBow's classes win over them.
    report: told of every session made (`report.made(session, kind)`), or
      None.

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
  patches = _patches(sessions.Maker(options, report), original, job)
  try:
    for module, name, _, new in patches:
      setattr(module, name, new)
    yield patches[0][3]
  finally:
    for module, name, old, _ in patches:
      setattr(module, name, old)


def _patches(maker, original, job):
  """[(module, name, original, stand-in)]: the `Session` stand-in first."""
  stand_in = session_class(original, tb_session.TensorBowSession, maker,
                           "tf.compat.v1.Session")
  patches = [(m, "Session", original, stand_in)
             for m in _aliases("Session", original)]
  interactive = tf.compat.v1.InteractiveSession
  interactive_stand_in = session_class(
      interactive, TensorBowInteractiveSession, maker,
      "tf.compat.v1.InteractiveSession")
  patches += [(m, "InteractiveSession", interactive, interactive_stand_in)
              for m in _aliases("InteractiveSession", interactive)]
  creator = compat.monitored_session.ChiefSessionCreator
  creator_stand_in = creator_class(creator, maker)
  patches += [(m, "ChiefSessionCreator", creator, creator_stand_in)
              for m in _aliases("ChiefSessionCreator", creator) +
              [compat.monitored_session]]
  manager = tf.compat.v1.train.SessionManager
  manager_stand_in = session_manager_class(maker)
  # Where Supervisor and TensorFlow's creators look it up.
  defining = sys.modules[manager.__module__]
  patches += [(m, "SessionManager", manager, manager_stand_in)
              for m in _aliases("SessionManager", manager) + [defining]]
  patches += [
      (tensorbow, "TensorBowSession", tensorbow.TensorBowSession,
       sessions.session_class(maker)),
      (tensorbow, "TensorBowSessionCreator",
       tensorbow.TensorBowSessionCreator, sessions.creator_class(maker))]
  patches += chief.patches(job)
  if job is not None:
    worker = compat.monitored_session.WorkerSessionCreator
    worker_stand_in = worker_creator_class(creator, maker)
    patches += [(m, "WorkerSessionCreator", worker, worker_stand_in)
                for m in _aliases("WorkerSessionCreator", worker) +
                [compat.monitored_session]]
  return patches
