"""Every session a script makes under `tensorbow-run` gets the launcher's
options (tensorbow/cli/sessions.py, patches.py): made directly
(`tensorbow.TensorBowSession`, `TensorBowSessionCreator`) with options of
the script's own, which win over a flag with one warning, or through
TensorFlow's classes (`Session`, `InteractiveSession`, the session
creators, `SessionManager` and so `Supervisor`); and the report at exit
names each session by kind, with its training runs, or says the script
failed (tensorbow/cli/report.py).

The scripts train least squares with gradient descent, so the models
follow from tests/references.py's SMA.
"""
import re

import numpy as np
import pytest
import tensorflow as tf

import tensorbow
from tensorbow.cli import main
from tensorbow.cli import options as cli_options
from tensorbow.cli import patches

import test_elastic as elastic
from cli_scripts import (LR, MODEL, STEPS, X, X16, Y, Y16, assert_sma,
                         record_sessions, run_model_script)
from graphs import build

TWO_CPUS = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
# Options away from their defaults that a session without a cluster
# takes without training (timeline and logdir are written at a first
# training run, which the tests that take them do not make).
FLAGS = cli_options.SessionOptions(
    replicas=4, algorithm="ssgd", nonfinite="raise", cluster_timeout=5.0,
    heartbeat_timeout=2.5, devices=("/cpu:0", "/cpu:1"), prefetch=False,
    timeline="/nowhere/timeline.json", logdir="/nowhere/logs",
    progress=30.0)


class _Told(object):
  """Stands in for the report: the kind of every session made."""

  def __init__(self):
    self.kinds = []

  def made(self, session, kind=None):
    self.kinds.append(kind)
    return session


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records
          if "wins over" in r.getMessage()]


def test_every_way_of_making_a_session_gets_the_launchers_options(
    monkeypatch, caplog):
  """TensorBow's classes the script calls itself, and TensorFlow's
  `SessionManager` and `Supervisor`, make their sessions with the
  launcher's every option, as `Session` does; the report hears of each,
  by kind."""
  made = record_sessions(monkeypatch)
  told = _Told()
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.get_variable("v", initializer=1.0)
    init = tf.compat.v1.global_variables_initializer()
  with patches.patch_session(FLAGS, told):
    tf.compat.v1.Session(graph=graph, config=TWO_CPUS).close()
    direct = tensorbow.TensorBowSession(graph=graph, config=TWO_CPUS)
    direct.close()
    with graph.as_default():
      creator = tensorbow.TensorBowSessionCreator(config=TWO_CPUS)
      with tf.compat.v1.train.MonitoredSession(creator):
        pass
    manager = tf.compat.v1.train.SessionManager(graph=graph)
    manager.prepare_session("", init_op=init, config=TWO_CPUS).close()
    supervisor = tf.compat.v1.train.Supervisor(graph=graph, logdir=None,
                                               init_op=init)
    with supervisor.managed_session(config=TWO_CPUS) as sess:
      # A script's check of its session's class holds for every one.
      assert isinstance(sess, tensorbow.TensorBowSession)
      assert sess.replicas == 4
  # The script's class is a stand-in, and the original comes back.
  assert type(direct) is not tensorbow.TensorBowSession
  assert isinstance(direct, tensorbow.TensorBowSession)
  assert tensorbow.TensorBowSession.__module__ == "tensorbow.session"
  assert len(made) == 5
  for _, options in made:
    assert options == FLAGS.session_kwargs()
  assert told.kinds == [
      "tf.compat.v1.Session", "tensorbow.TensorBowSession",
      "tensorbow.TensorBowSessionCreator",
      "tf.compat.v1.train.SessionManager",
      "tf.compat.v1.train.SessionManager"]
  assert not _warnings(caplog)


def test_the_scripts_own_options_win_with_one_warning_naming_both(
    monkeypatch, caplog):
  """`TensorBowSession(replicas=2)` under `--replicas 4` trains two
  replicas, the launcher's other options with them; the conflict is
  named once however many sessions repeat it, and an option the script
  passes as the flag sets it is none."""
  made = record_sessions(monkeypatch)
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(LR))
  with patches.patch_session(FLAGS._replace(
      algorithm="sma", devices=None, timeline=None, logdir=None)):
    for _ in range(2):
      with tensorbow.TensorBowSession(graph=m.graph, replicas=2,
                                      nonfinite="raise") as sess:
        sess.run(m.init)
        for _ in range(STEPS):
          sess.run(m.train, {m.x: X16, m.y: Y16})
        w, b = sess.run([m.w, m.b])
  assert [o["replicas"] for _, o in made] == [2, 2]
  assert made[0][1]["cluster_timeout"] == 5.0
  assert made[0][1]["prefetch"] is False
  assert _warnings(caplog) == [
      "tensorbow-run: warning: the script's TensorBowSession(replicas=2) "
      "wins over --replicas 4"]
  assert_sma(w, b, 2)


