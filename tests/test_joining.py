"""Workers that join a running job (DESIGN.md, "Two levels": elasticity):
a request to join heard and answered over the heartbeat ports, the
chief's sums telling every worker at once, the joiners the lowest worker
proposes, the discovery command that starts joiners, and jobs of two
workers on 127.0.0.1 that a third joins: by hand (`tensorbow-run --join`)
and through `--host-discovery`.

The jobs start real workers on free ports, each bounded in time; every
process they start is stopped before they return.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tensorbow import options
from tensorbow import scaleout
from tensorbow.cli import discovery as tb_discovery
from tensorbow.cli import launch
from tensorbow.scaleout import cluster as tb_cluster
from tensorbow.scaleout import heartbeat as tb_heartbeat
from tensorbow.scaleout import joining
from tensorbow.scaleout import membership

from children import child_env
import references
from tf_logs import OP_MUTATION, WARNINGS_LOGGED

LR = 0.1
WAVES = 30
RNG = np.random.RandomState(11)
W0 = RNG.randn(3, 1).astype(np.float32)
B0 = np.array([0.2], np.float32)
# Twelve rows a wave: three each for 4 replicas, two each for 6.
XS = RNG.randn(WAVES, 12, 3).astype(np.float32)
YS = RNG.randn(WAVES, 12, 1).astype(np.float32)


# ---- Asking, answering, agreeing -------------------------------------------


def _heartbeat(workers=2):
  """Worker 0's heartbeat of a job of `workers` free addresses, started."""
  addresses = launch.free_addresses(workers)
  beats = tb_heartbeat.Heartbeat(tb_cluster.Cluster(addresses, 0))
  beats.start()
  return addresses, beats


def _answer_when_asked(beats, text, heard=None):
  """Answers the first request `beats` hears with `text`, on a thread;
  appends it to `heard`."""
  def answer():
    deadline = time.monotonic() + 10
    while not beats.requests() and time.monotonic() < deadline:
      time.sleep(0.02)
    for request in beats.requests():
      beats.answer(request, text)
      if heard is not None:
        heard.append(request)
  thread = threading.Thread(target=answer, daemon=True)
  thread.start()
  return thread


@pytest.mark.mode_independent
def test_a_request_to_join_is_heard_answered_and_answered_again():
  addresses, beats = _heartbeat()
  try:
    answer = {"workers": addresses + ["127.0.0.1:1"], "index": 2,
              "wave": 7}
    heard = []
    thread = _answer_when_asked(beats, json.dumps(answer), heard)
    assert membership.Joiner(addresses).ask(10) == answer
    thread.join()
    [request] = heard
    assert json.loads(request)["address"].startswith("127.0.0.1:")
    assert beats.requests() == []  # answered
    # Asked again (the answer lost, say), it is answered again at once.
    again = tb_heartbeat.tag(addresses) + b" join|" + request.encode()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
      s.settimeout(5)
      s.sendto(again, ("127.0.0.1", int(addresses[0].rpartition(":")[2])))
      data = s.recv(65536)
    assert json.loads(data[len(tb_heartbeat.ANSWER):]) == answer
  finally:
    beats.close()


def test_a_refused_or_unanswered_joiner_fails_saying_why():
  addresses, beats = _heartbeat()
  try:
    _answer_when_asked(beats, json.dumps(
        {"refused": "the job has max_workers=2 workers"}))
    with pytest.raises(tf.errors.UnavailableError,
                       match="did not take this process in: the job has "
                       "max_workers=2 workers"):
      membership.Joiner(addresses).ask(10, probe=1)
    # Another job's workers (other addresses) do not hear it.
    with pytest.raises(tf.errors.UnavailableError,
                       match="took this process in within 0.5 s"):
      membership.Joiner(addresses[::-1]).ask(0.5)
    assert beats.requests() == []
  finally:
    beats.close()


class _Requests(object):
  """Stands in for a Heartbeat's requests to join and their answers."""

  def __init__(self, *requests):
    self.asking = [json.dumps(r) if isinstance(r, dict) else r
                   for r in requests]
    self.answers = {}

  def requests(self):
    return [r for r in self.asking if r not in self.answers]

  def answer(self, request, text):
    self.answers[request] = json.loads(text)

  def watch(self, watcher):
    self.watcher = watcher


def _request(port, probe=None):
  asked = {"address": f"127.0.0.1:{port}", "token": str(port)}
  return asked if probe is None else dict(asked, probe=probe)


