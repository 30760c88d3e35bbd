"""The replicas' state between waves: which variables have replicas, their
seeding, the refresh that follows a wave, and the state a checkpoint or
a snapshot holds. What an algorithm runs around a wave over that state is
its `runs` (algorithm_runs.py); what the replicas give the central model
after a wave, a plan's sync op (rewrite/sync.py).

A `ReplicaState` lives as long as one setting of L. At plan time, the
copier (rewrite/replicate.py) asks it for the replicas of the variables
it copies and the algorithm's state, and the planner hands it what the
copies made (`copied`); the trainer (waves.py) asks, every wave and
around plain runs, for the runs that seed, refresh, save and restore
the replicas.
Every op it makes is made once (`Builder.once`), so the graph does not
grow with the number of runs.
"""
import numpy as np
import tensorflow as tf

from tensorbow import algorithm_runs
from tensorbow.rewrite import graph_util


class ReplicaState(object):
  """The replicated variables of one setting of L and their life cycle.

  Args:
    builder: the setting's `rewrite.builder.Builder`.
    algorithm: the session's `algorithms.Algorithm`, resolved for L.
    share_variables: nothing is replicated: the copies train the user's
      own variables (`Builder`).
  """

  def __init__(self, builder, algorithm, share_variables=False):
    self._builder = builder
    self._share_variables = share_variables
    self._graph = builder.graph
    self._algorithm = algorithm
    self._in_use = False  # whether a training run was copied
    # replicated variable op name -> "model" | "slot" | "other"
    self._kinds = {}
    self._replicated = {}  # replicated variable op name -> Replicated
    self._states = {}  # model variable op name -> the algorithm's state
    # model variable op name -> the keys of its state's parts, which grow
    # as the state does (what ops made over the states depend on)
    self._signatures = {}
    self._seeds = {}  # replicated variable op name -> seed op
    self._pending_seed = set()  # replicated variables to seed before training
    self._before_training = []  # ops run once before the next training run
    self._pending_replicas = set()  # replicas to seed before training
    # The runs the algorithm makes around a wave, over these states.
    self._runs = algorithm_runs.AlgorithmRuns(
        builder, algorithm, self.algorithm_states, self.state_signature,
        self.replicas_of)

  @property
  def runs(self):
    """The setting's `algorithm_runs.AlgorithmRuns`."""
    return self._runs

  @property
  def in_use(self):
    """Whether a training run's copies were made (else there is nothing
    to seed, refresh or save)."""
    return self._in_use

  # ---- Asked by the copier, told by the planner ----------------------------

  def replicated_by(self, info):
    """The names of the variables a training run with
    `analysis.TrainingInfo` `info` gives replicas."""
    if self._share_variables:
      return set()
    # A model variable this run reads and another run trains has replicas
    # from the start: each replica computes at its own weights, whichever
    # train op runs first (two optimizers run in turn, a GAN's pair).
    return set(info.written) | info.read_models

  def add_variables(self, var_ops, model_vars):
    """Gives variable ops `var_ops` replicas, and, unless shared, model
    variables `model_vars` the algorithm's state.

    Returns:
      The names of the variables seeded already that were given the
      algorithm's state now: their seed ops are made afresh, and they are
      to be seeded again (`copied`).
    """
    builder = self._builder
    reseeded = []
    with builder.building():
      for op in var_ops:
        self._replicated[op.name] = builder.variable_replicas(op)
      for name in () if self._share_variables else model_vars:
        if name not in self._states:
          state = self._algorithm.variable_state(
              builder, self._graph.get_operation_by_name(name))
          if state is not None:
            self._keep({name: state})
            if name in self._seeds:
              # Replicated and seeded while read only: its replicas are
              # still the central model, and the state starts from it too.
              self._seeds[name] = self._make_seed(
                  self._graph.get_operation_by_name(name))
              reseeded.append(name)
    return reseeded

  def copied(self, info, made):
    """The copies of a training run with `analysis.TrainingInfo` `info`
    were made, and made `made` (a `replicate.Copier.extend`'s `Copied`):
    the algorithm's states it made more of replace the old, its variables'
    seed ops are made, and they and its ops to run before training run
    before the next training run (`seed_run`)."""
    self._in_use = True
    self._keep(made.states)
    for name in self.replicated_by(info):
      if name not in self._kinds:
        if name in info.model_vars or name in info.read_models:
          self._kinds[name] = "model"
        elif name in info.slot_vars:
          self._kinds[name] = "slot"
        else:
          self._kinds[name] = "other"
    with self._builder.building():
      for op in made.variables:
        self._seeds[op.name] = self._make_seed(op)
    self._pending_seed.update(op.name for op in made.variables)
    self._pending_seed.update(made.reseeded)
    self._before_training += list(made.before_training)
    # Made with the copies, not at the first wave or plain run after them:
    # each would extend TensorFlow's session once more, which sends its
    # whole graph and library (a second for a data set held in a one-shot
    # iterator's function).
    if self._pending_seed:
      self._seed_group(tuple(sorted(self._pending_seed)))
    self.refresh_op()

  def is_seeded(self, name):
    """Whether variable `name`'s replicas have a seed op already."""
    return name in self._seeds

  def replicas_of(self, name):
    """The Replicated copies of variable op `name`."""
    return self._replicated[name]

  def algorithm_state(self, name):
    """The algorithm's state for model variable `name`, or None."""
    return self._states.get(name)

  def algorithm_states(self):
    """{model variable op name: the algorithm's state}, as they are now
    (more come with later copies)."""
    return dict(self._states)

  # ---- Seeding -------------------------------------------------------------

  def _make_seed(self, var_op):
    """Op that sets every replica of `var_op` from the central model."""
    value = graph_util.read(var_op)
    assigns = [self._replicated[var_op.name].set(
        value, self._builder.all_replicas())]
    state = self._states.get(var_op.name)
    if state is not None:
      assigns += self._algorithm.seed_ops(self._builder, state, value)
    return tf.group(*assigns, name=f"seed/{var_op.name}")

  def seed_run(self):
    """(fetches, feed_dict) seeding the replicas that need it, or None;
    marks them seeded."""
    ops, feeds = self._before_training, {}
    self._before_training = []
    if self._pending_seed:
      names = tuple(sorted(self._pending_seed))
      self._pending_seed.clear()
      ops.append(self._seed_group(names))
    if self._pending_replicas:
      replicas, op = self._replica_seed()
      ops.append(op)
      feeds[replicas] = np.array(sorted(self._pending_replicas), np.int32)
      self._pending_replicas.clear()
    return (ops, feeds) if ops else None

  def _seed_group(self, names):
    """The op running the seed ops of variables `names`, made once."""
    return self._builder.once("seed", names, lambda: graph_util.after(
        [self._seeds[n] for n in names], "seed/group"))

  def _replica_seed(self):
    """(replicas placeholder, op) setting the replicas fed alone from the
    central model: their variables from the user's, their slots from the
    mean over the replicas (refreshed first), the algorithm's state
    afresh."""
    names = tuple(sorted(self._seeds))
    refresh = self.refresh_op()

    def build():
      replicas = tf.compat.v1.placeholder(tf.int32, [None],
                                          name="seed/replicas")
      # The reads wait for the refresh, which may have run already.
      ready = (graph_util.after([refresh], "seed/refreshed", tf.constant(0))
               if refresh is not None else None)
      with self._graph.control_dependencies(
          [ready] if ready is not None else []):
        assigns = []
        for name in names:
          central = graph_util.read(self._graph.get_operation_by_name(name))
          assigns.append(self._replicated[name].set(central, replicas))
          state = self._states.get(name)
          if state is not None:
            assigns += self._algorithm.reseed_ops(self._builder, state,
                                                  central, replicas)
        return replicas, tf.group(*assigns, name="seed/replicas_op")

    return self._builder.once("seed_replicas", self.state_signature(names),
                              build)

  def reseed_replicas(self, replicas):
    """Replicas `replicas` are to be set from the central model before the
    next training run (left out of a wave's central update: hooks.py,
    `leave_out`)."""
    self._pending_replicas.update(replicas)

  def mark_seeded(self, names):
    """Replicas of `names` were set otherwise: no seed before training."""
    self._pending_seed.difference_update(names)

  def replicated_variables(self):
    """The names of the variable ops with replicas, sorted."""
    return sorted(self._seeds)

  def replicates_any(self, names):
    """Whether any of variable ops `names` has replicas."""
    return any(n in self._seeds for n in names)

  def reseed(self, names=None):
    """Replicas of variables `names` (None: all) are to be re-seeded from
    the central model before the next training run."""
    if names is None:
      self._pending_seed.update(self._seeds)
    else:
      self._pending_seed.update(n for n in names if n in self._seeds)

  # ---- Around a wave -------------------------------------------------------

  def model_bytes(self):
    """The bytes of the replicated model variables."""
    total = 0
    for name in (n for n, k in self._kinds.items() if k == "model"):
      dtype, shape = graph_util.dtype_and_shape(
          self._graph.get_operation_by_name(name))
      total += dtype.size * shape.num_elements()
    return total

  def distances(self):
    """A float64 vector: each replica's L2 distance from the central model
    over the replicated model variables; None if none has replicas."""
    names = tuple(sorted(n for n in self._seeds
                         if self._kinds.get(n) == "model"))
    if not names:
      return None

    def build():
      total = 0.0
      for name in names:
        copies = self._replicated[name]
        central = graph_util.read(self._graph.get_operation_by_name(name))
        apart = tf.cast(copies.stacked(), tf.float64) - tf.cast(
            central, tf.float64)
        total += tf.reduce_sum(tf.reshape(tf.square(apart),
                                          [copies.num_replicas, -1]), 1)
      return tf.sqrt(total)

    return self._builder.once("distances", names, build)

  def pending_seed(self):
    """The replicated variables to be seeded from the central model
    before the next training run."""
    return tuple(sorted(self._pending_seed))

  def central_tensors(self, names):
    """(names, tensors reading them): the user's variables `names`."""
    names = tuple(sorted(names))
    return names, self._builder.once("central", names, lambda: [
        graph_util.read(self._graph.get_operation_by_name(n))
        for n in names])

  def set_central_run(self, values):
    """(fetches, feed_dict) setting the user's variables central_tensors
    named to `values` ({name: value})."""
    names = tuple(sorted(values))
    placeholders, assigns = self._central_assigns(names)
    return assigns, {p: values[n] for n, p in zip(names, placeholders)}

  def _central_assigns(self, names):
    """([placeholder], [op assigning it]) for the user's variables
    `names`."""

    def build():
      placeholders, assigns = [], []
      for n in names:
        var = self._graph.get_operation_by_name(n)
        p = tf.compat.v1.placeholder(
            tf.as_dtype(var.get_attr("dtype")).base_dtype)
        placeholders.append(p)
        assigns.append(graph_util.assign(var, p))
      return placeholders, assigns

    return self._builder.once("assign_central", names, build)

  def refresh_op(self):
    """Op that brings user-named slots (and, for an algorithm whose model is
    a replica's, the model) up to date.

    Slots become the replicas' mean; the model, replica 0's. Returns None
    if there is nothing to refresh.
    """
    names = tuple(sorted(
        n for n, k in self._kinds.items()
        if k == "slot" or (k == "model" and
                            self._algorithm.model_from_replica)))
    if not names:
      return None

    def build():
      first = self._builder.constant(0, tf.int32)
      updates = []
      for name in names:
        var = self._graph.get_operation_by_name(name)
        updates.append(graph_util.assign(var, self._replicated[name].mean(
            first, mean=self._kinds[name] == "slot")))
      return tf.group(*updates, name="refresh")

    return self._builder.once("refresh", names, build)

  # ---- Checkpoints and snapshots -------------------------------------------

  def _state_of(self, name):
    """[(keys, Replicated) or (key, resource handle)] of replicated
    variable `name`'s state: its replicas' copies and the algorithm's
    state for it."""
    parts = [([f"{name}/replica_{r}"
               for r in range(self._builder.num_replicas)],
              self._replicated[name])]
    state = self._states.get(name)
    if state is not None:
      parts += self._algorithm.state_parts(self._builder, state)
    return parts

  def _keep(self, states):
    """Keeps the algorithm's `states` ({model variable op name: state}),
    each replacing the variable's old one, and the keys of their parts."""
    for name, state in states.items():
      self._states[name] = state
      self._signatures[name] = tuple(
          tuple(k) if isinstance(k, list) else k
          for k, _ in self._algorithm.state_parts(self._builder, state))

  def state_signature(self, names):
    """What the state of variables `names` depends on, for Builder.once:
    the keys of their states' parts (a state grows by parts)."""
    return names, tuple(self._signatures[n] for n in names
                        if n in self._signatures)

  def state_keys(self, name):
    """The keys of replicated variable `name`'s state."""
    keys = []
    for k, _ in self._state_of(name):
      keys.extend(k if isinstance(k, list) else [k])
    return keys

  def replicated_parts(self):
    """[rewrite.builder.Replicated]: the copies per replica of every
    replicated variable's state, which are no graph's variables."""
    return [part for name in sorted(self._seeds)
            for keys, part in self._state_of(name) if isinstance(keys, list)]

  def state_tensors(self):
    """{key: tensor} reading every replica's copy of every replicated
    variable and the algorithm's state for each model variable."""
    names = tuple(sorted(self._seeds))

    def build():
      tensors = {}
      for name in names:
        for keys, part in self._state_of(name):
          if isinstance(keys, list):
            tensors.update(zip(keys, tf.unstack(part.stacked(),
                                                num=len(keys))))
          else:
            tensors[keys] = tf.raw_ops.ReadVariableOp(
                resource=part, dtype=part.op.get_attr("dtype"))
      return tensors

    return self._builder.once("state", self.state_signature(names), build)

  def load_state_run(self, names, values):
    """(fetches, feed_dict) setting the state of replicated variables
    `names` from {key: value} `values`."""
    names = tuple(sorted(names))

    def build():
      placeholders, assigns = [], []
      for name in names:
        for keys, part in self._state_of(name):
          if isinstance(keys, list):
            p = tf.compat.v1.placeholder(part.dtype)
            assigns.append(part.set(p, self._builder.all_replicas(),
                                    stacked=True))
          else:
            p = tf.compat.v1.placeholder(
                tf.as_dtype(part.op.get_attr("dtype")))
            assigns.append(tf.raw_ops.AssignVariableOp(resource=part,
                                                       value=p))
          placeholders.append((keys, p))
      return placeholders, tf.group(*assigns, name="load")

    placeholders, op = self._builder.once(
        "load", self.state_signature(names), build)
    feeds = {}
    for keys, p in placeholders:
      if isinstance(keys, list):
        feeds[p] = np.stack([np.asarray(values[k]) for k in keys])
      else:
        feeds[p] = values[keys]
    return op, feeds

  def _shared_parts(self):
    """{key: resource handle} of the algorithm's state that is no
    replica's own (SMA's previous central model, say)."""
    return {keys: part for name in sorted(self._seeds)
            for keys, part in self._state_of(name)
            if not isinstance(keys, list)}

  def shared_state_tensors(self):
    """{key: tensor} reading the algorithm's state that is no replica's
    own, for the model variables with replicas."""
    parts = self._shared_parts()
    return self._builder.once("shared", self.state_signature(
        tuple(sorted(self._seeds))), lambda: {
            k: tf.raw_ops.ReadVariableOp(resource=h,
                                         dtype=h.op.get_attr("dtype"))
            for k, h in parts.items()})

  def set_shared_state_run(self, values):
    """(fetches, feed_dict) setting what shared_state_tensors read to
    {key: value} `values`."""
    keys = tuple(sorted(values))
    parts = self._shared_parts()

    def build():
      placeholders = [tf.compat.v1.placeholder(
          tf.as_dtype(parts[k].op.get_attr("dtype"))) for k in keys]
      return placeholders, tf.group(*[
          tf.raw_ops.AssignVariableOp(resource=parts[k], value=p)
          for k, p in zip(keys, placeholders)], name="set_shared")

    placeholders, op = self._builder.once("set_shared", keys, build)
    return op, {p: values[k] for k, p in zip(keys, placeholders)}

  def snapshot_tensors(self, names):
    """{key: tensor} reading the user's variables `names` and every
    replica's state: what a commit that may fail could change."""
    names = tuple(sorted(names))
    tensors = dict(self._builder.once("snapshot", names, lambda: {
        f"{n}/central": graph_util.read(self._graph.get_operation_by_name(n))
        for n in names}))
    tensors.update(self.state_tensors())
    return tensors

  def restore_snapshot_run(self, names, snapshot):
    """(fetches, feed_dict) setting back what snapshot_tensors(names)
    read, given as `snapshot`."""
    names = tuple(sorted(names))
    placeholders, assigns = self._central_assigns(names)
    fetches = list(assigns)
    feeds = {p: snapshot[f"{n}/central"] for n, p in zip(names, placeholders)}
    replicated = tuple(sorted(self._seeds))
    if replicated:
      load, load_feeds = self.load_state_run(replicated, snapshot)
      fetches.append(load)
      feeds.update(load_feeds)
    return fetches, feeds
