"""Plans a training run: per replica the calls of its learning task, the
synchronisation, and what the session merges (DESIGN.md).

A Planner is given its setting's runtime, builder and replica state: it
has the replicas copied into the execution graph (rewrite/replicate.py),
splits each task into its computation and its commit (phases.py), and
prepares every call in the runtime, once per signature.
"""
import collections

import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow import runtime as tb_runtime
from tensorbow.rewrite import analysis
from tensorbow.rewrite import pipelines
from tensorbow.rewrite import batch_sizes
from tensorbow.rewrite import kernel_choice
from tensorbow.rewrite import reductions
from tensorbow.rewrite import substitutes
from tensorbow.rewrite import phases
from tensorbow.rewrite import replicate
from tensorbow.rewrite import sync

# One training run's execution, prepared once per signature.
Plan = collections.namedtuple("Plan", [
    "feeds",  # fed tensors, by name
    "names",  # per feed: its tensor's name
    "batch",  # per feed: is it a batch feed (sharded)?
    "elements",  # per feed: does each replica get an element of its own
                 # (a pipeline's, built for a fixed batch)?
    "batch_feed",  # position of the first batch feed (else of the first
                   # element feed of rank >= 1), or -1: a replica's rows
    "dtypes",  # per feed: TF_DataType enum
    "np_dtypes",  # per feed: NumPy dtype
    "shapes",  # per feed: dims (None where unknown), or None: unknown rank
    "replicas",  # L: the tasks of a wave
    "by_group",  # calls are per stream group, fed the replica's index
    "calls",  # per replica, or per stream group if by_group: runtime call
              # id (of the computation if atomic)
    "sync_call",  # runtime call id of the synchronisation, or -1
    "sync_calls",  # with nonfinite="skip": per replica, the synchronisation
                   # taking single variables from it; else None
    "central_fetches",  # {fetch position: the tensor name read for it
                        # from the central model after the wave}
    "echoed",  # (fetch position, feed position) of fetches of fed tensors
               # (a pipeline's element): the whole value fed
    "combine",  # per fetch: how its replicas' values make the whole
                # batch's (rewrite/reductions.py: ROWS, SUM, MAX, MIN, None)
    "atomic",  # a phases.Split of every replica's task, or None: run whole
    "commit_calls",  # as calls: runtime call id of the commit
    "described",  # per computed fetch then internal tensor: what it is
    "snapshot",  # user variables a commit that may fail writes, or None
    "gradients",  # positions among the float32/64 internal tensors (as
                  # Runtime.kept_sums orders them) of model variables' whole
                  # gradients (the gradient noise scale's, autotune.py)
    "summed",  # names of the variables merged as sums over rows
               # (rewrite/reductions.py), summed over the workers too
])


