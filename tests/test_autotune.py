"""replicas="auto" (tensorbow/autotune.py): the search over L, and a change
of L that neither changes the central model nor loses an update."""
import threading

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow import autotune

import graphs
import references

tf1 = tf.compat.v1
LR, MU = 0.1, 0.9
RNG = np.random.RandomState(37)
BATCHES = [(RNG.randn(16, 3).astype(np.float32),
            RNG.randn(16, 1).astype(np.float32)) for _ in range(9)]


def _gd():
  return tf1.train.GradientDescentOptimizer(LR)


@pytest.mark.parametrize("inline", [False, True],
                         ids=["inter-op pool", "inline"])
@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_changing_l_keeps_the_central_model_and_every_update(use_resource,
                                                             inline):
  model = graphs.build(_gd, use_resource)
  with tb.TensorBowSession(graph=model.graph, replicas=1) as sess:
    sess.run(model.init)
    for x, y in BATCHES[:3]:
      sess.run(model.train, {model.x: x, model.y: y})
    before = sess.run([model.w, model.b])
    sess.retune(2, None, inline)
    assert sess.replicas == 2
    for got, want in zip(sess.run([model.w, model.b]), before):
      np.testing.assert_array_equal(got, want)
    for x, y in BATCHES[3:6]:
      sess.run(model.train, {model.x: x, model.y: y})
    assert sess.settings.inline == inline
    after_sma = sess.run([model.w, model.b])
    sess.retune(1, 1, inline)
    for x, y in BATCHES[6:]:
      sess.run(model.train, {model.x: x, model.y: y})
    final = sess.run([model.w, model.b])
  # One replica: plain gradient descent on the whole batch.
  params = [graphs.W0.astype(np.float64), graphs.B0.astype(np.float64)]

  def plain(params, batches):
    for x, y in batches:
      grads, _ = references.least_squares(params, x, y)
      params = [p - LR * g for p, g in zip(params, grads)]
    return params

  params = plain(params, BATCHES[:3])
  for got, want in zip(before, params):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  # Two replicas seeded from that central model: SMA from there.
  params = references.sma(params, BATCHES[3:6], 2, 0.5, MU, LR)[-1][0]
  for got, want in zip(after_sma, params):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  params = plain(params, BATCHES[6:])
  for got, want in zip(final, params):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("inline", [False, True])
def test_inline_runs_a_tasks_ops_on_its_own_thread(inline):
  """RunOptions.inter_op_thread_pool = -1 reaches TensorFlow: with one
  replica, whose task runs on the calling thread, an op of the training
  run (a py_func) runs on that thread; otherwise on TensorFlow's pool."""
  seen = []

  def record():
    seen.append(threading.get_native_id())
    return np.float32(0)

  model = graphs.build(_gd)
  with model.graph.as_default():
    probe = tf1.py_func(record, [], tf.float32, stateful=True)
    loss = model.loss + probe
    train = _gd().minimize(loss)
  x, y = BATCHES[0]
  with tb.TensorBowSession(graph=model.graph, replicas=1) as sess:
    sess.retune(1, 1, not inline)
    sess.run(model.init)
    sess.run(train, {model.x: x, model.y: y})
    planned = dict(sess._trainer.plans)  # pylint: disable=protected-access
    # Only the threads change: nothing is planned again.
    sess.retune(1, 1, inline)
    plans = sess._trainer.plans  # pylint: disable=protected-access
    assert plans.keys() == planned.keys()
    assert all(plans[k] is p for k, p in planned.items())
    for _ in range(3):
      sess.run(train, {model.x: x, model.y: y})
  assert len(seen) == 4
  me = threading.get_native_id()
  assert (seen[0] == me) != inline
  assert all((tid == me) == inline for tid in seen[1:]), (me, seen)


def test_inline_options_keep_the_users():
  from tensorbow import runtime  # pylint: disable=g-import-not-at-top
  parse = tf1.RunOptions.FromString
  first, others = runtime._options(None, True)  # pylint: disable=protected-access
  assert parse(first).inter_op_thread_pool == -1 == parse(
      others).inter_op_thread_pool
  given = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE,
                         timeout_in_ms=500)
  first, others = runtime._options(given, True)  # pylint: disable=protected-access
  assert parse(first) == tf1.RunOptions(
      trace_level=tf1.RunOptions.FULL_TRACE, timeout_in_ms=500,
      inter_op_thread_pool=-1)
  assert parse(others).trace_level == tf1.RunOptions.NO_TRACE
  assert given.inter_op_thread_pool == 0  # not changed
  given.inter_op_thread_pool = 1  # the user's own pool stays
  assert parse(runtime._options(given, True)[0]).inter_op_thread_pool == 1  # pylint: disable=protected-access
  assert runtime._options(None, False) == (b"", b"")  # pylint: disable=protected-access