@pytest.mark.mode_independent
def test_the_door_answers_probes_refuses_what_it_must_and_takes_in_order():
  beats = _Requests(_request(5, probe=0), "garbage", _request(6),
                    _request(7), _request(8))
  door = joining.Door(lambda: beats, True, 4)
  assert not door.asked()  # not the chief yet
  door.at(2, 17, True)
  assert door.asked()  # 6, 7 and 8 wait
  probe, garbage = (json.dumps(_request(5, probe=0)), "garbage")
  assert beats.answers == {garbage: {"refused": "no request"}}
  beats.watcher({})  # a heartbeat: the probe is answered at once
  assert beats.answers[probe] == {"wave": 17, "workers": 2}
  # Two of the three fit under max_workers=4, in the order they asked.
  assert list(door.taking_in(2)) == ["127.0.0.1:6", "127.0.0.1:7"]
  cluster = tb_cluster.Cluster(["127.0.0.1:1", "127.0.0.1:2",
                                "127.0.0.1:6", "127.0.0.1:7"], 0)
  door.answer(door.taking_in(2), cluster, {"wave": 18})
  told = beats.answers[json.dumps(_request(7))]
  assert (told["index"], told["wave"], told["workers"]) == (
      3, 18, cluster.workers)
  # Full now: the one left is refused by name.
  door.at(4, 19, True)
  assert not door.asked()
  assert beats.answers[json.dumps(_request(8))] == {
      "refused": "the job has max_workers=4 workers"}
  # A job without min_workers refuses all.
  beats = _Requests(_request(9))
  door = joining.Door(lambda: beats, False, None)
  door.at(2, 3, True)
  assert not door.asked()
  assert "without min_workers" in beats.answers[json.dumps(_request(9))][
      "refused"]


class _Joiner(object):
  """Stands in for a membership.Joiner: the job's waves, probe by probe,
  then the answer that takes it in."""

  def __init__(self, waves, answer):
    self.waves, self.answer, self.asked = list(waves), answer, []

  def ask(self, timeout, probe=None):
    del timeout
    self.asked.append(probe)
    return self.answer if probe is None else {"wave": self.waves.pop(0)}


def test_a_joiner_catches_up_while_the_job_moves_on_then_asks_in():
  provisional = tb_cluster.Cluster(["0.0.0.0:0"] * 2 + ["127.0.0.1:9"], 2)
  answer = {"workers": ["a:1", "b:2", "127.0.0.1:9"], "index": 2,
            "wave": 31, "group_key": 4}
  joiner = _Joiner([30, 31], answer)
  arrival = joining.Arrival(joiner, 12, 5.0)
  assert not arrival.due(11) and arrival.due(12)
  assert arrival.ask(12, provisional) is None  # the job is at 30 now
  assert not arrival.due(29) and arrival.due(30)
  last = tb_cluster.last_group_key()
  try:
    assert arrival.ask(30, provisional) == answer  # 31: close enough
    assert tb_cluster.last_group_key() == 4  # its reducer joins theirs
  finally:
    tb_cluster.follow_group_key(last)  # this process's other reducers'
  assert joiner.asked == [1, 2, None]
  # A job that changed size meanwhile: the setting no longer fits.
  arrival = joining.Arrival(_Joiner([5], dict(answer, index=3, workers=[
      "a:1", "b:2", "c:3", "127.0.0.1:9"])), 5, 5.0)
  with pytest.raises(tf.errors.UnavailableError,
                     match="start it again"):
    arrival.ask(5, provisional)


class _Beats(object):
  """Stands in for a Heartbeat: the others echo what we propose, each at
  its own port, and the lowest, `leader`, takes in `joined`."""

  def __init__(self, members, leader_joined):
    self.members = members
    self.leader_joined = leader_joined
    self.proposed = []

  def propose(self, text):
    self.proposed.append(membership.Proposal.parse(text))

  def proposals(self):
    mine = self.proposed[-1]
    return {i: mine._replace(
        port=3000 + i, joined=(self.leader_joined if i == 0 else
                               mine.joined)).text()
            for i in self.members}

  def silent(self):
    return {}