class Planner(object):
  """Plans one setting's training runs, once per signature, and keeps the
  plans.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    execution: the session's `execution.ExecutionGraph`.
    settings: the setting's `options.Settings`.
    runtime: the setting's `runtime.Runtime`, where calls are prepared.
    builder: the setting's `rewrite.builder.Builder`.
    replica_state: the setting's `replicas.ReplicaState`.
  """

  def __init__(self, session, execution, settings, runtime, builder,
               replica_state):
    self._session = session
    self._exec = execution
    self._replicas = settings.replicas
    # One replica training the user's own variables is plain training
    # (DESIGN.md, "L = 1 is plain training"); a cluster's worker replicates even
    # one.
    self._plain = settings.replicas == 1 and builder.shares_variables
    self._algorithm = settings.algorithm
    self._nonfinite = settings.nonfinite
    self._runtime = runtime
    self._builder = builder
    self._replica_state = replica_state
    self._copier = None  # made with the first training run copied
    # Times each substitute against TensorFlow's kernel for the copier,
    # made with it (None: every substitute `substitutes` picks).
    self._chooser = None
    self._plans = {}  # training-run signature -> Plan

  @property
  def plans(self):
    """{training-run signature: Plan} of the runs planned so far."""
    return self._plans

  @property
  def graph(self):
    """The user's graph."""
    return self._exec.user_graph

  def kernel_choices(self):
    """What timing each substitute against TensorFlow's kernel chose."""
    return list(self._chooser.choices) if self._chooser else []

  def plan_for(self, route, first):
    """The plan of a training run over `route` (routing.Route), made once
    per signature; `first`: the values of one replica's feeds."""
    # Whether a feed without a declared shape is a batch depends on the
    # rank of what it is fed.
    key = route.signature + tuple(
        np.ndim(v) for t, v in zip(route.fed, first) if t.shape.rank is None)
    plan = self._plans.get(key)
    if plan is None:
      plan = self.plan(route.handler, route.closure.ops,
                       route.fed + route.pulled,
                       frozenset(route.closure.pulled), first)
      if not self._plain:
        self._algorithm.check(split=plan.atomic is not None)
      self._plans[key] = plan
    return plan

  def plan(self, handler, ops, fed, pulled=frozenset(), values=None):
    """The plan of a training run: `handler` and `fed` of the user's graph,
    `ops` its closure in the execution graph; the fed tensors named in
    `pulled` come from an input pipeline, one element per replica if
    `takes_elements(pulled tensors)`; `values`, if given, what this run
    feeds them, one replica's element for those (the shapes the kernels
    are chosen for)."""
    _check_fetchable(handler)
    fed_names = frozenset(t.name for t in fed)
    echoed = [(i, [f.name for f in fed].index(t.name))
              for i, t in enumerate(handler.fetches()) if t.name in fed_names]
    elements, batch, folds = self._feed_kinds(ops, fed, pulled, values)
    merged = dict(echoed=echoed, combine=self._combinations(
        handler.fetches(), fed, batch, elements))
    sourced = (fed, batch, elements)  # of the user's graph
    fed = [self._exec.tensor(t) for t in fed]
    skipped = set(i for i, _ in echoed)
    fetches = [self._exec.tensor(t) for t in handler.fetches()]
    task_fetches = [t for i, t in enumerate(fetches) if i not in skipped]
    targets = [self._exec.op(op) for op in handler.targets()]
    info = self._training_info(ops, fed, batch, elements, pulled)
    if info is None:
      _check_pulled_whole(ops, pulled)
      # As TensorFlow runs it; split in two only to check for non-finite
      # values before the writes.
      return self._task_plan(fed, batch, elements,
                             [(task_fetches, list(targets))],
                             -1, {}, lambda name: name,
                             self._nonfinite != "propagate")._replace(
                                 **merged)
    rep = self._copier_for(values, batch, elements)
    stand_ins = self._stand_ins(fed, batch, pulled)
    copies, made = rep.extend(info, fed_names, stand_ins,
                              folds if len(stand_ins) > len(pulled) else {})
    self._replica_state.copied(info, made)
    summed = self._summed(info, *sourced)
    sync_call = self._sync_call(info, summed)
    central_fetches, twins = self._central_fetches(
        fetches, merged["combine"], summed, skipped)
    # What the replicas compute for a twin still runs (its writes).
    targets = targets + [fetches[i].op for i in twins]
    tasks = self._group_tasks(
        copies, [t for i, t in enumerate(fetches)
                 if i not in central_fetches and i not in skipped], targets)
    by_group = not self._plain
    # A shared model's tasks and a pool's chunks each apply their step
    # when they finish, and one replica's copy is plain training as
    # TensorFlow runs it: one TensorFlow run per task, not a computation
    # and a commit.
    atomic = not (self._algorithm.shares_model or self._algorithm.pooled or (
        self._plain and self._nonfinite == "propagate"))
    return self._task_plan(fed, batch, elements, tasks, sync_call,
                           central_fetches, self._builder.user_name, atomic,
                           info.written,
                           [self._builder.replica_input] if by_group else [],
                           stand_ins)._replace(summed=tuple(sorted(summed)),
                                               **merged)

  def _training_info(self, ops, fed, batch, elements, pulled):
    """The analysis.TrainingInfo of a training run over closure `ops` fed
    `fed` (of the execution graph; `batch` and `elements` say which are
    batch sources, `pulled` names a pipeline's), or None where one replica
    runs the user's own graph.

    One replica is plain training (DESIGN.md, "L = 1 is plain training"):
    the user's own graph, or a copy of it training the same variables with
    faster kernels or reading its input's stand-ins.
    """
    trainable = analysis.trainable_variable_ops(self.graph)
    # What a replica's own data flows from (batch-norm statistics).
    batch_names = [t.name for t, b, e in zip(fed, batch, elements)
                   if b or e]
    if self._plain:
      return _plain_copy_info(ops, batch_names, trainable,
                              any(t.name in pulled for t in fed))
    info = analysis.analyse_training(ops, batch_names, trainable)
    self._algorithm.check(sparse=[
        n for n in info.apply_ops if not analysis.is_dense_apply(
            self._exec.graph.get_operation_by_name(n))])
    return info

  def _feed_kinds(self, ops, fed, pulled, values):
    """(per feed: is it a pipeline's element of its own per replica, is it
    a batch feed; the constants folded from a fixed batch size,
    `batch_sizes.folds`) of a training run over closure `ops` fed `fed`,
    those named in `pulled` from an input pipeline, `values` if given."""
    by_element = self.takes_elements([t for t in fed if t.name in pulled])
    elements = [by_element and t.name in pulled for t in fed]
    batch = [batch_sizes.is_batch_feed(t) and not e
             for t, e in zip(fed, elements)]
    folds = {}
    if not self._plain and values is not None:
      batch, folds = batch_sizes.plan_batches(self.graph, ops, fed, values,
                                              batch, elements)
    return elements, batch, folds

  def _copier_for(self, values, batch, elements):
    """The setting's Copier, made at the first training run copied, with
    its kernel chooser timed for the rows a replica takes of `values`
    (`batch` and `elements` saying which feeds are batches)."""
    if self._copier is None:
      if substitutes.measured() and values is not None:
        rows = ([len(v) // self._replicas for v, b in zip(values, batch)
                 if b and np.ndim(v)] +
                [len(v) for v, e in zip(values, elements)
                 if e and np.ndim(v)])
        self._chooser = kernel_choice.Chooser(max(rows[0], 1) if rows else 1)
      self._copier = replicate.Copier(self._builder, self._replica_state,
                                      self._algorithm, self._chooser)
    return self._copier

  def _stand_ins(self, fed, batch, pulled):
    """{fed tensor name: the placeholder the copies read instead}: a
    pipeline's output (named in `pulled`), and a fixed-size batch feed's
    shard, of unknown size (the copies then compute what TensorFlow
    folded from the size)."""
    stand_ins = {t.name: self._builder.input_stand_in(t) for t in fed
                 if t.name in pulled}
    stand_ins.update((t.name, self._builder.input_stand_in(t, shard=True))
                     for t, b in zip(fed, batch) if b and
                     t.shape.rank and t.shape.as_list()[0] is not None)
    return stand_ins

  def _group_tasks(self, copies, fetches, targets):
    """Per stream group, (fetches, targets) of its copy (`copies`) of a
    task fetching `fetches` and running `targets` (of the execution
    graph), with the writes that those were ordered after in the user's
    graph (Copies.orderings_of)."""
    moved = sorted(set(
        name for op in [t.op for t in fetches] + targets
        for name in copies.orderings_of(op.name)))
    targets = targets + [self._exec.graph.get_operation_by_name(n)
                         for n in moved]
    graph = self._exec.graph
    return [([copies.group_tensor(t.op.name, t.value_index, g)
              for t in fetches],
             [graph.get_operation_by_name(copies.group_name(op.name, g))
              for op in targets])
            for g in range(self._builder.num_groups)]

  def _combinations(self, tensors, fed, batch, elements):
    """Per tensor (of the user's graph), how its replicas' values make the
    whole batch's (rewrite/reductions.py), from the run's batch sources:
    its batch feeds and the pipeline elements the replicas are fed
    (`fed`, with `batch` and `elements` saying which)."""
    if self._replicas == 1:  # one value: nothing to merge
      return tuple(None for _ in tensors)
    sources = [t for t, b, e in zip(fed, batch, elements)
               if b or (e and t.shape.rank)]
    others = [t for t, b, e in zip(fed, batch, elements)
              if not (b or (e and t.shape.rank))]
    return reductions.combinations(self.graph, tensors, sources, others)

  def _sync_call(self, info, summed):
    """The runtime call id of the synchronisation of a training run with
    `info` (`summed` the variables merged as sums), -1 without one, or,
    with nonfinite="skip", one per replica it may take single variables
    from."""
    syncs = [sync.sync_op(self._builder, self._algorithm,
                          self._replica_state, info, r, summed)
             for r in range(self._replicas if self._nonfinite == "skip"
                            else 1)]
    if syncs[0] is None:
      return -1
    calls = [self._runtime.add_call([], [], [op]) for op in syncs]
    # With nonfinite="skip", replica 0 may be skipped: then single
    # variables come from another.
    return calls if self._nonfinite == "skip" else calls[0]

  def _central_fetches(self, fetches, combine, summed, skipped):
    """({fetch position: tensor name read after the wave}, the positions
    of those read from a central twin), for the fetches (of the execution
    graph) that are variables' values or central twins."""
    central = {i: t.name for i, t in enumerate(fetches)
               if analysis.is_variable_value(t) and i not in skipped}
    twins = self._twins(fetches, combine, summed, skipped)
    central.update((i, t.name) for i, t in twins.items())
    return central, sorted(twins)

  def _twins(self, fetches, combine, summed, skipped):
    """{fetch position: its central twin (rewrite/reductions.py)} of the
    fetches (of the execution graph) computed from the variables merged
    as sums, `summed`, not merged otherwise (`combine`) nor `skipped`."""
    twins = {}
    for i, (t, kind) in enumerate(zip(fetches, combine)):
      if kind is None and i not in skipped and summed:
        twin = reductions.central_twin(self._builder, t, summed)
        if twin is not None:
          twins[i] = twin
    return twins

  def _summed(self, info, fed, batch, elements):
    """Names of the variables of `info.other_vars` that the run only adds
    sums over the batch's rows to (a counter of rows, a metric's
    accumulators: rewrite/reductions.py), fed `fed` of the user's graph
    (`batch` and `elements` saying which are batch sources)."""
    writes = {}
    for op in info.ops:
      var = analysis.variable_of(op.inputs[0]) if analysis.is_write(
          op) else None
      if var is not None and var.name in info.other_vars:
        writes.setdefault(var.name, []).append(op)
    adds = {name: ops for name, ops in writes.items()
            if all(op.type in reductions.ADDING_WRITES for op in ops)}
    deltas = sorted(set(op.inputs[1].name for ops in adds.values()
                        for op in ops))
    kinds = dict(zip(deltas, self._combinations(
        [self.graph.get_tensor_by_name(n) for n in deltas], fed, batch,
        elements)))
    return frozenset(name for name, ops in adds.items()
                     if all(kinds[op.inputs[1].name] == reductions.SUM
                            for op in ops))

  def takes_elements(self, pulled):
    """Whether each replica takes an element of its own from the input
    pipeline that yields `pulled` (user tensors): with several replicas,
    when the pipeline's batch size is built into the graph (DESIGN.md)."""
    return self._replicas > 1 and any(
        t.shape.rank and not batch_sizes.is_batch_feed(t) for t in pulled)

  def _task_plan(self, fed, batch, elements, tasks, sync_call,
                 central_fetches, user_name, atomic, written=None,
                 replica_feed=(), stand_ins=None):
    """The plan of a wave of `tasks`, with each task split into its
    computation and its commit if `atomic`. `tasks` are per stream group
    (fetches, targets) fed `replica_feed`, the replica's index, if given;
    else one per replica. The tasks read `stand_ins[name]` for fed
    tensor `name`, where given, and are fed that."""
    by_group = bool(replica_feed)
    fed = list(fed)
    call_feeds = [(stand_ins or {}).get(t.name, t)
                  for t in fed] + list(replica_feed)
    fed_names = frozenset(t.name for t in call_feeds)
    splits = ([phases.split(f, t, fed_names) for f, t in tasks]
              if atomic else [None])
    splits = _aligned(splits, user_name)
    if splits is not None:
      calls, commit_calls = [], []
      for (f, t), split in zip(tasks, splits):
        calls.append(self._runtime.add_call(
            call_feeds,
            [f[i] for i in split.compute_fetches] + split.internal,
            [t[i] for i in split.compute_targets]))
        commit_calls.append(self._runtime.add_call(
            call_feeds + split.internal,
            [f[i] for i in split.commit_fetches],
            [t[i] for i in split.commit_targets]))
      described = (
          [user_name(tasks[0][0][i].name) for i in splits[0].compute_fetches] +
          [_described_internal(user_name, t) for t in splits[0].internal])
      compat.extend_session(self._session)
      snapshot = (written if written is not None and
                  any(s.may_fail for s in splits) else None)
      return _new_plan(fed, batch, elements, self._replicas, by_group, calls,
                       sync_call, central_fetches, splits[0], commit_calls,
                       described, snapshot,
                       phases.gradient_positions(splits[0].internal))
    if self._nonfinite != "propagate":
      raise tf.errors.UnimplementedError(
          None, None,
          f"TensorBow: nonfinite={self._nonfinite!r} needs a training run "
          "whose writes can run after its computation; in this one a write "
          "waits on a computed op through a control dependency")
    calls = [self._runtime.add_call(call_feeds, f, t) for f, t in tasks]
    compat.extend_session(self._session)
    return _new_plan(fed, batch, elements, self._replicas, by_group, calls,
                     sync_call, central_fetches)


