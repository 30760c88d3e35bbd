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
    planned = sess.plans()
    # Only the threads change: nothing is planned again.
    sess.retune(1, 1, inline)
    plans = sess.plans()
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
  assert "ops on the task's thread (goodput 150 rows/s)" in (
      decisions[-1].reason)
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


def test_leaves_the_first_setting_once_training_took_patience_trials():
  tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=0,
                             patience=5)
  runs = 0
  while not tuner.decisions:
    # The first run builds the plan: 0.5 s; then 1/16 s a run. A trial is
    # expected to take 0.5 + 7 / 16 s; 5 of them: 4.6875 s.
    tuner.observe(1, 1, 100, 0.5 if runs == 0 else 0.0625)
    runs += 1
  assert runs == 1 + 67  # 0.5 + 67 / 16 >= 4.6875 > 0.5 + 66 / 16
  assert tuner.decisions[0].rows_per_second == pytest.approx(1600)


def test_leaves_the_first_setting_by_the_median_of_the_runs_so_far():
  # Runs of uneven length: a trial is expected to take the first run and
  # 7 more at the median (np.median's, two middle runs averaged) of the
  # runs after the first, read again at every run until the search leaves.
  # The alternating runs leave at an even count, where the average of the
  # two middle runs decides.
  alternating = [0.5] + [0.1, 0.01] * 1000
  for seconds in [alternating] + [
      [0.5] + list(np.random.RandomState(seed).lognormal(-3.0, 1.0, 2000))
      for seed in range(6)]:
    expected = next(
        n for n in range(7, len(seconds)) if sum(seconds[:n]) >=
        5 * (seconds[0] + 7 * np.median(seconds[1:n])))
    tuner = autotune.AutoTuner(warmup=2, measure=5, cores=1, min_seconds=0,
                               patience=5)
    runs = 0
    while not tuner.decisions:
      tuner.observe(1, 1, 100, seconds[runs])
      runs += 1
    assert runs == expected


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


def _search_goodput(throughputs, efficiencies):
  """The tuner fed runs of throughput throughputs[L] whose rows have
  statistical efficiency efficiencies[L] (a stand-in for what a session
  measures), one stream group a replica up to 2 cores; (setting, its
  decisions)."""
  setting = (1, 1, False)
  tuner = autotune.AutoTuner(warmup=1, measure=3, cores=2)
  for _ in range(500):
    l, g, inline = setting
    # Each replica its own element of 16 rows: 16 L rows a run.
    following = tuner.observe(
        l, g, 16 * l, 16 * l / throughputs[l], inline,
        batch=16 if l > 1 else None, efficiency=efficiencies[l],
        noise_scale=8.0)
    if following is not None:
      l, g, inline = following
      setting = (l, g if g is not None else min(l, 2), inline)
    if tuner.settled:
      break
  return setting, tuner.decisions


def test_leaves_a_setting_whose_goodput_is_below_one_replicas():
  # L = 2 trains 1.5x the rows a second of L = 1, but its rows teach 0.6x
  # as much: goodput 90 against 100. It goes back to L = 1.
  setting, decisions = _search_goodput({1: 100.0, 2: 150.0, 3: 150.0},
                                       {1: 1.0, 2: 0.6, 3: 0.5})
  assert setting[0] == 1
  at_two = decisions[1]
  assert at_two.replicas == 2 and at_two.next[0] == 1
  assert at_two.rows_per_second == pytest.approx(150.0)
  assert at_two.efficiency == pytest.approx(0.6)
  assert at_two.goodput == pytest.approx(90.0)
  assert at_two.noise_scale == 8.0
  assert "goodput under 1.1x L=1's 100 rows/s" in at_two.reason
  # On throughput alone (efficiency 1) L = 2 would have been kept.
  setting, _ = _search_goodput({1: 100.0, 2: 150.0, 3: 150.0},
                               {1: 1.0, 2: 1.0, 3: 1.0})
  assert setting[0] == 2


