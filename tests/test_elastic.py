"""Survivors that go on (DESIGN.md, "Two levels": elasticity): how the
survivors of a lost worker agree on a new cluster (scaleout/membership.py),
how a wave that lost a worker is put back (rollback.py) and run again in
one process, and jobs of three workers on 127.0.0.1 that lose one.

The jobs start real workers under `tensorbow-run` on free ports, each
bounded in time; every process they start is stopped before they return.
"""
import glob
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tensorbow
from tensorbow import hooks
from tensorbow import options
from tensorbow import preemption
from tensorbow import rollback
from tensorbow import scaleout
from tensorbow import setting
from tensorbow.cli import launch
from tensorbow.scaleout import cluster as tb_cluster
from tensorbow.scaleout import job as tb_job
from tensorbow.scaleout import membership
from tensorbow.scaleout import recovery as tb_recovery

from children import child_env
import references
from tf_logs import OP_MUTATION, WARNINGS_LOGGED

LR = 0.1
RNG = np.random.RandomState(5)
W0 = RNG.randn(3, 1).astype(np.float32)
B0 = np.array([0.1], np.float32)
# Twelve rows a wave: two each for 6 replicas, three each for 4.
XS = RNG.randn(6, 12, 3).astype(np.float32)
YS = RNG.randn(6, 12, 1).astype(np.float32)


# ---- Agreeing on who goes on ----------------------------------------------


class _Beats(object):
  """Stands in for a Heartbeat: what the other workers propose, and how
  long each has been silent."""

  def __init__(self, heard, silent=None):
    self.heard = heard  # index -> Proposal, or a function of ours
    self._silent = silent or {}
    self.proposed = []

  def propose(self, text):
    self.proposed.append(membership.Proposal.parse(text))

  def proposals(self):
    mine = self.proposed[-1]
    return {i: (p(mine) if callable(p) else p).text()
            for i, p in self.heard.items()}

  def silent(self):
    return dict(self._silent)


def _cluster(index, workers=3):
  return tb_cluster.Cluster([f"127.0.0.1:{2000 + k}" for k in range(workers)],
                            index)


def _echo(port, members=None, wave=None):
  """A survivor that proposes what we propose, at its own `port`."""
  return lambda mine: mine._replace(
      port=port, members=mine.members if members is None else members,
      wave=mine.wave if wave is None else wave)


@pytest.mark.mode_independent
def test_a_proposal_reads_back_and_anything_else_is_none():
  p = membership.Proposal(2, 17, (0, 2), 4321)
  assert membership.Proposal.parse(p.text()) == p
  for junk in ("", "[1, 2]", "not json", '["a", 1, [0], 2]'):
    assert membership.Proposal.parse(junk) is None


@pytest.mark.mode_independent
def test_survivors_agree_on_themselves_in_their_old_order_at_new_ports():
  beats = _Beats({0: _echo(5000)})
  members, addresses = membership.agree(beats, _cluster(2), [1], 1, 7, 5.0,
                                        3.0)
  assert members == (0, 2)
  assert addresses[0] == "127.0.0.1:5000"
  assert addresses[1] == f"127.0.0.1:{beats.proposed[-1].port}"
  assert beats.proposed[-1].wave == 7 and beats.proposed[-1].change == 1


@pytest.mark.mode_independent
def test_a_survivor_that_lost_another_too_narrows_the_proposal():
  # Worker 3 saw worker 2 lost as well: worker 0 follows it.
  beats = _Beats({3: _echo(5003, members=(0, 3)), 2: _echo(5002)})
  members, addresses = membership.agree(beats, _cluster(0, 4), [1], 1, 7,
                                        5.0, 3.0)
  assert members == (0, 3)
  assert addresses[1] == "127.0.0.1:5003"
  assert beats.proposed[0].members == (0, 2, 3)


@pytest.mark.mode_independent
def test_a_survivor_silent_past_the_bound_is_left_out():
  beats = _Beats({0: _echo(5000), 2: _echo(5002)}, silent={0: 0.1, 2: 9.0})
  members, _ = membership.agree(beats, _cluster(1, 3), [], 1, 7, 5.0, 3.0)
  assert members == (0, 1)