def test_an_algorithm_of_the_scripts_keeps_its_own_settings(monkeypatch,
                                                            caplog):
  """An algorithm instance carries its parameters: the launcher's
  `--alpha` is not added to it (the session would refuse both), and the
  warning names the algorithm and the flag."""
  made = record_sessions(monkeypatch)
  graph = tf.Graph()
  easgd = tensorbow.algorithms.EASGD(0.2)
  with patches.patch_session(cli_options.SessionOptions(alpha=0.3)):
    tensorbow.TensorBowSession(graph=graph, algorithm=easgd).close()
    # A name the launcher's flag names too takes the launcher's alpha.
    tensorbow.TensorBowSession(graph=graph, algorithm="sma").close()
  assert made[0][1]["algorithm"] is easgd and made[0][1]["alpha"] is None
  assert made[1][1]["alpha"] == 0.3
  [warning] = _warnings(caplog)
  assert warning.startswith(
      "tensorbow-run: warning: the script's TensorBowSession(algorithm=")
  assert warning.endswith("wins over --alpha 0.3")


@pytest.mark.parametrize("text, status", [
    ("import sys\nsys.exit(3)\n", 3),
    ("raise ValueError('from the script')\n", 1),
])
def test_a_script_that_fails_is_reported_failed(tmp_path, capsys, text,
                                                status):
  script = tmp_path / "fails.py"
  script.write_text(text)
  with pytest.raises((SystemExit, ValueError)):
    main.main([str(script)])
  err = capsys.readouterr().err
  assert (f"tensorbow-run: the script failed with exit status {status}; it "
          "made no TensorBowSession") in err, err
  assert "plain TensorFlow" not in err


# ---- Scripts run under the command -------------------------------------

CRASHING_SCRIPT = """\
import sys

import numpy as np
import tensorflow as tf

{mode}
""" + MODEL + """\
with tf.compat.v1.Session() as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  # x and y of different batch sizes: the first training run fails.
  sess.run(train, {{x: data["x"], y: data["y"][:4]}})
"""


@pytest.mark.slow
def test_a_script_that_crashes_in_its_first_training_run_is_reported(
    tmp_path, tf_mode_statement):
  stderr = run_model_script(tmp_path, CRASHING_SCRIPT, tf_mode_statement,
                            x=X, y=Y, status=1)
  assert ("tensorbow-run: the script failed with exit status 1; it made 1 "
          "TensorBowSession, which ran 0 training runs: 1 through "
          "tf.compat.v1.Session (0 training runs)") in stderr, stderr[-3000:]
  assert "plain TensorFlow" not in stderr


SUPERVISOR_SCRIPT = """\
import sys

import numpy as np
import tensorflow as tf

{mode}
""" + MODEL + """\
supervisor = tf.compat.v1.train.Supervisor(logdir=sys.argv[3])
with supervisor.managed_session() as sess:
  for _ in range({steps}):
    sess.run(train, {{x: data["x"], y: data["y"]}})
  np.savez(sys.argv[2], w=sess.run(w), b=sess.run(b),
           session=type(sess).__name__)
"""


@pytest.mark.slow
def test_a_supervisor_script_trains_through_tensorbow(tmp_path,
                                                     tf_mode_statement):
  stderr = run_model_script(tmp_path, SUPERVISOR_SCRIPT, tf_mode_statement,
                            tmp_path / "out.npz", tmp_path / "logdir")
  out = np.load(tmp_path / "out.npz")
  assert str(out["session"]) == "TensorBowSession"
  assert_sma(out["w"], out["b"], 4)
  assert (f"tensorbow-run: the script made 1 TensorBowSession, which ran "
          f"{STEPS} training runs: 1 through "
          f"tf.compat.v1.train.SessionManager, Supervisor's ({STEPS} "
          "training runs)") in stderr, stderr[-3000:]


@pytest.mark.slow
def test_a_script_made_session_goes_on_without_a_killed_worker(
    tmp_path, tf_mode_statement):
  """`tensorbow-run --workers 3 --min-workers 2 --replicas 2` on a script
  that makes `TensorBowSession(replicas=2)` itself: worker 1, killed
  before wave 3, is lost; the other two go on as SMA of their replicas
  (test_elastic.py's job and checks), and each names its one session."""
  body = elastic.PLAIN.replace("tf.compat.v1.Session()",
                               "tb.TensorBowSession(replicas=2)")
  done = elastic._job(tmp_path, "import tensorbow as tb\n" + tf_mode_statement,  # pylint: disable=protected-access
                      body, ["--min-workers", "2"], KILL="1", KILL_AT="3")
  elastic._assert_survivors(done, tmp_path, 1)  # pylint: disable=protected-access
  for k in (0, 2):
    assert re.search(
        rf"\[{k}\] tensorbow-run: the script made 1 TensorBowSession, which "
        r"ran \d+ training runs: 1 through tensorbow\.TensorBowSession",
        done.stdout), done.stdout[-3000:]
  assert "wins over" not in done.stdout


@pytest.mark.mode_independent
def test_the_flag_table_names_each_options_flag():
  assert cli_options.flag_argv("replicas", 4) == ["--replicas", "4"]
  assert cli_options.flag_argv("prefetch", False) == ["--no-prefetch"]
  assert cli_options.flag_argv("devices", ("/cpu:0", "/cpu:1")) == [
      "--devices", "/cpu:0,/cpu:1"]