def test_noise_scale_is_trace_over_squared_gradient_norm():
  # Per-example gradients G + noise of covariance diag(s^2): B_simple =
  # sum(s^2) / |G|^2 = 20 / 5 = 4 rows.
  rng = np.random.RandomState(3)
  g, s = np.array([1.0, 2.0, 0.0, 0.0]), np.sqrt([5.0, 5.0, 5.0, 5.0])
  noise = autotune.NoiseScale(max_samples=4000)
  for _ in range(4000):
    examples = g + s * rng.randn(4, 8, 4)  # 4 replicas x 8 rows
    noise.add(list(examples.mean(axis=1)), 8)
  assert noise.value() == pytest.approx(4.0, rel=0.05)
  assert not noise.wanted
  with pytest.raises(ValueError, match="two replicas or more"):
    noise.add([g], 8)
  pure_noise = autotune.NoiseScale()
  pure_noise.add([np.array([1.0]), np.array([-1.0])], 4)  # mean 0
  assert pure_noise.value() == float("inf")
  assert autotune.NoiseScale().value() is None


def test_efficiency_is_pollux_s():
  assert autotune.efficiency(8.0, 8, 2) == pytest.approx(16 / 24)
  assert autotune.efficiency(8.0, 8, 1) == 1.0
  assert autotune.efficiency(float("inf"), 8, 4) == 1.0


def test_auto_weighs_an_input_pipelines_rows_by_the_noise_scale(monkeypatch):
  """Each replica takes its own element of a tf.data pipeline: from the
  first wave at L = 2 on, the tuner is given the replicas' gradients, at
  the weights L = 1's runs left, and their noise scale's efficiency."""
  monkeypatch.setattr(autotune, "MIN_SECONDS", 0.0)
  monkeypatch.setattr(autotune, "PATIENCE", 0.0)
  # TensorFlow's kernels: with TensorBow's, w's step may take its gradient
  # as an outer product's factors, and only b's gradient is then read.
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
  samples = []
  add = autotune.NoiseScale.add

  def recorded(noise, gradients, rows):
    samples.append(([np.array(g) for g in gradients], rows))
    add(noise, gradients, rows)

  monkeypatch.setattr(autotune.NoiseScale, "add", recorded)
  rng = np.random.RandomState(8)
  xs = rng.randn(400, 3).astype(np.float32)
  ys = rng.randn(400, 1).astype(np.float32)
  with tf.Graph().as_default():
    x, y = tf1.data.make_one_shot_iterator(
        tf.data.Dataset.from_tensor_slices((xs, ys)).batch(
            4, drop_remainder=True)).get_next()
    w = tf1.get_variable("w", initializer=graphs.W0)
    b = tf1.get_variable("b", initializer=graphs.B0)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    train = _gd().minimize(loss)
    with tb.TensorBowSession(replicas="auto") as sess:
      sess.run(tf1.global_variables_initializer())
      for _ in range(30):
        sess.run(train)
      decisions = sess.tuning_decisions()
  first = decisions[0]
  assert first.replicas == 1 and first.next[0] == 2
  assert first.efficiency == 1.0 and first.noise_scale is None
  # L = 1's runs are plain SGD on the elements in order; the first wave
  # at L = 2 starts both replicas from where they left the model.
  params = [graphs.W0.astype(np.float64), graphs.B0.astype(np.float64)]
  for e in range(first.run):
    grads, _ = references.least_squares(params, xs[4 * e:4 * e + 4],
                                        ys[4 * e:4 * e + 4])
    params = [p - LR * g for p, g in zip(params, grads)]
  gradients, rows = samples[0]
  assert rows == 4 and len(gradients) == 2
  for r, got in enumerate(gradients):
    e = first.run + r  # replica r's element
    grads, _ = references.least_squares(params, xs[4 * e:4 * e + 4],
                                        ys[4 * e:4 * e + 4])
    want = np.concatenate([g.ravel() for g in grads])
    assert (np.allclose(got, want, rtol=1e-4, atol=1e-5) or
            np.allclose(got, np.roll(want, 1), rtol=1e-4, atol=1e-5)), (
                got, want)
  # L = 2 was weighed by its efficiency, and left or kept by its goodput.
  at_two = decisions[1]
  assert at_two.replicas == 2 and at_two.noise_scale is not None
  assert 0 < at_two.efficiency <= 1
  if at_two.noise_scale < float("inf"):
    assert at_two.efficiency < 1
  assert at_two.goodput == pytest.approx(
      at_two.rows_per_second * at_two.efficiency)
  assert (at_two.next[0] == 1) == (at_two.goodput < 1.1 * first.goodput)