def _search(throughputs, rows=64, cores=2, memory=lambda l: (None, None),
            inline_gain=1.0):
  """The tuner fed, at each setting, runs of throughput
  throughputs[(L, stream groups)] (default groups: min(L, cores)), times
  `inline_gain` with ops on the tasks' threads, and memory(L) as
  (resident, available bytes); returns the setting (L, groups, inline) it
  settles at and its decisions."""
  setting = (1, 1, False)
  tuner = autotune.AutoTuner(warmup=1, measure=3, cores=cores,
                             memory=lambda: memory(setting[0]))
  for _ in range(500):
    l, g, inline = setting
    throughput = throughputs[(l, g)] * (inline_gain if inline else 1.0)
    following = tuner.observe(l, g, rows, rows / throughput, inline)
    if following is not None:
      l, g, inline = following
      setting = (l, g if g is not None else min(l, cores), inline)
    if tuner.settled:
      break
  return setting, tuner.decisions


def test_adds_replicas_while_throughput_improves_by_ten_percent():
  setting, decisions = _search({(1, 1): 100, (2, 2): 150, (3, 2): 170,
                                (4, 2): 180, (3, 1): 160})
  # 3 is 1.13x 2, 4 only 1.06x 3: back to 3; 1 stream group is slower, and
  # so are the ops on the tasks' threads.
  assert setting == (3, 2, False)
  assert [d.replicas for d in decisions] == [1, 2, 3, 4, 3, 3]
  assert [d.inline for d in decisions] == [False] * 5 + [True]
  assert decisions[-1].next == (3, 2, False) and "settled at L=3" in (
      decisions[-1].reason)
  assert not any("settled" in d.reason for d in decisions[:-1])


def test_keeps_fewer_stream_groups_when_they_are_faster():
  setting, _ = _search({(1, 1): 100, (2, 2): 150, (3, 2): 150,
                        (2, 1): 170})
  assert setting == (2, 1, False)


def test_runs_ops_on_the_tasks_threads_when_that_is_faster():
  setting, decisions = _search({(1, 1): 100, (2, 2): 60}, inline_gain=1.5)
  assert setting == (1, 1, True)
  assert decisions[-2].next == (1, 1, True) and "trying ops on the task's " \
      "thread" in decisions[-2].reason
  assert decisions[-1].rows_per_second == pytest.approx(150)
  assert "ops on the task's thread (150 rows/s)" in decisions[-1].reason
  # Under gain_groups (1.05x) better: the inter-op pool stays.
  setting, _ = _search({(1, 1): 100, (2, 2): 60}, inline_gain=1.04)
  assert setting == (1, 1, False)


def test_never_settles_slower_than_one_replica():
  setting, decisions = _search({(1, 1): 100, (2, 2): 60})
  assert setting == (1, 1, False) and decisions[-1].next == (1, 1, False)


def test_adds_replicas_only_while_memory_allows():
  mb = 2**20
  # Each replica takes 100 MB; 450 - 100 L MB stay available. At L = 3,
  # 150 MB are under twice what the next replica will take.
  setting, decisions = _search(
      {(1, 1): 100, (2, 2): 200, (3, 2): 300, (4, 2): 400, (3, 1): 200},
      memory=lambda l: (1000 * mb + 100 * l * mb, (450 - 100 * l) * mb))
  assert setting == (3, 2, False)
  assert [d.replicas for d in decisions] == [1, 2, 3, 3, 3]
  assert ("memory: a replica took 100 MB, 150 MB available (under 2x)"
          in decisions[2].reason)
  # Plenty of memory: it goes on to the batch's rows' limit of throughput.
  setting, _ = _search(
      {(1, 1): 100, (2, 2): 200, (3, 2): 300, (4, 2): 400, (4, 1): 200},
      rows=4, memory=lambda l: (100 * l * mb, 10000 * mb))
  assert setting == (4, 2, False)


def test_process_memory_reads_this_process():
  resident, available = autotune.process_memory()
  assert resident > 10 * 2**20 and available > 0


