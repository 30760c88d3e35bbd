"""`TensorBowSession`: the user's entry point (DESIGN.md section 2).

A drop-in for `tf.compat.v1.Session`. Each `run` is routed: a *plain run*
goes, by name, to an ordinary `tf.compat.v1.Session` over the execution
graph (the user's ops and TensorBow's, execution.py) and so behaves exactly
as TensorFlow on the central model; a *training run* (one whose closure
holds an optimizer's apply op) is planned once per signature (planner.py),
then executed as a wave of learning tasks by the C++ runtime on the same
TensorFlow session: batch feeds are sharded across the replicas, and the
replicas' fetches merged.
"""
import collections
import logging
import threading

import numpy as np
import tensorflow as tf

from tensorbow import algorithms
from tensorbow import checkpoint
from tensorbow import compat
from tensorbow import execution
from tensorbow import planner
from tensorbow.rewrite import analysis

ALGORITHMS = algorithms.NAMES
NONFINITE = ("propagate", "raise", "skip")

# How a run is classified, kept per fetch structure and feed keys.
_Route = collections.namedtuple("_Route", [
    "fed",  # fed tensors, by name
    "order",  # per fed tensor: its position in feed_dict
    "handler",  # TensorFlow's fetch handler
    "signature",  # (fetched tensor names, target names, fed names)
    "closure",  # (is_training, written variables or None, ops)
    "fetched",  # tensors and operations the handler fetches or runs
    "cacheable",  # no fetch is fed (the handler then holds a feed value)
])
_MAX_ROUTES = 256
# A floating-point type that NumPy's dtype kinds do not call one.
_BFLOAT16 = np.dtype(tf.bfloat16.as_numpy_dtype)


