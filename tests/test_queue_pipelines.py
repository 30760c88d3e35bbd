"""TF1 queue-runner programs under `tensorbow-run` (DESIGN.md, "Input
pipelines").

The script is written as TensorFlow's CIFAR-10 tutorial is: records read
by a `FixedLengthRecordReader` in queue runners, `tf.train.shuffle_batch`
with a batch size built into the graph, a `MonitoredTrainingSession` with
`StopAtStepHook`, `NanTensorHook`, a hook fetching the loss every step
and a checkpoint. Each record carries its row id; the hook also fetches
the ids each replica trained on (merged in replica order), so the NumPy
reference replays SMA on exactly the rows of every wave.
"""
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf


from children import child_env
import references

LR, BATCH, REPLICAS = 0.05, 8, 4
RNG = np.random.RandomState(11)
ROWS = 96
X = RNG.randn(ROWS, 3).astype(np.float32)
Y = (X @ np.array([[1.0], [-2.0], [0.5]], np.float32) +
     0.1 * RNG.randn(ROWS, 1).astype(np.float32))
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)

SCRIPT = """\
import sys

import numpy as np
import tensorflow as tf

{mode}
steps, threads = int(sys.argv[1]), int(sys.argv[2])
data, checkpoints, out = sys.argv[3:6]
files = [data]
filenames = tf.compat.v1.train.string_input_producer(files)
reader = tf.compat.v1.FixedLengthRecordReader(record_bytes=5 * 4)
_, value = reader.read(filenames)
record = tf.compat.v1.decode_raw(value, tf.float32)
record.set_shape([5])
row_id = tf.cast(record[0], tf.int32)
features, target = record[1:4], record[4:5]
ids, x, y = tf.compat.v1.train.shuffle_batch(
    [row_id, features, target], batch_size={batch}, num_threads=threads,
    capacity=64, min_after_dequeue=16)
w = tf.compat.v1.get_variable("w", initializer=np.load(sys.argv[6]))
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
step = tf.compat.v1.train.get_or_create_global_step()
train = tf.compat.v1.train.GradientDescentOptimizer({lr}).minimize(
    loss, global_step=step)
trained_rows = tf.identity(ids)


class Record(tf.compat.v1.train.SessionRunHook):
  def __init__(self):
    self.rows, self.losses, self.steps = [], [], []

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs([loss, trained_rows, step])

  def after_run(self, run_context, run_values):
    value, rows, at = run_values.results
    self.losses.append(value)
    self.rows.append(rows)
    self.steps.append(at)


record_hook = Record()
hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps),
         tf.compat.v1.train.NanTensorHook(loss), record_hook]
with tf.compat.v1.train.MonitoredTrainingSession(
    checkpoint_dir=checkpoints, hooks=hooks, save_checkpoint_steps=steps,
    save_summaries_steps=None, log_step_count_steps=None) as sess:
  while not sess.should_stop():
    sess.run(train)
np.savez(out, rows=np.concatenate(record_hook.rows),
         sizes=[len(r) for r in record_hook.rows],
         losses=record_hook.losses, steps=record_hook.steps)
"""


def run_script(tmp_path, mode, replicas, steps, threads=4, timeout=600):
  """Runs the script under `tensorbow-run --replicas replicas`; returns
  (recorded rows per step, losses, steps, checkpoint dir, stderr)."""
  records = np.concatenate(
      [np.arange(ROWS, dtype=np.float32)[:, None], X, Y], axis=1)
  data = tmp_path / "records.bin"
  records.astype(np.float32).tofile(data)
  np.save(tmp_path / "w0.npy", W0)
  script = tmp_path / "train_queue.py"
  script.write_text(SCRIPT.format(mode=mode, batch=BATCH, lr=LR))
  checkpoints, out = tmp_path / "ckpt", tmp_path / "out.npz"
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--replicas", str(replicas),
       str(script), str(steps), str(threads), str(data), str(checkpoints),
       str(out), str(tmp_path / "w0.npy")],
      env=child_env(), cwd=tmp_path, capture_output=True, text=True,
      timeout=timeout)
  assert done.returncode == 0, done.stderr[-3000:]
  result = np.load(out)
  rows = np.split(result["rows"], np.cumsum(result["sizes"])[:-1])
  return (rows, result["losses"], result["steps"], str(checkpoints),
          done.stderr)


def restore_plain(checkpoints):
  """(w, global step) from the latest checkpoint, in plain TensorFlow."""
  graph = tf.Graph()
  with graph.as_default():
    w = tf.compat.v1.get_variable("w", [3, 1])
    step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      saver.restore(sess, tf.train.latest_checkpoint(checkpoints))
      return sess.run([w, step])


