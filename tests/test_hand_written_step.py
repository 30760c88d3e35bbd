"""A training step written by hand (tf.gradients and assign_sub, no
Optimizer) is a plain run (DESIGN.md, "Two kinds of run"): it runs as TensorFlow
does and warns, once per set of variables, that it is not replicated."""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb

tf1 = tf.compat.v1
RNG = np.random.RandomState(3)
X = RNG.randn(8, 2).astype(np.float32)
Y = RNG.randn(8, 1).astype(np.float32)
USE_RESOURCE = pytest.mark.parametrize("use_resource", [True, False],
                                       ids=["resource", "ref"])


def _model(use_resource):
  """Least squares with a hand-written step ("step"), an optimizer step
  ("train") on another copy of the variables, and plain writes."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    y = tf1.placeholder(tf.float32, [None, 1], name="y")
    w = tf1.get_variable("w", initializer=np.ones([2, 1], np.float32),
                         use_resource=use_resource)
    b = tf1.get_variable("b", initializer=np.zeros([1], np.float32),
                         use_resource=use_resource)
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y), name="loss")
    grad_w, grad_b = tf1.gradients(loss, [w, b])
    step = tf.group(tf1.assign_sub(w, 0.1 * grad_w),
                    tf1.assign_sub(b, 0.1 * grad_b), name="step")
    step_w = tf1.assign_sub(w, 0.05 * grad_w, name="step_w")
    v = tf1.get_variable("v", initializer=np.ones([2, 1], np.float32),
                         use_resource=use_resource)
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(
        tf.reduce_mean(tf.square(tf.matmul(x, v) - y)), name="train")
    reset = tf1.assign(w, tf.zeros([2, 1]), name="reset")
    init = tf1.global_variables_initializer()
    saver = tf1.train.Saver()
  return graph, dict(x=x, y=y, w=w, b=b, loss=loss, step=step,
                     step_w=step_w, train=train, reset=reset, init=init,
                     saver=saver)


def _run(sess, m):
  """The same script for either session: [w, b, loss] after each run."""
  sess.run(m["init"])
  feeds = {m["x"]: X, m["y"]: Y}
  seen = []
  for _ in range(3):
    _, loss = sess.run([m["step"], m["loss"]], feeds)
    seen.append(sess.run([m["w"], m["b"]]) + [loss])
  sess.run(m["step_w"], feeds)
  sess.run(m["step"], feeds)
  seen.append(sess.run([m["w"], m["b"]]))
  return seen


def _warnings(caplog):
  return [r.getMessage() for r in caplog.records
          if r.name == "tensorbow" and "from a gradient" in r.getMessage()]


@USE_RESOURCE
def test_hand_written_step_warns_once_and_runs_as_tensorflow(use_resource,
                                                             caplog):
  graph, m = _model(use_resource)
  with tf1.Session(graph=graph) as sess:
    expected = _run(sess, m)
  with caplog.at_level("WARNING", logger="tensorbow"):
    with tb.TensorBowSession(graph=graph, replicas=4) as sess:
      got = _run(sess, m)
  for e, g in zip(expected, got):
    for a, b in zip(e, g):
      np.testing.assert_array_equal(a, b)
  warned = _warnings(caplog)
  # One for {w, b} (however many runs, with or without the loss fetched),
  # one for {w} alone.
  assert len(warned) == 2, warned
  assert "variables 'b', 'w'" in warned[0]
  assert "variable 'w' " in warned[1]
  for text in warned:
    assert "not a training run" in text
    assert "plain run on the central model" in text
    assert "tf.compat.v1.train.Optimizer" in text


@USE_RESOURCE
def test_no_warning_for_assigns_restores_or_optimizer_steps(
    tmp_path, use_resource, caplog):
  graph, m = _model(use_resource)
  with caplog.at_level("WARNING", logger="tensorbow"):
    with tb.TensorBowSession(graph=graph, replicas=2) as sess:
      sess.run(m["init"])
      sess.run(m["reset"])
      for _ in range(2):
        sess.run(m["train"], {m["x"]: X, m["y"]: Y})
      path = m["saver"].save(sess, str(tmp_path / "model"))
      m["saver"].restore(sess, path)
      assert sess.counts["training_runs"] == 2
  assert _warnings(caplog) == []
