"""Several workers (DESIGN.md, "Two levels"): TF_CONFIG, the worker's part
of a batch, the launcher, and SMA across processes against NumPy.

The two-process tests start real workers on free ports of 127.0.0.1 with
`launch.run_workers` (what `tensorbow-run --workers` runs), each bounded
in time; every process they start is stopped before they return. The
fast tier keeps one such job per algorithm; failures, restarts and real
scripts are in the slow tier.
"""
import glob
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tensorbow.scaleout import cluster as tb_cluster
from tensorbow import checkpoint
from tensorbow import feeds
from tensorbow import options
from tensorbow import preemption
from tensorbow import scaling
from tensorbow.cli import chief
from tensorbow.cli import launch

from children import CHECKOUT, child_env
import references

LR = 0.1
RNG = np.random.RandomState(11)
W0 = RNG.randn(3, 1).astype(np.float32)
B0 = np.array([0.1], np.float32)
# Ten rows a wave: the four replicas' shards are uneven (3, 3, 2, 2).
XS = RNG.randn(4, 10, 3).astype(np.float32)
YS = RNG.randn(4, 10, 1).astype(np.float32)

# One worker of the job: least squares, each worker's variables first set
# elsewhere (the chief's are taken by all), trained by TensorBowSession
# with 2 replicas over the waves of data.npz; the central model saved.
# With CKPT set, a Saver saves the model after wave SAVE_AT, or (FIRST set)
# restores it and trains from wave FIRST + 1. With COUNT set, the train op
# also counts the rows, by a counter and by metrics.mean's count, and each
# wave fetches its rows and the sum of its labels: all saved.
WORKER = """\
import json
import os
import sys

import numpy as np
import tensorflow as tf
{mode}
import tensorbow as tb

data = np.load(sys.argv[1])
optimizer, resource, algorithm = sys.argv[3], sys.argv[4] == "1", sys.argv[5]
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable("w", initializer=data["w0"] + index,
                              use_resource=resource)
b = tf.compat.v1.get_variable("b", initializer=data["b0"] - index,
                              use_resource=resource)
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
opt = {{"sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer({lr}),
       "momentum": lambda: tf.compat.v1.train.MomentumOptimizer({lr}, 0.9),
       "adam": lambda: tf.compat.v1.train.AdamOptimizer({lr})}}[optimizer]()
train = opt.minimize(loss)
env = os.environ
counts, sums, fetched = [], [], []
if "COUNT" in env:
  sums = [tf.shape(x)[0], tf.reduce_sum(y)]
  seen = tf.compat.v1.get_variable("seen", [], tf.int64, trainable=False,
                                   initializer=tf.zeros_initializer())
  _, update = tf.compat.v1.metrics.mean(tf.square(tf.matmul(x, w) - y))
  train = tf.group(train, update,
                   seen.assign_add(tf.cast(tf.shape(x)[0], tf.int64)))
  counts = [seen] + [v for v in tf.compat.v1.local_variables()
                     if v.name.endswith("count:0")]
if "LOCAL_SGD" in env:  # LocalSGD's arguments, as JSON
  algorithm = tb.algorithms.LocalSGD(**json.loads(env["LOCAL_SGD"]))
saver = tf.compat.v1.train.Saver()
first = int(env.get("FIRST", 0))
devices = int(env.get("DEVICES", 1))  # each worker's CPU devices
with tb.TensorBowSession(
    replicas=int(env.get("REPLICAS", 2)), algorithm=algorithm,
    cluster_timeout=float(sys.argv[6]),
    config=tf.compat.v1.ConfigProto(device_count={{"CPU": devices}}),
    devices=[f"/cpu:{{d}}" for d in range(devices)] if devices > 1 else None
    ) as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  sess.run(tf.compat.v1.local_variables_initializer())
  if first:
    saver.restore(sess, os.path.join(env["CKPT"], "model"))
  # ROWS: per wave, the rows of its batch taken (an epoch's last batch).
  cut = ([int(r) for r in env["ROWS"].split(",")] if "ROWS" in env else
         [None] * len(data["xs"]))
  for step in range(first, int(env.get("LAST", len(data["xs"])))):
    fetched.append(sess.run([train] + sums,
                            {{x: data["xs"][step][:cut[step]],
                             y: data["ys"][step][:cut[step]]}})[1:])
    print("wave", step + 1, "done", flush=True)
    if "CKPT" in env and step + 1 == int(env.get("SAVE_AT", -1)):
      print("saved", saver.save(sess, os.path.join(env["CKPT"], "model")),
            flush=True)
    time.sleep(float(env.get("SLEEP", 0)))
    if step + 1 == int(env.get("PAUSE_AT", -1)) and index == int(
        env.get("PAUSE_WORKER", -1)):
      time.sleep(float(env["PAUSE"]))  # one worker's wave is slow
  np.savez(sys.argv[2] + str(index) + ".npz", w=sess.run(w), b=sess.run(b),
           counts=np.array(sess.run(counts), np.float64),
           fetched=np.array(fetched, np.float64))
  print("REPORT", json.dumps(sess.scaling_report()._asdict()), flush=True)
"""


def _worker_script(tmp_path, tf_mode_statement, waves=4):
  data = tmp_path / "data.npz"
  np.savez(data, w0=W0, b0=B0, xs=np.concatenate([XS] * (waves // 4 or 1)),
           ys=np.concatenate([YS] * (waves // 4 or 1)))
  script = tmp_path / "worker.py"
  script.write_text("import time\n" + WORKER.format(mode=tf_mode_statement,
                                                    lr=LR))
  return script, data


# ---- The cluster a process is in -----------------------------------------


def _tf_config(workers, index, **extra):
  return {"TF_CONFIG": json.dumps(
      dict({"cluster": {"worker": workers},
            "task": {"type": "worker", "index": index}}, **extra))}


def test_tf_config_gives_the_cluster_and_this_worker():
  workers = ["127.0.0.1:2001", "127.0.0.1:2002", "127.0.0.1:2003"]
  cluster = tb_cluster.from_environ(_tf_config(workers, 2))
  assert cluster == tb_cluster.Cluster(workers, 2)
  assert cluster.num_workers == 3 and not cluster.is_chief
  assert tb_cluster.from_environ(_tf_config(workers, 0)).is_chief
  # Round trip through what the launcher sets.
  assert tb_cluster.from_environ(
      {"TF_CONFIG": tb_cluster.to_environ(cluster)}) == cluster


@pytest.mark.parametrize("environ", [
    {}, {"TF_CONFIG": ""}, _tf_config(["127.0.0.1:2001"], 0)])
def test_no_cluster_without_two_workers(environ):
  assert tb_cluster.from_environ(environ) is None


@pytest.mark.parametrize("environ, message", [
    ({"TF_CONFIG": "{not json"}, "not JSON"),
    (_tf_config(["a:1", "b:2"], 0, cluster={"worker": ["a:1", "b:2"],
                                            "ps": ["c:3"]}), "ps"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]}})},
     "task"),
    (_tf_config(["a:1", "b:2"], 2), "index"),
    (_tf_config(["a:1", "b"], 0), "host:port"),
])
def test_a_bad_tf_config_is_refused_by_name(environ, message):
  with pytest.raises(ValueError, match=message):
    tb_cluster.from_environ(environ)


