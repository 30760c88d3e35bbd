"""The runs an algorithm's wave hooks make (hooks.py): ops over the
model variables' states, made once per setting and set of states, and
what they are fed; on a cluster, the sums over the workers.

One `AlgorithmRuns` belongs to a `replicas.ReplicaState` and lives as long
as it (one setting of L); it asks the replica state for the algorithm's
per-variable states it keeps. A run is (fetches, feed_dict), its ops made
once (`Builder.once`) by a function the hook passes; the hooks run them.
"""
import numpy as np
import tensorflow as tf

from tensorbow.rewrite import graph_util


class AlgorithmRuns(object):
  """The runs of `algorithm`'s wave hooks, and the workers' sums.

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

  def fed_run(self, purpose, value, make_ops):
    """(fetches, feed_dict) of the ops `make_ops(builder, states, fed)`
    makes for the model variables' states, `fed` a float64 placeholder
    fed `value`; None if `value` is None, no variable has a state or the
    ops are none. The ops are made once per `purpose` and set of states."""
    names, states = self._named_states()
    if value is None or not names:
      return None

    def build():
      fed = tf.compat.v1.placeholder(tf.float64, None,
                                     name=f"{purpose}_value")
      return fed, make_ops(self._builder, states, fed)

    fed, ops = self._builder.once(purpose, self._state_signature(names), build)
    return (ops, {fed: value}) if ops else None

  def participants_run(self, skipped, remaining, make_ops):
    """(fetches, feed_dict) of the ops `make_ops(builder, states, count,
    replicas)` makes, `count` fed `remaining` (the replicas taking part in
    the next central update) and `replicas` the replicas `skipped`; None
    if the ops are none. Made once per set of states."""
    names, states = self._named_states()

    def build():
      count = tf.compat.v1.placeholder(tf.int32, [], name="participants")
      replicas = tf.compat.v1.placeholder(tf.int32, [None],
                                          name="skipped_replicas")
      return count, replicas, make_ops(self._builder, states, count,
                                       replicas)

    count, replicas, ops = self._builder.once(
        "participants", self._state_signature(names), build)
    if not ops:
      return None
    return ops, {count: remaining,
                 replicas: np.array(sorted(skipped), np.int32)}

  def made(self, purpose, make):
    """What `make(builder, states)` makes of the model variables' states
    (ops, a tensor), made once per `purpose` and set of states; None if no
    variable has a state."""
    names, states = self._named_states()
    if not names:
      return None
    return self._builder.once(purpose, self._state_signature(names),
                              lambda: make(self._builder, states))

  def worker_sync(self, summed=()):
    """(op run before a wave, [tensor each worker adds to the sum after
    it], [placeholder fed each sum], op applying the sums) keeping the
    variables named in `summed` (merged as sums over rows: counters,
    metrics) the sum of every worker's move; None if there are none.
    Made once per set of them: it does not depend on the model
    variables' states."""
    summed = tuple(sorted(summed))
    return self._builder.once(
        "worker_sync", summed,
        lambda: _summed_parts([self._worker_sum(name) for name in summed]))

  def summed_run(self, purpose, part):
    """(op run before a wave, [tensor each process adds to the sum after
    it], [placeholder fed each sum], op applying the sums) over the model
    variables' states, made once per `purpose` and set of states from
    `part(builder, state)`: (before op, tensor added, function from a
    tensor of the sum to the op applying it), or None; None if no
    variable has a part."""
    return self.made(purpose, lambda builder, states: _summed_parts(
        self._parts(part, states)))

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

  def worker_merge_run(self, kind, value, part):
    """The run of a merge spanning every worker's replicas, fed `value`:
    ([tensor each worker adds to the sum], [placeholder fed each sum], op
    applying them, its other feeds), or None if no variable has a part.
    `part(builder, state)` gives a variable's (float64 tensor this worker
    adds, function from (its sum, the sum of the workers' replica counts,
    the value) to the op applying it), or None; made once per `kind`."""
    names, states = self._named_states()

    def build():
      parts = self._parts(part, states)
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

    built = self._builder.once(f"worker_merge_{kind}",
                               self._state_signature(names), build)
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


def _summed_parts(parts):
  """(op running every part's before op, [tensor each part adds],
  [placeholder fed each sum], op applying them) of `parts`, each a
  (before op, tensor added, function from the sum to its apply op); None
  if there are none."""
  if not parts:
    return None
  before, added, apply = zip(*parts)
  sums = [tf.compat.v1.placeholder(t.dtype, t.shape) for t in added]
  return (tf.group(*before, name="worker_base"), list(added), sums,
          tf.group(*[a(s) for a, s in zip(apply, sums)], name="worker_sum"))
