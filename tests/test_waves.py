"""The wave (tensorbow/waves.py, wave.py) on its own: a Trainer handed a
fake runtime, replica state and plans, so what it does with them is seen
directly: the shards each replica is given, the merged fetches, which
replicas commit, and the hooks an algorithm is called through."""
import numpy as np
import pytest
import tensorflow as tf

from tensorbow import execution
from tensorbow import hooks
from tensorbow import options
from tensorbow import planner
from tensorbow import routing
from tensorbow import runtime
from tensorbow import scaleout
from tensorbow import session_lock
from tensorbow import waves
from tensorbow.algorithms import adaptive
from tensorbow.algorithms import base
from tensorbow.algorithms import sma
from tensorbow.rewrite import builder
from tensorbow.rewrite import phases
from tensorbow.rewrite import reductions

tf1 = tf.compat.v1
ROWS = 10


class _Runtime(object):
  """Computes, per replica, 2 * its rows and their mean; reports the
  replicas in `nonfinite` as having a non-finite first fetch."""

  def __init__(self, nonfinite=()):
    self.nonfinite = set(nonfinite)
    self.shards = None
    self.committed = None
    self.discarded = False
    self.weights = None

  def compute(self, calls, per_replica, dtypes, batch_feed, internal, check,
              options_, run_metadata, by_group):
    del calls, dtypes, internal, options_, run_metadata, by_group
    self.shards = [values[batch_feed] for values in per_replica]
    computed = [[2 * x, np.float32(x.mean())] for x in self.shards]
    nonfinite = [[0] if check and r in self.nonfinite else []
                 for r in range(len(per_replica))]
    return computed, nonfinite

  # The runtime's own: compute, between, commit over this fake's.
  atomic = runtime.Runtime.atomic

  def average_kept(self, weights):
    self.weights = np.asarray(weights)

  def discard(self):
    self.discarded = True

  def commit(self, calls, committed, sync_call, options_, run_metadata,
             by_group):
    del calls, sync_call, options_, run_metadata, by_group
    self.committed = list(committed)
    return [[] for _ in committed]

  def run_pool(self, calls, values, dtypes, split, batch_sizes, options_):
    """Chunks of batch_sizes[r] rows to replicas 0, 0, 1, 2, 0, 0, 1, 2,
    ... (as if replica 0 were twice as fast)."""
    del calls, dtypes, options_
    assert split == [True]
    self.pool_sizes = list(batch_sizes)
    rows, chunks, turn = values[0], [], 0
    while sum(c[2] - c[1] for c in chunks) < len(rows):
      r = (0, 0, 1, 2)[turn % 4]
      begin = chunks[-1][2] if chunks else 0
      end = min(len(rows), begin + batch_sizes[r])
      x = rows[begin:end]
      chunks.append((r, begin, end, [2 * x, np.float32(x.mean())]))
      turn += 1
    return chunks


class _State(object):
  """Replica state, and its algorithm's runs, that record what the wave
  asks of them."""

  in_use = True

  def __init__(self):
    self.skipped = None
    self.reseeded = []
    self.factors, self.merged = [], []
    self.runs = self  # it records the algorithm's runs (AlgorithmRuns) too

  def seed_run(self):
    return None

  def fed_run(self, purpose, value, make_ops):
    del make_ops
    if value is not None:
      {"scale": self.factors, "merge": self.merged}[purpose].append(
          list(value))
    return None

  def made(self, purpose, make):
    del purpose, make
    return None

  def participants_run(self, skipped, remaining, make_ops):
    del make_ops
    self.skipped = (list(skipped), remaining)
    return None

  def reseed_replicas(self, replicas):
    self.reseeded.extend(replicas)


class _Plans(object):

  def __init__(self, plan):
    self.plan = plan
    self.plans = {}

  def plan_for(self, route, first):
    del first
    self.plans[route.signature] = self.plan
    return self.plan

  def takes_elements(self, pulled):
    del pulled
    return False


class _Averaging(base.Algorithm):
  """Has the runtime average what it kept, by the commit weights."""

  name = "averaging"

  def wave_hooks(self, setting):
    return [_Average(setting.runtime)]


class _Average(hooks.WaveHook):

  def __init__(self, runtime):
    self._runtime = runtime

  def between(self, opened, weights):
    self._runtime.average_kept(np.asarray(weights, np.float64) /
                               sum(weights))


class _Pooled(adaptive.Adaptive):
  """Adaptive SGD's hooks with a schedule that records what the wave
  tells it."""

  name = "pooled"

  def schedule(self, replicas):
    return _Schedule(replicas)


class _Schedule(object):

  def __init__(self, replicas):
    self.replicas = replicas
    self.rows, self.records, self.drifts = [], [], []

  def batch_sizes(self, rows):
    self.rows.append(rows)
    return np.array([3, 2, 2])

  def factors(self):
    return None if self.records else np.array([1.5, 1.0, 1.0])

  def record(self, replicas):
    self.records.append(list(replicas))
    return len(self.records) % 2 == 0

  def merge(self, drift):
    self.drifts.append(drift)
    return np.array([0.5, 0.25, 0.25])

  @property
  def history(self):
    return self.records


