"""Routes a run: classifies it once per fetch structure and feed keys.

A run whose closure holds an optimizer's apply op is a training run;
every other run is a plain run (DESIGN.md). The classification, and what
the run fetches and is fed, are kept per `run()` call shape, so that a
training loop's steps are classified once.
"""
import collections
import logging

import tensorflow as tf

from tensorbow import checkpoint
from tensorbow import compat
from tensorbow import session_lock
from tensorbow.rewrite import analysis
from tensorbow.rewrite import graph_util
from tensorbow.rewrite import pipelines as tb_pipelines

# How a run is classified, kept per fetch structure and feed keys.
Route = collections.namedtuple("Route", [
    "fed",  # fed tensors, by name
    "order",  # per fed tensor: its position in feed_dict
    "handler",  # TensorFlow's fetch handler
    "signature",  # (fetched tensor names, target names, fed names)
    "closure",  # a Closure
    "pulled",  # a training run's input tensors taken from its pipeline
               # (tf.data iterators, queues) before the wave, by name
    "fetched",  # tensors and operations the handler fetches or runs
    "cacheable",  # no fetch is fed (the handler then holds a feed value)
    "sparse",  # a training run's SparseTensor feeds (not cached)
])
_MAX_ROUTES = 256

# What a run executes, kept per signature.
Closure = collections.namedtuple("Closure", [
    "training",  # whether it holds an optimizer's apply op
    "written",  # names of the variables it may write, or None: unknown
    "ops",  # the ops it runs, in the execution graph, inputs first
    "pulled",  # names of its input tensors taken from a pipeline first
    "reads",  # names of the variable ops it runs
    "pipelines",  # rewrite/pipelines.py's PipelineUses: how it takes from or
                  # resets input pipelines (a training run: before its
                  # pulls)
    "pull_feeds",  # names, sorted, of the fed tensors its pulls read (a
                   # feedable iterator's string handle)
    "waits",  # names of the ops it runs that may wait on another run
              # (session_lock.py): a training run lets go of the lock
    "takes",  # the gradient accumulators' takes it runs, which only one
              # replica of a job may run (session_lock.per_process_takes)
])


