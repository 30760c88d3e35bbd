"""TensorFlow's TF1 CIFAR-10 tutorial, shaped for Fashion-MNIST: records of
fixed length read by a `FixedLengthRecordReader` in queue runners
(`num_epochs` epochs), `tf.train.shuffle_batch` of 32 in four threads, a
graph built for that batch (the reshape to [32, -1]), weight decay, a
decaying learning rate, moving averages of the weights, and a
`MonitoredTrainingSession` with `StopAtStepHook`, `NanTensorHook`, a hook
fetching the loss and a checkpoint; then the tutorial's evaluation: the
checkpoint restored into a fresh session on the test set."""
import os
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

import _fashion

tf.disable_v2_behavior()
tf.set_random_seed(0)
BATCH, EPOCHS = 32, 2
train_x, train_y, test_x, test_y = _fashion.load(6000, 2000)
work = tempfile.mkdtemp()
records = os.path.join(work, "train.bin")
np.concatenate([train_y[:, None].astype(np.uint8),
                (train_x * 255).astype(np.uint8)], axis=1).tofile(records)


def inference(images, batch):
  def weight(name, shape, stddev, decay=None):
    w = tf.get_variable(
        name, shape,
        initializer=tf.truncated_normal_initializer(stddev=stddev))
    if decay:
      tf.add_to_collection("losses", tf.multiply(tf.nn.l2_loss(w), decay))
    return w

  def bias(name, shape, value):
    return tf.get_variable(name, shape,
                           initializer=tf.constant_initializer(value))

  conv1 = tf.nn.relu(tf.nn.conv2d(images, weight("c1", [5, 5, 1, 16], 0.05),
                                  [1, 1, 1, 1], "SAME") + bias("b1", [16], 0.0))
  pool1 = tf.nn.max_pool(conv1, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
  norm1 = tf.nn.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
  conv2 = tf.nn.relu(tf.nn.conv2d(norm1, weight("c2", [5, 5, 16, 32], 0.05),
                                  [1, 1, 1, 1], "SAME") + bias("b2", [32], 0.1))
  pool2 = tf.nn.max_pool(conv2, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")
  flat = tf.reshape(pool2, [batch, -1])
  local3 = tf.nn.relu(tf.matmul(flat, weight(
      "l3", [flat.shape.as_list()[1], 128], 0.04, 0.004)) +
                      bias("b3", [128], 0.1))
  return tf.matmul(local3, weight("l4", [128, 10], 1 / 128.0)) + bias(
      "b4", [10], 0.0)


with tf.Graph().as_default():
  filenames = tf.train.string_input_producer([records], num_epochs=EPOCHS)
  _, value = tf.FixedLengthRecordReader(record_bytes=785).read(filenames)
  record = tf.decode_raw(value, tf.uint8)
  label = tf.cast(tf.strided_slice(record, [0], [1]), tf.int32)
  image = tf.cast(tf.reshape(tf.strided_slice(record, [1], [785]),
                             [28, 28, 1]), tf.float32) / 255.0
  image = tf.image.random_flip_left_right(image)
  image.set_shape([28, 28, 1])
  label.set_shape([1])
  images, labels = tf.train.shuffle_batch(
      [image, label], batch_size=BATCH, num_threads=4,
      capacity=1000 + 3 * BATCH, min_after_dequeue=1000)
  labels = tf.reshape(labels, [BATCH])
  logits = inference(images, BATCH)
  cross_entropy = tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                     logits=logits))
  tf.add_to_collection("losses", cross_entropy)
  loss = tf.add_n(tf.get_collection("losses"))
  step = tf.train.get_or_create_global_step()
  rate = tf.train.exponential_decay(0.05, step, 1000, 0.5, staircase=True)
  apply = tf.train.GradientDescentOptimizer(rate).minimize(
      loss, global_step=step)
  averages = tf.train.ExponentialMovingAverage(0.999, step)
  with tf.control_dependencies([apply]):
    train = averages.apply(tf.trainable_variables())

  class LossHook(tf.train.SessionRunHook):
    def before_run(self, run_context):
      return tf.train.SessionRunArgs(loss)

    def after_run(self, run_context, run_values):
      self.last = run_values.results

  loss_hook = LossHook()
  hooks = [tf.train.StopAtStepHook(last_step=100000),
           tf.train.NanTensorHook(loss), loss_hook]
  with tf.train.MonitoredTrainingSession(
      checkpoint_dir=work, hooks=hooks, save_checkpoint_secs=None,
      save_checkpoint_steps=100000, save_summaries_steps=None,
      log_step_count_steps=None) as sess:
    while not sess.should_stop():
      sess.run(train)

with tf.Graph().as_default():
  x = tf.placeholder(tf.float32, [len(test_x), 784])
  logits = inference(tf.reshape(x, [-1, 28, 28, 1]), len(test_x))
  accuracy = tf.reduce_mean(tf.cast(tf.equal(
      tf.argmax(logits, 1), tf.constant(test_y)), tf.float32))
  saver = tf.train.Saver()
  with tf.Session() as sess:
    saver.restore(sess, tf.train.latest_checkpoint(work))
    acc = sess.run(accuracy, {x: test_x})
print(f"RESULT accuracy={acc:.4f} loss={loss_hook.last:.4f}")
