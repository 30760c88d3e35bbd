"""Preemption: SIGTERM, what a scheduler sends before it reclaims a
machine, makes a training job save at one wave and exit for a restart.

`tensorbow-run` installs the handler (`install`) in the process that runs
the script. The first SIGTERM only takes note (a second one terminates
as the default would). After the wave under way, every worker learns of
the notice at the same wave: on one process at once; on a cluster
through the next sum over the workers, which carries each worker's note
(`scaleout`). Each worker then saves through the script's own `Saver`,
as it last saved (its save run again, at a prefix of that wave, the
replicas' state beside it and the chief's checkpoint state file naming
it), and raises `SystemExit(EXIT_CODE)`; with elasticity (`min_workers`),
the workers not asked go on without those that were if enough remain.
How the processes agree is an `Agreement` the session is given
(scaleout's for a worker, `ALONE` for one process). A re-run of the same
command that restores the latest checkpoint (as
`MonitoredTrainingSession` does) goes on from that wave. A script that
has not saved yet exits without a checkpoint, saying so.
"""
import collections
import logging
import os
import re
import signal
import threading

import tensorflow as tf

# What a preempted job exits with: TensorFlow's PreemptionCheckpointHandler
# uses the same for "restart me".
EXIT_CODE = 42

# How the processes of a job agree on a preemption. `preempting(requested)`:
# after a wave, whether every process saves now (this one asked to stop
# if `requested`); `go_on_after(wave)`: after preempted `wave` saved,
# whether this one goes on without those asked to stop (they leave before
# the next wave); `leaves_save()`: whether a Saver's save is another
# process's to write (this one keeps its replicas' state beside it).
Agreement = collections.namedtuple(
    "Agreement", ["preempting", "go_on_after", "leaves_save"])


def _as_asked(requested):
  return requested


def _never(*unused):
  del unused
  return False


# One process: it saves when asked to stop, then stops, and writes its
# checkpoints itself.
ALONE = Agreement(preempting=_as_asked, go_on_after=_never,
                  leaves_save=_never)


class Notice(object):
  """Whether this process was asked to stop (by SIGTERM)."""

  def __init__(self):
    self._requested = threading.Event()

  def requested(self):
    """Whether a preemption notice has come (SIGTERM, or `request`)."""
    return self._requested.is_set()

  def request(self):
    """Notes a preemption notice: the job saves and stops after its next
    wave (Preemption.after_wave)."""
    self._requested.set()


_NOTICE = Notice()


def notice():
  """This process's notice (signals are the process's)."""
  return _NOTICE


def install(given=None):
  """Makes SIGTERM request `given` (default: the process's notice); a
  second SIGTERM terminates the process as the default handler would.
  From the main thread only, as Python's signal handlers."""
  given = given or _NOTICE

  def on_sigterm(signum, frame):
    del frame
    if given.requested():
      signal.signal(signum, signal.SIG_DFL)
      os.kill(os.getpid(), signum)
      return
    logging.getLogger("tensorbow").warning(
        "TensorBow: SIGTERM: saving after this wave, then exiting with "
        "status %d (a second SIGTERM ends the process now)", EXIT_CODE)
    given.request()

  signal.signal(signal.SIGTERM, on_sigterm)


class Preemption(object):
  """A session's side of preemption: the script's last save, and what to
  do after each wave.

  Args:
    agreement: how the job's processes agree on it (an `Agreement`;
      `ALONE` for one process).
    given: the Notice (default: the process's).
  """

  def __init__(self, agreement, given=None):
    self._agreement = agreement
    self._notice = given or _NOTICE
    self._last_save = None  # (route, fed values, index of the prefix)

  def saw(self, saver, route, fed_values):
    """A plain run was `saver` (checkpoint.saver_call's, or None) of
    `route` fed `fed_values`: a save is kept to be run again."""
    if saver is None or saver[0] != "save":
      return
    for i, tensor in enumerate(route.fed):
      if tensor.dtype == tf.string and tensor.shape.rank == 0:
        self._last_save = (route, list(fed_values), i)
        return

  def after_wave(self, wave, plain_run):
    """After training run `wave`: if the workers agree to stop, saves with
    `plain_run(route, fed values)`, then goes on without those asked if
    the scale-out can (elasticity), else raises SystemExit(EXIT_CODE)."""
    if not self._agreement.preempting(self._notice.requested()):
      return
    log = logging.getLogger("tensorbow")
    said = (self._save(wave, plain_run) if self._last_save is not None else
            f"after wave {wave}, the script has not saved with a Saver "
            "yet, so there is no checkpoint to resume from")
    if self._agreement.go_on_after(wave):
      log.warning("TensorBow: preempted: %s; this worker goes on without "
                  "those asked to stop", said)
      return
    log.warning("TensorBow: preempted: %s; exiting with status %d", said,
                EXIT_CODE)
    raise SystemExit(EXIT_CODE)

  def _save(self, wave, plain_run):
    """Runs the script's last save again at a prefix of `wave`; what it
    did."""
    route, values, i = self._last_save
    last = values[i]
    last = last.decode() if isinstance(last, bytes) else str(last)
    prefix = f"{re.sub(r'-[0-9]+$', '', last)}-preempted-{wave}"
    values = values[:i] + [prefix] + values[i + 1:]
    plain_run(route, values)
    if not self._agreement.leaves_save():
      directory = os.path.dirname(prefix) or "."
      state = tf.train.get_checkpoint_state(directory)
      tf.compat.v1.train.update_checkpoint_state(
          directory, prefix,
          list(state.all_model_checkpoint_paths if state else []) + [prefix])
    return f"saved {prefix} at wave {wave}"