def _check_fetchable(handler):
  """Refuses a training run fetching what the runtime cannot return.

  Raises:
    TypeError: naming the fetch and its dtype.
  """
  fetchable = tb_runtime.fetchable_dtypes()
  for t in handler.fetches():
    if (t.dtype.base_dtype.as_datatype_enum not in fetchable and
        not analysis.is_variable_value(t)):
      raise TypeError(
          f"TensorBow cannot fetch {t.name} ({t.dtype.name}) in a training "
          "run; fetch it in a plain run")


def _aligned(splits, user_name):
  """`splits` with every task's internal tensors in the first's order, by
  the user's names, or None if they do not split alike.

  A replica's commit may run on another stream group than its computation,
  so the tensors crossing the cut must mean the same at every position.
  """
  first = splits[0]
  if first is None or any(s is None or s[:4] != first[:4] for s in splits):
    return None
  order = [user_name(t.name) for t in first.internal]
  aligned = []
  for s in splits:
    by_name = {user_name(t.name): t for t in s.internal}
    if sorted(by_name) != sorted(order) or len(by_name) != len(order):
      return None
    aligned.append(s._replace(internal=[by_name[n] for n in order]))
  return aligned


def _plain_copy_info(ops, batch_names, trainable, pulls):
  """With one replica: the TrainingInfo of a copy worth making, or None.

  A copy pays where `substitutes` has a faster equivalent for one of its
  ops, and is needed where the run `pulls` its input from a pipeline (the
  copy reads stand-ins: Builder.input_stand_in); a graph TensorBow cannot
  copy runs as the user wrote it.
  """
  if not (pulls or substitutes.enabled() and
          any(substitutes.applies(op) for op in ops)):
    return None
  try:
    return analysis.analyse_training(ops, batch_names, trainable)
  except tf.errors.UnimplementedError:
    return None


