"""`tensorbow-run` (tensorbow/cli/main.py) on unmodified TF1 scripts.

The script trains least squares, loss = 0.5 * mean((x w + b - y)^2), with
plain gradient descent, so the weights after SMA waves follow from the NumPy
reference below (DESIGN.md, "Synchronous model averaging").
"""
import json
import logging
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tensorbow import autotune
from tensorbow.cli import launch
from tensorbow.cli import main
from tensorbow.cli import options as cli_options
from tensorbow.cli import patches

from children import child_env
import references
from cli_scripts import (B0, LR, MODEL, STEPS, W0, X, X16, Y,
                         Y16, run_child)


# An unmodified TF1 script: {imports} and {session} vary the spelling,
# {mode} is the suite's TF1 mode (conftest.py).
SCRIPT = """\
import json
import sys

import numpy as np
{imports}

{mode}
""" + MODEL + """\
with {session} as sess:
  sess.run(tf.compat.v1.global_variables_initializer())
  losses = [float(sess.run([loss, train], {{x: data["x"], y: data["y"]}})[0])
            for _ in range({steps})]
  w_final, b_final = sess.run([w, b])
  result = {{"session": type(sess).__name__,
            "is_session": isinstance(sess, {session_class}),
            "name": __name__, "argv": sys.argv,
            "w": w_final.tolist(), "b": b_final.tolist(), "losses": losses}}
with open(sys.argv[2], "w") as f:
  json.dump(result, f)
"""

SPELLINGS = {
    "tf.compat.v1.Session": ("import tensorflow as tf",
                             "tf.compat.v1.Session()",
                             "tf.compat.v1.Session"),
    "tf.Session": ("import tensorflow.compat.v1 as tf",
                   "tf.Session()", "tf.Session"),
    "from-import": ("import tensorflow as tf\n"
                    "from tensorflow.compat.v1 import Session",
                    "Session(graph=tf.compat.v1.get_default_graph())",
                    "Session"),
}


# The classic TF1 script, as most run on TensorFlow 2 whatever the suite's
# mode: v1 behaviour, reference variables, `tf.Session`. It trains on a
# batch of 3 rows, then on the data's rows, fetching the batch's row count.
V1_SCRIPT = """\
import json
import sys

import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()

data = np.load(sys.argv[1])
x = tf.placeholder(tf.float32, [None, 3])
y = tf.placeholder(tf.float32, [None, 1])
w = tf.Variable(data["w0"])
b = tf.Variable(data["b0"])
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
rows = tf.shape(x)[0]
train = tf.train.GradientDescentOptimizer({lr}).minimize(loss)
result = {{"variables": [type(v).__name__ for v in (w, b)]}}
with tf.Session() as sess:
  sess.run(tf.global_variables_initializer())
  try:
    sess.run(train, {{x: data["x"][:3], y: data["y"][:3]}})
    result["small_batch"] = "trained"
  except tf.errors.InvalidArgumentError as e:
    result["small_batch"] = e.message
  result["w_after_small_batch"] = sess.run(w).tolist()
  result["rows"] = [
      int(sess.run([rows, train], {{x: data["x"], y: data["y"]}})[0])
      for _ in range({steps})]
  result["w"], result["b"] = [v.tolist() for v in sess.run([w, b])]
with open(sys.argv[2], "w") as f:
  json.dump(result, f)
"""


def write_script(tmp_path, mode, spelling="tf.compat.v1.Session"):
  """The least-squares script in TF1 mode `mode` (a statement), and its
  data's path."""
  imports, session, session_class = SPELLINGS[spelling]
  script = tmp_path / "train_lsq.py"
  script.write_text(SCRIPT.format(imports=imports, session=session,
                                  session_class=session_class, lr=LR,
                                  steps=STEPS, mode=mode))
  data = tmp_path / "data.npz"
  np.savez(data, x=X, y=Y, w0=W0, b0=B0)
  return str(script), str(data)