@pytest.mark.parametrize("workers, replicas", [(2, 1), (2, 2), (3, 2),
                                               (2, 3)])
def test_a_workers_part_is_its_replicas_shards_of_the_whole_batch(
    workers, replicas):
  for rows in range(workers * replicas, 30):
    whole = np.array_split(np.arange(rows), workers * replicas)
    for k in range(workers):
      start, stop = tb_cluster.Cluster(["h:1"] * workers, k).part(rows,
                                                                  replicas)
      mine = np.array_split(np.arange(start, stop), replicas)
      expected = whole[k * replicas:(k + 1) * replicas]
      assert [list(m) for m in mine] == [list(e) for e in expected]


@pytest.mark.parametrize("rows", [0, 1, 2])
def test_a_batch_that_leaves_a_worker_no_rows_is_refused_naming_it(rows):
  """2 workers of 2 replicas: rows go to replicas 0, 1, 2, 3 in order, so
  worker 1 needs a batch of 3 rows (DESIGN.md, feed sharding)."""
  cluster = tb_cluster.Cluster(["h:1"] * 2, 1)
  with pytest.raises(tf.errors.InvalidArgumentError) as info:
    cluster.check_rows(rows, 2, "IteratorGetNext:0")
  assert info.value.message == (
      f"TensorBow: a batch of {rows} rows (IteratorGetNext:0) leaves worker "
      "1 of 2 no rows: the rows go to the cluster's 4 replicas in order, one "
      "each, and every worker needs one, so a batch needs at least 3; batch "
      "the input pipeline with drop_remainder=True (or feed whole batches) "
      "to avoid it")
  cluster.check_rows(3, 2, "x:0")  # worker 1 trains one of its replicas


def test_worker_part_cuts_batch_feeds_only():

  class Plan(object):
    batch = [True, False, True]

  x, lr, y = np.arange(10), np.float32(0.1), np.arange(10, 20)
  cut = feeds.worker_part(Plan(), [x, lr, y], lambda rows: (3, 6))
  assert list(cut[0]) == [3, 4, 5] and cut[1] == lr
  assert list(cut[2]) == [13, 14, 15]


@pytest.mark.parametrize("algorithm", ["asgd", "adaptive", "none"])
def test_algorithms_that_cannot_span_workers_refuse_a_cluster(algorithm):
  with pytest.raises(ValueError, match=f"'{algorithm}' cannot keep"):
    options.check_options(2, algorithm, workers=2)


def test_replicas_auto_refuses_a_cluster():
  with pytest.raises(ValueError, match="cannot tune"):
    options.check_options("auto", "sma", workers=2)


@pytest.mark.parametrize("timeout", [0, -1.0, "60", True])
def test_cluster_timeout_is_checked(timeout):
  with pytest.raises(ValueError, match="cluster_timeout"):
    options.check_options(2, "sma", cluster_timeout=timeout)


@pytest.mark.parametrize("timeout", [0, 0.99, -1.0, "4", True, None])
def test_heartbeat_timeout_is_checked(timeout):
  with pytest.raises(ValueError, match="heartbeat_timeout"):
    options.check_options(2, "sma", heartbeat_timeout=timeout)


def test_a_reducer_counts_a_worker_lost_past_its_heartbeat_timeout():
  cluster = tb_cluster.Cluster(launch.free_addresses(2), 0)
  reducer = tb_cluster.Reducer(cluster, heartbeat_timeout=2.0)
  assert reducer._lost_now({1: 1.9}) == {}
  assert reducer._lost_now({1: 2.0}) == {1: 2.0}
  # Once lost, lost for good, whatever comes after.
  assert reducer._lost_now({1: 0.1}) == {1: 2.0}


def test_a_sum_under_way_is_cancelled_once_a_worker_is_lost():
  cluster = tb_cluster.Cluster(launch.free_addresses(2), 0)
  reducer = tb_cluster.Reducer(cluster, heartbeat_timeout=2.0)
  closed = threading.Event()

  class Session(object):
    def close(self):
      closed.set()

  reducer._session = Session()
  reducer._cancel_if_lost({1: 1.0})
  assert not closed.wait(0.2)
  reducer._cancel_if_lost({1: 2.5})
  assert closed.wait(5.0)
  reducer.close()  # the cancelled session is not closed twice


@pytest.mark.parametrize("requested", [False, True])
def test_a_stop_request_rides_in_the_sums_own_all_reduces(requested):
  reducer = tb_cluster.Reducer(
      tb_cluster.Cluster(launch.free_addresses(2), 0),
      requested=lambda: requested)
  run = []

  def both_workers(ops, feeds, what):  # two workers that fed the same
    run.append((len(ops), what))
    return [2 * value for value in feeds.values()]

  reducer._run = both_workers
  one = reducer.sum([np.arange(3, dtype=np.float32), np.ones((2, 2), "f")],
                    "wave 1")
  np.testing.assert_array_equal(one[0], [0, 2, 4])
  np.testing.assert_array_equal(one[1], np.full((2, 2), 2))
  assert reducer.stopping == requested
  assert reducer.asked == ({0} if requested else set())  # whose request
  # float32 alone: one all-reduce, the request in it; with float64 and
  # int64 too, one each.
  two = reducer.sum([np.ones(2, np.float64), np.ones(1, np.float32),
                     np.ones(1, np.int64)], "wave 2")
  assert [t.dtype for t in two] == [np.float64, np.float32, np.int64]
  assert run == [(1, "wave 1"), (3, "wave 2")]


def test_scaling_model_is_lemma_3_1_and_gadeis_rule():
  # T_C = 0.1 s, T_O = 0.02 s on 2 workers: r = 0.2 / 2 = 0.1.
  report = scaling.report(2, 10, 1.0, 0.2, 1000, predicted=(1, 2, 8))
  assert report.compute_seconds == pytest.approx(0.1)
  assert report.sync_seconds == pytest.approx(0.02)
  assert report.ratio == pytest.approx(0.2)
  assert report.per_member_ratio == pytest.approx(0.1)
  assert report.efficiency[1] == pytest.approx(1.0)
  assert report.efficiency[2] == pytest.approx(1.1 / 1.2)
  assert report.efficiency[8] == pytest.approx(1.1 / 1.8)
  assert report.bandwidth == pytest.approx(2 * 1000 / 0.12)
  # Before any wave, nothing to predict from.
  assert scaling.report(2, 0, 0.0, 0.0, 1000).efficiency[64] == 1.0