class TensorBowSession(compat.SessionInterface):
  """Trains several replicas of a TF1 model at once, kept together by SMA.

  Args:
    target: as for `tf.compat.v1.Session`.
    graph: as for `tf.compat.v1.Session` (default: the default graph).
    config: as for `tf.compat.v1.Session`.
    replicas: L, the number of model replicas (learners), >= 1.
    algorithm: an instance from `tensorbow.algorithms` or its name: "sma"
      (synchronous model averaging) or "none" (independent replicas; the
      central model is replica 0's, for measuring the cost of
      synchronisation).
    alpha: the SMA correction factor; None means 1 / replicas (or give it
      to `algorithms.SMA`).
    central_momentum: the momentum of the central model, in [0, 1).
    nonfinite: what a training run does with an infinity or NaN in a
      replica's fetches or in what its optimizer applies: "propagate" (as
      TensorFlow), "raise" (InvalidArgumentError, nothing committed) or
      "skip" (those replicas are left out of the wave's update and
      re-seeded from the central model, with a warning).

  Raises:
    ValueError: for an argument out of range.
  """

  def __init__(self, target="", graph=None, config=None, *, replicas=2,
               algorithm="sma", alpha=None, central_momentum=0.9,
               nonfinite="propagate"):
    if nonfinite not in NONFINITE:
      raise ValueError(f"nonfinite must be one of {NONFINITE}, got "
                       f"{nonfinite!r}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
      raise ValueError(f"replicas must be an int >= 1, got {replicas!r}")
    algorithm = algorithms.resolve(algorithm, alpha, central_momentum)
    alpha = getattr(algorithm, "alpha", None)
    if alpha is None:
      alpha = 1.0 / replicas
    central_momentum = getattr(algorithm, "central_momentum", 0.9)
    if graph is None:
      graph = tf.compat.v1.get_default_graph()
    self._graph = graph
    # TensorBow's ops go into a graph of the session's own (execution.py).
    self._exec = execution.ExecutionGraph(graph)
    self._session = compat.PlainSession(target=target,
                                        graph=self._exec.graph, config=config)
    self._replicas = replicas
    self._algorithm = algorithm.name
    self._alpha = float(alpha)
    self._central_momentum = float(central_momentum)
    self._nonfinite = nonfinite
    self._planner = planner.Planner(
        self._session, self._exec, replicas, self._algorithm, self._alpha,
        self._central_momentum, nonfinite)
    self._plans = {}
    self._closures = {}  # signature -> (is_training, written, ops)
    self._routes = {}  # _run_key -> _Route
    self._needs_refresh = False
    self._loaded_state = None  # replica state restored with a checkpoint
    self._lock = threading.RLock()
    self._closed = False
    self._context = None

  # ---- SessionInterface ----------------------------------------------------

  @property
  def graph(self):
    return self._graph

  @property
  def graph_def(self):
    return self._graph.as_graph_def()

  @property
  def execution_graph(self):
    """The `tf.Graph` this session executes: the user's ops (same names)
    and TensorBow's, for inspection."""
    return self._exec.graph

  @property
  def sess_str(self):
    return self._session.sess_str

  @property
  def replicas(self):
    return self._replicas

  def list_devices(self):
    return self._session.list_devices()

  def close(self):
    """Closes the session once a wave in flight has finished.

    Stops the runtime's threads and closes the TensorFlow session; later
    runs raise RuntimeError, as TensorFlow's do.
    """
    with self._lock:
      self._closed = True
      self._planner.runtime = None
      self._session.close()

  @property
  def _runtime(self):
    return self._planner.runtime

  @property
  def _replicator(self):
    return self._planner.replicator

  def _check_open(self):
    if self._closed:
      raise RuntimeError("Attempted to use a closed Session.")

  def as_default(self):
    """Context manager that makes this the default session."""
    return compat.default_session(self)

  def __enter__(self):
    if self._context is not None:
      raise RuntimeError("Session context managers are not re-entrant. Use "
                         "`Session.as_default()` to enter a session again.")
    self._context = (self.graph.as_default(), self.as_default())
    self._context[0].__enter__()
    return self._context[1].__enter__()

  def __exit__(self, exc_type, exc_value, exc_tb):
    graph_context, session_context = self._context
    self._context = None
    session_context.__exit__(exc_type, exc_value, exc_tb)
    graph_context.__exit__(exc_type, exc_value, exc_tb)
    self.close()

  def partial_run_setup(self, fetches, feeds=None):
    """As `tf.compat.v1.Session.partial_run_setup` (plain runs only)."""
    self._sync()
    handler = compat.fetch_handler(self.graph, fetches, {})
    feeds = [self.graph.as_graph_element(f, allow_tensor=True,
                                         allow_operation=False).name
             for f in tf.nest.flatten(feeds or [])]
    return self._session.partial_run_setup(_names(handler), feeds)

  def partial_run(self, handle, fetches, feed_dict=None):
    """As `tf.compat.v1.Session.partial_run` (plain runs only)."""
    self._sync()
    feeds = compat.feed_items(self.graph, feed_dict or {})
    handler = compat.fetch_handler(self.graph, fetches,
                                   {t.ref(): v for t, v in feeds})
    values = self._session.partial_run(handle, _names(handler),
                                       {t.name: v for t, v in feeds})
    return handler.build_results(self, values[:len(handler.fetches())])

  def make_callable(self, fetches, feed_list=None, accept_options=False):
    """A callable running `fetches` with positional feeds for `feed_list`.

    As `tf.compat.v1.Session.make_callable`; training runs are sharded and
    merged as by `run`.
    """
    feed_list = list(feed_list or [])

    def call(*args, **kwargs):
      if len(args) != len(feed_list):
        raise TypeError(f"expected {len(feed_list)} feed values, got "
                        f"{len(args)}")
      options = run_metadata = None
      if accept_options:
        options = kwargs.pop("options", None)
        run_metadata = kwargs.pop("run_metadata", None)
      if kwargs:
        raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")
      return self.run(fetches, dict(zip(feed_list, args)), options,
                      run_metadata)

    return call

  def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
    """Runs `fetches` as `tf.compat.v1.Session.run` does.

    A training run trains every replica on its shard of the batch feeds,
    then synchronises; fetched values are merged (DESIGN.md section 2.4).

    Raises:
      tf.errors.InvalidArgumentError: batch feeds of different sizes, or
        fewer rows than replicas (nothing is changed).
      tf.errors.UnimplementedError: a training graph TensorBow cannot train.
      As `tf.compat.v1.Session.run` otherwise.
    """
    self._check_open()
    feed_dict = feed_dict or {}
    self._sync()
    key = _run_key(fetches, feed_dict)
    route = self._routes.get(key) if key is not None else None
    graph = self.graph
    if route is not None and not all(
        graph.is_fetchable(x) for x in route.fetched):
      # Made unfetchable since: classified again, TensorFlow's handler
      # reports it before a plain run's refresh or reseeding could run.
      route = None
    if route is None:
      feeds = compat.feed_items(graph, feed_dict)
      route = self._route(fetches, feeds)
      if key is not None and route.cacheable:
        if len(self._routes) >= _MAX_ROUTES:
          self._routes.clear()
        self._routes[key] = route
      values = [v for _, v in feeds]
    else:
      values = list(feed_dict.values())  # one tensor per key (_run_key)
    fed_values = [values[i] for i in route.order]
    for t in route.fed:
      if not graph.is_feedable(t):
        raise ValueError(f"Tensor {t.name} may not be fed.")
    if not route.closure[0]:
      return self._plain_run(route, fed_values, options, run_metadata)
    return self._training_run(route, fed_values, options, run_metadata)

  def _sync(self):
    """Brings the execution graph up to the user's graph."""
    if self._exec.user_graph.version != self._exec.version:
      with self._lock:
        self._exec.sync()

  def _route(self, fetches, feeds):
    """Classifies a run fed `feeds` ([(tensor, value)]): its _Route."""
    # Without the fed values unless a fetch is fed: a cached route must not
    # keep a run's feeds alive.
    handler = compat.fetch_handler(self.graph, fetches,
                                   {t.ref(): None for t, _ in feeds})
    cacheable = not compat.fetches_fed(handler)
    if not cacheable:
      handler = compat.fetch_handler(self.graph, fetches,
                                     {t.ref(): v for t, v in feeds})
    signature = (tuple(t.name for t in handler.fetches()),
                 tuple(op.name for op in handler.targets()),
                 tuple(sorted(t.name for t, _ in feeds)))
    with self._lock:
      closure = self._closures.get(signature)
      if closure is None:
        fed_names = frozenset(signature[2])
        ops = analysis.closure(
            [self._exec.tensor(t).op for t in handler.fetches()] +
            [self._exec.op(op) for op in handler.targets()], fed_names)
        closure = (any(analysis.is_apply(op) for op in ops),
                   analysis.written_variables(ops), ops)
        self._closures[signature] = closure
    order = sorted(range(len(feeds)), key=lambda i: feeds[i][0].name)
    return _Route(fed=[feeds[i][0] for i in order], order=order,
                  handler=handler,
                  signature=signature, closure=closure,
                  fetched=handler.fetches() + handler.targets(),
                  cacheable=cacheable)

  # ---- Plain runs ----------------------------------------------------------

  def _plain_run(self, route, fed_values, options, run_metadata):
    """Runs as tf.compat.v1.Session does, on the execution graph.

    A Saver's save or restore also saves or restores the replicas' state
    beside the checkpoint.
    """
    _, written, ops = route.closure
    handler = route.handler
    feeds = {t.name: v for t, v in zip(route.fed, fed_values)}
    with self._lock:
      if self._needs_refresh and self._replicator is not None:
        refresh = self._replicator.refresh_op()
        if refresh is not None:
          self._session.run(refresh)
        self._needs_refresh = False
    # Not under the lock: a run that blocks inside TensorFlow (a dequeue)
    # must not block the session's other runs, as with TensorFlow.
    try:
      values = self._session.run(_names(handler), feeds, options,
                                 run_metadata)
    except (TypeError, ValueError):
      raise  # refused before anything ran
    except tf.errors.OpError as e:
      # Failed while executing: the writes that did not wait for the
      # failed op may have run.
      if isinstance(e.op, tf.Operation):
        written = analysis.written_variables(ops, failed_op=e.op)
      self._reseed(written)
      raise
    except BaseException:
      # Interrupted, maybe after some writes.
      self._reseed(written)
      raise
    self._reseed(written)
    saver = checkpoint.saver_call(ops, dict(zip(route.fed, fed_values)),
                                  self.graph)
    if saver is not None:
      with self._lock:
        kind, prefix = saver
        if kind == "save" and self._replicator is not None:
          checkpoint.save(prefix, self._config(), self._replica_state())
        elif kind == "restore":
          self._loaded_state = checkpoint.load(prefix, self._config())
    return handler.build_results(self, values[:len(handler.fetches())])

  def _config(self):
    """What a checkpoint's replica state must have been saved with."""
    return {"replicas": self._replicas, "algorithm": self._algorithm,
            "alpha": self._alpha, "central_momentum": self._central_momentum}

  def _replica_state(self):
    """{key: value} of every replica's state (seeded first if due)."""
    self._seed_replicas()
    return self._read(self._replicator.state_tensors())

  def _read(self, tensors):
    """{key: value} of a {key: tensor} dict, in one run."""
    keys = sorted(tensors)
    return dict(zip(keys, self._session.run([tensors[k] for k in keys])))

  def _seed_replicas(self):
    """Sets replicas due for it from a restored checkpoint's state or from
    the central model."""
    rep = self._replicator
    if self._loaded_state is not None:
      names = [n for n in rep.replicated_variables()
               if all(k in self._loaded_state for k in rep.state_keys(n))]
      if names:
        self._session.run(*rep.load_state_run(names, self._loaded_state))
        rep.mark_seeded(names)
      self._loaded_state = None
    seed = rep.seed_run()
    if seed is not None:
      self._session.run(*seed)

  def _reseed(self, written):
    if written is None or written:
      with self._lock:
        # Written since: what a restore loaded no longer applies.
        self._loaded_state = None
        if self._replicator is not None:
          self._replicator.reseed(written)

  # ---- Training runs -------------------------------------------------------

  def _training_run(self, route, fed_values, options, run_metadata):
    """A wave over `route`'s plan; `fed_values` in the order of route.fed."""
    handler = route.handler
    with self._lock:
      self._check_open()
      plan = self._plans.get(route.signature)
      if plan is None:
        plan = self._planner.plan(handler, route.closure[2], route.fed)
        self._plans[route.signature] = plan
      values = self._feed_values(plan, fed_values)
      shards = self._shard(plan, values)
      if self._replicator is not None:
        self._seed_replicas()
      per_replica = [[s[r] for s in shards] for r in range(plan.replicas)]
      # Before the wave: an interrupt after it must still leave the
      # user-named slots to be refreshed.
      self._needs_refresh = True
      if plan.atomic is not None:
        outputs, committed = self._atomic_wave(plan, per_replica, options,
                                               run_metadata)
      else:
        outputs, committed = self._whole_wave(plan, per_replica, options,
                                              run_metadata), None
      fetched = handler.fetches()
      central = {}
      if plan.central_fetches:
        central_values = self._session.run(
            [fetched[i].name for i in plan.central_fetches])
        central = dict(zip(plan.central_fetches, central_values))
    sizes = ([len(s) for s in shards[plan.batch_feed]]
             if plan.batch_feed >= 0 else None)
    if committed is not None and not all(committed):
      # Skipped replicas: the wave's result is the committed ones'.
      keep = [r for r, c in enumerate(committed) if c] or [0]
      outputs = [outputs[r] for r in keep]
      sizes = [sizes[r] for r in keep] if sizes else None
    results = []
    k = 0  # position among the replicas' fetches
    for i in range(len(fetched)):
      if i in central:
        results.append(central[i])
      else:
        results.append(_merge([o[k] for o in outputs], sizes))
        k += 1
    return handler.build_results(self, results)

  def _whole_wave(self, plan, per_replica, options, run_metadata):
    """A wave of tasks that compute and write in one TensorFlow run."""
    try:
      return self._runtime.run_wave(
          plan.calls, per_replica, plan.dtypes, plan.batch_feed,
          plan.sync_call, options, run_metadata, by_group=plan.by_group)
    except tf.errors.OpError:
      self._after_failed_writes()
      raise

  def _after_failed_writes(self):
    """After a wave failed while writing: replicas that finished their step
    are put back on the central model, which the wave did not change."""
    if self._replicator is not None:
      self._replicator.reseed()
      self._reset_barriers()

  def _reset_barriers(self):
    """Restarts SMA's leader counts after a wave that did not finish."""
    reset = self._replicator.reset_barriers_op()
    if reset is not None:
      self._session.run(reset)

  def _atomic_wave(self, plan, per_replica, options, run_metadata):
    """A wave whose writes run only once every replica has computed.

    Returns:
      (per replica its fetches, per replica whether it committed).
    """
    split = plan.atomic
    runtime = self._runtime
    check = self._nonfinite != "propagate"
    try:
      computed, nonfinite = runtime.compute(
          plan.calls, per_replica, plan.dtypes, plan.batch_feed,
          len(split.internal), check, options, run_metadata,
          by_group=plan.by_group)
      committed = [True] * plan.replicas
      bad = [r for r, where in enumerate(nonfinite) if where]
      if bad:
        what = "; ".join(
            f"replica {r}: {', '.join(plan.described[i] for i in nonfinite[r])}"
            for r in bad)
        if self._nonfinite == "raise":
          raise tf.errors.InvalidArgumentError(
              None, None,
              f"TensorBow: a training run produced non-finite values "
              f"({what}); nothing was committed")
        logging.warning("TensorBow: replicas left out of a training run for "
                        "non-finite values (%s); they are re-seeded from the "
                        "central model", what)
        committed = [not where for where in nonfinite]
        self._skip_replicas(bad, plan.replicas - len(bad))
    except BaseException:
      # Nothing was written: the wave is dropped.
      runtime.discard()
      raise
    # Where an op after a write may fail, what the commit may write is
    # kept to be put back.
    snapshot = self._snapshot(plan.snapshot) if plan.snapshot else None
    try:
      sync_call = plan.sync_call
      if plan.sync_calls is not None and True in committed:
        sync_call = plan.sync_calls[committed.index(True)]
      written = runtime.commit(plan.commit_calls, committed, sync_call,
                               options, run_metadata, by_group=plan.by_group)
    except tf.errors.OpError:
      if snapshot is not None:
        self._restore_snapshot(plan.snapshot, snapshot)
      else:
        self._after_failed_writes()
      raise
    if not all(committed):
      self._replicator.reseed_replicas(
          [r for r, c in enumerate(committed) if not c])
    n = len(split.compute_fetches) + len(split.commit_fetches)
    outputs = []
    for r in range(plan.replicas):
      values = [None] * n
      for i, v in zip(split.compute_fetches, computed[r]):
        values[i] = v
      for i, v in zip(split.commit_fetches, written[r]):
        values[i] = v
      outputs.append(values)
    return outputs, committed

  def _snapshot(self, names):
    values = self._read(self._replicator.snapshot_tensors(names))
    return {k: np.array(v, copy=True) for k, v in values.items()}

  def _restore_snapshot(self, names, snapshot):
    self._session.run(*self._replicator.restore_snapshot_run(names, snapshot))
    self._reset_barriers()

  def _skip_replicas(self, bad, remaining):
    """Leaves replicas `bad` out of the coming commit's central update."""
    if remaining == 0:
      return
    run = self._replicator.participants_run(bad, remaining)
    if run is not None:
      self._session.run(*run)

  def _feed_values(self, plan, fed):
    """The fed values, in plan order, as checked NumPy arrays.

    Checked as TensorFlow checks them: dtype and shape, and every batch
    feed's rows.
    """
    values = []
    rows = []
    for t, name, is_batch, dtype, shape, value in zip(
        plan.feeds, plan.names, plan.batch, plan.np_dtypes, plan.shapes, fed):
      if isinstance(value, tf.Tensor):
        raise TypeError(
            f"The value of a feed cannot be a tf.Tensor object (feed "
            f"{t.name}); feed NumPy arrays, lists or scalars")
      array = np.asarray(value, dtype=dtype)
      if not _shape_fits(shape, array.shape):
        raise ValueError(
            f"Cannot feed value of shape {array.shape} for Tensor {t.name}, "
            f"which has shape {t.shape}")
      if is_batch:
        rows.append((name, array.shape[0]))
      values.append(array)
    if rows:
      sizes = {n for _, n in rows}
      if len(sizes) > 1:
        raise tf.errors.InvalidArgumentError(
            None, None,
            "TensorBow: all batch feeds of a training run must have the same "
            f"first dimension; got {_described(rows)}")
      if sizes.pop() < self._replicas:
        raise tf.errors.InvalidArgumentError(
            None, None,
            f"TensorBow: a batch feed needs at least one row per replica "
            f"({self._replicas} replicas); got {_described(rows)}")
    return values

  def _shard(self, plan, values):
    """Per feed, one array per replica: batch feeds split, others whole."""
    n = plan.replicas
    shards = []
    for array, is_batch in zip(values, plan.batch):
      if is_batch and n > 1:
        shards.append([_contiguous(s) for s in np.array_split(array, n)])
      else:
        shards.append([_contiguous(array)] * n)
    return shards

  # ---- For benchmarks and tuning -------------------------------------------

  def task_timings(self):
    """Start, end, replica and stream group of every learning task run."""
    return self._runtime.task_timings() if self._runtime is not None else []

  def clear_task_timings(self):
    """Forgets the task timings recorded so far."""
    if self._runtime is not None:
      self._runtime.clear_task_timings()


def _names(handler):
  """The names a fetch handler's fetches and targets go by."""
  return ([t.name for t in handler.fetches()] +
          [op.name for op in handler.targets()])


def _described(rows):
  return ", ".join(f"{name}: {n}" for name, n in rows)


def _shape_fits(dims, shape):
  """Whether an array's shape is compatible with a feed's (known) dims."""
  if dims is None:
    return True
  return len(dims) == len(shape) and all(
      d is None or d == n for d, n in zip(dims, shape))


class _Uncacheable(Exception):
  pass


def _run_key(fetches, feed_dict):
  """A hashable key for a run's fetch structure and feed keys, or None.

  Only plain structures (lists, tuples, dicts) of Tensors, Operations and
  names are keyed; anything else is classified afresh on every run.
  """
  try:
    return (_fetch_key(fetches),
            tuple(_leaf_key(k) for k in feed_dict))
  except _Uncacheable:
    return None


def _fetch_key(fetch):
  kind = type(fetch)
  if kind is list or kind is tuple:
    return (kind, tuple(_fetch_key(f) for f in fetch))
  if kind is dict:
    return (kind, tuple((type(k), k, _fetch_key(v))
                        for k, v in fetch.items()))
  return _leaf_key(fetch)


def _leaf_key(leaf):
  if isinstance(leaf, tf.Tensor):
    return leaf.ref()
  if isinstance(leaf, tf.Operation):
    return leaf  # hashed and compared by identity
  if isinstance(leaf, str):
    return leaf
  raise _Uncacheable()


def _contiguous(array):
  # Not np.ascontiguousarray: it turns a scalar into shape [1].
  if array.flags.c_contiguous:
    return array
  return np.require(array, requirements="C")


def _merge(values, sizes):
  """Merges one fetch's per-replica values (DESIGN.md section 2.4)."""
  first = values[0]
  if first.ndim == 0:
    if ((first.dtype.kind == "f" or first.dtype == _BFLOAT16) and
        len(values) > 1):
      weights = np.asarray(sizes if sizes else [1] * len(values), np.float64)
      mean = np.dot(weights, np.asarray(values, np.float64)) / weights.sum()
      return first.dtype.type(mean)
    return first[()]
  if (sizes is not None and len(values) > 1 and
      all(v.ndim >= 1 and v.shape[0] == n for v, n in zip(values, sizes))):
    return np.concatenate(values)
  return first
