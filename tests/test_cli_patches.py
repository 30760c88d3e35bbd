"""The stand-ins `tensorbow-run` puts in TensorFlow's place
(tensorbow/cli/patches.py): what each makes, with which options, and that
the originals come back."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow
from tensorbow.cli import options as cli_options
from tensorbow.cli import patches

from cli_scripts import (LR, MODEL, STEPS, W0, X, X16, Y, Y16, assert_sma,
                         record_sessions, run_model_script)
from graphs import build

TWO_CPUS = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
# Every option away from its default (test_cli_options checks that).
EVERY_OPTION = cli_options.SessionOptions(
    replicas=4, algorithm="ssgd", alpha=0.3, central_momentum=0.5,
    nonfinite="raise", cluster_timeout=5.0, heartbeat_timeout=2.5,
    devices=("/cpu:0", "/cpu:1"), prefetch=False,
    # Written at a first training run, which these tests do not make.
    timeline="/nowhere/timeline.json", logdir="/nowhere/logs",
    progress=30.0)


def test_remote_target_gets_a_plain_session():
  original = tf.compat.v1.Session
  with patches.patch_session(
      cli_options.SessionOptions(replicas=2)) as stand_in:
    assert tf.compat.v1.Session is stand_in
    sess = stand_in(target="grpc://localhost:1", graph=tf.Graph())
    try:
      assert type(sess) is original  # pylint: disable=unidiomatic-typecheck
      assert sess.sess_str == b"grpc://localhost:1"
    finally:
      sess.close()  # never ran anything: nothing to connect to
    local = stand_in(graph=tf.Graph())
    try:
      assert isinstance(local, tensorbow.TensorBowSession)
      assert local.replicas == 2
      # The session TensorBow wraps is a plain one, not a stand-in.
      assert type(local._session) is original  # pylint: disable=protected-access
    finally:
      local.close()
  assert tf.compat.v1.Session is original


def test_stand_in_passes_for_the_session_class():
  original = tf.compat.v1.Session
  with patches.patch_session(
      cli_options.SessionOptions(replicas=3)) as stand_in:
    import tensorflow.compat.v1 as tf_v1  # pylint: disable=g-import-not-at-top
    assert tf_v1.Session is stand_in
    assert stand_in.reset is original.reset
    assert issubclass(tensorbow.TensorBowSession, stand_in)

    class Derived(tf.compat.v1.Session):  # a script's own subclass
      pass

    assert Derived.__mro__[1] is original
    with pytest.raises(RuntimeError, match="does not nest"):
      with patches.patch_session():
        pass
  assert tf_v1.Session is original


def test_nonfinite_reaches_the_session():
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w = tf.compat.v1.get_variable("w", initializer=W0)
    loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(LR).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  y_nan = Y.copy()
  y_nan[-1] = np.nan
  with patches.patch_session(
      cli_options.SessionOptions(replicas=2, nonfinite="raise")):
    with tf.compat.v1.Session(graph=graph) as sess:
      sess.run(init)
      with pytest.raises(tf.errors.InvalidArgumentError,
                         match=r"non-finite values \(replica 1: "):
        sess.run(train, {x: X, y: y_nan})
      np.testing.assert_array_equal(sess.run(w), W0)


def test_every_option_reaches_every_session_the_patch_makes(monkeypatch):
  """`Session`, `InteractiveSession` and `MonitoredTrainingSession` make
  their TensorBow sessions with the one options object's every option."""
  made = record_sessions(monkeypatch)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.get_variable("v", initializer=1.0)
  with patches.patch_session(EVERY_OPTION):
    tf.compat.v1.Session(graph=graph, config=TWO_CPUS).close()
    tf.compat.v1.InteractiveSession(graph=graph, config=TWO_CPUS).close()
    with graph.as_default():
      with tf.compat.v1.train.MonitoredTrainingSession(config=TWO_CPUS):
        pass
  assert [kind for kind, _ in made] == [
      tensorbow.TensorBowSession, patches.TensorBowInteractiveSession,
      tensorbow.TensorBowSession]
  for _, options in made:
    assert options == EVERY_OPTION.session_kwargs()