def test_a_workers_replica_state_makes_the_checkpoints_directory(tmp_path):
  """A worker that is not the chief writes its state beside a checkpoint
  whose directory the chief's Saver may not have made yet."""
  prefix = str(tmp_path / "not" / "yet" / "model-1")
  config = {"replicas": 2, "algorithm": "sma"}
  checkpoint.save(prefix, config, {"w": np.arange(3.0)}, worker=1, waves=7)
  loaded = checkpoint.load(prefix, config, worker=1)
  assert checkpoint.pop_waves(loaded, 0) == 7
  np.testing.assert_array_equal(loaded["w"], np.arange(3.0))


def test_only_the_chief_writes_checkpoint_files_and_summaries(tmp_path):
  assert chief.patches(None) == []
  assert chief.patches(tb_cluster.Cluster(["h:1", "h:2"], 0)) == []
  patches = chief.patches(tb_cluster.Cluster(["h:1", "h:2"], 1))
  graph = tf.Graph()
  with graph.as_default():
    v = tf.compat.v1.get_variable("v", initializer=[1.0, 2.0])
    step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    summary = tf.compat.v1.summary.scalar("s", tf.reduce_sum(v))
  runs = []

  class Session(object):
    """Records the runs a save asks for (a TensorBowSession's would save
    the replicas' state only)."""

    def run(self, fetches, feed_dict=None):
      runs.append((fetches, feed_dict))
      return 7 if fetches is step else None

  try:
    for owner, name, _, new in patches:
      setattr(owner, name, new)
    path = saver.save(Session(), str(tmp_path / "model"), global_step=step)
    assert saver.save(Session(), str(tmp_path / "model"),
                      global_step=np.int64(8)) == str(tmp_path / "model") + "-8"
    with graph.as_default():
      writer = tf.compat.v1.summary.FileWriter(str(tmp_path / "events"),
                                               graph)
      with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        writer.add_summary(sess.run(summary), 1)
      writer.flush()
      writer.close()
      assert writer.get_logdir() == str(tmp_path / "events")
  finally:
    for owner, name, old, _ in patches:
      setattr(owner, name, old)
  assert path == str(tmp_path / "model") + "-7"
  assert runs[-2] == (saver.saver_def.save_tensor_name,
                      {saver.saver_def.filename_tensor_name: path})
  assert os.listdir(tmp_path) == []  # no state file, meta graph or events
  # Put back: TensorFlow's own writer and save write again.
  with graph.as_default():
    writer = tf.compat.v1.summary.FileWriter(str(tmp_path / "events"))
    writer.add_event(tf.compat.v1.Event(step=1))
    writer.close()
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      saver.save(sess, str(tmp_path / "model"), global_step=np.int64(3))
  assert os.listdir(tmp_path / "events")
  assert os.path.exists(str(tmp_path / "model") + "-3.index")


def test_sma_over_workers_takes_alpha_over_all_their_replicas():
  assert options.check_options(2, "sma", workers=3).alpha == pytest.approx(
      1 / 6)


# ---- Two workers on this machine -------------------------------------------


def _assert_centrals(centrals, expected):
  """Every worker's central (w, b) is `expected`'s, to 1e-5."""
  for central in centrals:
    for name, value in zip("wb", expected):
      np.testing.assert_allclose(central[name], value, rtol=1e-5, atol=1e-5)


def _run_job(tmp_path, script, data, optimizer, resource, algorithm,
             timeout=60.0, **environ):
  out = io.StringIO()
  status = launch.run_workers(
      [sys.executable, str(script), str(data), str(tmp_path / "central"),
       optimizer, "1" if resource else "0", algorithm, str(timeout)],
      2, threads=1, out=out, environ=child_env(**environ))
  assert status == 0, out.getvalue()[-3000:]
  return out.getvalue(), [np.load(tmp_path / f"central{k}.npz")
                          for k in range(2)]


# Jobs of worker processes are end-to-end tests: slow tier (pytest.ini).
@pytest.mark.slow
@pytest.mark.parametrize("optimizer, resource", [
    ("sgd", False), ("sgd", True), ("momentum", False), ("momentum", True)])
def test_two_workers_of_two_replicas_are_sma_of_four(
    tmp_path, tf_mode_statement, optimizer, resource):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  output, centrals = _run_job(tmp_path, script, data, optimizer, resource,
                              "sma")
  expected = references.sma(
      [W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9, LR,
      momentum=0.9 if optimizer == "momentum" else None)[-1][0]
  _assert_centrals(centrals, expected)
  # Every line came through, marked with its worker.
  for k in range(2):
    assert f"[{k}] wave 4 done" in output
  # The scaling model saw four waves of both kinds of time on each.
  for k in range(2):
    line = [l for l in output.splitlines() if l.startswith(f"[{k}] REPORT ")]
    report = json.loads(line[0].split(" ", 2)[2])
    assert report["workers"] == 2 and report["waves"] == 4
    assert report["compute_seconds"] > 0 and report["sync_seconds"] > 0
    assert report["model_bytes"] == 4 * (3 + 1)  # w and b, float32
    assert report["bandwidth"] == pytest.approx(
        2 * 16 / (report["compute_seconds"] + report["sync_seconds"]))


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["sma", "easgd"])
def test_two_workers_count_every_row_of_the_job(tmp_path, tf_mode_statement,
                                                algorithm):
  # A counter of rows and a metric's count written in the training run
  # are the whole job's, on every worker (DESIGN.md, "What leaves the
  # replicas"; issue #60): 4 waves of 10 rows, 2 x 2 replicas.
  script, data = _worker_script(tmp_path, tf_mode_statement)
  _, centrals = _run_job(tmp_path, script, data, "sgd", False, algorithm,
                         COUNT="1")
  for central in centrals:
    np.testing.assert_array_equal(central["counts"], [40.0, 40.0])
    # Fetched, a wave's row count and sum of labels are the job's batch's.
    np.testing.assert_array_equal(central["fetched"][:, 0], [10.0] * 4)
    np.testing.assert_allclose(central["fetched"][:, 1],
                               YS.sum(axis=(1, 2)), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["sma", "ssgd"])
def test_two_workers_of_one_replica_are_two_replicas(
    tmp_path, tf_mode_statement, algorithm):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  _, centrals = _run_job(tmp_path, script, data, "sgd", False, algorithm,
                         REPLICAS="1")
  if algorithm == "sma":
    expected = references.sma([W0, B0], list(zip(XS, YS)), 2, 0.5, 0.9,
                              LR)[-1][0]
  else:  # the whole batch's step
    expected = [W0.astype(np.float64), B0.astype(np.float64)]
    for x, y in zip(XS, YS):
      grads, _ = references.least_squares(expected, x, y)
      expected = [p - LR * g for p, g in zip(expected, grads)]
  _assert_centrals(centrals, expected)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["sma", "ssgd"])