@pytest.mark.parametrize("heard, message", [
    ({0: _echo(5000, wave=8)}, "at waves [7, 8]"),
    ({0: _echo(5000, members=(0,))}, "went on without worker 2"),
    ({}, "no agreement within 0.3 s with worker 0 (127.0.0.1:2000)"),
])
def test_survivors_that_cannot_agree_fail_saying_why(heard, message):
  with pytest.raises(tf.errors.UnavailableError, match=re.escape(message)):
    membership.agree(_Beats(heard), _cluster(2), [1], 1, 7, 0.3, 3.0)


# ---- The option -------------------------------------------------------


@pytest.mark.mode_independent
@pytest.mark.parametrize("value", [0, -1, 4, 1.5, True, "2"])
def test_min_workers_is_checked(value):
  with pytest.raises(ValueError, match="min_workers"):
    options.check_options(2, "sma", workers=3, min_workers=value)


@pytest.mark.mode_independent
def test_a_membership_log_needs_min_workers_and_a_log_file(tmp_path):
  with pytest.raises(ValueError, match="membership_log needs min_workers"):
    options.check_options(2, "sma", workers=3, membership_log="m.json")
  bad = tmp_path / "m.json"
  bad.write_text('[{"wave": 3}]')
  with pytest.raises(ValueError, match="is no membership log"):
    membership.Log(str(bad))


@pytest.mark.mode_independent
def test_a_membership_log_is_written_by_the_chief_and_replayed(tmp_path):
  path = str(tmp_path / "m.json")
  other = membership.Log(path)
  other.record(3, [0, 2], [1], 1)  # not the chief: writes nothing
  assert not os.path.exists(path)
  chief = membership.Log(path)
  chief.record(3, [0, 2], [1], 0)
  chief.record(7, [2], [0], 0)
  replay = membership.Log(path)
  assert [replay.due(w) for w in (2, 3)] == [
      None, {"wave": 3, "workers": [0, 2], "left": [1]}]
  assert replay.due(7) is None  # the change before it is not made yet
  replay.record(3, [0, 2], [1], 0)
  assert replay.due(7) == {"wave": 7, "workers": [2], "left": [0]}
  replay.record(7, [2], [0], 0)
  assert replay.due(8) is None
  assert len(json.loads(open(path).read())) == 2  # replayed, not written


# ---- A wave put back and run again, in one process -------------------------


class _LosesOnce(object):
  """One process that sees a worker lost once, at wave `at`: before the
  wave (`take_model`: its job's hook, as the wave opens), in the sum
  before its commit (`commit_sum`: its job's reduce, which it has only
  then) or after it (`sync`: its job's sums). As an elastic worker's, its
  job keeps the replicas before each wave (job.Backup) and its training
  runs go through the recovery loop; otherwise it is one process (its
  settings' parts and its preemption are one process's)."""

  elastic = True
  workers, index = 1, 0

  def __init__(self, at, where):
    self._at, self._where, self.reformed = at, where, []
    self._backup = None

  def processes(self):
    return setting.ALONE._replace(job=self.job)

  def agreement(self):
    return preemption.ALONE

  def close(self):
    pass

  def recovery(self, record):
    return tb_recovery.Recovery(self, record)

  def catching_up(self, wave):
    return False

  def _lose(self, wave, where):
    if wave == self._at and where == self._where and not self.reformed:
      raise scaleout.MembershipChanged(wave, [1], "lost worker 1")

  def job(self, session, replica_state):
    lose = self._lose
    if self._backup is None:
      self._backup = rollback.Backup(session, session.graph)

    class Opening(hooks.WaveHook):

      def opening(self, opened):
        lose(opened.number, "take_model")

    def reduce(wave, arrays):
      lose(wave, "commit_sum")
      return arrays

    def sums(wave, summed, arrays):
      lose(wave, "sync")
      return list(arrays)

    return hooks.ALONE._replace(
        hooks=(tb_job.Backup(self._backup, replica_state), Opening()),
        sums=sums,
        reduce=reduce if self._where == "commit_sum" else None)

  def reform(self, change):
    self.reformed.append(change.wave)


