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

* planning: the check of the session's options and of a training run;
* wave time: the hooks (hooks.py: before, leave_out, between, merge,
  after, failed, undo) by which the algorithm joins each wave of a
  setting (`wave_hooks`), made once per setting. What an algorithm runs
  around a wave (SMA's participants, EASGD's phase, local SGD's exchange,
  synchronous SGD's average) is in its own hook set, beside it in its
  module; a pooled algorithm's `schedule` cuts the wave's batch;
* copy time: what a replica's apply ops become, and what must run once
  after the copies are built (`after_copy`);
* seeding, across workers and checkpoints: what runs then. The hooks
  taking a builder make ops: they are called when the ops are first
  needed, the ops are kept per setting (and set of variables), and the
  replica state (replicas.py) runs them each time.

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
  # wave (by its hooks, through the job's reduce); an algorithm that
  # cannot refuses a cluster.
  spans_workers = False
  # Replicas spread over several devices (devices=) can be kept together
  # (device_sync, or an exchange that reads every replica); an algorithm
  # that cannot refuses devices=.
  spans_devices = False
  # A training run's batch is cut into chunks that the replicas take as
  # they come free (runtime.Runtime.run_pool), each chunk one whole step of
  # its replica; the wave keeps the algorithm's `schedule` (Wave.schedule),
  # which its hooks ask when to merge.
  pooled = False
  # Every replica takes the same step each wave (synchronous SGD): a
  # replica with no rows of a wave's batch (DESIGN.md, feed sharding)
  # still computes one, on another's shard, weighted 0 (the commit weights),
  # and commits the common step; otherwise it sits the wave out.
  replicas_equal = False
  # The central model takes a step of its own that the replicas' moves only
  # feed (an outer step, as Lookahead's): one replica then trains a copy
  # of the user's variables, and L = 1 is not plain training (DESIGN.md,
  # "L = 1 is plain training").
  steps_central = False

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

  def check(self, nonfinite=None, sparse=(), split=True):
    """Raises if the session or a training run asks what the replicas
    cannot hold to; each argument is checked where it is known.

    Args:
      nonfinite: the session's `nonfinite` option ("propagate", "raise"
        or "skip"; None: not checked here).
      sparse: the names of a training run's apply ops that update rows of
        a variable.
      split: whether a training run of several replicas can run as a wave
        in two phases (computation, then commit): False if its writes
        cannot wait for its computation.

    Raises:
      ValueError: `nonfinite` cannot hold with this algorithm.
      tf.errors.UnimplementedError: the replicas cannot be kept together
        through such a training run.
    """
    del sparse, split
    if (nonfinite not in (None, "propagate") and
        (self.shares_model or self.pooled)):
      raise ValueError(f"algorithm {self.name!r} applies each task's step "
                       "when it finishes: nonfinite must be 'propagate'")

  # ---- Wave time: what joins each wave ------------------------------------
  def wave_hooks(self, setting):
    """The hooks (`hooks.WaveHook`) by which this algorithm joins each
    wave of a setting: made once per setting, they are called after the
    noise sample's and the job's (the backup, what other processes hand
    this one), in the order returned.

    Args:
      setting: the setting's `hooks.Setting`: the session, the runtime,
        the builder (see the module's docstring), the replica state
        (`runs`: the runs over the algorithm's states, made once;
        `replicated_variables`; `reseed`) and the job (`hooks.Job`: its
        `reduce` sums arrays over the processes, None in one).

    Returns:
      A sequence of `hooks.WaveHook`s (none by default).
    """
    del setting
    return ()

  def schedule(self, replicas):
    """A pooled algorithm's per-session schedule for `replicas` replicas:
    an object with batch_sizes(rows), factors(), record(replicas),
    merge(drift) and history, as adaptive.Schedule."""
    raise NotImplementedError

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

  # ---- Across devices and workers ------------------------------------------
  def device_sync(self, builder, state):
    """With the replicas on several devices (builder.placement), the op
    that makes every device's copy of `state`'s variable, and the variable,
    the central model of all the replicas after a wave; or None."""
    del builder, state
    return None

  # ---- Checkpoints --------------------------------------------------------
  def state_parts(self, builder, state):
    """[(key or per-replica keys, resource handle or Replicated)]: the
    parts of `state` a checkpoint holds. They make no ops, and a state
    that grows (apply_nodes) grows by parts: the replica state makes its
    ops over the states afresh when their parts' keys change."""
    del builder, state
    return []