@pytest.mark.mode_independent
def test_workers_take_in_the_joiners_the_lowest_proposes_last():
  cluster = tb_cluster.Cluster([f"127.0.0.1:{2000 + k}" for k in range(3)],
                               2)
  beats = _Beats([0, 1], ("10.0.0.9:77",))
  members, addresses = membership.agree(beats, cluster, (), 1, 5, 5.0, 3.0)
  assert members == (0, 1, 2)
  assert addresses[:2] == ["127.0.0.1:3000", "127.0.0.1:3001"]
  assert addresses[3] == "10.0.0.9:77"
  # It proposed none of its own, then the lowest's, and agreed on those.
  assert beats.proposed[0].joined == ()
  assert beats.proposed[-1].joined == ("10.0.0.9:77",)
  p = membership.Proposal(1, 5, (0, 1), 99, ("h:1",))
  assert membership.Proposal.parse(p.text()) == p


@pytest.mark.mode_independent
def test_a_survivor_below_the_bound_waits_for_a_joiner_then_gives_up():
  cluster = tb_cluster.Cluster(["127.0.0.1:2000", "127.0.0.1:2001"], 0)
  asked = []

  def joined(going):
    assert going == 1
    asked.append(going)
    return ("127.0.0.1:77",) if len(asked) > 3 else ()

  beats = _Beats([], ())
  members, addresses = membership.agree(beats, cluster, (1,), 1, 3, 5.0,
                                        3.0, joined, 2, 30.0)
  assert members == (0,) and addresses[1] == "127.0.0.1:77"
  assert len(asked) > 3
  # No joiner within the wait: it agrees on fewer, and the caller fails.
  start = time.monotonic()
  members, addresses = membership.agree(_Beats([], ()), cluster, (1,), 1, 3,
                                        5.0, 3.0, lambda going: (), 2, 0.5)
  assert members == (0,) and len(addresses) == 1
  assert 0.5 <= time.monotonic() - start < 3.0


def test_a_one_worker_sum_carries_whether_it_has_joiners():
  asked = []
  reducer = tb_cluster.Reducer(tb_cluster.Cluster(["127.0.0.1:1"], 0),
                               joining=lambda: bool(asked))
  [total] = reducer.sum([np.arange(3.0)], "wave 1")
  np.testing.assert_array_equal(total, np.arange(3.0))
  assert not reducer.joining
  asked.append(1)
  reducer.sum([np.ones(2)], "wave 2")
  assert reducer.joining


def test_a_replayed_join_is_refused_by_name(tmp_path):
  path = tmp_path / "m.json"
  path.write_text(json.dumps([{"wave": 4, "workers": [0, 1, 2], "left": [],
                               "joined": [2]}]))
  replay = membership.Log(str(path))
  assert replay.due(3) is None
  with pytest.raises(tf.errors.UnimplementedError,
                     match="replaying a join is not built"):
    replay.due(4)
  # A joiner takes the job's changes so far, and replays nothing.
  joiner = membership.Log(str(path), replay.replay)
  assert joiner.replay is None and joiner.changes == replay.replay


@pytest.mark.mode_independent
@pytest.mark.parametrize("kwargs, message", [
    (dict(join=["127.0.0.1:1"]), "join needs min_workers"),
    (dict(join="127.0.0.1:1", min_workers=2), "join must be the addresses"),
    (dict(join=["nowhere"], min_workers=2), "join must be the addresses"),
    (dict(join=["127.0.0.1:1"], min_workers=2, workers=2),
     "TF_CONFIG names a cluster of 2"),
    (dict(max_workers=3), "max_workers needs min_workers"),
    (dict(max_workers=2, min_workers=3, workers=3), "max_workers must be"),
    (dict(max_workers=True, min_workers=1), "max_workers must be"),
])
def test_the_joining_options_are_checked(kwargs, message):
  with pytest.raises(ValueError, match=message):
    options.check_options(algorithm="sma", **kwargs)


@pytest.mark.mode_independent
def test_a_joiner_is_checked_as_a_worker_of_a_cluster():
  options.check_options(join=["127.0.0.1:1"], min_workers=1, max_workers=4)
  with pytest.raises(ValueError, match="cannot keep the workers"):
    options.check_options(algorithm="asgd", join=["127.0.0.1:1"],
                          min_workers=1)


class _Child(object):
  def __init__(self, code=None):
    self.code = code

  def poll(self):
    return self.code


