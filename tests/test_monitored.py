"""Monitored sessions on TensorBow (tensorbow/monitored.py,
tensorbow/cli/patches.py).

`MonitoredTrainingSession` finalizes the graph, makes its session through
`ChiefSessionCreator` and runs hooks' fetches in the training runs. The
model is least squares trained by gradient descent, so the central model
after the waves follows from the NumPy SMA reference (tests/references.py).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tensorbow
from tensorbow import monitored
from tensorbow.cli import options as cli_options
from tensorbow.cli import patches

from children import child_env
import references


LR, STEPS, REPLICAS = 0.1, 5, 4
RNG = np.random.RandomState(11)
X = RNG.randn(16, 3).astype(np.float32)
Y = RNG.randn(16, 1).astype(np.float32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)
B0 = np.array([0.1], np.float32)

# An unmodified TF1 script with the usual hooks; {mode} is the suite's TF1
# mode (conftest.py).
MTS_SCRIPT = """\
import json
import sys

import numpy as np
import tensorflow.compat.v1 as tf

{mode}
tf.logging.set_verbosity(tf.logging.INFO)
data = np.load(sys.argv[1])
x = tf.placeholder(tf.float32, [None, 3])
y = tf.placeholder(tf.float32, [None, 1])
w = tf.Variable(data["w0"], name="w")
b = tf.Variable(data["b0"], name="b")
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
tf.summary.scalar("loss", loss)
tf.summary.histogram("weights", w)
step = tf.train.get_or_create_global_step()
train = tf.train.GradientDescentOptimizer({lr}).minimize(loss,
                                                         global_step=step)
result = {{"losses": [], "steps": []}}


class Final(tf.train.SessionRunHook):

  def end(self, session):
    result["session"] = type(session).__name__
    result["w"], result["b"] = [v.tolist() for v in session.run([w, b])]


hooks = [tf.train.StopAtStepHook(last_step={steps}),
         tf.train.LoggingTensorHook({{"logged_loss": loss}}, every_n_iter=1),
         tf.train.NanTensorHook(loss), Final()]
with tf.train.MonitoredTrainingSession(
    checkpoint_dir=sys.argv[2], hooks=hooks, save_checkpoint_steps=2,
    save_summaries_steps=1) as sess:
  while not sess.should_stop():
    _, value, at = sess.run([train, loss, step],
                            {{x: data["x"], y: data["y"]}})
    result["losses"].append(float(value))
    result["steps"].append(int(at))
with open(sys.argv[3], "w") as f:
  json.dump(result, f)