def _check_pulled_whole(ops, pulled):
  """Refuses a training run of the user's own graph (`ops`, its closure)
  that would be fed `pulled` tensors a shape op reads: fed, the pipeline's
  op would run too and take an element more (Builder.input_stand_in).

  Raises:
    tf.errors.UnimplementedError: naming the shape op.
  """
  reader = pipelines.shape_reader(ops, pulled)
  if reader is not None:
    raise tf.errors.UnimplementedError(
        None, None,
        f"TensorBow cannot train this graph with one replica: it takes its "
        f"batch from an input pipeline, op '{reader.name}' reads the "
        "batch's shape, and TensorBow cannot copy the graph to feed it "
        "safely; feed the batch with feed_dict")


def _described_internal(user_name, tensor):
  """What a tensor handed from a task's computation to its commit is."""
  for consumer in tensor.consumers():
    if phases.writes_state(consumer) and consumer.inputs:
      var = analysis.variable_of(consumer.inputs[0])
      if var is not None:
        return f"{user_name(tensor.name)} (applied to {user_name(var.name)})"
  return user_name(tensor.name)


def _new_plan(fed, batch, elements, replicas, by_group, calls, sync_call,
              central_fetches, atomic=None, commit_calls=None, described=None,
              snapshot=None, gradients=()):
  """A Plan; `sync_call` is one call id or, per replica, one call id."""
  sync_calls = sync_call if isinstance(sync_call, list) else None
  if sync_calls is not None:
    sync_call = sync_calls[0]
  rows = [i for i, t in enumerate(fed) if elements[i] and t.shape.rank]
  return Plan(
      feeds=fed, names=[t.name for t in fed], batch=batch, elements=elements,
      batch_feed=(batch.index(True) if any(batch) else
                  rows[0] if rows else -1),
      dtypes=[t.dtype.base_dtype.as_datatype_enum for t in fed],
      np_dtypes=[t.dtype.base_dtype.as_numpy_dtype for t in fed],
      shapes=[None if t.shape.rank is None else tuple(t.shape.as_list())
              for t in fed],
      replicas=replicas, by_group=by_group, calls=calls, sync_call=sync_call,
      sync_calls=sync_calls,
      central_fetches=central_fetches, echoed=[], combine=(),
      atomic=atomic, commit_calls=commit_calls, described=described,
      snapshot=snapshot, gradients=list(gradients), summed=())