def test_a_batch_with_fewer_rows_than_a_workers_replicas_trains_as_one_job(
    tmp_path, tf_mode_statement, algorithm):
  """Wave 2 has 3 rows: worker 0 trains both its replicas on one each,
  worker 1 one of its two; the result is one process's of 4 replicas."""
  rows = (10, 3, 10, 10)
  script, data = _worker_script(tmp_path, tf_mode_statement)
  _, centrals = _run_job(tmp_path, script, data, "momentum", False,
                         algorithm, ROWS=",".join(map(str, rows)))
  batches = [(x[:n], y[:n]) for x, y, n in zip(XS, YS, rows)]
  if algorithm == "sma":
    expected = references.sma([W0, B0], batches, 4, 0.25, 0.9, LR,
                               momentum=0.9)[-1][0]
  else:  # the whole batch's step, as one model (momentum SGD)
    expected = [W0.astype(np.float64), B0.astype(np.float64)]
    velocity = [np.zeros_like(p) for p in expected]
    for x, y in batches:
      grads, _ = references.least_squares(expected, x, y)
      velocity = [0.9 * v + g for v, g in zip(velocity, grads)]
      expected = [p - LR * v for p, v in zip(expected, velocity)]
  _assert_centrals(centrals, expected)


@pytest.mark.slow
def test_easgd_over_two_workers_is_easgd_of_four(tmp_path,
                                                 tf_mode_statement):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  _, centrals = _run_job(tmp_path, script, data, "sgd", False, "easgd")
  # EASGD is SMA without central momentum, alpha 0.9 / replicas.
  expected = references.sma([W0, B0], list(zip(XS, YS)), 4, 0.9 / 4, 0.0,
                             LR)[-1][0]
  _assert_centrals(centrals, expected)


# An algorithm of one hook set that spans workers through its job's
# reduce alone (issue 66): after every wave each worker sums its replicas'
# variables, the job's reduce sums those sums and the replica counts over
# the workers, and the central model becomes the mean of every replica of
# the job (the replicas re-seeded from it). No other sum crosses.
SPANNING = """\
class MeanOverTheJob(tb.algorithms.Algorithm):
  name = "mean_over_the_job"
  spans_workers = True

  def wave_hooks(self, setting):
    return [MeanHook(setting)]


class MeanHook(tb.hooks.WaveHook):

  def __init__(self, setting):
    self._setting = setting
    self._ops = None

  def after(self, opened, ran):
    s = self._setting
    if self._ops is None:
      self._ops = self._make(s.builder, s.replica_state.replicated_variables())
    sums, fed, assign = self._ops
    mine = s.session.run(sums) + [
        np.array([s.builder.num_replicas], np.float32)]
    *total, count = s.job.reduce(opened.number, mine)
    s.session.run(assign, dict(zip(fed, [t / count[0] for t in total])))
    s.replica_state.reseed()

  def _make(self, builder, names):
    sums, fed, assigns = [], [], []
    with builder.graph.as_default(), tf.name_scope("test_job_mean"):
      for name in names:
        var_op = builder.graph.get_operation_by_name(name)
        sums.append(tf.reduce_sum(
            builder.variable_replicas(var_op).stacked(), axis=0))
        fed.append(tf.compat.v1.placeholder(sums[-1].dtype, sums[-1].shape))
        assigns.append(
            tf.raw_ops.AssignVariableOp(resource=var_op.outputs[0],
                                        value=fed[-1])
            if var_op.type == "VarHandleOp" else
            tf.compat.v1.assign(var_op.outputs[0], fed[-1]).op)
      return sums, fed, tf.group(assigns)


algorithm = MeanOverTheJob()
"""


@pytest.mark.slow
@pytest.mark.parametrize("resource", [False, True])
def test_an_algorithm_that_spans_workers_through_reduce_alone_plugs_in(
    tmp_path, tf_mode_statement, resource):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  script.write_text(script.read_text().replace(
      "saver = tf.compat.v1.train.Saver()",
      SPANNING + "saver = tf.compat.v1.train.Saver()"))
  _, centrals = _run_job(tmp_path, script, data, "sgd", resource, "sma")
  # Each wave: the mean over the job's four replicas of one step each on
  # its shard (3, 3, 2, 2 rows), from the central model.
  w, b = W0.astype(np.float64), B0.astype(np.float64)
  for x, y in zip(XS, YS):
    steps = [references.least_squares([w, b], x[s], y[s])[0]
             for s in np.array_split(np.arange(len(x)), 4)]
    w = w - LR * np.mean([gw for gw, _ in steps], axis=0)
    b = b - LR * np.mean([gb for _, gb in steps], axis=0)
  _assert_centrals(centrals, [w, b])


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, resource, fast_kernels", [
    ("sgd", False, "1"), ("momentum", True, "0"), ("momentum", False, "0")])
def test_local_sgd_over_two_workers_is_local_sgd_of_four(
    tmp_path, tf_mode_statement, optimizer, resource, fast_kernels):
  """One period for both levels: averaging after wave 1 (the warm-up),
  Nesterov's outer step after waves 3, 5 and 7 over all four replicas,
  and wave 8 a period cut short."""
  arguments = dict(period=2, outer_learning_rate=0.7, outer_momentum=0.9,
                   nesterov=True, warmup_waves=1)
  script, data = _worker_script(tmp_path, tf_mode_statement, waves=8)
  _, centrals = _run_job(tmp_path, script, data, optimizer, resource,
                         "local_sgd", LOCAL_SGD=json.dumps(arguments),
                         TENSORBOW_FAST_KERNELS=fast_kernels)
  expected = references.local_sgd(
      [W0, B0], list(zip(XS, YS)) * 2, 4, LR,
      0.9 if optimizer == "momentum" else None, 2, 0.7, 0.9, True, 1)
  _assert_centrals(centrals, expected[-1][0])


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, resource", [
    ("sgd", False), ("momentum", True)])
def test_local_sgd_with_a_period_per_level_is_a_hierarchical_averager(
    tmp_path, tf_mode_statement, optimizer, resource):
  """After the warm-up (wave 1), each worker's own exchange after waves 3
  and 7, and the workers' average after their exchanges of wave 5."""
  arguments = dict(period=2, outer_learning_rate=0.7, outer_momentum=0.9,
                   nesterov=True, warmup_waves=1, worker_period=4)
  script, data = _worker_script(tmp_path, tf_mode_statement, waves=8)
  _, centrals = _run_job(tmp_path, script, data, optimizer, resource,
                         "local_sgd", LOCAL_SGD=json.dumps(arguments))
  momentum = 0.9 if optimizer == "momentum" else None
  expected = references.local_sgd_levels(
      [W0, B0], list(zip(XS, YS)) * 2, 2, 2, LR, momentum, 2, 4, 0.7, 0.9,
      True, 1)
  for central, mine in zip(centrals, expected):
    _assert_centrals([central], mine)
  # The workers drifted apart after wave 7; one period would not have.
  assert np.abs(expected[0][0] - expected[1][0]).max() > 1e-3
  one = references.local_sgd([W0, B0], list(zip(XS, YS)) * 2, 4, LR,
                             momentum, 2, 0.7, 0.9, True, 1)[-1][0]
  assert np.abs(one[0] - expected[0][0]).max() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, resource", [
    ("adam", True), ("adam", False), ("momentum", True)])