def test_devices_reach_the_session():
  """`devices` spreads the replicas over two CPU devices: replicas 0 and
  1 train on device 0's stream group, 2 and 3 on device 1's, and the
  devices' moves are summed into SMA of four (tests/test_devices.py)."""
  m = build(lambda: tf.compat.v1.train.GradientDescentOptimizer(LR))
  options = cli_options.SessionOptions(replicas=4,
                                       devices=("/cpu:0", "/cpu:1"))
  with patches.patch_session(options):
    with tf.compat.v1.Session(graph=m.graph, config=TWO_CPUS) as sess:
      sess.run(m.init)
      for _ in range(STEPS):
        sess.run(m.train, {m.x: X16, m.y: Y16})
      w, b = sess.run([m.w, m.b])
      groups = {(t.replica, t.stream_group) for t in sess.task_timings()
                if t.replica >= 0}
  assert groups == {(0, 0), (1, 0), (2, 1), (3, 1)}
  assert_sma(w, b, 4)


def test_interactive_session_is_a_tensorbow_session_while_default():
  """As TensorFlow's `InteractiveSession` subclasses its session, the
  stand-in's sessions are `TensorBowInteractiveSession`s: the default
  session (and their graph the default graph) from construction until
  closed."""
  original = tf.compat.v1.InteractiveSession
  graph = tf.Graph()
  with graph.as_default():
    six = tf.constant(2.0) * 3.0
  outer_session = tf.compat.v1.get_default_session()
  outer_graph = tf.compat.v1.get_default_graph()
  with patches.patch_session(cli_options.SessionOptions(replicas=3)):
    assert tf.compat.v1.InteractiveSession is not original
    sess = tf.compat.v1.InteractiveSession(graph=graph)
    try:
      assert isinstance(sess, patches.TensorBowInteractiveSession)
      assert isinstance(sess, tensorbow.TensorBowSession)
      assert isinstance(sess, tf.compat.v1.InteractiveSession)
      assert isinstance(sess, tf.compat.v1.Session)
      assert sess.replicas == 3
      assert tf.compat.v1.get_default_session() is sess
      assert tf.compat.v1.get_default_graph() is graph
      assert six.eval() == 6.0
    finally:
      sess.close()
    assert tf.compat.v1.get_default_session() is outer_session
    assert tf.compat.v1.get_default_graph() is outer_graph
    sess.close()  # closed again: nothing more to leave
    assert tf.compat.v1.get_default_session() is outer_session
    with pytest.raises(RuntimeError, match="closed Session"):
      sess.run(six)
    plain = tf.compat.v1.Session(graph=graph)
    try:
      assert not isinstance(plain, tf.compat.v1.InteractiveSession)
    finally:
      plain.close()
  assert tf.compat.v1.InteractiveSession is original


INTERACTIVE_SCRIPT = """\
import sys

import numpy as np
import tensorflow as tf

{mode}
""" + MODEL + """\
sess = tf.compat.v1.InteractiveSession()
tf.compat.v1.global_variables_initializer().run()
for _ in range({steps}):
  train.run({{x: data["x"], y: data["y"]}})
np.savez(sys.argv[2], session=type(sess).__name__, w=w.eval(), b=b.eval(),
         is_default=tf.compat.v1.get_default_session() is sess,
         classes=[c.__name__ for c in type(sess).__mro__],
         is_interactive=isinstance(sess, tf.compat.v1.InteractiveSession))
sess.close()
np.savez(sys.argv[3], default=tf.compat.v1.get_default_session() is None)
"""


@pytest.mark.slow
def test_interactive_session_trains_with_tensorbow(tmp_path,
                                                   tf_mode_statement):
  stderr = run_model_script(tmp_path, INTERACTIVE_SCRIPT, tf_mode_statement,
                            tmp_path / "out.npz", tmp_path / "after.npz")
  out = np.load(tmp_path / "out.npz")
  # A TensorBowSession, of the subclass that is the default session.
  assert str(out["session"]) == "TensorBowInteractiveSession"
  assert "TensorBowSession" in list(out["classes"])
  assert out["is_default"] and out["is_interactive"]
  # Closing it stops it being the default session, as TensorFlow's.
  assert np.load(tmp_path / "after.npz")["default"]
  assert_sma(out["w"], out["b"], 4)
  assert (f"made 1 TensorBowSession, which ran {STEPS} training runs"
          in stderr), stderr[-2000:]