def run_python(args, cwd):
  result = subprocess.run([sys.executable] + args, env=child_env(), cwd=cwd,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def run_plain(tmp_path, script, data, name="plain.json"):
  """Runs the script as `python script.py`; returns its JSON result."""
  out = str(tmp_path / name)
  run_python([script, data, out], tmp_path)
  with open(out) as f:
    return json.load(f)


def run_tensorbow(tmp_path, options, script, data, name="tb.json"):
  """Runs the script under `main(options + [script, ...])`; returns
  (its JSON result, the command's stderr)."""
  out = str(tmp_path / name)
  argv = list(options) + [script, data, out]
  result = run_python(
      ["-c", f"import sys; from tensorbow.run import main; "
             f"sys.exit(main({argv!r}))"], tmp_path)
  with open(out) as f:
    return json.load(f), result.stderr


def sma_sgd_reference(replicas, alpha, mu, algorithm="sma", x=X, y=Y):
  """DESIGN.md, "Synchronous model averaging" for gradient descent
  (tests/references.py); returns the central (w, b) and the fetched loss of
  every wave."""
  waves = references.sma([W0, B0], [(x, y)] * STEPS, replicas, alpha, mu, LR,
                         algorithm=algorithm)
  return waves[-1][0], [loss for _, loss, _, _ in waves]


@pytest.mark.slow
def test_script_trains_with_sma_and_differs_from_plain_tf(tmp_path,
                                                         tf_mode_statement):
  script, data = write_script(tmp_path, tf_mode_statement)
  plain = run_plain(tmp_path, script, data)
  result, stderr = run_tensorbow(tmp_path, ["--replicas", "2"], script, data)
  assert plain["session"] == "Session"
  assert result["session"] == "TensorBowSession"
  assert result["is_session"] is True
  assert "TensorBowSession, 2 replicas" in stderr
  (w, b), losses = sma_sgd_reference(2, alpha=0.5, mu=0.9)
  np.testing.assert_allclose(result["w"], w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(result["b"], b, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(result["losses"], losses, rtol=1e-5)
  assert np.max(np.abs(np.subtract(result["w"], plain["w"]))) > 1e-3


@pytest.mark.slow
def test_one_replica_equals_plain_tf(tmp_path, tf_mode_statement):
  script, data = write_script(tmp_path, tf_mode_statement)
  plain = run_plain(tmp_path, script, data)
  result, _ = run_tensorbow(tmp_path, ["--replicas", "1"], script, data)
  assert result["session"] == "TensorBowSession"
  for key in ("w", "b", "losses"):
    np.testing.assert_allclose(result[key], plain[key], rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_auto_replicas_start_as_plain_tf(tmp_path, tf_mode_statement):
  """`--replicas auto` reaches the session: it starts at one replica and
  measures before it adds any, so a short script trains as plain TF."""
  script, data = write_script(tmp_path, tf_mode_statement)
  plain = run_plain(tmp_path, script, data)
  result, stderr = run_tensorbow(tmp_path, ["--replicas", "auto"], script,
                                 data)
  assert "auto replicas" in stderr
  assert result["session"] == "TensorBowSession"
  for key in ("w", "b", "losses"):
    np.testing.assert_allclose(result[key], plain[key], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("options,alpha,mu,algorithm", [
    (["--replicas", "3", "--alpha", "0.25", "--central_momentum", "0.5"],
     0.25, 0.5, "sma"),
    (["--replicas", "2", "--algorithm", "none"], None, None, "none"),
])
@pytest.mark.slow
def test_options_reach_the_session(tmp_path, tf_mode_statement, options,
                                   alpha, mu, algorithm):
  script, data = write_script(tmp_path, tf_mode_statement)
  result, stderr = run_tensorbow(tmp_path, options, script, data)
  assert f"(algorithm {algorithm})" in stderr
  replicas = int(options[1])
  (w, b), _ = sma_sgd_reference(replicas, alpha, mu, algorithm)
  np.testing.assert_allclose(result["w"], w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(result["b"], b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("spelling", ["tf.Session", "from-import"])
def test_other_spellings_of_session_are_replaced(tmp_path, tf_mode_statement,
                                                 spelling):
  script, data = write_script(tmp_path, tf_mode_statement, spelling)
  result, _ = run_tensorbow(tmp_path, ["--replicas", "2"], script, data)
  assert result["session"] == "TensorBowSession"
  assert result["is_session"] is True
  (w, _), _ = sma_sgd_reference(2, alpha=0.5, mu=0.9)
  np.testing.assert_allclose(result["w"], w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_script_sees_its_own_argv_and_name(tmp_path, tf_mode_statement):
  script, data = write_script(tmp_path, tf_mode_statement)
  result, _ = run_tensorbow(tmp_path, ["--replicas", "2"], script, data)
  assert result["argv"] == [script, data, str(tmp_path / "tb.json")]
  assert result["name"] == "__main__"


@pytest.mark.slow
def test_v1_script_shards_its_batches(tmp_path):
  script = tmp_path / "train_v1.py"
  script.write_text(V1_SCRIPT.format(lr=LR, steps=STEPS))
  data = str(tmp_path / "data16.npz")
  np.savez(data, x=X16, y=Y16, w0=W0, b0=B0)
  plain = run_plain(tmp_path, str(script), data)
  result, _ = run_tensorbow(tmp_path, ["--replicas", "4"], str(script), data)
  assert plain["variables"] == ["RefVariable"] * 2
  assert plain["small_batch"] == "trained"
  assert plain["rows"] == [16] * STEPS
  # 3 rows for 4 replicas: replicas 0 to 2 train on one row each, replica
  # 3 sits the wave out (DESIGN.md, feed sharding).
  assert result["small_batch"] == "trained"
  waves = references.sma([W0, B0], [(X16[:3], Y16[:3])] +
                         [(X16, Y16)] * STEPS, 4, 0.25, 0.9, LR)
  np.testing.assert_allclose(result["w_after_small_batch"], waves[0][0][0],
                             rtol=1e-5, atol=1e-6)
  # The fetched row count is the whole batch's, as TensorFlow's (DESIGN.md,
  # "What leaves the replicas"; until issue #60 it was replica 0's 4, and
  # this test took that for the sign of the split). 16 rows: 4 to each
  # replica, as SMA over 4 shards of the data shows.
  assert result["rows"] == [16] * STEPS
  w, b = waves[-1][0]
  np.testing.assert_allclose(result["w"], w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(result["b"], b, rtol=1e-5, atol=1e-6)


# ---- In-process: the command itself -------------------------------------


def test_patch_is_restored_when_the_script_fails(tmp_path):
  original = tf.compat.v1.Session
  argv = list(sys.argv)
  script = tmp_path / "fails.py"
  script.write_text("import sys\n"
                    "import tensorflow as tf\n"
                    "assert tf.compat.v1.Session.__qualname__ == 'Session'\n"
                    "assert 'tensorbow' in tf.compat.v1.Session.__module__\n"
                    "sys.exit(3 if sys.argv[1:] == ['a', '--b'] else 4)\n")
  with pytest.raises(SystemExit) as exit_info:
    main.main([str(script), "a", "--b"])
  assert exit_info.value.code == 3
  assert tf.compat.v1.Session is original
  assert sys.argv == argv

  script.write_text("raise ValueError('from the script')\n")
  with pytest.raises(ValueError, match="from the script"):
    main.main(["--replicas", "4", str(script)])
  assert tf.compat.v1.Session is original


def test_auto_replicas_show_the_tuners_decisions(tmp_path, capsys,
                                                monkeypatch):
  """Each decision of replicas="auto" is a line on stderr, and only while
  the script runs; fixed replicas show none."""
  monkeypatch.setattr(autotune, "MIN_SECONDS", 0.0)  # decide within 40 runs
  monkeypatch.setattr(autotune, "PATIENCE", 0.0)
  script = tmp_path / "tiny.py"
  script.write_text(
      "import numpy as np\n"
      "import tensorflow as tf\n"
      "tf1 = tf.compat.v1\n"
      "with tf.Graph().as_default():\n"
      "  x = tf1.placeholder(tf.float32, [None, 3])\n"
      "  w = tf1.get_variable('w', initializer=np.ones((3, 1), np.float32))\n"
      "  loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))\n"
      "  train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)\n"
      "  with tf1.Session() as sess:\n"
      "    sess.run(tf1.global_variables_initializer())\n"
      "    for _ in range(40):\n"
      "      sess.run(train, {x: np.ones((8, 3), np.float32)})\n")
  logger = logging.getLogger("tensorbow")
  level, handlers = logger.level, list(logger.handlers)
  main.main(["--replicas", "auto", str(script)])
  err = capsys.readouterr().err
  assert "tensorbow-run: TensorBow auto-tuner, run 7: L=1 on 1 stream " in err
  assert logger.level == level and logger.handlers == handlers
  main.main(["--replicas", "2", str(script)])
  assert "auto-tuner" not in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["missing_script.py"], "script not found: missing_script.py"),
    (["--replicas", "0", "x.py"],
     "--replicas: must be an int >= 1 or 'auto', got 0"),
    (["--replicas", "two", "x.py"],
     "--replicas: must be an int >= 1 or 'auto', got two"),
    (["--alpha", "1.5", "x.py"], "--alpha: must be in (0, 1], got 1.5"),
    (["--central_momentum", "1", "x.py"],
     "--central_momentum: must be in [0, 1), got 1"),
    (["--algorithm", "lars", "x.py"], "invalid choice: 'lars'"),
    (["--nonfinite", "ignore", "x.py"], "invalid choice: 'ignore'"),
])
def test_bad_arguments_exit_2(capsys, argv, message):
  with pytest.raises(SystemExit) as exit_info:
    main.main(argv)
  assert exit_info.value.code == 2
  assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--replicas", "1", "--devices", "/cpu:0,/cpu:1"],
     "2 devices need at least as many replicas, got replicas=1"),
    (["--replicas", "4", "--devices", "/cpu:0,/cpu:1", "--nonfinite",
      "skip"], "nonfinite='skip' cannot leave replicas out of a wave"),
    (["--workers", "2", "--algorithm", "asgd"],
     "algorithm 'asgd' cannot keep the workers of a cluster together"),
    (["--workers", "2", "--replicas", "auto"],
     "replicas='auto' cannot tune a cluster's workers together"),
])
def test_options_the_session_would_refuse_exit_2(tmp_path, capsys, argv,
                                                message):
  """Checked as the session checks them, before a worker starts or the
  script runs."""
  script = tmp_path / "never_runs.py"
  script.write_text("raise AssertionError('the script ran')\n")
  with pytest.raises(SystemExit) as exit_info:
    main.main(argv + [str(script)])
  assert exit_info.value.code == 2
  assert f"tensorbow-run: error: {message}" in capsys.readouterr().err


def test_the_options_are_built_once_and_given_to_the_patch(tmp_path,
                                                          monkeypatch):
  built, patched = [], []
  from_args, patch = cli_options.from_args, patches.patch_session

  def counted(args):
    built.append(from_args(args))
    return built[-1]

  def patch_session(options, report):
    patched.append(options)
    return patch(options, report)

  monkeypatch.setattr(cli_options, "from_args", counted)
  monkeypatch.setattr(patches, "patch_session", patch_session)
  script = tmp_path / "empty.py"
  script.write_text("")
  argv = ["--replicas", "3", "--alpha", "0.5", "--cluster-timeout", "7",
          "--no-prefetch", str(script)]
  assert main.main(argv) == 0
  assert len(built) == 1 and patched == built
  assert patched[0] is built[0]
  assert patched[0] == cli_options.SessionOptions(
      replicas=3, alpha=0.5, cluster_timeout=7.0, prefetch=False)


def test_workers_run_the_command_with_the_same_options(tmp_path,
                                                       monkeypatch):
  """Each worker's command line is the options written back: parsed, it
  gives the options the launcher parsed, and the script with its
  arguments."""
  started = []

  def run_workers(command, workers, threads, min_workers=None, joiner=None,
                  discovery=None, max_workers=None, patient=False):
    started.append((command, workers, threads))
    assert min_workers is None and discovery is None and max_workers is None
    assert not patient
    # A joiner runs the same command, asking to join the job's addresses.
    joins = main.parser().parse_args(
        joiner(["127.0.0.1:7001", "127.0.0.1:7002"])[3:])
    ran = main.parser().parse_args(command[3:])
    assert cli_options.from_args(joins) == cli_options.from_args(
        ran)._replace(join=("127.0.0.1:7001", "127.0.0.1:7002"))
    assert joins.script_args == ran.script_args == ["--lr", "0.1"]
    return 5

  monkeypatch.setattr(launch, "run_workers", run_workers)
  script = tmp_path / "job.py"
  script.write_text("")
  argv = ["--replicas", "2", "--algorithm", "ssgd", "--alpha", "0.3",
          "--central_momentum", "0.7", "--nonfinite", "raise",
          "--cluster-timeout", "12.5", "--no-prefetch", "--workers", "3",
          "--threads", "1", str(script), "--lr", "0.1"]
  assert main.main(argv) == 5
  [(command, workers, threads)] = started
  assert (workers, threads) == (3, 1)
  assert command[:3] == [sys.executable, "-m", "tensorbow.run"]
  assert "--workers" not in command and "--threads" not in command
  args = main.parser().parse_args(command[3:])
  assert cli_options.from_args(args) == cli_options.from_args(
      main.parser().parse_args(argv))
  assert cli_options.from_args(args) == cli_options.SessionOptions(
      replicas=2, algorithm="ssgd", alpha=0.3, central_momentum=0.7,
      nonfinite="raise", cluster_timeout=12.5, prefetch=False)
  assert (args.script, args.script_args) == (str(script), ["--lr", "0.1"])


@pytest.mark.slow
def test_a_script_without_sessions_is_reported(tmp_path, tf_mode_statement):
  stderr = run_child(
      tmp_path, f"import tensorflow as tf\n{tf_mode_statement}\n"
      "print(tf.constant(1.0))\n")
  assert "the script made no TensorBowSession" in stderr