"""


def run_script(tmp_path, mode, argv_prefix):
  script = tmp_path / "train_mts.py"
  script.write_text(MTS_SCRIPT.format(mode=mode, lr=LR, steps=STEPS))
  data = tmp_path / "data.npz"
  np.savez(data, x=X, y=Y, w0=W0, b0=B0)
  checkpoints, out = tmp_path / "ckpt", tmp_path / "result.json"
  done = subprocess.run(
      [sys.executable] + argv_prefix + [str(script), str(data),
                                        str(checkpoints), str(out)],
      env=child_env(), cwd=tmp_path, capture_output=True, text=True,
      timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  with open(out) as f:
    return json.load(f), str(checkpoints), done.stderr


def summaries(checkpoints, tag):
  """{step: value} of the scalar summaries `tag` written in `checkpoints`."""
  found = {}
  for name in tf.io.gfile.glob(os.path.join(checkpoints, "events.*")):
    for event in tf.compat.v1.train.summary_iterator(name):
      for value in event.summary.value:
        if value.tag == tag:
          found[event.step] = value.simple_value
  return found


def restore_plain(checkpoints):
  """(w, b, global step) restored from the latest checkpoint by a plain
  TensorFlow session."""
  graph = tf.Graph()
  with graph.as_default():
    w = tf.compat.v1.get_variable("w", [3, 1])
    b = tf.compat.v1.get_variable("b", [1])
    step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, tf.train.latest_checkpoint(checkpoints))
      return sess.run([w, b, step])


def sma_reference(replicas, algorithm="sma"):
  waves = references.sma([W0, B0], [(X, Y)] * STEPS, replicas,
                         alpha=1.0 / replicas, mu=0.9, lr=LR,
                         algorithm=algorithm)
  return waves[-1][0], [loss for _, loss, _, _ in waves]


@pytest.mark.slow
def test_monitored_training_session_trains_under_tensorbow_run(
    tmp_path, tf_mode_statement):
  result, checkpoints, stderr = run_script(
      tmp_path, tf_mode_statement,
      ["-m", "tensorbow.run", "--replicas", str(REPLICAS)])
  assert result["session"] == "TensorBowSession"
  # StopAtStepHook counts waves: one global step each.
  assert result["steps"] == list(range(1, STEPS + 1))
  (w, b), losses = sma_reference(REPLICAS)
  np.testing.assert_allclose(result["losses"], losses, rtol=1e-5)
  np.testing.assert_allclose(result["w"], w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(result["b"], b, rtol=1e-5, atol=1e-6)
  # CheckpointSaverHook's last checkpoint restores into plain TensorFlow.
  w_saved, b_saved, step_saved = restore_plain(checkpoints)
  np.testing.assert_array_equal(w_saved, np.float32(result["w"]))
  np.testing.assert_array_equal(b_saved, np.float32(result["b"]))
  assert step_saved == STEPS
  # SummarySaverHook: the loss summary of each wave is the fetched loss.
  written = summaries(checkpoints, "loss")
  assert sorted(written) == result["steps"]
  np.testing.assert_allclose([written[s] for s in result["steps"]],
                             result["losses"], rtol=1e-6)
  # LoggingTensorHook fetched the merged loss too.
  logged = [float(line.split("logged_loss = ")[1].split()[0].rstrip(","))
            for line in stderr.splitlines() if "logged_loss = " in line]
  np.testing.assert_allclose(logged, result["losses"], rtol=1e-5)


@pytest.mark.slow
def test_monitored_training_session_is_plain_tensorflow_without_it(
    tmp_path, tf_mode_statement):
  result, _, _ = run_script(tmp_path, tf_mode_statement, [])
  assert result["session"] == "Session"
  (w, _), _ = sma_reference(1, algorithm="none")  # plain SGD
  np.testing.assert_allclose(result["w"], w, rtol=1e-5, atol=1e-6)


def _model():
  x = tf.compat.v1.placeholder(tf.float32, [None, 3])
  y = tf.compat.v1.placeholder(tf.float32, [None, 1])
  w = tf.compat.v1.get_variable("w", initializer=W0)
  b = tf.compat.v1.get_variable("b", initializer=B0)
  loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
  step = tf.compat.v1.train.get_or_create_global_step()
  train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(
      loss, global_step=step)
  return x, y, w, b, loss, train


class _Final(tf.compat.v1.train.SessionRunHook):
  """Fetches `fetches` when the monitored session ends."""

  def __init__(self, fetches):
    self._fetches = fetches
    self.values = None

  def end(self, session):
    self.values = session.run(self._fetches)


def test_session_creator_trains_and_resumes_from_its_checkpoint(tmp_path):
  checkpoints = str(tmp_path / "ckpt")
  losses = []
  with tf.Graph().as_default():
    x, y, w, b, loss, train = _model()
    creator = tensorbow.TensorBowSessionCreator(replicas=REPLICAS,
                                                checkpoint_dir=checkpoints)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=3),
             tf.compat.v1.train.CheckpointSaverHook(checkpoints, save_steps=3)]
    with tf.compat.v1.train.MonitoredSession(creator, hooks) as sess:
      assert tf.compat.v1.get_default_graph().finalized
      while not sess.should_stop():
        losses.append(sess.run([loss, train], {x: X, y: Y})[0])
  # A second monitored session restores the checkpoint and goes on.
  with tf.Graph().as_default():
    x, y, w, b, loss, train = _model()
    creator = tensorbow.TensorBowSessionCreator(replicas=REPLICAS,
                                                checkpoint_dir=checkpoints)
    final = _Final([w, b])
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=STEPS), final]
    with tf.compat.v1.train.MonitoredSession(creator, hooks) as sess:
      while not sess.should_stop():
        losses.append(sess.run([loss, train], {x: X, y: Y})[0])
  final = final.values
  (w_ref, b_ref), losses_ref = sma_reference(REPLICAS)
  np.testing.assert_allclose(losses, losses_ref, rtol=1e-5)
  np.testing.assert_allclose(final[0], w_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(final[1], b_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options,error", [
    ({"replicas": 0}, ValueError),
    ({"nonfinite": "ignore"}, ValueError),
    ({"replica": 2}, TypeError),
    ({"devices": "/cpu:0"}, ValueError),
    ({"devices": ["/cpu:0", "/cpu:1"], "replicas": 1}, ValueError),
])
def test_session_creator_refuses_bad_options_at_once(options, error):
  with pytest.raises(error):
    tensorbow.TensorBowSessionCreator(**options)


def test_patch_replaces_chief_session_creator_and_restores_it():
  original = tf.compat.v1.train.ChiefSessionCreator
  from tensorflow.python.training import monitored_session  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  with patches.patch_session(cli_options.SessionOptions(replicas=3)):
    stand_in = tf.compat.v1.train.ChiefSessionCreator
    assert monitored_session.ChiefSessionCreator is stand_in
    assert issubclass(stand_in, original)
    assert issubclass(stand_in, monitored.TensorBowSessionCreator)
    with tf.Graph().as_default():
      tf.compat.v1.get_variable("v", initializer=1.0)
      with tf.compat.v1.train.MonitoredSession() as sess:
        raw = sess._tf_sess()  # pylint: disable=protected-access
        assert isinstance(raw, tensorbow.TensorBowSession)
        assert raw.replicas == 3
    # A remote master keeps TensorFlow's own session manager.
    remote = stand_in(master="grpc://localhost:1")
    assert type(remote._get_session_manager()) is (  # pylint: disable=protected-access,unidiomatic-typecheck
        tf.compat.v1.train.SessionManager)
  assert tf.compat.v1.train.ChiefSessionCreator is original
  assert monitored_session.ChiefSessionCreator is original