def _wave(replicas, nonfinite="propagate", algorithm=None, bad=()):
  """(trainer, runtime, state, run): `run(x)` trains once on rows `x`."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=tf.ones([2]), use_resource=True)
    doubled = tf.identity(2 * x, name="doubled")
    loss = tf.reduce_mean(x * w, name="loss")
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
  exec_graph = execution.ExecutionGraph(graph)
  lock = session_lock.SessionLock()
  router = routing.Router(graph, exec_graph, lock)
  fed = exec_graph.tensor(x)
  plan = planner.Plan(
      feeds=[fed], names=[fed.name], batch=[True], elements=[False],
      batch_feed=0, dtypes=[fed.dtype.as_datatype_enum],
      np_dtypes=[np.float32], shapes=[(None, 2)], replicas=replicas,
      by_group=True, calls=[0], sync_call=-1, sync_calls=None,
      central_fetches={}, echoed=[], combine=(reductions.ROWS, None),
      atomic=phases.Split([0, 1], [], [0], [], [], False),
      commit_calls=[1], described=["doubled:0", "loss:0"], snapshot=None,
      gradients=[], summed=())
  runtime, state = _Runtime(bad), _State()
  # SMA's hooks by default: they tell the replica state who sits out.
  settings = options.Settings(
      replicas, algorithm or sma.SMA().resolved(replicas), nonfinite, 1,
      False)
  trainer = waves.Trainer(
      None, settings, _Plans(plan), runtime,
      builder.Builder(exec_graph.graph, replicas, 1), state, graph, lock,
      lambda: None)

  def run(rows, trained=False):
    """The results of a training run on `rows` (with `trained`: the
    waves.Trained)."""
    route, values = router.route([doubled, loss, train], {x: rows})
    assert route.closure.training
    out = trainer.train(route, values, None, None)
    return out if trained else out.results

  return trainer, runtime, state, run


def _rows():
  return np.arange(ROWS * 2, dtype=np.float32).reshape(ROWS, 2)


@pytest.mark.parametrize("replicas", [1, 3, 4])
def test_each_replica_gets_its_shard_and_the_fetches_merge(replicas):
  trainer, runtime, _, run = _wave(replicas)
  rows = _rows()
  trained = run(rows, trained=True)
  doubled, loss, _ = trained.results
  for got, want in zip(runtime.shards, np.array_split(rows, replicas)):
    np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(doubled, 2 * rows)
  # A scalar fetch is the shard-weighted mean: the whole batch's mean.
  np.testing.assert_allclose(loss, rows.mean(), rtol=1e-6)
  assert runtime.committed == [True] * replicas
  assert (trained.rows, trained.batch) == (ROWS, ROWS)


def test_an_algorithm_gets_shard_weights_before_the_commit():
  _, runtime, _, run = _wave(4, algorithm=_Averaging())
  run(_rows())
  sizes = np.array([len(s) for s in np.array_split(_rows(), 4)])
  np.testing.assert_allclose(runtime.weights, sizes / sizes.sum())


def test_a_pooled_algorithm_trains_chunks_and_merges_when_told():
  trainer, runtime, state, run = _wave(3, algorithm=_Pooled())
  rows = _rows()
  doubled, loss, _ = run(rows)
  # Chunks of 3, 3, 2, 2 rows to replicas 0, 0, 1, 2: the fetches merge in
  # the order of the rows, weighted by them.
  np.testing.assert_array_equal(doubled, 2 * rows)
  np.testing.assert_allclose(loss, rows.mean(), rtol=1e-6)
  assert runtime.pool_sizes == [3, 2, 2] and runtime.shards is None
  assert state.factors == [[1.5, 1.0, 1.0]] and state.merged == []
  run(rows)
  assert state.factors == [[1.5, 1.0, 1.0]]  # unchanged: not set again
  assert state.merged == [[0.5, 0.25, 0.25]]  # the schedule's period
  # The replica of each update, per run.
  assert trainer.schedule_history() == [[0, 0, 1, 2], [0, 0, 1, 2]]
  # Nothing committed in two phases: each chunk applied its own step.
  assert runtime.committed is None


def test_raise_commits_nothing():
  _, runtime, state, run = _wave(4, nonfinite="raise", bad=[2])
  with pytest.raises(tf.errors.InvalidArgumentError, match="replica 2"):
    run(_rows())
  assert runtime.discarded and runtime.committed is None
  assert state.skipped is None


def test_skip_leaves_the_replica_out_and_reseeds_it():
  _, runtime, state, run = _wave(4, nonfinite="skip", bad=[1])
  rows = _rows()
  doubled, loss, _ = run(rows)
  assert runtime.committed == [True, False, True, True]
  assert state.skipped == ([1], 3) and state.reseeded == [1]
  kept = [s for r, s in enumerate(np.array_split(rows, 4)) if r != 1]
  np.testing.assert_array_equal(doubled, 2 * np.concatenate(kept))
  np.testing.assert_allclose(loss, np.concatenate(kept).mean(), rtol=1e-6)


def test_fewer_rows_than_replicas_leave_the_others_out():
  """2 rows at L = 4: replicas 0 and 1 compute and commit, 2 and 3 sit
  out (left out of the synchronisation, not re-seeded); the fetches merge
  over the two rows."""
  _, runtime, state, run = _wave(4)
  rows = _rows()[:2]
  doubled, loss, _ = run(rows)
  assert [len(s) for s in runtime.shards] == [1, 1]
  assert runtime.committed == [True, True]
  assert state.skipped == ([2, 3], 2) and state.reseeded == []
  np.testing.assert_array_equal(doubled, 2 * rows)
  np.testing.assert_allclose(loss, rows.mean(), rtol=1e-6)


def test_replicas_equal_borrow_a_shard_that_weighs_nothing():
  algorithm = _Averaging()
  algorithm.replicas_equal = True
  _, runtime, state, run = _wave(4, algorithm=algorithm)
  rows = _rows()[:3]
  doubled, loss, _ = run(rows)
  # Replica 3 computes on replica 0's row, weighted 0, and commits.
  assert [len(s) for s in runtime.shards] == [1, 1, 1, 1]
  np.testing.assert_array_equal(runtime.shards[3], rows[:1])
  np.testing.assert_allclose(runtime.weights, [1 / 3, 1 / 3, 1 / 3, 0])
  assert runtime.committed == [True] * 4 and state.skipped is None
  np.testing.assert_array_equal(doubled, 2 * rows)
  np.testing.assert_allclose(loss, rows.mean(), rtol=1e-6)


class _Recorder(hooks.WaveHook):
  """A wave hook that records each point it is called at, with what it
  is told there."""

  def __init__(self):
    self.calls = []

  def before(self, opened):
    self.calls.append(("before", opened.number, list(opened.sizes)))

  def between(self, opened, weights):
    self.calls.append(("between", opened.number, list(weights)))

  def leave_out(self, skipped, remaining):
    self.calls.append(("leave_out", list(skipped), remaining))

  def merge(self, opened, ran):
    self.calls.append(("merge", opened.number))

  def after(self, opened, ran):
    self.calls.append(("after", opened.number, ran.committed))

  def undo(self):
    self.calls.append(("undo",))


class _Hooked(base.Algorithm):
  """An algorithm that joins each wave through one recording hook."""

  name = "hooked"

  def __init__(self):
    self.hook = _Recorder()

  def wave_hooks(self, setting):
    del setting
    return [self.hook]


def test_an_algorithms_hooks_are_called_at_each_point_in_order():
  algorithm = _Hooked()
  _, _, _, run = _wave(3, nonfinite="skip", algorithm=algorithm, bad=[1])
  run(_rows())
  run(_rows()[:6])
  sizes = [len(s) for s in np.array_split(_rows(), 3)]
  assert algorithm.hook.calls == [
      ("before", 1, sizes), ("between", 1, sizes), ("leave_out", [1], 2),
      ("merge", 1), ("after", 1, [True, False, True]),
      ("before", 2, [2, 2, 2]), ("between", 2, [2, 2, 2]),
      ("leave_out", [1], 2), ("merge", 2),
      ("after", 2, [True, False, True])]


def test_a_wave_that_loses_a_worker_undoes_its_hooks_and_its_count():
  algorithm = _Hooked()
  trainer, runtime, _, run = _wave(2, algorithm=algorithm)

  def lose_a_worker(*args, **kwargs):
    del args, kwargs
    raise scaleout.MembershipChanged(1, [1], "worker 1 lost")

  runtime.compute = lose_a_worker
  with pytest.raises(scaleout.MembershipChanged):
    run(_rows())
  assert algorithm.hook.calls == [("before", 1, [5, 5]), ("undo",)]
  assert trainer.waves == 0 and runtime.discarded


class _Named(hooks.WaveHook):
  """Logs its name and each point it is called at."""

  def __init__(self, name, log):
    self._name, self._log = name, log

  def _called(self, point):
    self._log.append((point, self._name))

  def before(self, opened):
    self._called("before")

  def leave_out(self, skipped, remaining):
    self._called("leave_out")

  def between(self, opened, weights):
    self._called("between")

  def merge(self, opened, ran):
    self._called("merge")

  def after(self, opened, ran):
    self._called("after")

  def failed(self):
    self._called("failed")

  def undo(self):
    self._called("undo")


def test_joined_hooks_are_called_in_their_order_at_every_point():
  log = []
  joined = hooks.Joined([_Named("a", log), hooks.WaveHook(),
                         _Named("b", log)])
  joined.before(None)
  joined.leave_out([1], 1)
  joined.between(None, [1])
  joined.merge(None, None)
  joined.after(None, None)
  joined.failed()
  joined.undo()
  points = ["before", "leave_out", "between", "merge", "after", "failed",
            "undo"]
  assert log == [(p, n) for p in points for n in ("a", "b")]