def test_discovery_starts_a_worker_while_it_lists_more_than_run(tmp_path,
                                                                monkeypatch):
  hosts = tmp_path / "hosts"
  hosts.write_text("127.0.0.1\n127.0.0.1\n")
  now = [0.0]
  found = tb_discovery.Discovery(f"cat {hosts}", every=0.0,
                                 clock=lambda: now[0])
  children = [_Child(), _Child()]
  out = []

  class _Out(object):
    def write(self, text):
      out.append(text)

    def flush(self):
      pass

  grow = found.grower(lambda: children.append(_Child()), children, 4,
                      _Out(), threading.Lock())
  grow()
  assert len(children) == 2
  hosts.write_text("127.0.0.1\n127.0.0.1\n127.0.0.1\nfar.example\n")
  grow()
  assert len(children) == 3
  assert "worker 2 starts and asks to join" in "".join(out)
  assert "lists far.example, not this machine" in "".join(out)
  hosts.write_text("127.0.0.1\n" * 5)
  grow()  # within its backoff
  assert len(children) == 3
  now[0] += tb_discovery.BACKOFF
  grow()
  assert len(children) == 4
  now[0] += tb_discovery.BACKOFF
  grow()  # max_workers
  assert len(children) == 4
  # A worker lost is replaced; none once a worker finished.
  children[1].code = -9
  grow()
  assert len(children) == 5
  now[0] += tb_discovery.BACKOFF
  children[2].code = -9
  children[0].code = 0
  grow()
  assert len(children) == 5
  assert "".join(out).count("far.example") == 1


# ---- Jobs that a third worker joins ----------------------------------------

# An unmodified TF1 script but for its pace: until the membership log
# exists, each wave of the job's workers waits half a second, so a joiner
# started after wave 1 joins during the run. Outside the job (no
# TF_CONFIG) it calls itself worker 9.
SCRIPT = """\
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
{mode}

data = np.load(sys.argv[1])
config = json.loads(os.environ.get("TF_CONFIG") or '{{"task": {{"index": 9}}}}')
index = config["task"]["index"]
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.compat.v1.get_variable("w", initializer=data["w0"] + index)
b = tf.compat.v1.get_variable("b", initializer=data["b0"] - index)
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
step = tf.compat.v1.train.get_or_create_global_step()
train = tf.compat.v1.train.GradientDescentOptimizer({lr}).minimize(
    loss, global_step=step)
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  for wave, (xb, yb) in enumerate(zip(data["xs"], data["ys"]), 1):
    value = sess.run([train, loss], {{x: xb, y: yb}})[1]
    print("wave", wave, "done", repr(float(value)), flush=True)
    if "TF_CONFIG" in os.environ and not os.path.exists(sys.argv[3]):
      time.sleep(0.5)
    if wave + 1 == int(os.environ.get("KILL_AT", 0)) and index == 1:
      os.kill(os.getpid(), 9)
  w_value, b_value, steps = sess.run([w, b, step])
np.savez(sys.argv[2] + str(index) + ".npz", w=w_value, b=b_value)
print("steps", steps, flush=True)
"""


def _run(args, tmp_path, mode, log, **environ):
  """`tensorbow-run ARGS job.py data central log`, started."""
  data = tmp_path / "data.npz"
  if not data.exists():
    np.savez(data, w0=W0, b0=B0, xs=XS, ys=YS)
  script = tmp_path / "job.py"
  script.write_text(SCRIPT.format(mode=mode, lr=LR))
  return subprocess.Popen(
      [sys.executable, "-m", "tensorbow.run", "--replicas", "2",
       "--min-workers", "2", *args, str(script), str(data),
       str(tmp_path / "central"), str(log)],
      env=child_env(unset=("TF_CONFIG",), **dict(WARNINGS_LOGGED, **environ)),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, start_new_session=True)


