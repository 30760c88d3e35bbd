"""`TensorBowSession`'s options, checked before anything is built, and the
settings a session trains with."""
import collections
import os

from tensorbow import algorithms
from tensorbow import devices as tb_devices
from tensorbow.scaleout import cluster as tb_cluster

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


def check_options(replicas=2, algorithm="sma", alpha=None,
                  central_momentum=0.9, nonfinite="propagate", workers=1,
                  cluster_timeout=60.0, heartbeat_timeout=3.0, devices=1,
                  prefetch=True, timeline=None, logdir=None, progress=None,
                  min_workers=None, membership_log=None, join=None,
                  max_workers=None, elastic_timeout=None):
  """Checks `TensorBowSession`'s options; returns the algorithm resolved for
  `replicas` on each of `workers` workers (for "auto", for the one
  replica it starts with), spread over `devices` devices.

  Raises:
    ValueError: for an option out of range.
  """
  _check_run_options(nonfinite, replicas, prefetch, timeline, logdir,
                     membership_log, progress)
  _check_timeouts(cluster_timeout, heartbeat_timeout)
  _check_membership(min_workers, membership_log, workers)
  workers = _check_joining(join, max_workers, min_workers, workers)
  _check_elastic_timeout(elastic_timeout, min_workers)
  resolved = algorithms.resolve(algorithm, alpha, central_momentum).resolved(
      (1 if replicas == AUTO else replicas) * workers)
  resolved.check_nonfinite(nonfinite)
  if workers > 1:
    _check_workers(replicas, resolved, workers)
  if devices > 1:
    _check_devices(replicas, resolved, nonfinite, workers, devices)
  return resolved


def _check_run_options(nonfinite, replicas, prefetch, timeline, logdir,
                       membership_log, progress):
  """Raises ValueError for an option of one worker's training runs out of
  range: what it does with non-finite values, its replicas, prefetching
  and what it writes or reports."""
  if nonfinite not in NONFINITE:
    raise ValueError(f"nonfinite must be one of {NONFINITE}, got "
                     f"{nonfinite!r}")
  if replicas != AUTO and (isinstance(replicas, bool) or
                           not isinstance(replicas, int) or replicas < 1):
    raise ValueError(f"replicas must be an int >= 1 or {AUTO!r}, got "
                     f"{replicas!r}")
  if not isinstance(prefetch, bool):
    raise ValueError(f"prefetch must be True or False, got {prefetch!r}")
  for name, value in (("timeline", timeline), ("logdir", logdir),
                      ("membership_log", membership_log)):
    if value is not None and not (isinstance(value, (str, os.PathLike)) and
                                  os.fspath(value)):
      raise ValueError(f"{name} must be a path or None, got {value!r}")
  if progress is not None and (
      isinstance(progress, bool) or not isinstance(progress, (int, float))
      or not 0 < progress < float("inf")):
    raise ValueError(f"progress must be a number of seconds > 0 or None, "
                     f"got {progress!r}")


def _check_timeouts(cluster_timeout, heartbeat_timeout):
  """Raises ValueError for a cluster's timeout out of range: how long a
  worker waits for the cluster, and for a silent worker's heartbeats."""
  if (isinstance(cluster_timeout, bool) or
      not isinstance(cluster_timeout, (int, float)) or
      not cluster_timeout > 0):
    raise ValueError(f"cluster_timeout must be a number of seconds > 0, got "
                     f"{cluster_timeout!r}")
  if (isinstance(heartbeat_timeout, bool) or
      not isinstance(heartbeat_timeout, (int, float)) or
      not heartbeat_timeout >= 1.0):
    raise ValueError(f"heartbeat_timeout must be a number of seconds >= 1 "
                     f"(several heartbeats), got {heartbeat_timeout!r}")


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
      or not join or not all(isinstance(a, str) and tb_cluster.is_address(a)
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
  devices = tb_devices.check(devices)
  return check_options(**options, workers=workers,
                       devices=len(devices) if devices else 1)


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