def test_ssgd_over_two_workers_is_tensorflow_on_the_whole_batch(
    tmp_path, tf_mode_statement, optimizer, resource):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  _, centrals = _run_job(tmp_path, script, data, optimizer, resource, "ssgd")
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w = tf.compat.v1.get_variable("w", initializer=W0)
    b = tf.compat.v1.get_variable("b", initializer=B0)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    opt = (tf.compat.v1.train.AdamOptimizer(LR) if optimizer == "adam" else
           tf.compat.v1.train.MomentumOptimizer(LR, 0.9))
    train = opt.minimize(loss)
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for xb, yb in zip(XS, YS):
        sess.run(train, {x: xb, y: yb})
      expected = sess.run([w, b])
  _assert_centrals(centrals, expected)


def _start_worker(tmp_path, script, data, addresses, k, bound=60.0,
                  **environ):
  env = launch.worker_environ(tb_cluster.Cluster(addresses, k), 1,
                              child_env(**environ))
  return subprocess.Popen(
      [sys.executable, str(script), str(data), str(tmp_path / "c"), "sgd",
       "0", "sma", str(bound)],
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      start_new_session=True)


def _read_until(child, prefix):
  """The lines `child` printed up to the first that starts with `prefix`."""
  said = []
  for line in iter(child.stdout.readline, b""):
    said.append(line)
    if line.startswith(prefix):
      break
  return said


def _stop_all(children):
  for child in children:
    if child.poll() is None:
      os.killpg(child.pid, signal.SIGKILL)
    child.wait()


@pytest.mark.slow
def test_a_lost_worker_fails_the_other_in_seconds_and_the_job_resumes(
    tmp_path, tf_mode_statement):
  script, data = _worker_script(tmp_path, tf_mode_statement, waves=400)
  ckpt = tmp_path / "ckpt"
  ckpt.mkdir()
  addresses = launch.free_addresses(2)
  children = []
  try:
    for k in range(2):
      children.append(_start_worker(tmp_path, script, data, addresses, k,
                                    CKPT=str(ckpt), SAVE_AT="2",
                                    SLEEP="0.05"))
    # Worker 1 dies once both have trained past the checkpoint.
    said = _read_until(children[1], b"wave 3 ")
    children[1].kill()
    lost = time.monotonic()
    _, err = children[0].communicate(timeout=60)
    took = time.monotonic() - lost
    err1 = children[1].stderr.read().decode()
  finally:
    _stop_all(children)
  assert children[0].returncode != 0
  # The heartbeats find it, not the sum's 60 s timeout.
  assert took < 10, took
  message = err.decode()
  assert "worker 1 (" + addresses[1] + ") is gone" in message, message[-2000:]
  assert "during wave" in message
  # The chief wrote the checkpoint; worker 1 its replicas' state only.
  assert b"saved " + str(ckpt / "model").encode() + b"\n" in said
  assert "leaves checkpoint writes to the chief" in err1
  for k in range(2):
    assert (ckpt / f"model.tensorbow-worker{k}.npz").exists()
  # Started again from the checkpoint, the job trains waves 3 and 4 as if
  # nothing had happened.
  _, centrals = _run_job(tmp_path, script, data, "sgd", False, "sma",
                         CKPT=str(ckpt), FIRST="2", LAST="4")
  expected = references.sma([W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9,
                            LR)[-1][0]
  _assert_centrals(centrals, expected)


SCRIPTS = os.path.join(CHECKOUT, "benchmarks", "real_scripts")
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def _script_result(command, cwd):
  """Per worker (None: one process), the RESULT accuracy and MODEL
  checksum lines a real script printed."""
  done = subprocess.run(command, env=child_env(SCRIPTS), cwd=cwd,
                        capture_output=True, text=True, timeout=900,
                        check=False)
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  found = {}
  for line in done.stdout.splitlines():
    worker = None
    if line.startswith("["):
      worker, _, line = line.partition("] ")
      worker = int(worker[1:])
    if line.startswith("RESULT accuracy="):
      found.setdefault(worker, {})["accuracy"] = float(
          line.split()[1].split("=")[1])
    elif line.startswith("MODEL "):
      found.setdefault(worker, {})["model"] = float(line.split()[1])
  return found


# The scripts set their own TF1 mode: this run's cannot change them.
@pytest.mark.mode_independent
@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(FASHION_MNIST),
                    reason="Fashion-MNIST is not installed "
                    "(apt-get install dataset-fashion-mnist)")
@pytest.mark.parametrize("script", ["mlp.py", "monitored_mlp.py"])
def test_tensorbow_run_trains_an_unmodified_script_on_two_workers(
    tmp_path, script):
  plain = _script_result(
      [sys.executable, script, str(tmp_path / "plain")], SCRIPTS)[None]
  workers = _script_result(
      [sys.executable, "-m", "tensorbow.run", "--workers", "2",
       "--replicas", "2", script, str(tmp_path / "tb")], SCRIPTS)
  assert sorted(workers) == [0, 1]
  # One central model on both workers, as accurate as TensorFlow's.
  assert workers[0]["model"] == workers[1]["model"]
  assert workers[0]["accuracy"] == workers[1]["accuracy"]
  assert abs(workers[0]["accuracy"] - plain["accuracy"]) <= 0.02, (
      workers, plain)
  if script == "monitored_mlp.py":  # the chief's files alone
    files = os.listdir(tmp_path / "tb")
    assert len([f for f in files if f.startswith("events.")]) == 1, files
    assert {f for f in files if f.endswith(".npz")} == {
        f"model.ckpt-{s}.tensorbow-worker{k}.npz"
        for s in (200, 400) for k in range(2)}, files


# A distributed-style TF1 script: MonitoredTrainingSession, is_chief from
# TF_CONFIG, the chief alone given a checkpoint folder.
# Least squares from each worker's own start (`index`: its place), the
# global step counting the waves: the middle of the scripts below.
STEPPED = """\
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable("w", initializer=data["w0"] + index)
b = tf.compat.v1.get_variable("b", initializer=data["b0"])
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
step = tf.compat.v1.train.get_or_create_global_step()
train = tf.compat.v1.train.GradientDescentOptimizer({lr}).minimize(
    loss, global_step=step)
"""