def _train(algorithm, scale, monkeypatch, resource):
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w = tf.compat.v1.get_variable("w", initializer=W0, use_resource=resource)
    b = tf.compat.v1.get_variable("b", initializer=B0, use_resource=resource)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    opt = tf.compat.v1.train.MomentumOptimizer(LR, 0.9)
    step = tf.compat.v1.train.get_or_create_global_step()
    train = opt.minimize(loss, global_step=step)
    init = tf.compat.v1.global_variables_initializer()
  monkeypatch.setattr(scaleout, "from_environ", lambda *a, **k: scale)
  with tensorbow.TensorBowSession(graph=graph, replicas=4,
                                  algorithm=algorithm) as sess:
    sess.run(init)
    losses = [sess.run([train, loss], {x: xs, y: ys})[1]
              for xs, ys in zip(XS, YS)]
    return sess.run([w, b, step]) + [losses]


# Three cases in the fast tier (a point each); the rest, and TensorFlow's
# kernels in place of TensorBow's, in the slow one.
@pytest.mark.parametrize("algorithm, where, resource, kernels", [
    ("sma", "sync", False, "all"), ("sma", "take_model", True, "all"),
    ("ssgd", "commit_sum", False, "all")] + [
        pytest.param(*case, marks=pytest.mark.slow) for case in [
            ("sma", "sync", True, "all"), ("sma", "take_model", False, "all"),
            ("ssgd", "commit_sum", True, "all"),
            ("easgd", "sync", False, "all"), ("easgd", "sync", True, "all"),
            ("local_sgd", "sync", False, "all"),
            ("local_sgd", "sync", True, "all"), ("sma", "sync", False, "0"),
            ("ssgd", "commit_sum", True, "0")]])
def test_a_wave_that_lost_a_worker_runs_again_as_if_it_had_not_failed(
    monkeypatch, algorithm, where, resource, kernels):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", kernels)
  scale = _LosesOnce(3, where)
  got = _train(algorithm, scale, monkeypatch, resource)
  assert scale.reformed == [3]
  plain = _train(algorithm, None, monkeypatch, resource)  # alone
  for g, p in zip(got, plain):
    np.testing.assert_array_equal(g, p)
  assert got[2] == len(XS)  # the global step counts the dropped wave once


# ---- Jobs of three workers that lose one ---------------------------------

# An unmodified TF1 script (tf.compat.v1.Session) but for the test's
# fault: the worker KILL sends itself SIGKILL before its wave KILL_AT.
SCRIPT = """\
import json
import os
import signal
import sys

import numpy as np
import tensorflow as tf
{mode}

data = np.load(sys.argv[1])
env = os.environ
index = json.loads(env["TF_CONFIG"])["task"]["index"]
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable("w", initializer=data["w0"] + index)
b = tf.compat.v1.get_variable("b", initializer=data["b0"] - index)
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
step = tf.compat.v1.train.get_or_create_global_step()
train = tf.compat.v1.train.GradientDescentOptimizer({lr}).minimize(
    loss, global_step=step)


def killed(wave):
  if wave == int(env["KILL_AT"]) and index == int(env["KILL"]):
    os.kill(os.getpid(), signal.SIGKILL)


{body}
np.savez(sys.argv[2] + str(index) + ".npz", w=w_value, b=b_value)
print("steps", steps, flush=True)
"""

PLAIN = """\
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  for wave, (xb, yb) in enumerate(zip(data["xs"], data["ys"]), 1):
    killed(wave)
    sess.run(train, {{x: xb, y: yb}})
    print("wave", wave, "done", flush=True)
  w_value, b_value, steps = sess.run([w, b, step])
"""

MONITORED = """\
with tf.compat.v1.train.MonitoredTrainingSession(
    is_chief=index == 0,
    checkpoint_dir=sys.argv[3] if index == 0 else None) as sess:
  for wave, (xb, yb) in enumerate(zip(data["xs"], data["ys"]), 1):
    killed(wave)
    sess.run(train, {{x: xb, y: yb}})
  w_value, b_value, steps = sess.run([w, b, step])
"""


# Saves after wave 1; the worker TERM sends itself SIGTERM (a scheduler's
# notice) before its wave TERM_AT.
SAVING = """\
saver = tf.compat.v1.train.Saver()
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  for wave, (xb, yb) in enumerate(zip(data["xs"], data["ys"]), 1):
    if wave == int(env["TERM_AT"]) and index == int(env["TERM"]):
      os.kill(os.getpid(), signal.SIGTERM)
    sess.run(train, {{x: xb, y: yb}})
    print("wave", wave, "done", flush=True)
    if wave == 1:
      saver.save(sess, os.path.join(sys.argv[3], "model"), global_step=step)
  w_value, b_value, steps = sess.run([w, b, step])
"""


