"""The interface between an algorithm and TensorBow's session.

An `Algorithm` is a session's configuration (compared by value) and the
seam through which the planner, the copier (rewrite/replicate.py), the
replica state (replicas.py) and the wave (wave.py) ask it what a
replica's optimizer step becomes, what state it keeps and what it needs
of a wave. It keeps no per-session state itself: what it makes per model
variable it returns, and the replica state keeps it and hands it back.
A variable's state is fixed once made: where apply_nodes makes more of
it, it returns a new one, which the replica state keeps instead.

The hooks are grouped by when what they decide takes effect:

* planning: checks of the session's options and of a training run;
* wave time: the hooks (hooks.py: before, between, after, undo) by which
  the algorithm joins each wave of a setting (`wave_hooks`), made once
  per setting. An algorithm may be its graph hooks and this hook set
  alone; the hooks below that make a wave's runs are the older way, kept
  by the algorithms written with them;
* copy time: what a replica's apply ops become, and what must run once
  after the copies are built (`after_copy`);
* seeding, before a wave, commit, after a wave, across workers and
  checkpoints: what runs then. The hooks taking a builder make ops: they
  are called when the ops are first needed, the ops are kept per setting
  (and set of variables), and the replica state (replicas.py) or the
  wave's runs (algorithm_runs.py) run them each time; the `*_value` hooks
  say what they are fed, wave by wave; `schedule` is called once per
  setting; `before_commit` runs within each wave, on the C++ runtime.

The hooks that make ops get the setting's builder (rewrite/builder.py),
which offers: `graph`, `prefix`, `num_replicas`, `num_groups`,
`constant(value, dtype)`, `replicated(name, dtype, shape)` (state with
one copy per replica), `variable_replicas(var_op)` (a variable's copies),
`replica_variable_node(node, op_type, replicated, aux)`,
`device_handle(name, handle, aux)`, `all_replicas()`, `replica_input`,
`placement`, `device(group)`. It is a maker, not a channel: what must run
before the next training run a hook returns, and the replica state runs
it."""


