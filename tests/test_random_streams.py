"""Each replica draws its own random stream (DESIGN.md, "Random streams").

Replica 0 draws TensorFlow's own stream of each random op, so one replica
equals `tf.compat.v1.Session` to the bit; replica r > 0 draws a stream of
its own derived from the op's seeds and r. The L = 4 tests feed waves of
four identical rows, one a replica, and read each replica's dropout mask
from the fetched (per-example) dropout output.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.rewrite import random_streams

tf1 = tf.compat.v1
WIDTH = 64  # units a mask covers: two masks are equal by chance 2**-64
WAVES = 20
REPLICAS = 4


def _dropout_model(seed=6):
  """(graph, x, draws, loss, train, init, variables): dropout on the
  input, a layer, and normal noise added to the loss, as gradient-noise
  scripts do; the graph seed `seed` (None: unseeded). `draws[0]` is the
  dropout's output."""
  graph = tf.Graph()
  with graph.as_default():
    if seed is not None:
      tf1.set_random_seed(seed)
    x = tf1.placeholder(tf.float32, [None, WIDTH])
    dropped = tf.nn.dropout(x, rate=0.5)
    w = tf1.get_variable(
        "w", initializer=np.linspace(-1, 1, WIDTH * 8).reshape(
            WIDTH, 8).astype(np.float32))
    h = tf.matmul(dropped, w)
    noise = tf.random.normal(tf.shape(h), stddev=0.01)
    loss = tf.reduce_mean(tf.square(h + noise - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
    init = tf1.global_variables_initializer()
  return graph, x, [dropped, noise], loss, train, init, [w]


def _noise_model():
  """A model drawing from each covered random op: truncated-normal noise on
  the weights, uniform-int and uniform noise on the activations."""
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(11)
    x = tf1.placeholder(tf.float32, [None, WIDTH])
    w = tf1.get_variable("w", initializer=tf1.ones_initializer(),
                         shape=[WIDTH, 4])
    b = tf1.get_variable("b", initializer=tf1.zeros_initializer(),
                         shape=[4])
    shifts = tf.cast(tf.random.uniform(tf.shape(x), -2, 3, dtype=tf.int32),
                     tf.float32)
    scale = tf.random.uniform([], 0.5, 1.5, seed=3)
    jitter = tf.random.truncated_normal([WIDTH, 4], stddev=0.01)
    h = tf.matmul(x + shifts * 0.1, w + jitter) * scale + b
    loss = tf.reduce_mean(tf.square(h))
    train = tf1.train.MomentumOptimizer(0.001, 0.9).minimize(loss)
    init = tf1.global_variables_initializer()
  return graph, x, [shifts, jitter, scale], loss, train, init, [w, b]


def _batches(rows=16, runs=5):
  rng = np.random.RandomState(0)
  return [rng.randn(rows, WIDTH).astype(np.float32) for _ in range(runs)]


def _train(make_session, model):
  """(per run its draws, losses, variables) training `model` on
  _batches()."""
  graph, x, draws, loss, train, init, variables = model()
  with make_session(graph) as sess:
    sess.run(init)
    runs = [sess.run([draws, loss, train], {x: xs}) for xs in _batches()]
    return [r[0] for r in runs], [r[1] for r in runs], sess.run(variables)


@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast", "tf_kernels"])
@pytest.mark.parametrize("model", [_dropout_model, _noise_model],
                         ids=["dropout_and_noise", "every_covered_op"])
def test_one_replica_draws_tensorflows_stream(monkeypatch, fast, model):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast)
  want = _train(lambda g: tf1.Session(graph=g), model)
  got = _train(lambda g: tb.TensorBowSession(graph=g, replicas=1), model)
  for got_draws, want_draws in zip(got[0], want[0]):
    for g, w in zip(got_draws, want_draws):
      assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
  for g, w in zip(got[1] + got[2], want[1] + want[2]):
    if fast == "0":
      assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
    else:  # TensorBow's matmul kernels round apart from TensorFlow's
      np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def _masks(seed=6, slow=None, monkeypatch=None, **options):
  """(per wave the four replicas' masks, the trained weights) at L = 4,
  with replica `slow`'s computations delayed."""
  if monkeypatch is not None:
    monkeypatch.setenv("TENSORBOW_STREAM_GROUPS", "2")
    if slow is not None:
      monkeypatch.setenv("TENSORBOW_TEST_SLOW_REPLICA", f"{slow}:10")
    else:
      monkeypatch.delenv("TENSORBOW_TEST_SLOW_REPLICA", raising=False)
  graph, x, (dropped, _), _, train, init, variables = _dropout_model(seed)
  row = np.ones([1, WIDTH], np.float32)
  masks = []
  with tb.TensorBowSession(graph=graph, replicas=REPLICAS, **options) as sess:
    sess.run(init)
    for _ in range(WAVES):
      out, _ = sess.run([dropped, train], {x: np.repeat(row, REPLICAS, 0)})
      assert out.shape == (REPLICAS, WIDTH)
      masks.append(out != 0)
    return np.array(masks), sess.run(variables)


def _assert_no_mask_repeats(masks):
  flat = masks.reshape(-1, WIDTH)
  assert len(set(m.tobytes() for m in flat)) == len(flat)


def _tensorflows_masks(seed=6):
  """The masks tf.compat.v1.Session draws for one row, wave after wave."""
  graph, x, (dropped, _), _, _, _, _ = _dropout_model(seed)
  with tf1.Session(graph=graph) as sess:
    return np.array([sess.run(dropped, {x: np.ones([1, WIDTH], np.float32)})
                     != 0 for _ in range(WAVES)])


@pytest.mark.slow
def test_seeded_replicas_never_repeat_a_mask_and_reproduce(monkeypatch):
  masks, model = _masks(monkeypatch=monkeypatch)
  _assert_no_mask_repeats(masks)
  # Replica 0 draws what TensorFlow's own session draws.
  np.testing.assert_array_equal(masks[:, 0], _tensorflows_masks()[:, 0])
  # The same seed, replica 0 or replica 3 slowed: the same bits.
  for slow in (0, 3):
    again, again_model = _masks(slow=slow, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(again, masks)
    for got, want in zip(again_model, model):
      assert got.tobytes() == want.tobytes()
  # Another seed, other masks.
  other, _ = _masks(seed=7, monkeypatch=monkeypatch)
  assert not np.array_equal(other, masks)


def test_unseeded_replicas_never_repeat_a_mask(monkeypatch):
  masks, _ = _masks(seed=None, monkeypatch=monkeypatch)
  _assert_no_mask_repeats(masks)


def test_replicas_on_devices_draw_their_own_streams(monkeypatch):
  masks, _ = _masks(monkeypatch=monkeypatch,
                    config=tf1.ConfigProto(device_count={"CPU": 2}),
                    devices=["/cpu:0", "/cpu:1"])
  _assert_no_mask_repeats(masks)
  np.testing.assert_array_equal(masks[:, 0], _tensorflows_masks()[:, 0])


def _loop_model():
  """Normal noise drawn in each of three iterations of a tf.while_loop."""
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(5)
    x = tf1.placeholder(tf.float32, [None, WIDTH])
    w = tf1.get_variable("w", initializer=tf1.ones_initializer(),
                         shape=[WIDTH])

    def body(i, h, draws):
      noise = tf.random.normal(tf.shape(h))
      return i + 1, h * w + noise, draws.write(i, noise)

    _, h, draws = tf1.while_loop(
        lambda i, *_: i < 3, body,
        [tf.constant(0), x, tf.TensorArray(tf.float32, size=3)])
    # Per example: [rows, iterations, WIDTH].
    noise = tf.transpose(draws.stack(), [1, 0, 2])
    train = tf1.train.GradientDescentOptimizer(0.001).minimize(
        tf.reduce_mean(tf.square(h)))
    init = tf1.global_variables_initializer()
  return graph, x, noise, train, init


def test_random_ops_in_a_while_loop(tf_mode, caplog):
  graph, x, noise, train, init = _loop_model()
  rows = np.ones([REPLICAS, WIDTH], np.float32)
  with tb.TensorBowSession(graph=graph, replicas=REPLICAS) as sess:
    sess.run(init)
    draws = np.array([sess.run([noise, train], {x: rows})[0]
                      for _ in range(3)])
  if tf_mode == "graph":
    # Control flow v2: the loop's body is a function, whose random op
    # each copy calls alike; TensorBow says so.
    assert "runs random ops in a function (RandomStandardNormal)" in (
        caplog.text)
    return
  # Every replica, iteration and wave drew its own values.
  flat = draws.reshape(-1, WIDTH)
  assert len(set(d.tobytes() for d in flat)) == len(flat)
  graph, x, noise, _, init = _loop_model()
  with tf1.Session(graph=graph) as sess:
    sess.run(init)
    want = [sess.run(noise, {x: rows[:1]})[0] for _ in range(3)]
  np.testing.assert_array_equal(draws[:, 0], want)


def test_random_ops_without_a_stream_per_replica_are_named(caplog):
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(1)
    x = tf1.placeholder(tf.float32, [None, WIDTH])
    w = tf1.get_variable("w", initializer=tf1.ones_initializer(),
                         shape=[WIDTH])
    order = tf.random.shuffle(tf.range(WIDTH), name="shuffled")
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(
        tf.reduce_mean(x * w * tf.cast(order, tf.float32)))
    init = tf1.global_variables_initializer()
  with tb.TensorBowSession(graph=graph, replicas=2) as sess:
    sess.run(init)
    sess.run(train, {x: np.ones([4, WIDTH], np.float32)})
  assert "op 'shuffled' (RandomShuffle)" in caplog.text


def test_stream_states_by_replica_of_the_whole_run():
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(6)
    op = tf.random.uniform([2], seed=9).op.inputs[0].op
    if op.type != "RandomUniform":
      op = [o for o in graph.get_operations() if o.type == "RandomUniform"][0]
  states = random_streams.state_values(op, 0, 8)
  # Replica 0: TensorFlow's own state (counter seed2 << 64, key seed).
  assert states[0].tolist() == [0, 9, 6]
  assert len(set(tuple(s) for s in states.tolist())) == 8
  # Worker 1 of a cluster with four replicas a worker: replicas 4 to 7.
  np.testing.assert_array_equal(random_streams.state_values(op, 4, 4),
                                states[4:])


def test_dropout_under_a_cond(tf_mode, caplog):
  """Dropout switched on by a training flag, as TF1 models write it."""
  graph = tf.Graph()
  with graph.as_default():
    tf1.set_random_seed(6)
    x = tf1.placeholder(tf.float32, [None, WIDTH])
    training = tf1.placeholder_with_default(True, [])
    w = tf1.get_variable("w", initializer=tf1.ones_initializer(),
                         shape=[WIDTH])
    dropped = tf1.cond(training, lambda: tf.nn.dropout(x, rate=0.5),
                       lambda: x)
    train = tf1.train.GradientDescentOptimizer(0.01).minimize(
        tf.reduce_mean(tf.square(dropped * w)))
    init = tf1.global_variables_initializer()
  rows = np.ones([REPLICAS, WIDTH], np.float32)
  with tb.TensorBowSession(graph=graph, replicas=REPLICAS) as sess:
    sess.run(init)
    masks = np.array([sess.run([dropped, train], {x: rows})[0] != 0
                      for _ in range(5)])
  if tf_mode == "graph":  # the branch is a function (control flow v2)
    assert "runs random ops in a function (RandomUniform)" in caplog.text
    return
  _assert_no_mask_repeats(masks)