class Router(object):
  """Classifies the runs of one session.

  Args:
    graph: the user's graph.
    execution: the session's `execution.ExecutionGraph`.
    lock: the session's lock, held while the closure cache changes.
  """

  def __init__(self, graph, execution, lock):
    self._graph = graph
    self._exec = execution
    self._lock = lock
    self._closures = {}  # signature -> Closure
    self._routes = {}  # _run_key -> Route
    self._warned = set()  # variable sets warned of (_warn_hand_written)

  def detached(self, fetches):
    """The route of a plain run, fed nothing, that no replica's state
    concerns: it reads and writes no variable, saves nothing and takes
    from no pipeline (a queue runner's enqueue, run once a record); None
    for any other run.

    Such a run needs nothing of TensorBow's around it, and TensorFlow's
    callable costs a fraction of a `run` call: a reader's queue runners
    call it from several threads against the wave's.
    """
    route, _ = self.route(fetches, {})
    closure = route.closure
    uses = closure.pipelines
    if (closure.training or closure.reads or closure.written is None or
        closure.written or uses.takes or uses.resets or uses.saves or
        checkpoint.saver_call(closure.ops, {}, self._graph) is not None):
      return None
    return route

  def partial_run_setup(self, session, fetches, feeds):
    """`session.partial_run_setup` of `fetches` and `feeds`, refusing a
    training run (tf.errors.UnimplementedError)."""
    handler = compat.fetch_handler(self._graph, fetches, {})
    feeds = [self._graph.as_graph_element(f, allow_tensor=True,
                                          allow_operation=False).name
             for f in tf.nest.flatten(feeds or [])]
    self.refuse_training(handler, feeds, "partial_run")
    return session.partial_run_setup(names(handler), feeds)

  def partial_run(self, session, owner, handle, fetches, feed_dict):
    """`session.partial_run` of `fetches`, its results as `owner`'s."""
    feeds = compat.feed_items(self._graph, feed_dict or {})
    handler = compat.fetch_handler(self._graph, fetches,
                                   {t.ref(): v for t, v in feeds})
    values = session.partial_run(handle, names(handler),
                                 {t.name: v for t, v in feeds})
    return handler.build_results(owner, values[:len(handler.fetches())])

  def route(self, fetches, feed_dict):
    """(Route, fed values in the route's order) of a `run()` call.

    Raises:
      As `tf.compat.v1.Session.run` for fetches or feeds it refuses.
    """
    key = _run_key(fetches, feed_dict)
    route = self._routes.get(key) if key is not None else None
    graph = self._graph
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
    for t in route.fed:
      if not graph.is_feedable(t):
        raise ValueError(f"Tensor {t.name} may not be fed.")
    sparse = (compat.sparse_feed_keys(feed_dict) if route.closure.training
              else ())
    if sparse:
      route = route._replace(sparse=sparse)
    return route, [values[i] for i in route.order]

  def evaluation(self, route, fed_values):
    """(route, fed values) of a run of `route`'s fetched tensors alone, fed
    the same: a training run that only evaluates; None if that would train
    too (a tensor that waits for the training step) or leave an input
    pipeline behind (`route` pulls from one)."""
    if route.pulled:
      return None
    evaluated, values = self.route(list(route.handler.fetches()),
                                   dict(zip(route.fed, fed_values)))
    return None if evaluated.closure.training else (evaluated, values)

  def refuse_training(self, handler, fed_names, what):
    """Raises if `handler`'s fetches, fed `fed_names`, take a training step:
    `what` (partial_run) would take it as plain TensorFlow, unreplicated.

    Raises:
      tf.errors.UnimplementedError: naming the first apply op.
    """
    ops = graph_util.closure(
        [self._exec.tensor(t).op for t in handler.fetches()] +
        [self._exec.op(op) for op in handler.targets()], frozenset(fed_names))
    for op in ops:
      if analysis.trains(op):
        raise tf.errors.UnimplementedError(
            None, None,
            f"TensorBow cannot take a training step in {what}: the fetches "
            f"run optimizer op '{op.name}'; take it with run()")

  def _route(self, fetches, feeds):
    """Classifies a run fed `feeds` ([(tensor, value)]): its _Route."""
    # Without the fed values unless a fetch is fed: a cached route must not
    # keep a run's feeds alive.
    handler = compat.fetch_handler(self._graph, fetches,
                                   {t.ref(): None for t, _ in feeds})
    cacheable = not compat.fetches_fed(handler)
    if not cacheable:
      handler = compat.fetch_handler(self._graph, fetches,
                                     {t.ref(): v for t, v in feeds})
    signature = (tuple(t.name for t in handler.fetches()),
                 tuple(op.name for op in handler.targets()),
                 tuple(sorted(t.name for t, _ in feeds)))
    with self._lock:
      closure = self._closures.get(signature)
      if closure is None:
        fed_names = frozenset(signature[2])
        for t, _ in feeds:
          self._exec.tensor(t)  # imported, if it waited (ExecutionGraph.sync)
        roots = ([self._exec.tensor(t).op for t in handler.fetches()] +
                 [self._exec.op(op) for op in handler.targets()])
        ops = graph_util.closure(roots, fed_names)
        training = any(analysis.trains(op) for op in ops)
        # A training run's batch from an input pipeline is taken from it
        # first, then fed as a batch feed would be (DESIGN.md).
        pulled = tuple(sorted(t.name for op in ops if training and
                              op.type in tb_pipelines.PULLED_INPUT_OPS
                              for t in op.outputs))
        pipelines = tb_pipelines.pipeline_uses(ops, fed_names)
        pull_feeds = _read_feeds(
            [self._exec.graph.get_tensor_by_name(n).op for n in pulled],
            fed_names)
        if pulled:
          ops = graph_util.closure(roots, fed_names | frozenset(pulled))
        closure = Closure(
            training, analysis.written_variables(ops), ops, pulled,
            frozenset(op.name for op in ops
                      if op.type in analysis.VARIABLE_OPS),
            pipelines, pull_feeds, session_lock.waiting_ops(ops),
            session_lock.per_process_takes(ops))
        self._closures[signature] = closure
        if not training:
          self._warn_hand_written(ops, fed_names)
    order = sorted(range(len(feeds)), key=lambda i: feeds[i][0].name)
    return Route(fed=[feeds[i][0] for i in order], order=order,
                  handler=handler,
                  signature=signature, closure=closure,
                  fetched=handler.fetches() + handler.targets(),
                  pulled=[self._graph.get_tensor_by_name(n)
                          for n in closure.pulled],
                  cacheable=cacheable, sparse=())


  def _warn_hand_written(self, ops, fed_names):
    """Warns, once per set of variables, of a plain run that writes
    trainable variables from a gradient: a training step written by hand, which
    TensorBow can only run as TensorFlow does (DESIGN.md, "Two kinds of
    run")."""
    names = analysis.gradient_writes(
        ops, fed_names, analysis.trainable_variable_ops(self._graph))
    if not names or frozenset(names) in self._warned:
      return
    self._warned.add(frozenset(names))
    listed = ", ".join(f"'{n}'" for n in names)
    logging.getLogger("tensorbow").warning(
        "TensorBow: this run writes trainable variable%s %s from a gradient "
        "without an optimizer's apply op, so it is not a training run: it "
        "runs as a plain run on the central model, exactly as "
        "tf.compat.v1.Session would, not replicated or averaged; to train "
        "the replicas, take the step with a tf.compat.v1.train.Optimizer "
        "(minimize or apply_gradients)", "s" if len(names) > 1 else "",
        listed)


def _read_feeds(ops, fed_names):
  """The names, sorted, of the tensors among `fed_names` that running
  `ops` reads."""
  return tuple(sorted(
      t.name for op in graph_util.closure(ops, fed_names)
      for t in op.outputs if t.name in fed_names))


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


def names(handler):
  """The names a fetch handler's fetches and targets go by."""
  return ([t.name for t in handler.fetches()] +
          [op.name for op in handler.targets()])