class _Lines(object):
  """A child's output lines, read on a thread."""

  def __init__(self, child):
    self.lines = []
    self._thread = threading.Thread(target=self._read, args=(child,),
                                    daemon=True)
    self._thread.start()

  def _read(self, child):
    for line in child.stdout:
      self.lines.append(line)

  def wait_for(self, text, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
      found = [line for line in list(self.lines) if text in line]
      if found:
        return found[0]
      time.sleep(0.05)
    raise AssertionError(f"no {text!r} within {seconds} s: "
                         + "".join(self.lines)[-3000:])

  def text(self):
    self._thread.join(timeout=5)
    return "".join(self.lines)


BOUND = 60.0  # seconds a test's processes may run in all
# ... where a worker is lost and the launcher starts another in its place:
# three processes importing TensorFlow one after another. It ran 17 s
# alone and 31 s beside a copy of itself and a busy core, and passed 60 s
# once in CI beside the slow tier's other worker.
REPLACED_BOUND = 2 * BOUND


def _left(deadline):
  """Seconds left until `deadline` (time.monotonic), at least a tenth."""
  return max(deadline - time.monotonic(), 0.1)


def _job_and_joiner(job_args, tmp_path, mode, log, children, deadline):
  """A job of 2 workers under `tensorbow-run JOB_ARGS` and, once its
  worker 0 trained a wave, one started by hand to join it: (their
  output, the addresses the job printed); both appended to `children`."""
  children.append(_run(["--workers", "2", *job_args], tmp_path, mode, log))
  job_out = _Lines(children[-1])
  addresses = job_out.wait_for("workers at", _left(deadline)).split()[-1]
  job_out.wait_for("[0] wave 1 done", _left(deadline))
  children.append(_run(["--join", addresses], tmp_path, mode, log))
  return job_out, _Lines(children[-1]), addresses


def _stopped(children):
  for child in children:
    if child.poll() is None:
      os.killpg(child.pid, 9)
    child.wait()


def _assert_joined(tmp_path, log, indices, out):
  """The log took one worker in at a wave k of the run; every worker's
  central model is SMA of 4 replicas before k and of 6 from k on."""
  [change] = json.loads(log.read_text())
  assert change["left"] == [] and change["joined"] == [2], change
  assert change["workers"] == [0, 1, 2]
  k = change["wave"]
  assert 2 <= k <= WAVES, out[-3000:]
  members = [list(range(4)) if wave < k else list(range(6))
             for wave in range(1, WAVES + 1)]
  expected = references.sma_members([W0, B0], list(zip(XS, YS)), members,
                                    0.9, LR)
  for i in indices:
    central = np.load(tmp_path / f"central{i}.npz")
    np.testing.assert_allclose(central["w"], expected[0], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(central["b"], expected[1], rtol=1e-5,
                               atol=1e-5)
  four = references.sma_members([W0, B0], list(zip(XS, YS)),
                                [list(range(4))] * WAVES, 0.9, LR)
  assert np.abs(four[0] - expected[0]).max() > 1e-3
  return k


@pytest.mark.slow
def test_a_worker_started_by_hand_joins_as_sma_of_the_new_replicas(
    tmp_path, tf_mode_statement):
  log = tmp_path / "membership.json"
  children, deadline = [], time.monotonic() + BOUND
  try:
    job_out, joiner_out, addresses = _job_and_joiner(
        ["--membership-log", str(log)], tmp_path, tf_mode_statement, log,
        children, deadline)
    job, joiner = children
    assert job.wait(timeout=_left(deadline)) == 0, job_out.text()[-3000:]
    assert joiner.wait(timeout=_left(deadline)) == 0, \
        joiner_out.text()[-3000:]
  finally:
    _stopped(children)
  out = job_out.text()
  k = _assert_joined(tmp_path, log, [0, 1, 9], out)
  assert OP_MUTATION not in out + joiner_out.text(), out[-3000:]
  for i in (0, 1):
    assert (f"[{i}] TensorBow: membership: from wave {k}, workers 0,1,2 go "
            f"on, 2 joined (3 workers; this is now worker "
            f"{i})") in out, out[-3000:]
    assert f"[{i}] steps {WAVES}" in out
  joined = joiner_out.text()
  assert "asks the job at " + addresses in joined
  assert f"wave {WAVES} done" in joined and f"steps {WAVES}" in joined
  # Its runs before wave k only evaluated its own model, as initialised.
  losses = {int(line.split()[1]): float(line.split()[3])
            for line in joined.splitlines() if line.startswith("wave ")}
  for wave in range(1, k):
    x, y = XS[wave - 1], YS[wave - 1]
    np.testing.assert_allclose(
        losses[wave], 0.5 * np.mean((x @ (W0 + 9) + B0 - 9 - y) ** 2),
        rtol=1e-5)


@pytest.mark.slow
def test_a_discovery_command_starts_a_worker_that_joins(tmp_path,
                                                       tf_mode_statement):
  log = tmp_path / "membership.json"
  hosts = tmp_path / "hosts"
  hosts.write_text("127.0.0.1\n127.0.0.1\n")
  deadline = time.monotonic() + BOUND
  job = _run(["--workers", "2", "--max-workers", "3", "--membership-log",
              str(log), "--host-discovery", f"cat {hosts}"], tmp_path,
             tf_mode_statement, log)
  try:
    job_out = _Lines(job)
    job_out.wait_for("[0] wave 1 done", _left(deadline))
    # Four listed, at most three run.
    hosts.write_text("127.0.0.1\n" * 4)
    assert job.wait(timeout=_left(deadline)) == 0, job_out.text()[-3000:]
  finally:
    _stopped([job])
  out = job_out.text()
  assert "lists 4 workers of this machine, 2 run: worker 2 starts" in out
  assert "worker 3 starts" not in out
  _assert_joined(tmp_path, log, [0, 1, 9], out)
  assert f"[2] wave {WAVES} done" in out and f"[2] steps {WAVES}" in out


@pytest.mark.slow
@pytest.mark.mode_independent
def test_a_job_at_max_workers_refuses_a_joiner_by_name(tmp_path):
  log = tmp_path / "membership.json"
  mode = "tf.compat.v1.disable_v2_behavior()"
  children, deadline = [], time.monotonic() + BOUND
  try:
    job_out, joiner_out, _ = _job_and_joiner(
        ["--max-workers", "2"], tmp_path, mode, log, children, deadline)
    job, joiner = children
    assert joiner.wait(timeout=_left(deadline)) != 0
    log.write_text("[]")  # the job's waves need wait no more
    assert job.wait(timeout=_left(deadline)) == 0, job_out.text()[-3000:]
  finally:
    _stopped(children)
  assert ("did not take this process in: the job has max_workers=2 workers"
          in joiner_out.text()), joiner_out.text()[-3000:]


@pytest.mark.slow
def test_a_lost_worker_is_replaced_while_the_survivor_waits(
    tmp_path, tf_mode_statement):
  # Worker 1 SIGKILLs itself before wave 3; one survivor is fewer than
  # --min-workers 2, so it waits while the discovery command, still
  # listing two, has the launcher start a worker that takes its place.
  log = tmp_path / "membership.json"
  hosts = tmp_path / "hosts"
  hosts.write_text("127.0.0.1\n127.0.0.1\n")
  job = _run(["--workers", "2", "--elastic-timeout", "60",
              "--membership-log", str(log), "--host-discovery",
              f"cat {hosts}"], tmp_path, tf_mode_statement, log, KILL_AT="3")
  try:
    job_out = _Lines(job)
    assert job.wait(timeout=REPLACED_BOUND) == 0, job_out.text()[-3000:]
  finally:
    _stopped([job])
  out = job_out.text()
  assert "worker 1 exited with status -9" in out, out[-3000:]
  assert "2 workers of this machine, 1 run: worker 2 starts" in out
  assert json.loads(log.read_text()) == [
      {"wave": 3, "workers": [0, 2], "left": [1], "joined": [2]}]
  # Replicas 2 and 3 (worker 1's) are lost during wave 3; 4 and 5, the
  # joiner's, start from the central model and run it again with 0 and 1.
  members = [[0, 1, 2, 3]] * 2 + [[0, 1, 4, 5]] * (WAVES - 2)
  expected = references.sma_members([W0, B0], list(zip(XS, YS)), members,
                                    0.9, LR)
  for i in (0, 9):
    central = np.load(tmp_path / f"central{i}.npz")
    np.testing.assert_allclose(central["w"], expected[0], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(central["b"], expected[1], rtol=1e-5,
                               atol=1e-5)
  assert f"[0] steps {WAVES}" in out and f"[2] steps {WAVES}" in out


def test_too_few_after_the_wait_fail_naming_the_bound_and_the_wait():
  workers = scaleout.Workers(
      tb_cluster.Cluster(["127.0.0.1:2000", "127.0.0.1:2001"], 0), 5.0,
      min_workers=2, elastic_timeout=30.0)
  change = scaleout.MembershipChanged(3, [1], "lost")
  with pytest.raises(tb_cluster.WorkerLost,
                     match="1 of the job's workers remain after losing "
                     r"worker\(s\) 1 during wave 3, fewer than min_workers=2 "
                     "and none joined within 30 s"):
    workers._check_enough([0], change)
  workers._check_enough([0], change, joined=1)  # a joiner makes two