@pytest.mark.slow
def test_fewer_survivors_than_min_workers_fail_naming_the_bound(
    tmp_path, tf_mode_statement):
  data = tmp_path / "data.npz"
  np.savez(data, w0=W0, b0=B0, xs=XS, ys=YS)
  script = tmp_path / "job.py"
  body = PLAIN.replace("tf.compat.v1.Session()", "tb.TensorBowSession("
                       "replicas=2, min_workers=3)")
  script.write_text("import tensorbow as tb\n" + SCRIPT.format(
      mode=tf_mode_statement, lr=LR, body=body.format()))
  addresses = launch.free_addresses(3)
  children = []
  try:
    for k in range(3):
      env = launch.worker_environ(tb_cluster.Cluster(addresses, k), 1,
                                  child_env(KILL="1", KILL_AT="3"))
      children.append(subprocess.Popen(
          [sys.executable, str(script), str(data), str(tmp_path / "c")],
          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
          start_new_session=True))
    errors = [c.communicate(timeout=60)[1].decode() for c in children[::2]]
  finally:
    for child in children:
      if child.poll() is None:
        child.kill()
      child.wait()
  for child, message in zip(children[::2], errors):
    assert child.returncode != 0
    assert "2 of the job's workers remain after losing worker(s) 1 during " \
        "wave 3, fewer than min_workers=3" in message, message[-2000:]


def _job(tmp_path, tf_mode_statement, body, flags, **environ):
  """`tensorbow-run FLAGS job.py` of 3 workers run to its end; the
  finished process."""
  data = tmp_path / "data.npz"
  np.savez(data, w0=W0, b0=B0, xs=XS, ys=YS)
  script = tmp_path / "job.py"
  script.write_text(SCRIPT.format(mode=tf_mode_statement, lr=LR,
                                  body=body.format()))
  return subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--workers", "3",
       "--replicas", "2", *flags, str(script), str(data),
       str(tmp_path / "central"), str(tmp_path / "ckpt")],
      env=child_env(**dict(WARNINGS_LOGGED, **environ)), capture_output=True,
      text=True, timeout=60)


