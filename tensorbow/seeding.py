"""Where the replicas' state comes from before a wave (DESIGN.md,
"Checkpoints").

Between waves, plain runs may restore a checkpoint, assign variables or
run initializers. A `Seeding` keeps what a Saver's restore loaded beside
the checkpoint (checkpoint.py), merged over several restores of Savers
that cover some variables each, or what the session's previous setting
carried over; and which variables plain runs wrote since, whose replicas
come from the central model instead. The next wave seeds every replica
due for it from the one or the other, and a Saver's save writes the
replicas' state beside its checkpoint.
"""
from tensorbow import checkpoint


class Seeding(object):
  """What seeds one setting's replicas before its next wave.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    replica_state: the setting's `replicas.ReplicaState`.
    config: what a checkpoint's replica state must have been saved with
      (options.checkpoint_config).
    checkpoint_worker: () -> whose replica state file a checkpoint has
      beside it (hooks.Job's; None: one process, nobody's in particular).
  """

  def __init__(self, session, replica_state, config, checkpoint_worker):
    self._session = session
    self._state = replica_state
    self._config = config
    self._worker = checkpoint_worker
    self._loaded = None  # replica state restored with checkpoints
    self._written = set()  # variables it no longer applies to

  def config(self):
    """What a checkpoint's replica state must have been saved with."""
    return dict(self._config)

  def after_saver(self, kind, prefix, waves):
    """A Saver's "save" or "restore" of checkpoint `prefix` ran, with
    `waves` training runs completed; returns the count of waves to go on
    from (a restore of every model variable's state brings back the
    count it was saved at)."""
    worker = None if self._worker is None else self._worker()
    if kind == "save" and self._state.in_use:
      checkpoint.save(prefix, self.config(), self.replica_state(), worker,
                      waves=waves)
    elif kind == "restore":
      loaded = checkpoint.load(prefix, self.config(), worker)
      waves = checkpoint.pop_waves(loaded, waves)
      self._take(loaded or {})
    return waves

  def _take(self, loaded):
    """Replica state `loaded` by a restore joins what earlier restores
    loaded (a Saver may cover only some variables); the variables it
    covers take it, not the central model, though the restore wrote
    them."""
    self._written = set(n for n in self._written
                        if not _covers(loaded, n, self._state))
    self._loaded = dict(self._loaded or {}, **loaded) or None

  def carry(self, state):
    """The replicas are to train on from `state` ({key: value}, the
    previous setting's replica state)."""
    self._loaded, self._written = state, set()

  def replica_state(self):
    """{key: value} of every replica's state (seeded first if due)."""
    self.seed()
    tensors = self._state.state_tensors()
    keys = sorted(tensors)
    return dict(zip(keys, self._session.run([tensors[k] for k in keys])))

  def seed(self):
    """Sets replicas due for it from state carried or restored, or else
    from the central model."""
    rep = self._state
    if self._loaded is not None:
      names = [n for n in rep.replicated_variables()
               if n not in self._written and
               all(k in self._loaded for k in rep.state_keys(n))]
      if names:
        self._session.run(*rep.load_state_run(names, self._loaded))
        rep.mark_seeded(names)
      self._loaded = None
    seed = rep.seed_run()
    if seed is not None:
      self._session.run(*seed)

  def wrote(self, written):
    """Plain runs wrote variables `written` (None: maybe any): what a
    restore loaded no longer applies to them."""
    if written is None:
      self._loaded = None
    else:
      self._written.update(written)


def _covers(loaded, name, replicas):
  """Whether replica state `loaded` holds variable `name`'s: every key
  of its state (replicas.ReplicaState), or, for a variable not given
  replicas yet (a restore before the first training run), any."""
  keys = replicas.state_keys(name) if replicas.replicates_any([name]) else []
  if keys:
    return all(k in loaded for k in keys)
  return any(k.startswith(name + "/") for k in loaded)