MONITORED = """\
import json
import os
import sys

import numpy as np
import tensorflow as tf
{mode}

data = np.load(sys.argv[1])
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
""" + STEPPED + """with tf.compat.v1.train.MonitoredTrainingSession(
    is_chief=index == 0,
    checkpoint_dir=sys.argv[2] if index == 0 else None) as sess:
  for xb, yb in zip(data["xs"], data["ys"]):
    sess.run(train, {{x: xb, y: yb}})
  w_value, b_value, steps = sess.run([w, b, step])
np.savez(sys.argv[3] + str(index) + ".npz", w=w_value, b=b_value)
print("steps", steps)
"""


def _tensorbow_run(tmp_path, tf_mode_statement, template, flags, *args):
  """`tensorbow-run FLAGS job.py DATA ARGS` run to its end, job.py being
  `template` in this TF1 mode and DATA the tests' waves; the finished
  process, its output as text."""
  _, data = _worker_script(tmp_path, tf_mode_statement)
  script = tmp_path / "job.py"
  script.write_text(template.format(mode=tf_mode_statement, lr=LR))
  return subprocess.run(
      [sys.executable, "-m", "tensorbow.run", *flags, str(script), str(data),
       *map(str, args)],
      env=child_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_monitored_worker_that_is_not_chief_trains_with_the_chief(
    tmp_path, tf_mode_statement):
  done = _tensorbow_run(tmp_path, tf_mode_statement, MONITORED,
                        ["--workers", "2", "--replicas", "2"],
                        tmp_path / "ckpt", tmp_path / "central")
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  assert "[0] steps 4" in done.stdout and "[1] steps 4" in done.stdout
  _assert_centrals(
      [np.load(tmp_path / f"central{k}.npz") for k in range(2)],
      references.sma([W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9,
                     LR)[-1][0])
  assert tf.train.latest_checkpoint(str(tmp_path / "ckpt"))


@pytest.mark.slow
def test_a_worker_that_stops_answering_fails_the_other_within_the_bound(
    tmp_path, tf_mode_statement):
  script, data = _worker_script(tmp_path, tf_mode_statement, waves=400)
  addresses = launch.free_addresses(2)
  bound = tb_cluster.DEFAULT_HEARTBEAT_TIMEOUT
  children = [_start_worker(tmp_path, script, data, addresses, k,
                            SLEEP="0.05") for k in range(2)]
  try:
    _read_until(children[1], b"wave 3 ")
    os.killpg(children[1].pid, signal.SIGSTOP)  # alive, listening, silent
    stopped = time.monotonic()
    _, err = children[0].communicate(timeout=60)
    took = time.monotonic() - stopped
  finally:
    _stop_all(children)
  assert children[0].returncode != 0
  # Its heartbeats stop; its port still takes connections (the kernel
  # answers for a stopped process), so only the heartbeat bound finds it.
  assert bound - 0.5 < took < bound + 6, took
  message = err.decode()
  assert (f"worker 1 ({addresses[1]}) did not answer heartbeats for "
          f"{bound:g} s") in message, message[-2000:]
  assert "during wave" in message


@pytest.mark.slow
def test_a_lost_worker_fails_every_other_in_seconds_naming_it(
    tmp_path, tf_mode_statement):
  script, data = _worker_script(tmp_path, tf_mode_statement, waves=400)
  addresses = launch.free_addresses(3)
  children = [_start_worker(tmp_path, script, data, addresses, k,
                            SLEEP="0.05") for k in range(3)]
  try:
    _read_until(children[1], b"wave 3 ")
    children[1].kill()
    lost = time.monotonic()
    errors = [c.communicate(timeout=60)[1].decode() for c in children[::2]]
    took = time.monotonic() - lost
  finally:
    _stop_all(children)
  assert took < 10, took
  for child, message in zip(children[::2], errors):
    assert child.returncode != 0
    assert f"worker 1 ({addresses[1]}) is gone" in message, message[-2000:]
    assert "during wave" in message


@pytest.mark.slow
def test_a_slow_wave_is_not_a_lost_worker(tmp_path, tf_mode_statement):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  pause = 1.5 * tb_cluster.DEFAULT_HEARTBEAT_TIMEOUT
  started = time.monotonic()
  _, centrals = _run_job(tmp_path, script, data, "sgd", False, "sma",
                         PAUSE_AT="2", PAUSE_WORKER="1", PAUSE=str(pause))
  # Worker 0 waited in wave 3's sum while worker 1 paused, and went on.
  assert time.monotonic() - started > pause
  expected = references.sma([W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9,
                            LR)[-1][0]
  _assert_centrals(centrals, expected)


@pytest.mark.slow
def test_a_late_worker_is_waited_for_by_name(tmp_path, tf_mode_statement):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  addresses = launch.free_addresses(2)
  children = [_start_worker(tmp_path, script, data, addresses, 0, 60.0)]
  waiting = f"worker 0 waits for worker 1 ({addresses[1]}) to start".encode()
  try:
    # Worker 0 reaches its first wave alone, and says whom it waits for.
    said = b""
    for line in iter(children[0].stderr.readline, b""):
      said += line
      if waiting in line:
        break
    children.append(_start_worker(tmp_path, script, data, addresses, 1,
                                  60.0))
    outputs = [c.communicate(timeout=240) for c in children]
  finally:
    _stop_all(children)
  assert [c.returncode for c in children] == [0, 0], outputs[0][1][-2000:]
  assert waiting in said
  expected = references.sma([W0, B0], list(zip(XS, YS)), 4, 0.25, 0.9,
                            LR)[-1][0]
  _assert_centrals([np.load(tmp_path / f"c{k}.npz") for k in range(2)],
                   expected)


# The launcher's own tests start processes that set no TF1 mode and build
# no graph: this run's mode cannot change them (conftest.py).
@pytest.mark.mode_independent
def test_the_launcher_stops_the_others_when_one_fails(tmp_path):
  script = tmp_path / "job.py"
  script.write_text(
      "import json, os, sys, time\n"
      "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\n"
      "print('threads', os.environ['TF_NUM_INTRAOP_THREADS'], flush=True)\n"
      "if index == 1:\n"
      "  sys.exit(3)\n"
      "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
      "time.sleep(120)\n")
  out = io.StringIO()
  start = time.monotonic()
  status = launch.run_workers([sys.executable, str(script),
                               str(tmp_path / "pid")], 2, threads=3, out=out)
  assert status == 3
  assert time.monotonic() - start < 60
  assert "[1] threads 3" in out.getvalue()
  pid = int((tmp_path / "pid").read_text())
  with pytest.raises(ProcessLookupError):
    os.kill(pid, 0)


@pytest.mark.mode_independent
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_do_not_outlive_their_launcher(tmp_path, sig):
  script = tmp_path / "job.py"
  script.write_text(
      "import os, sys, time\n"
      "open(sys.argv[1] + os.environ['TF_CONFIG'][-3], 'w').write(\n"
      "    str(os.getpid()))\n"
      "time.sleep(120)\n")
  launcher = subprocess.Popen(
      [sys.executable, "-c",
       "import sys; from tensorbow.cli import launch; "
       "launch.run_workers([sys.executable] + sys.argv[1:], 2)",
       str(script), str(tmp_path / "pid")],
      env=child_env(), stdout=subprocess.DEVNULL, start_new_session=True)
  try:
    deadline = time.monotonic() + 60
    files = [tmp_path / f"pid{k}" for k in range(2)]
    while not all(f.exists() and f.read_text() for f in files):
      assert time.monotonic() < deadline
      time.sleep(0.1)
    pids = [int(f.read_text()) for f in files]
    launcher.send_signal(sig)
    launcher.wait(timeout=30)
    deadline = time.monotonic() + 30
    while True:
      alive = []
      for pid in pids:
        try:
          os.kill(pid, 0)
          alive.append(pid)
        except ProcessLookupError:
          pass
      if not alive:
        break
      assert time.monotonic() < deadline, f"workers {alive} outlived it"
      time.sleep(0.1)
  finally:
    if launcher.poll() is None:
      launcher.kill()
      launcher.wait()


@pytest.mark.mode_independent
@pytest.mark.slow
def test_tensorbow_run_takes_workers_and_hosts(tmp_path):
  script = tmp_path / "job.py"
  script.write_text("import os\nprint(os.environ['TF_CONFIG'])\n")
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--hosts",
       "127.0.0.1:1,127.0.0.1:2", "--worker-index", "1", str(script)],
      env=child_env(), capture_output=True, timeout=120, check=True)
  config = json.loads(done.stdout.decode().strip().splitlines()[-1])
  assert config == {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                    "task": {"type": "worker", "index": 1}}
  bad = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--hosts", "127.0.0.1:1",
       "--worker-index", "0", str(script)],
      env=child_env(), capture_output=True, timeout=120)
  assert bad.returncode == 2 and b"two or more workers" in bad.stderr