def test_measures_short_runs_for_at_least_min_seconds():
  tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=0.5,
                             patience=0)
  runs = 0
  while not tuner.decisions:
    # Warm-up runs are slow and do not count.
    tuner.observe(1, 1, 64, 1.0 if runs < 2 else 0.001)
    runs += 1
  assert runs == 2 + 500
  assert tuner.decisions[0].rows_per_second == pytest.approx(64000)
  tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=0.5,
                             patience=0)
  for _ in range(7):
    tuner.observe(1, 1, 64, 0.2)
  assert tuner.decisions  # 5 runs of 0.2 s: over 0.5 s


def test_leaves_the_first_setting_once_training_took_patience_first_runs():
  tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=0,
                             patience=5)
  runs = 0
  while not tuner.decisions:
    # The first run builds the plan: 0.5 s; then 1/16 s a run.
    tuner.observe(1, 1, 100, 0.5 if runs == 0 else 0.0625)
    runs += 1
  assert runs == 1 + 32  # 0.5 + 32 / 16 = 5 x 0.5 s
  assert tuner.decisions[0].rows_per_second == pytest.approx(1600)


def test_drops_a_clearly_slower_setting_without_waiting():
  tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=1.0,
                             patience=0)
  runs = 0
  while not tuner.decisions:
    tuner.observe(1, 1, 100, 0.01)  # 10,000 rows/s
    runs += 1
  assert runs == 2 + 100 and tuner.decisions[-1].next == (2, None, False)
  for _ in range(7):  # 7,900 rows/s: under 0.8x
    tuner.observe(2, 1, 100, 1 / 79)
  assert len(tuner.decisions) == 2
  assert tuner.decisions[-1].rows_per_second == pytest.approx(7900)
  tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=1.0,
                             patience=0)
  for _ in range(102):
    tuner.observe(1, 1, 100, 0.01)
  for _ in range(7):  # 8,100 rows/s: measured for the whole second
    tuner.observe(2, 1, 100, 1 / 81)
  assert len(tuner.decisions) == 1


def test_stops_at_the_batch_rows_and_retunes_on_a_new_batch_size():
  tuner = autotune.AutoTuner(warmup=0, measure=1, cores=1, min_seconds=0,
                             patience=0)
  assert tuner.observe(1, 1, 2, 1.0) == (2, None, False)
  assert tuner.observe(2, 1, 2, 0.1) == (2, 1, True)  # 2 rows: at most 2
  assert tuner.observe(2, 1, 2, 0.2, True) == (2, 1, False)
  assert tuner.settled and tuner.observe(2, 1, 2, 0.1) is None
  assert tuner.observe(2, 1, 8, 0.1) == (3, None, False)  # a new batch size
  assert "batch size changed" in tuner.decisions[-2].reason


def test_auto_session_trains_and_reports_its_decisions(monkeypatch):
  monkeypatch.setattr(autotune, "MIN_SECONDS", 0.0)  # decide within 30 runs
  monkeypatch.setattr(autotune, "PATIENCE", 0.0)
  model = graphs.build(lambda: tf1.train.MomentumOptimizer(0.05, 0.9))
  x, y = BATCHES[0]
  with tb.TensorBowSession(graph=model.graph, replicas="auto") as sess:
    assert sess.replicas == 1
    sess.run(model.init)
    first = sess.run(model.loss, {model.x: x, model.y: y})
    for _ in range(30):
      sess.run(model.train, {model.x: x, model.y: y})
    last = sess.run(model.loss, {model.x: x, model.y: y})
    decisions = sess.tuning_decisions()
  assert last < first
  assert decisions and decisions[0].replicas == 1
  assert all(isinstance(d, autotune.Decision) for d in decisions)
  assert sess.replicas == decisions[-1].next[0]


def test_elements_of_a_fixed_batch_are_not_a_new_batch_size():
  # Each replica its own element of 2 rows: L = 2 trains 4 rows a run, L = 3
  # six. Neither is a new batch size, and L is not bounded by the 2 rows.
  tuner = autotune.AutoTuner(warmup=0, measure=1, cores=1, min_seconds=0,
                             patience=0)
  assert tuner.observe(1, 1, 2, 1.0) == (2, None, False)
  assert tuner.observe(2, 1, 4, 0.1, batch=2) == (3, None, False)
  assert tuner.observe(3, 1, 6, 0.1, batch=2) == (4, None, False)
  assert not any("batch size changed" in d.reason for d in tuner.decisions)
