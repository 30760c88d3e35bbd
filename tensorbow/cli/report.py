"""The line `tensorbow-run` prints when a script ends: which sessions the
script made, by the class it made each through, the training runs each
ran, and whether the script failed.

Every stand-in (patches.py, sessions.py) tells the report of each
session it makes; main.py tells it how the script ended and prints it.
"""
import collections

from tensorbow import preemption
from tensorbow import session as tb_session

# What a kind of session is made by, beyond its class's name.
_MADE_BY = {
    "tf.compat.v1.train.ChiefSessionCreator":
        "MonitoredTrainingSession's and MonitoredSession's",
    "tf.compat.v1.train.SessionManager": "Supervisor's",
}


def exit_status(error):
  """The exit status of a script that ended by raising `error` (None: it
  returned), as `python script.py` would exit.

  Args:
    error: the exception the script raised, or None.

  Returns:
    An int: 0 for success; SystemExit's code (1 for a message); 130 for
    KeyboardInterrupt (the shell's 128 + SIGINT); 1 for anything else.
  """
  if error is None:
    return 0
  if isinstance(error, SystemExit):
    if error.code is None:
      return 0
    return error.code if isinstance(error.code, int) else 1
  if isinstance(error, KeyboardInterrupt):
    return 130
  return 1


class Report(object):
  """The sessions a script made, each by kind, with the training runs of
  those that are `TensorBowSession`s (their `counts`, kept without the
  session), and the script's exit status."""

  def __init__(self):
    self.sessions = []  # (kind, counts; None for a plain TF session)
    self.status = None  # the script's exit status, once it ended

  def made(self, session, kind):
    """Records `session`, made through `kind` (such as
    "tf.compat.v1.Session"); returns `session`."""
    counts = (session.counts
              if isinstance(session, tb_session.TensorBowSession) else None)
    self.sessions.append((kind, counts))
    return session

  def __str__(self):
    failed = self.status not in (None, 0)
    text = "tensorbow-run: "
    if self.status == preemption.EXIT_CODE:
      text += (f"the script was stopped by SIGTERM at a wave (exit status "
               f"{self.status}); it ")
    elif failed:
      text += f"the script failed with exit status {self.status}; it "
    else:
      text += "the script "
    trained = [(k, c["training_runs"]) for k, c in self.sessions
               if c is not None]
    plain = [k for k, c in self.sessions if c is None]
    if not trained:
      text += "made no TensorBowSession"
    else:
      runs = sum(r for _, r in trained)
      text += (f"made {_count(len(trained), 'TensorBowSession')}, which ran "
               f"{_count(runs, 'training run')}: {_by_kind(trained)}")
    if plain:
      text += (f"; and {_count(len(plain), 'plain TensorFlow session')} "
               f"(a remote target, or SessionManager.wait_for_session): "
               f"{', '.join(_counted(plain))}")
    if not failed and not trained:
      text += "; warning: whatever it trained ran on plain TensorFlow"
    elif not failed and not sum(r for _, r in trained):
      text += ("; warning: no training run: whatever it trained ran on "
               "plain TensorFlow")
    return text


def _count(n, noun):
  return f"{n} {noun}{'s' if n != 1 else ''}"


def _by_kind(trained):
  """"1 through K (4 training runs), ..." for [(kind, runs)]."""
  runs = collections.defaultdict(list)
  for kind, n in trained:
    runs[kind].append(n)
  parts = []
  for kind, each in runs.items():
    made_by = f", {_MADE_BY[kind]}" if kind in _MADE_BY else ""
    parts.append(f"{len(each)} through {kind}{made_by} "
                 f"({', '.join(map(str, each))} training "
                 f"run{'s' if each != [1] else ''})")
  return "; ".join(parts)


def _counted(kinds):
  """"2 through K" for each kind in `kinds`, in order first made."""
  return [f"{n} through {k}"
          for k, n in collections.Counter(kinds).items()]
