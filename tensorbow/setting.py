"""One setting of a session: what it trains with for a given L.

A `TensorBowSession` trains with one setting at a time: L replicas on a
number of stream groups, each task's ops on its own thread or not. A
setting's runtime (runtime/), builder (rewrite/builder.py), replica state
(replicas.py), planner (planner.py) and trainer (waves.py) are made
together here, from the parts that outlive every setting (the TensorFlow
session, the execution graph, the lock, the input pipelines' elements,
the processes training together); `retune` makes a new setting when L
or the stream groups change.
"""
import collections
import logging

from tensorbow import devices as tb_devices
from tensorbow import hooks
from tensorbow import options
from tensorbow import planner
from tensorbow import prefetch
from tensorbow import replicas as tb_replicas
from tensorbow import runtime as tb_runtime
from tensorbow import waves
from tensorbow.rewrite import builder as tb_builder

# A setting's collaborators, made together (`Maker.make`).
Setting = collections.namedtuple(
    "Setting", ["settings", "runtime", "planner", "trainer"])

# The processes training together, as a session's settings see them.
Processes = collections.namedtuple("Processes", [
    # () -> (how many processes train together, this one's place among
    # them), now: a worker's change when the job is formed anew.
    "place",
    # Whether one replica trains copies, not the user's own variables
    # (its central model is one of several processes' to be summed).
    "replicates_one",
    # (session, replica_state) -> the `hooks.Job` of a setting on the
    # `tf.compat.v1.Session` whose replicas are `replica_state`.
    "job",
])


def _one_place():
  return 1, 0


def _one_job(session, replica_state):
  del session, replica_state
  return hooks.ALONE


# One process: it alone trains, its one replica trains the user's own
# variables, and its job adds nothing to a wave.
ALONE = Processes(place=_one_place, replicates_one=False, job=_one_job)

# What outlives every setting of a session, and each setting is made from.
Parts = collections.namedtuple("Parts", [
    "session",  # the tf.compat.v1.Session on the execution graph
    "execution",  # the execution.ExecutionGraph
    "user_graph",  # the user's tf.Graph
    "algorithm_spec",  # algorithms.resolve's, resolved for each L
    "nonfinite",  # the session's `nonfinite` option
    "devices",  # the devices named (two or more), or None
    "processes",  # the processes training together (a `Processes`)
    "lock",  # the session's session_lock.SessionLock
    "check_open",  # raises if the session was closed
    "inputs",  # the prefetch.Prefetcher kept across settings
    "noise",  # replicas="auto"'s autotune.NoiseScale, or None
])


def lasting_parts(session, execution, user_graph, chosen, processes, lock,
                  check_open, noise):
  """The `Parts` a session's settings are made from.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    execution: the session's `execution.ExecutionGraph`.
    user_graph: the user's `tf.Graph`.
    chosen: the session's `options.SessionOptions`, checked.
    processes: the processes training together (a `Processes`).
    lock: the session's `session_lock.SessionLock`.
    check_open: raises if the session was closed.
    noise: replicas="auto"'s `autotune.NoiseScale`, or None.

  Returns:
    A `Parts`.

  Raises:
    ValueError: `devices` names a device the session does not have (the
      session is closed).
  """
  devices = _named_devices(session, chosen.devices)
  # Kept across settings of L: what was taken or pulled ahead stays.
  inputs = prefetch.Prefetcher(session, ahead=chosen.prefetch)
  return Parts(session, execution, user_graph, chosen.algorithm_spec(),
               chosen.nonfinite, devices, processes, lock, check_open, inputs,
               noise)


def _named_devices(session, devices):
  """The devices `devices` names among `session`'s, if two or more (None:
  TensorFlow places the model; one device named is checked, and trains as
  without devices)."""
  devices = tb_devices.check(devices)
  try:
    named = (tb_devices.resolve(
        devices, [d.name for d in session.list_devices()])
             if devices else None)
  except ValueError:
    session.close()
    raise
  return named if named and len(named) > 1 else None


def unchanged(settings, runtime, replicas, stream_groups, anew):
  """Whether the setting of `settings` on `runtime` already trains
  `replicas` replicas on `stream_groups` (None: whichever it has), and
  need not be made anew (`anew`: after a change of the workers)."""
  return (replicas == settings.replicas and not anew and
          stream_groups in (None, runtime.num_stream_groups))


def make(parts, replicas, stream_groups, inline):
  """The `Setting` of `replicas` replicas on `stream_groups` stream groups
  (None: the runtime's default for L), each task's ops on its own thread
  if `inline`.

  Args:
    parts: the session's `Parts`.
    replicas: L.
    stream_groups: the runtime's concurrent tasks, or None.
    inline: whether each task's ops run on its stream group's thread.

  Returns:
    A `Setting`.
  """
  workers, index = parts.processes.place()
  algorithm = parts.algorithm_spec.resolved(replicas * workers)
  groups = stream_groups or tb_runtime.default_stream_groups(replicas)
  placement = (tb_devices.place(parts.devices, replicas, groups)
               if parts.devices else None)
  if placement is not None:
    groups = len(placement.group_device)
  settings = options.Settings(replicas, algorithm, parts.nonfinite, groups,
                              inline)
  runtime = tb_runtime.Runtime(
      parts.session, groups, replicas, inline,
      placement and (placement.group_device, placement.replica_device))
  share = _shares(parts, replicas, algorithm)
  builder = tb_builder.Builder(
      parts.execution.graph, replicas, groups, share,
      _group_devices(parts.session, placement, groups, share), placement,
      index * replicas)
  state = tb_replicas.ReplicaState(builder, algorithm, share)
  plans = planner.Planner(parts.session, parts.execution, settings, runtime,
                          builder, state)
  trainer = waves.Trainer(
      parts.session, settings, plans, runtime, builder, state,
      parts.user_graph, parts.lock, parts.check_open,
      parts.processes.job(parts.session, state), parts.inputs, parts.noise)
  return Setting(settings, runtime, plans, trainer)


def _shares(parts, replicas, algorithm):
  """Whether the replicas train the user's own variables: one replica
  does, unless its central model is one of several processes' or takes
  an outer step of its own; so do an algorithm's that share the model."""
  return ((replicas == 1 and not parts.processes.replicates_one and
           not algorithm.steps_central) or algorithm.shares_model)


def name_unused(parts, settings, unused, tuner=None):
  """Names the options passed `unused` (SessionOptions.without_effect_alone)
  once the setting of `settings` trains one replica on the user's own
  variables, as tf.compat.v1.Session does: they have no effect. Warned,
  or under replicas="auto" recorded in `tuner`'s decisions (an
  autotune.AutoTuner; L = 1 is then one setting of several). Returns those
  still to be named ([] once named, or if there were none)."""
  if not unused or settings.replicas != 1 or not _shares(
      parts, 1, settings.algorithm):
    return unused
  named = (f"{', '.join(unused)} ha{'s' if len(unused) == 1 else 've'} "
           "no effect (an outer step of local SGD or Lookahead would)")
  if tuner is not None:
    tuner.note((1, settings.stream_groups, settings.inline),
                f"at L=1, which trains as tf.compat.v1.Session does, {named}")
  else:
    logging.getLogger("tensorbow").warning(
        "TensorBow: one replica trains as tf.compat.v1.Session does, so %s",
        named)
  return []


def _group_devices(session, placement, groups, share):
  """The device of each stream group: the placement's, else each of the
  session's CPU devices where several groups keep replicas of their own
  (None: TensorFlow places them)."""
  if placement is not None:
    return placement.group_names()
  if groups > 1 and not share:
    return tb_devices.cpu_devices(session)
  return None