class Algorithm(object):
  """What keeps a session's replicas together; `name` is its string form.

  Every hook has a default that does nothing, which is what independent
  replicas need.
  """

  name = None
  # The central model is replica 0's, copied on refresh, rather than
  # maintained by the algorithm.
  model_from_replica = False
  # The replicas' tasks train the central model itself: nothing is
  # replicated, and each task's step lands as soon as the task finishes.
  shares_model = False
  # The central models of several workers can be kept equal after each
  # wave (worker_sync); an algorithm that cannot refuses a cluster.
  spans_workers = False
  # Replicas spread over several devices (devices=) can be kept together
  # (device_sync, or an exchange that reads every replica); an algorithm
  # that cannot refuses devices=.
  spans_devices = False
  # A training run's batch is cut into chunks that the replicas take as
  # they come free (runtime.Runtime.run_pool), each chunk one whole step of
  # its replica; the Trainer keeps the algorithm's `schedule` and merges
  # with `drift_tensor`, `merge_ops` and `scale_ops` when it says so.
  pooled = False
  # Every replica takes the same step each wave (synchronous SGD): a
  # replica with no rows of a wave's batch (DESIGN.md, feed sharding)
  # still computes one, on another's shard, weighted 0 (`before_commit`),
  # and commits the common step; otherwise it sits the wave out.
  replicas_equal = False

  def __eq__(self, other):
    return type(self) is type(other) and vars(self) == vars(other)

  def __hash__(self):
    return hash((type(self), tuple(sorted(vars(self).items()))))

  def __repr__(self):
    args = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
    return f"{type(self).__name__}({args})"

  # ---- Planning: what a session and a training run's plan allow ---------
  def resolved(self, replicas):
    """This algorithm with its defaults filled in for `replicas` replicas."""
    del replicas
    return self

  def check_nonfinite(self, nonfinite):
    """Raises ValueError if the session's `nonfinite` option ("propagate",
    "raise" or "skip") cannot hold with this algorithm."""
    if (self.shares_model or self.pooled) and nonfinite != "propagate":
      raise ValueError(f"algorithm {self.name!r} applies each task's step "
                       "when it finishes: nonfinite must be 'propagate'")

  def check_updates(self, sparse):
    """Raises tf.errors.UnimplementedError if the replicas cannot be kept
    together through a training run whose apply ops `sparse` (names)
    update rows of a variable."""
    del sparse

  def check_split(self, split):
    """Raises tf.errors.UnimplementedError if a training run of several
    replicas needs a wave in two phases (computation, then commit) and
    `split` is False: its writes cannot wait for its computation."""
    del split

  # ---- Wave time: what joins each wave ------------------------------------
  def wave_hooks(self, builder, replica_state, session):
    """The hooks (`hooks.WaveHook`) by which this algorithm joins each
    wave of a setting beyond the runs its other hooks make: called once
    per setting, they are called after the backup's, the noise sample's
    and the runs' (algorithm_wave.py), in the order returned.

    Args:
      builder: the setting's builder (see the module's docstring).
      replica_state: the setting's `replicas.ReplicaState`: which
        variables have replicas (`replicated_variables`), and `reseed`.
      session: the `tf.compat.v1.Session` on the execution graph.

    Returns:
      A sequence of `hooks.WaveHook`s (none by default).
    """
    del builder, replica_state, session
    return ()

  # ---- Copy time: while a setting's copies are built ---------------------
  def variable_state(self, builder, var_op):
    """The algorithm's state for model variable `var_op`, or None: then
    its apply ops are copied as they are."""
    del builder, var_op
    return None

  def apply_nodes(self, builder, state, node, var, group, aux):
    """What replaces apply op `node` (a NodeDef of stream group `group`'s
    copy) on model variable op `var`, whose state is `state`.

    Args:
      builder: the setting's builder (see the module's docstring).
      state: the variable's state, as variable_state made it or an
        earlier apply_nodes returned it.
      node: the apply op's NodeDef in the copy.
      var: the model variable op.
      group: the stream group.
      aux: `aux(key, tensor)` names a tensor of the execution graph as an
        input.

    Returns:
      (the NodeDefs replacing `node`, the replacement that others should
      wait for keeping `node.name`; the variable's state from now on:
      `state`, or a new one where these nodes need more of it, which is
      then given to after_copy).
    """
    raise NotImplementedError

  def fuses_outer(self, has_state):
    """Whether a dense layer's apply op may take its gradient as the
    factors of an outer product (rewrite/substitutes.py, outer_applies):
    as it is, on a variable the algorithm keeps no state for, or, with
    `has_state`, as what apply_nodes is given."""
    return not has_state

  def after_copy(self, builder, state, seeded):
    """Copy time, once the apply ops on a variable were replaced in every
    group and apply_nodes returned a new state for it, `state`: ops to run
    once before the next training run, such as setting what apply_nodes
    added to the state after the variable's replicas were seeded
    (`seeded`), which their seed ops do not set."""
    del builder, state, seeded
    return []

  # ---- Seeding: before a setting's first wave, and afresh ---------------
  def seed_ops(self, builder, state, value):
    """Ops setting `state` for every replica from central `value`."""
    del builder, state, value
    return []

  def reseed_ops(self, builder, state, central, replicas):
    """Ops setting `state` of the replicas fed to `replicas` (an int32
    vector) afresh, the central model being `central`."""
    del builder, state, central, replicas
    return []

  # ---- Before a wave ------------------------------------------------------
  def wave_value(self, wave, sizes):
    """What `wave_ops` are fed before training run `wave` (counted from 1
    over the session's completed training runs) whose replicas' shards
    have `sizes` rows, or None: nothing to run."""
    del wave, sizes
    return None

  def wave_ops(self, builder, states, value):
    """Ops preparing the coming wave, fed `value` (float64)."""
    del builder, states, value
    return []

  def skip_ops(self, builder, states, count, replicas):
    """Ops leaving the replicas fed to `replicas` out of the coming wave's
    synchronisation, `count` (an int32 scalar) taking part."""
    del builder, states, count, replicas
    return []

  def schedule(self, replicas):
    """A pooled algorithm's per-session schedule for `replicas` replicas:
    an object with batch_sizes(rows), factors(), record(replicas) and
    merge(drift), as adaptive.Schedule."""
    raise NotImplementedError

  def scale_ops(self, builder, states, value):
    """Ops setting a pooled algorithm's per-replica learning-rate factors
    to `value` (float64, one per replica)."""
    del builder, states, value
    return []

  # ---- Commit: between a wave's computation and its writes ----------------
  def before_commit(self, runtime, sizes, workers=None):
    """Between a wave's computation and its commit, on the C++ runtime
    (runtime.Runtime) that keeps what the commit applies; `sizes`: per
    replica, the rows of its shard. On a cluster (only then is it given),
    `workers(arrays)` sums a list of arrays over the workers."""
    del runtime, sizes, workers

  # ---- After a wave -------------------------------------------------------
  def merge_value(self, wave, sizes):
    """What `merge_ops` are fed after training run `wave`, or None."""
    del wave, sizes
    return None

  def merge_ops(self, builder, states, value):
    """Ops run after a wave, fed `value` (float64)."""
    del builder, states, value
    return []

  def drift_tensor(self, builder, states):
    """A pooled algorithm's float64 tensor its schedule's merge reads."""
    raise NotImplementedError

  def device_sync(self, builder, state):
    """With the replicas on several devices (builder.placement), the op
    that makes every device's copy of `state`'s variable, and the variable,
    the central model of all the replicas after a wave; or None."""
    del builder, state
    return None

  def reset_ops(self, builder, states):
    """Ops restarting the synchronisation after a wave that did not
    finish."""
    del builder, states
    return []

  # ---- Across workers: after a wave, on a cluster only --------------------
  def worker_sync(self, builder, state):
    """What keeps the central models of a cluster's workers equal, for
    the variable of `state`: (op run before each wave, the tensor each
    worker adds to the sum after it, a function from a tensor of that sum
    to the op applying it), or None."""
    del builder, state
    return None

  def worker_merge(self, builder, state, average=False):
    """On a cluster, what takes the place of `merge_ops` for the variable
    of `state`, so that one merge spans every worker's replicas: (the
    float64 tensor this worker adds to the sum over the workers, a
    function from (a tensor of that sum, the sum of the workers' replica
    counts, the merge value) to the op applying it), or None: each worker
    merges its own replicas with `merge_ops`. With `average`, the merge
    that `worker_merge_kind` calls "average"."""
    del builder, state, average
    return None

  def worker_merge_kind(self, wave):
    """On a cluster, the merge after training run `wave` (one is due):
    "sum" (`worker_merge`), "average" (`worker_merge(average=True)`) or
    None (each worker merges its own replicas alone)."""
    del wave
    return "sum"

  # ---- Checkpoints --------------------------------------------------------
  def state_parts(self, builder, state):
    """[(key or per-replica keys, resource handle or Replicated)]: the
    parts of `state` a checkpoint holds."""
    del builder, state
    return []

  def state_signature(self, state):
    """What the parts of `state` depend on (they may grow later)."""
    del state
    return None