def assert_distinct_elements(rows, replicas):
  """Every replica of every wave trained on an element of its own: L
  elements of BATCH rows, none the same as another."""
  for wave in rows:
    assert len(wave) == replicas * BATCH
    elements = {tuple(e) for e in wave.reshape(replicas, BATCH)}
    assert len(elements) == replicas, wave


@pytest.mark.slow
def test_queue_pipeline_trains_each_replica_on_its_own_elements(
    tmp_path, tf_mode_statement):
  steps = 12
  rows, losses, at, checkpoints, stderr = run_script(
      tmp_path, tf_mode_statement, REPLICAS, steps)
  assert "static batch size" not in stderr
  assert list(at) == list(range(1, steps + 1))  # one global step a wave
  assert_distinct_elements(rows, REPLICAS)
  waves = references.sma([W0], [(X[r], Y[r]) for r in rows], REPLICAS,
                         alpha=1.0 / REPLICAS, mu=0.9, lr=LR)
  np.testing.assert_allclose(losses, [l for _, l, _, _ in waves], rtol=1e-5)
  # The chief's checkpoint restores into plain TensorFlow.
  w, step = restore_plain(checkpoints)
  assert step == steps
  np.testing.assert_allclose(w, waves[-1][0][0], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_queue_pipeline_trains_under_replicas_auto(tmp_path,
                                                   tf_mode_statement):
  steps = 60
  rows, losses, at, checkpoints, _ = run_script(
      tmp_path, tf_mode_statement, "auto", steps)
  assert list(at) == list(range(1, steps + 1))
  sizes = {len(r) for r in rows}
  assert sizes <= {BATCH * l for l in range(1, 9)}
  for size in sizes:
    assert_distinct_elements(np.stack([r for r in rows if len(r) == size]),
                             size // BATCH)
  assert np.isfinite(losses).all()
  w, step = restore_plain(checkpoints)
  assert step == steps and np.isfinite(w).all()


# The tutorial's shape in small: images decoded and flipped in four
# queue-runner threads, a convolution and a dense layer on a batch size
# built into the graph (the reshape to [8, -1]).
CONV_SCRIPT = """\
import sys

import numpy as np
import tensorflow as tf

{mode}
steps, path = int(sys.argv[1]), sys.argv[2]
filenames = tf.compat.v1.train.string_input_producer([path])
_, value = tf.compat.v1.FixedLengthRecordReader(record_bytes=193).read(
    filenames)
record = tf.compat.v1.decode_raw(value, tf.uint8)
label = tf.cast(tf.strided_slice(record, [0], [1]), tf.int32)
image = tf.cast(tf.reshape(tf.strided_slice(record, [1], [193]), [8, 8, 3]),
                tf.float32) / 255.0
image = tf.image.random_flip_left_right(image)
image.set_shape([8, 8, 3])
label.set_shape([1])
images, labels = tf.compat.v1.train.shuffle_batch(
    [image, label], batch_size=8, num_threads=4, capacity=64,
    min_after_dequeue=16)
kernel = tf.compat.v1.get_variable("kernel", [3, 3, 3, 4])
hidden = tf.nn.relu(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"))
w = tf.compat.v1.get_variable("w", [256, 10])
logits = tf.matmul(tf.reshape(hidden, [8, -1]), w)
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
    labels=tf.reshape(labels, [8]), logits=logits))
step = tf.compat.v1.train.get_or_create_global_step()
train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
    loss, global_step=step)
hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as sess:
  while not sess.should_stop():
    last = sess.run([train, step, loss])
print("trained", last[1], last[2])
"""


@pytest.mark.slow
def test_queue_runners_never_wait_for_a_wave(tmp_path, tf_mode_statement):
  # Four queue-runner threads enqueue while 500 training runs take their
  # elements. Bounded: a deadlock (queue runners waiting for the session
  # while a wave waited for them) fails the test instead of hanging it.
  records = np.concatenate(
      [RNG.randint(0, 10, (200, 1)), RNG.randint(0, 256, (200, 192))],
      axis=1).astype(np.uint8)
  records.tofile(tmp_path / "images.bin")
  script = tmp_path / "train_conv.py"
  script.write_text(CONV_SCRIPT.format(mode=tf_mode_statement))
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--replicas", str(REPLICAS),
       str(script), "500", str(tmp_path / "images.bin")],
      env=child_env(), cwd=tmp_path, capture_output=True, text=True,
      timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  _, step, loss = done.stdout.split()[-3:]
  assert int(step) == 500 and np.isfinite(float(loss))
