"""The options every session a script makes under `tensorbow-run` gets,
and the stand-ins for TensorBow's own classes.

A script may make its sessions through TensorFlow's classes, whose
stand-ins (patches.py) take no TensorBow options, or through TensorBow's
(`tensorbow.TensorBowSession`, `tensorbow.TensorBowSessionCreator`) with
options of its own. Either way one `Maker` gives the session the
launcher's options -- its cluster, elastic and observability options
among them -- under the script's own: where the script passed an option
that a flag set otherwise, the script's wins and one warning names both.
The report (report.py) is told of each session made.
"""
import logging

from tensorbow import algorithms
from tensorbow import monitored
from tensorbow import session as tb_session
from tensorbow.cli import options as cli_options

_logger = logging.getLogger("tensorbow")

# The options that configure an algorithm given by name, which an
# algorithm the script passes does not take from the launcher.
_ALGORITHM_SETTINGS = ("alpha", "central_momentum")


class Maker(object):
  """The launcher's options for every session of a script.

  Args:
    options: the launcher's `options.SessionOptions`.
    report: told of every session made (`report.made(session, kind)`), or
      None.
  """

  def __init__(self, options, report=None):
    self.options = options
    self._report = report
    self._warned = set()

  def kwargs(self, own, kind):
    """`TensorBowSession`'s keyword options for a session the script
    makes through `kind` passing `own`: the launcher's, and where `own`
    has an option, the script's, with a warning (once) where a flag set
    it otherwise. A flag at its default sets nothing.

    Args:
      own: the options the script passed, a dict.
      kind: the class the script made the session through, for the
        warning.

    Returns:
      A dict of every option of `SessionOptions` and those of `own`.
    """
    merged = self.options.session_kwargs()
    defaults = cli_options.SessionOptions().session_kwargs()
    # Who passed each option: its own name, or the algorithm that takes
    # it along.
    passed = {name: name for name in own}
    own = dict(own)
    if "algorithm" in own and not _same(own["algorithm"],
                                        merged["algorithm"]):
      # Another algorithm than the launcher's comes with its own settings
      # (an instance carries them; a name has the session's defaults).
      for name in _ALGORITHM_SETTINGS:
        if name not in own:
          own[name], passed[name] = defaults[name], "algorithm"
    for name, value in own.items():
      if (name in merged and not _same(merged[name], defaults[name]) and
          not _same(value, merged[name])):
        self._warn(kind, passed[name], own[passed[name]], name,
                   merged[name])
      merged[name] = value
    return merged

  def config(self, config, kwargs):
    """`config` with the CPU devices `kwargs`' devices need (see
    `SessionOptions.session_config`)."""
    devices = kwargs.get("devices")
    if not isinstance(devices, (list, tuple)):
      return config  # none, or one the session refuses by name
    try:
      return self.options._replace(devices=devices).session_config(config)
    except ValueError:
      return config  # a name the session refuses

  def told(self, session, kind):
    """`session`, the report told it was made through `kind`."""
    if self._report is not None:
      self._report.made(session, kind)
    return session

  def _warn(self, kind, name, value, field, flag_value):
    """Warns once that the script's `name=value` wins over the flag of
    `field` at `flag_value`."""
    key = (kind, name, repr(value), field)
    if key in self._warned:
      return
    self._warned.add(key)
    _logger.warning("tensorbow-run: warning: the script's %s(%s=%r) wins "
                    "over %s", kind.rsplit(".", 1)[-1], name, value,
                    " ".join(cli_options.flag_argv(field, flag_value)))


def _same(a, b):
  """Whether two option values are the same setting (a list of devices
  and a tuple of the same names are; an algorithm instance is only
  itself)."""
  if isinstance(a, algorithms.Algorithm) or isinstance(b, algorithms.Algorithm):
    return a is b
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return tuple(a) == tuple(b)
  return a == b


def _passes_for(replaced):
  """A metaclass that makes a stand-in for `replaced`, one of TensorBow's
  classes, pass for it: every instance and subclass of `replaced` is one
  of the stand-in's, as the script's `isinstance(sess,
  tb.TensorBowSession)` expects of a session made through
  `tf.compat.v1.Session`. A script's subclass of the stand-in checks as
  any class does."""

  class PassesFor(type(replaced)):  # ABCMeta for a SessionCreator

    def __instancecheck__(cls, instance):
      if vars(cls).get("tensorbow_replaces") is replaced:
        return isinstance(instance, replaced)
      return super().__instancecheck__(instance)

    def __subclasscheck__(cls, subclass):
      if vars(cls).get("tensorbow_replaces") is replaced:
        return issubclass(subclass, replaced)
      return super().__subclasscheck__(subclass)

  return PassesFor


def _named(stand_in, replaced):
  """`stand_in`, named and placed as `replaced` (for reprs)."""
  stand_in.__module__ = replaced.__module__
  stand_in.__qualname__ = replaced.__qualname__
  return stand_in


SESSION_KIND = "tensorbow.TensorBowSession"
CREATOR_KIND = "tensorbow.TensorBowSessionCreator"


def session_class(maker):
  """The stand-in for `tensorbow.TensorBowSession`.

  Args:
    maker: a `Maker`.

  Returns:
    A subclass of `TensorBowSession` with its constructor, whose options
    are the script's over the launcher's (`Maker.kwargs`).
  """

  class TensorBowSession(tb_session.TensorBowSession,
                         metaclass=_passes_for(tb_session.TensorBowSession)):
    """`tensorbow.TensorBowSession` as `tensorbow-run` replaces it."""
    tensorbow_replaces = tb_session.TensorBowSession

    def __init__(self, target="", graph=None, config=None, **options):
      kwargs = maker.kwargs(options, SESSION_KIND)
      super().__init__(target, graph, maker.config(config, kwargs), **kwargs)
      maker.told(self, SESSION_KIND)

  return _named(TensorBowSession, tb_session.TensorBowSession)


def creator_class(maker):
  """The stand-in for `tensorbow.TensorBowSessionCreator`.

  Args:
    maker: a `Maker`.

  Returns:
    A subclass of `TensorBowSessionCreator` with its constructor, whose
    sessions have the script's options over the launcher's.
  """

  class TensorBowSessionCreator(monitored.TensorBowSessionCreator,
                                metaclass=_passes_for(
                                    monitored.TensorBowSessionCreator)):
    """`tensorbow.TensorBowSessionCreator` as `tensorbow-run` replaces
    it."""
    tensorbow_replaces = monitored.TensorBowSessionCreator

    def __init__(self, scaffold=None, master="", config=None,
                 checkpoint_dir=None, checkpoint_filename_with_path=None,
                 **options):
      kwargs = maker.kwargs(options, CREATOR_KIND)
      super().__init__(scaffold, master, maker.config(config, kwargs),
                       checkpoint_dir, checkpoint_filename_with_path,
                       **kwargs)

    def create_session(self):
      return maker.told(super().create_session(), CREATOR_KIND)

  return _named(TensorBowSessionCreator, monitored.TensorBowSessionCreator)
