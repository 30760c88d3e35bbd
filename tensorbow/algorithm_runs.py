"""The runs an algorithm makes around a wave: before it (the wave's value,
the participants, a pooled algorithm's factors), after it (the merge) and,
on a cluster, the sums over the workers.

One `AlgorithmRuns` belongs to a `replicas.ReplicaState` and lives as long
as it (one setting of L); it asks the replica state for the algorithm's
per-variable states it keeps. Each run is (fetches, feed_dict), its ops made
once (`Builder.once`); the wave (wave.py, algorithm_wave.py) runs them.
"""
import numpy as np
import tensorflow as tf

from tensorbow.rewrite import graph_util


class AlgorithmRuns(object):
  """The runs of `algorithm` around a wave.

  Args:
    builder: the setting's `rewrite.builder.Builder`.
    algorithm: the session's `algorithms.Algorithm`, resolved for L.
    states: a function returning {model variable op name: the algorithm's
      state} as they are now (`ReplicaState.algorithm_states`).
    state_signature: what the states of variable names depend on, for
      `Builder.once` (`ReplicaState.state_signature`).
    replicas_of: the `Replicated` copies of a replicated variable, by
      name (`ReplicaState.replicas_of`).
  """

  def __init__(self, builder, algorithm, states, state_signature,
               replicas_of):
    self._builder = builder
    self._algorithm = algorithm
    self._states = states
    self._state_signature = state_signature
    self._replicas_of = replicas_of
    # (ops, value) of the latest wave run known to have run, and of the
    # one wave_run returned last.
    self._prepared = self._preparing = None

  def participants_run(self, skipped, remaining):
    """(fetches, feed_dict) leaving replicas `skipped` out of the next
    wave's synchronisation, `remaining` taking part; None if the algorithm
    has nothing to do for it."""
    names, states = self._named_states()

    def build():
      count = tf.compat.v1.placeholder(tf.int32, [], name="participants")
      replicas = tf.compat.v1.placeholder(tf.int32, [None],
                                          name="skipped_replicas")
      ops = self._algorithm.skip_ops(self._builder, states, count, replicas)
      return count, replicas, ops

    count, replicas, ops = self._builder.once(
        "participants", self._state_signature(names), build)
    if not ops:
      return None
    return ops, {count: remaining,
                 replicas: np.array(sorted(skipped), np.int32)}

  def wave_run(self, wave, sizes):
    """(fetches, feed_dict) preparing training run `wave` (counted from 1),
    whose replicas' shards have `sizes` rows, or None if the algorithm has
    nothing to do for it or the last run `prepared` set the same value."""
    value = self._algorithm.wave_value(wave, sizes)
    run = self._algorithm_run("wave", value, self._algorithm.wave_ops)
    done = (self._prepared is not None and run is not None and
            self._prepared[0] is run[0] and self._prepared[1] == value)
    self._preparing = None if done or run is None else (run[0], value)
    return None if done else run

  def prepared(self):
    """The run wave_run returned last has run: its ops hold its value."""
    if self._preparing is not None:
      self._prepared, self._preparing = self._preparing, None

  def merge_run(self, wave, sizes):
    """(fetches, feed_dict) to run after training run `wave`, or None."""
    return self._algorithm_run(
        "merge", self._algorithm.merge_value(wave, sizes),
        self._algorithm.merge_ops)

  def scale_run(self, factors):
    """(fetches, feed_dict) setting a pooled algorithm's per-replica
    learning-rate factors, or None."""
    return self._algorithm_run("scale", factors, self._algorithm.scale_ops)

  def merge_weighted_run(self, weights):
    """(fetches, feed_dict) of a pooled algorithm's merge with `weights`
    (one per replica), or None."""
    return self._algorithm_run("merge", weights, self._algorithm.merge_ops)

  def drift_tensor(self):
    """A pooled algorithm's tensor its schedule's merge reads, or None."""
    names, states = self._named_states()
    if not names:
      return None
    return self._builder.once(
        "drift", self._state_signature(names),
        lambda: self._algorithm.drift_tensor(self._builder, states))

  def _algorithm_run(self, purpose, value, make_ops):
    names, states = self._named_states()
    if value is None or not names:
      return None

    def build():
      fed = tf.compat.v1.placeholder(tf.float64, None,
                                     name=f"{purpose}_value")
      return fed, make_ops(self._builder, states, fed)

    fed, ops = self._builder.once(purpose, self._state_signature(names), build)
    return (ops, {fed: value}) if ops else None

  def worker_sync(self, summed=()):
    """(op run before a wave, [tensor each worker adds to the sum after
    it], [placeholder fed each sum], op applying the sums, its other feeds
    (none)) keeping the central models of a cluster's workers equal, and
    the variables named in `summed` (merged as sums over rows: counters,
    metrics) the sum of every worker's move; or None."""
    names, states = self._named_states()
    summed = tuple(sorted(summed))

    def build():
      parts = (self._parts(self._algorithm.worker_sync, states) +
               [self._worker_sum(name) for name in summed])
      if not parts:
        return None
      before, added, apply = zip(*parts)
      sums = [tf.compat.v1.placeholder(t.dtype, t.shape) for t in added]
      return (tf.group(*before, name="worker_base"), list(added), sums,
              tf.group(*[a(s) for a, s in zip(apply, sums)],
                       name="worker_sum"), {})

    return self._builder.once("worker_sync",
                              (self._state_signature(names), summed), build)

  def _worker_sum(self, name):
    """worker_sync's part for variable `name`, merged as a sum over rows:
    every worker's wave moved it from the same base by its own replicas'
    moves; the base plus the sum of the workers' moves is the whole
    batch's, given to the variable and its replicas. Summed in float64
    (exact for counts below 2 ** 53)."""
    builder = self._builder
    var = builder.graph.get_operation_by_name(name)
    dtype, shape = graph_util.dtype_and_shape(var)
    handle = graph_util.resource(f"{builder.prefix}/sums/{name}/worker_base",
                                 dtype, shape)
    # A copy: a reference variable's read shares its buffer, which the
    # wave's assign_add then changes in place.
    before = tf.raw_ops.AssignVariableOp(
        resource=handle, value=tf.raw_ops.Snapshot(input=graph_util.read(var)))
    base = tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)
    moved = tf.cast(graph_util.read(var) - base, tf.float64)

    def apply(total):
      value = base + tf.cast(total, dtype)
      return tf.group(graph_util.assign(var, value),
                      self._replicas_of(name).set(value,
                                                  builder.all_replicas()))

    return before, moved, apply

  def worker_merge_run(self, wave, sizes):
    """On a cluster, the merge after training run `wave` spanning every
    worker's replicas: ([tensor each worker adds to the sum], [placeholder
    fed each sum], op applying them, its other feeds), or None: no merge
    this wave, or the algorithm merges each worker alone (merge_run) this
    wave."""
    value = self._algorithm.merge_value(wave, sizes)
    kind = value is not None and self._algorithm.worker_merge_kind(wave)
    names, states = self._named_states()

    def build():
      parts = self._parts(
          lambda b, s: self._algorithm.worker_merge(
              b, s, average=kind == "average"), states)
      if not parts:
        return None
      # The workers' replica counts are summed beside the tensors.
      added = [a for a, _ in parts] + [self._builder.constant(
          float(self._builder.num_replicas), tf.float64)]
      sums = [tf.compat.v1.placeholder(tf.float64, a.shape) for a in added]
      fed = tf.compat.v1.placeholder(tf.float64, None,
                                     name="worker_merge_value")
      return added, sums, fed, tf.group(
          *[apply(s, sums[-1], fed) for (_, apply), s in zip(parts, sums)],
          name="worker_merge")

    built = (self._builder.once(f"worker_merge_{kind}",
                                self._state_signature(names), build)
             if kind else None)
    if built is None:
      return None
    added, sums, fed, op = built
    return added, sums, op, {fed: value}

  def _named_states(self):
    """(the model variables' names, sorted; their states), as the replica
    state keeps them now."""
    states = self._states()
    names = tuple(sorted(states))
    return names, [states[n] for n in names]

  def _parts(self, hook, states):
    """What per-variable `hook` gives for `states`, less the Nones."""
    parts = [hook(self._builder, s) for s in states]
    return [p for p in parts if p is not None]