def _expected(killed, at):
  """SMA of 6 replicas before wave `at`, then of the 4 of the survivors
  (worker k's replicas are 2k and 2k + 1), wave `at` run again on its
  batch cut among them."""
  survivors = [r for r in range(6) if r // 2 != killed]
  members = [list(range(6)) if wave < at else survivors
             for wave in range(1, len(XS) + 1)]
  return references.sma_members([W0, B0], list(zip(XS, YS)), members, 0.9,
                                LR)


def _assert_survivors(done, tmp_path, killed):
  """The job `done` went on without worker `killed`, lost before wave 3:
  each survivor said so, and ends at SMA over 6 then 4 replicas."""
  out = done.stdout
  assert done.returncode == 0, (out + done.stderr)[-3000:]
  assert f"worker {killed} exited with status -9; 2 go on" in out
  assert OP_MUTATION not in out + done.stderr, (out + done.stderr)[-3000:]
  survivors = [k for k in range(3) if k != killed]
  expected = _expected(killed, 3)
  for new, k in enumerate(survivors):
    # Each says who goes on from which wave; the lowest is the chief.
    assert (f"[{k}] TensorBow: membership: from wave 3, workers "
            f"{survivors[0]},{survivors[1]} go on without {killed} (2 "
            f"workers; this is now worker {new})") in out, out[-3000:]
    assert f"[{k}] wave 6 done" in out and f"[{k}] steps 6" in out
    central = np.load(tmp_path / f"central{k}.npz")
    np.testing.assert_allclose(central["w"], expected[0], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(central["b"], expected[1], rtol=1e-5,
                               atol=1e-5)
  # Not what six replicas throughout would give.
  six = references.sma([W0, B0], list(zip(XS, YS)), 6, 1 / 6, 0.9, LR)
  assert np.abs(six[-1][0][0] - expected[0]).max() > 1e-3


# Worker 1 lost, one device a worker: the replay test's first job.
@pytest.mark.slow
@pytest.mark.parametrize("killed, devices, kernels", [
    (0, 1, "all"), (1, 2, "0")])
def test_survivors_of_a_killed_worker_go_on_as_sma_of_their_replicas(
    tmp_path, tf_mode_statement, killed, devices, kernels):
  # With two devices a worker, each device keeps its copy of the central
  # model: those are put back and carried over too. "0": TensorFlow's
  # kernels in place of TensorBow's.
  done = _job(tmp_path, tf_mode_statement, PLAIN,
              ["--min-workers", "2", "--devices", str(devices)],
              KILL=str(killed), KILL_AT="3", TENSORBOW_FAST_KERNELS=kernels)
  _assert_survivors(done, tmp_path, killed)


@pytest.mark.slow
def test_ssgd_survivors_stay_sgd_on_the_whole_batch(tmp_path,
                                                    tf_mode_statement):
  # SSGD's wave is one step on the whole batch whoever trains it; the
  # loss is found in the sum before the commit, so nothing is written.
  done = _job(tmp_path, tf_mode_statement, PLAIN,
              ["--min-workers", "2", "--algorithm", "ssgd"], KILL="1",
              KILL_AT="3")
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  assert "membership: from wave 3, workers 0,2 go on" in done.stdout
  params = [W0.astype(np.float64), B0.astype(np.float64)]
  for x, y in zip(XS, YS):
    grads, _ = references.least_squares(params, x, y)
    params = [p - LR * g for p, g in zip(params, grads)]
  for k in (0, 2):
    central = np.load(tmp_path / f"central{k}.npz")
    np.testing.assert_allclose(central["w"], params[0], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(central["b"], params[1], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.slow
def test_a_lost_worker_is_watched_and_its_run_replayed_to_the_same_bits(
    tmp_path, tf_mode_statement):
  """One job of three workers that loses worker 1 before wave 3 (they are
  slow): the survivors go on, the change is on the timeline and in the
  scalars and the log, and the job again with the log gives the same
  bits."""
  log = tmp_path / "membership.json"
  timeline, logdir = tmp_path / "timeline.json", tmp_path / "logs"
  flags = ["--min-workers", "2", "--membership-log", str(log)]
  done = _job(tmp_path, tf_mode_statement, PLAIN, flags + [
      "--timeline", str(timeline), "--logdir", str(logdir)], KILL="1",
              KILL_AT="3")
  _assert_survivors(done, tmp_path, 1)
  events = json.loads(timeline.read_text())
  for event in events:
    assert {"ph", "ts", "dur", "pid", "tid"} <= set(event), event
  for k in (0, 2):
    changes = [e for e in events if e["pid"] == k and
               e["name"].startswith("membership: ")]
    assert [(e["name"], e["args"]) for e in changes] == [
        ("membership: from wave 3, workers 0,2 go on",
         {"wave": 3, "workers": [0, 2], "left": [1]})]
    waves = [e for e in events
             if e["pid"] == k and e["name"].startswith("wave ")]
    assert len(waves) == 6  # the dropped wave is not one
    files = glob.glob(str(logdir / f"worker{k}" / "events.out.tfevents.*"))
    workers = [v.simple_value
               for e in tf.compat.v1.train.summary_iterator(files[0])
               for v in e.summary.value if v.tag == "workers"]
    assert workers[-1] == 2.0, workers
  assert json.loads(log.read_text()) == [
      {"wave": 3, "workers": [0, 2], "left": [1]}]
  killed = [np.load(tmp_path / f"central{k}.npz") for k in (0, 2)]
  for k in (0, 2):
    os.remove(tmp_path / f"central{k}.npz")
  # Again with the log and no kill: worker 1 leaves before wave 3.
  again = _job(tmp_path, tf_mode_statement, PLAIN, flags, KILL="-1",
               KILL_AT="3")
  out = again.stdout
  assert again.returncode == 0, (out + again.stderr)[-3000:]
  assert ("[1] TensorBow: worker 1 leaves, as the membership log "
          f"{log} says: workers 1 leave before wave 3") in out, out[-3000:]
  assert "[1] wave 2 done" in out and "[1] wave 3 done" not in out
  for central, k in zip(killed, (0, 2)):
    replayed = np.load(tmp_path / f"central{k}.npz")
    for name in "wb":
      np.testing.assert_array_equal(replayed[name], central[name])
  # The log was replayed, not written again.
  assert json.loads(log.read_text()) == [
      {"wave": 3, "workers": [0, 2], "left": [1]}]


@pytest.mark.slow
def test_a_preempted_worker_saves_with_the_others_which_go_on_without_it(
    tmp_path, tf_mode_statement):
  (tmp_path / "ckpt").mkdir()
  done = _job(tmp_path, tf_mode_statement, SAVING, ["--min-workers", "2"],
              KILL="-1", KILL_AT="-1", TERM="1", TERM_AT="3")
  out = done.stdout
  assert done.returncode == 0, (out + done.stderr)[-3000:]
  prefix = str(tmp_path / "ckpt" / "model-preempted-3")
  assert (f"[1] TensorBow: preempted: saved {prefix} at wave 3; exiting "
          "with status 42") in out, out[-3000:]
  assert "worker 1 exited with status 42; 2 go on" in out
  expected = _expected(1, 4)  # wave 3 was the last of all three
  for k in (0, 2):
    assert (f"[{k}] TensorBow: preempted: saved {prefix} at wave 3; this "
            "worker goes on without those asked to stop") in out
    assert (f"[{k}] TensorBow: membership: from wave 4, workers 0,2 go on "
            "without 1") in out
    central = np.load(tmp_path / f"central{k}.npz")
    np.testing.assert_allclose(central["w"], expected[0], rtol=1e-5,
                               atol=1e-5)
  # Plain TensorFlow restores the checkpoint of wave 3: SMA of 6.
  graph = tf.Graph()
  with graph.as_default():
    w = tf.compat.v1.get_variable("w", shape=[3, 1])
    tf.compat.v1.get_variable("b", shape=[1])
    tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session(graph=graph) as sess:
      tf.compat.v1.train.Saver().restore(sess, prefix)
      saved = sess.run(w)
  np.testing.assert_allclose(saved, references.sma(
      [W0, B0], list(zip(XS, YS)), 6, 1 / 6, 0.9, LR)[2][0][0], rtol=1e-5,
                             atol=1e-5)


@pytest.mark.slow
def test_a_monitored_script_goes_on_without_a_killed_worker(
    tmp_path, tf_mode_statement):
  done = _job(tmp_path, tf_mode_statement, MONITORED, ["--min-workers", "2"],
              KILL="1", KILL_AT="4")
  out = done.stdout
  assert done.returncode == 0, (out + done.stderr)[-3000:]
  expected = _expected(1, 4)
  for k in (0, 2):
    assert f"[{k}] steps 6" in out
    central = np.load(tmp_path / f"central{k}.npz")
    np.testing.assert_allclose(central["w"], expected[0], rtol=1e-5,
                               atol=1e-5)
  assert tf.train.latest_checkpoint(str(tmp_path / "ckpt"))


# ---- The launcher -------------------------------------------------------


class _Child(object):
  def __init__(self, code):
    self.code = code

  def poll(self):
    return self.code


@pytest.mark.mode_independent
@pytest.mark.parametrize("codes, min_workers, status", [
    ([0, -9, 0], 2, 0),  # one lost, two finished
    ([0, -9, 0], None, -9),  # without elasticity a loss ends the job
    ([0, -9, -9], 2, -9),  # fewer than two remain
    ([0, 0, 0], 3, 0),
    ([0, 42, 0], 2, 0),  # one preempted, the others went on
    ([42, 42, 42], 2, 42),  # all preempted: a restartable job
])
def test_the_launcher_lets_survivors_finish_with_min_workers(
    codes, min_workers, status):
  out = io.StringIO()
  assert launch._wait([_Child(c) for c in codes], min_workers=min_workers,
                      out=out) == status
  if min_workers and status == 0 and -9 in codes:
    assert "worker 1 exited with status -9; 2 go on" in out.getvalue()


def test_the_membership_options_are_checked_before_they_are_used(
    monkeypatch):
  # A file descriptor is no path: before, a cluster's session opened (and
  # closed) descriptor 5 as a membership log.
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"worker": launch.free_addresses(2)},
      "task": {"type": "worker", "index": 0}}))
  monkeypatch.setattr(membership, "Log", None)  # not reached
  with pytest.raises(ValueError, match="membership_log must be a path"):
    tensorbow.TensorBowSession(replicas=2, min_workers=2, membership_log=5)
  with pytest.raises(ValueError, match="min_workers must be None or an int"):
    tensorbow.TensorBowSession(replicas=2, min_workers=3)