TIMELINE_SCRIPT = """\
import numpy as np
import tensorflow as tf
{mode}
rng = np.random.RandomState(3)
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable("w", initializer=rng.randn(3, 1).astype("f"))
loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  for _ in range(6):
    sess.run(train, {{x: rng.randn(8, 3), y: rng.randn(8, 1)}})
"""


@pytest.mark.slow
def test_two_workers_write_one_timeline_and_their_own_scalars(
    tmp_path, tf_mode_statement):
  script = tmp_path / "job.py"
  script.write_text(TIMELINE_SCRIPT.format(mode=tf_mode_statement))
  timeline, logdir = tmp_path / "timeline.json", tmp_path / "logs"
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--workers", "2",
       "--replicas", "2", "--timeline", str(timeline), "--logdir",
       str(logdir), str(script)],
      env=child_env(), capture_output=True, text=True, timeout=240)
  assert done.returncode == 0, done.stderr[-3000:]
  events = json.loads(timeline.read_text())
  for event in events:
    assert {"ph", "ts", "dur", "pid", "tid"} <= set(event), event
  for pid in (0, 1):
    mine = [e for e in events if e["pid"] == pid]
    tracks = sorted(e["args"]["name"] for e in mine
                    if e["name"] == "thread_name")
    assert tracks == ["stream group 0", "stream group 1", "waves",
                      "workers"], tracks
    waves = [e for e in mine if e["name"].startswith("wave ")]
    assert len(waves) == 6
    sums = [e for e in mine if e["name"] == "sum over the workers"]
    # Worker 0's model taken before wave 1, then a sum after each wave.
    assert len(sums) >= 6, sums
    assert all(e["ph"] == "X" and e["dur"] > 0 for e in waves + sums)
  for k in (0, 1):
    files = glob.glob(str(logdir / f"worker{k}" / "events.out.tfevents.*"))
    assert len(files) == 1, files
    # Written once a second and at close: the last at wave 6.
    workers = [(e.step, v.simple_value)
               for e in tf.compat.v1.train.summary_iterator(files[0])
               for v in e.summary.value if v.tag == "workers"]
    assert workers and workers[-1] == (6, 2.0), workers
    assert {value for _, value in workers} == {2.0}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, fast_kernels", [
    ("sma", "all"), ("sma", "0"), ("easgd", "all"), ("ssgd", "all")])
def test_two_workers_of_two_devices_of_two_replicas_are_one_of_eight(
    tmp_path, tf_mode_statement, algorithm, fast_kernels):
  script, data = _worker_script(tmp_path, tf_mode_statement)
  _, centrals = _run_job(tmp_path, script, data, "sgd", False, algorithm,
                         REPLICAS="4", DEVICES="2",
                         TENSORBOW_FAST_KERNELS=fast_kernels)
  if algorithm == "ssgd":  # SGD on the whole batch
    expected = [W0.astype(np.float64), B0.astype(np.float64)]
    for xb, yb in zip(XS, YS):
      grads, _ = references.least_squares(expected, xb, yb)
      expected = [p - LR * g for p, g in zip(expected, grads)]
  else:  # EASGD is SMA without central momentum, alpha 0.9 / replicas
    alpha, mu = (1 / 8, 0.9) if algorithm == "sma" else (0.9 / 8, 0.0)
    expected = references.sma([W0, B0], list(zip(XS, YS)), 8, alpha, mu,
                              LR)[-1][0]
  _assert_centrals(centrals, expected)


@pytest.mark.slow
def test_local_sgd_over_two_workers_of_two_devices_is_local_sgd_of_eight(
    tmp_path, tf_mode_statement):
  """One period for every level: the devices' and the workers' replicas
  averaged together at each exchange."""
  arguments = dict(period=2, outer_learning_rate=0.7, outer_momentum=0.9,
                   nesterov=True, warmup_waves=1)
  script, data = _worker_script(tmp_path, tf_mode_statement, waves=8)
  _, centrals = _run_job(tmp_path, script, data, "momentum", False,
                         "local_sgd", LOCAL_SGD=json.dumps(arguments),
                         REPLICAS="4", DEVICES="2")
  expected = references.local_sgd(
      [W0, B0], list(zip(XS, YS)) * 2, 8, LR, 0.9, 2, 0.7, 0.9, True, 1)
  _assert_centrals(centrals, expected[-1][0])


DEVICES_SCRIPT = """\
import json
import os
import sys

import numpy as np
import tensorflow as tf
{mode}
data = np.load(sys.argv[1])
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable("w", initializer=data["w0"])
b = tf.compat.v1.get_variable("b", initializer=data["b0"])
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
train = tf.compat.v1.train.GradientDescentOptimizer({lr}).minimize(loss)
with tf.compat.v1.Session() as sess:  # one device, as the script wrote it
  sess.run(tf.compat.v1.global_variables_initializer())
  for xb, yb in zip(data["xs"], data["ys"]):
    sess.run(train, {{x: xb, y: yb}})
  index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  np.savez(sys.argv[2] + str(index) + ".npz", w=sess.run(w), b=sess.run(b))
  print("CPUS", sum(d.device_type == "CPU" for d in sess.list_devices()))
  print("MEMBERS", sess.scaling_report().workers)  # workers x devices
"""


