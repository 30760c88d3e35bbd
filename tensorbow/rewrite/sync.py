"""The synchronisation op of a training run: what leaves the replicas
after a wave besides what the algorithm keeps together (DESIGN.md, "What
leaves the replicas").

The planner (planner.py) makes it into a plan's sync call, over the
replicas the replica state (replicas.py) keeps; the runtime runs it after
the wave's commits. It is made once per kind (`Builder.once`).
"""
import tensorflow as tf

from tensorbow.rewrite import graph_util


def sync_op(builder, algorithm, replica_state, info, source=0,
            summed=frozenset()):
  """The synchronisation op of a training run with `info`, or None.

  Single variables (a global step; any that is not floating point) are
  taken from replica `source` and given to every replica; those named in
  `summed` (a counter of rows, a metric's accumulators: they add a sum
  over the batch's rows) become the central value plus every replica's
  move from it, and are given to every replica; other floating-point
  variables written from the batch (batch norm's moving statistics) the
  replicas' mean (DESIGN.md, "What leaves the replicas"). With the
  replicas on several devices, the model variables become the sum of
  the devices' moves (Algorithm.device_sync).

  Args:
    builder: the setting's `builder.Builder`.
    algorithm: the session's `algorithms.Algorithm`, resolved for L.
    replica_state: the setting's `replicas.ReplicaState`: the variables'
      replicas (`replicas_of`) and the algorithm's states
      (`algorithm_state`).
    info: the training run's `analysis.TrainingInfo`.
    source: the replica single variables are taken from.
    summed: names of the variables merged as sums over rows.

  Returns:
    The op, or None if there is nothing to synchronise.
  """
  if builder.shares_variables:
    return None
  names = tuple(sorted(info.other_vars))
  batch = tuple(n in info.batch_dependent for n in names)
  adds = tuple(n in summed for n in names)
  models = tuple(sorted(n for n in info.model_vars
                        if replica_state.algorithm_state(n) is not None))
  if not names and not models:
    return None

  def build():
    src = builder.constant(source, tf.int32)
    ops = [op for name, mean, add in zip(names, batch, adds)
           for op in _left(builder, replica_state.replicas_of(name), name, src,
                           mean, add)]
    ops += [algorithm.device_sync(builder, replica_state.algorithm_state(n))
            for n in models]
    ops = [op for op in ops if op is not None]
    return tf.group(*ops, name="sync") if ops else None

  return builder.once(("sync", source, batch, adds, models), names, build)


def _left(builder, replicated, name, source, mean, add):
  """The ops giving variable `name` what leaves its replicas
  `replicated` (sync_op): the sum of their moves if `add`, else their
  mean if `mean`, else replica `source`'s (an int32 tensor)."""
  var = builder.graph.get_operation_by_name(name)
  if add:
    central = graph_util.read(var)
    value = central + tf.reduce_sum(replicated.stacked() - central, 0)
  else:
    value = replicated.mean(source, mean=mean)
  ops = [graph_util.assign(var, value)]
  if add or not (mean and replicated.dtype.is_floating):
    # Taken from one replica (a global step), or the sum: the replicas
    # that sat the wave out, or were left out of it, count it too, and
    # the next wave's moves start from it.
    ops.append(replicated.set(value, builder.all_replicas()))
  return ops