@pytest.mark.slow
def test_tensorbow_run_spreads_each_workers_replicas_over_its_devices(
    tmp_path, tf_mode_statement):
  done = _tensorbow_run(tmp_path, tf_mode_statement, DEVICES_SCRIPT,
                        ["--workers", "2", "--replicas", "4", "--devices",
                         "2"], tmp_path / "central")
  assert done.returncode == 0, done.stderr[-3000:]
  # Each worker's session got the two CPUs its script did not ask for.
  assert sorted(line for line in done.stdout.splitlines()
                if "CPUS" in line) == ["[0] CPUS 2", "[1] CPUS 2"]
  # Its replicas spread over them: 2 workers of 2 devices sum together.
  assert "[0] MEMBERS 4" in done.stdout and "[1] MEMBERS 4" in done.stdout
  expected = references.sma([W0, B0], list(zip(XS, YS)), 8, 1 / 8, 0.9,
                            LR)[-1][0]
  _assert_centrals([np.load(tmp_path / f"central{k}.npz") for k in range(2)],
                   expected)


PREEMPTED = """\
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
{mode}
data, ckpt = np.load(sys.argv[1]), sys.argv[2]
index = json.loads(os.environ.get("TF_CONFIG", '{{"task": {{"index": 0}}}}')
                   )["task"]["index"]
print("pid", os.getpid(), flush=True)
""" + STEPPED + """saver = tf.compat.v1.train.Saver()
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  if tf.train.latest_checkpoint(ckpt):
    saver.restore(sess, tf.train.latest_checkpoint(ckpt))
  for k in range(sess.run(step), len(data["xs"])):
    sess.run(train, {{x: data["xs"][k], y: data["ys"][k]}})
    print("wave", k + 1, "done", flush=True)
    if k + 1 == 1:
      saver.save(sess, os.path.join(ckpt, "model"), global_step=step)
    time.sleep(float(os.environ.get("SLEEP", 0)))
  np.savez(sys.argv[3] + str(index) + ".npz", w=sess.run(w), b=sess.run(b))
"""


def _preempted_job(tmp_path, tf_mode_statement, flags):
  """(the `tensorbow-run FLAGS` command of PREEMPTED over 40 waves, its
  checkpoint directory)."""
  _, data = _worker_script(tmp_path, tf_mode_statement, waves=40)
  script, ckpt = tmp_path / "job.py", tmp_path / "ckpt"
  script.write_text(PREEMPTED.format(mode=tf_mode_statement, lr=LR))
  return [sys.executable, "-m", "tensorbow.run", *flags, str(script),
          str(data), str(ckpt), str(tmp_path / "central")], ckpt


@pytest.mark.slow
@pytest.mark.parametrize("whom", ["worker", "launcher"])
def test_sigterm_saves_every_worker_at_one_wave_and_a_rerun_resumes(
    tmp_path, tf_mode_statement, whom):
  command, ckpt = _preempted_job(tmp_path, tf_mode_statement,
                                 ["--workers", "2", "--replicas", "2"])
  launcher = subprocess.Popen(command, env=child_env(SLEEP="0.1"),
                              stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
  try:
    said = []
    for line in iter(launcher.stdout.readline, ""):
      said.append(line)
      if line.startswith("[1] pid "):
        pid = int(line.split()[2])
      if line.startswith("[1] wave 3 "):
        # A scheduler's notice to one worker, or to the whole job.
        os.kill(pid if whom == "worker" else launcher.pid, signal.SIGTERM)
        break
    rest, _ = launcher.communicate(timeout=120)
  finally:
    if launcher.poll() is None:
      os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
  text = "".join(said) + rest
  assert launcher.returncode == preemption.EXIT_CODE, text[-3000:]
  saved = sorted(re.findall(r"\[(\d)\] .*preempted: saved (\S+) at wave "
                            r"(\d+)", text))
  assert [k for k, _, _ in saved] == ["0", "1"], text[-3000:]
  assert saved[0][1:] == saved[1][1:]  # one prefix, one wave, on both
  prefix, wave = saved[0][1], int(saved[0][2])
  assert 3 <= wave < 40
  assert tf.train.latest_checkpoint(str(ckpt)) == prefix
  # Plain TensorFlow restores it: the central model of wave `wave`.
  graph = tf.Graph()
  with graph.as_default():
    w = tf.compat.v1.get_variable("w", shape=[3, 1])
    b = tf.compat.v1.get_variable("b", shape=[1])
    tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session(graph=graph) as sess:
      tf.compat.v1.train.Saver().restore(sess, prefix)
      central = sess.run({"w": w, "b": b})
  _assert_centrals([central], references.sma(
      [W0, B0], list(zip(XS, YS)) * 10, 4, 0.25, 0.9, LR)[wave - 1][0])
  if whom == "launcher":
    return  # the resume is the same as the worker case's
  # The same command again resumes from it to the end, as if the job had
  # never stopped.
  again = subprocess.run(command, env=child_env(), capture_output=True,
                         text=True, timeout=240)
  assert again.returncode == 0, again.stdout[-3000:]
  assert f"[0] wave {wave + 1} done" in again.stdout
  assert f"[0] wave {wave} done" not in again.stdout
  _assert_centrals(
      [np.load(tmp_path / f"central{k}.npz") for k in range(2)],
      references.sma([W0, B0], list(zip(XS, YS)) * 10, 4, 0.25, 0.9,
                     LR)[-1][0])


@pytest.mark.slow
def test_sigterm_to_one_process_saves_at_the_wave_and_a_rerun_resumes(
    tmp_path, tf_mode_statement):
  command, ckpt = _preempted_job(tmp_path, tf_mode_statement,
                                 ["--replicas", "2"])
  child = subprocess.Popen(command, env=child_env(SLEEP="0.1"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
  try:
    for line in iter(child.stdout.readline, ""):
      if line.startswith("wave 3 "):
        os.kill(child.pid, signal.SIGTERM)
        break
    _, err = child.communicate(timeout=120)
  finally:
    _stop_all([child])
  assert child.returncode == preemption.EXIT_CODE, err[-3000:]
  prefix, wave = re.search(r"preempted: saved (\S+) at wave (\d+)",
                           err).groups()
  assert tf.train.latest_checkpoint(str(ckpt)) == prefix
  again = subprocess.run(command, env=child_env(), capture_output=True,
                         text=True, timeout=240)
  assert again.returncode == 0, again.stderr[-3000:]
  assert f"wave {int(wave) + 1} done" in again.stdout.splitlines()[1]
  _assert_centrals([np.load(tmp_path / "central0.npz")], references.sma(
      [W0, B0], list(zip(XS, YS)) * 10, 2, 0.5, 0.9, LR)[-1][0])
