"""The perceptron of mlp.py under MonitoredTrainingSession, as the TF1
guides wrote it: a global step, checkpoints and summaries in a folder,
feed_dict batches of 100."""
import sys
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

import _fashion

tf.disable_v2_behavior()
tf.set_random_seed(0)
train_x, train_y, test_x, test_y = _fashion.load(20000)
x = tf.placeholder(tf.float32, [None, 784])
y = tf.placeholder(tf.int64, [None])
w1 = tf.get_variable("w1", [784, 256])
b1 = tf.get_variable("b1", [256], initializer=tf.zeros_initializer())
w2 = tf.get_variable("w2", [256, 10])
b2 = tf.get_variable("b2", [10], initializer=tf.zeros_initializer())
logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
    labels=y, logits=logits))
tf.summary.scalar("loss", loss)
step = tf.train.get_or_create_global_step()
train = tf.train.AdamOptimizer(1e-3).minimize(loss, global_step=step)
accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y),
                                  tf.float32))
folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
rng = np.random.RandomState(0)
with tf.train.MonitoredTrainingSession(
    checkpoint_dir=folder, save_checkpoint_steps=200,
    save_summaries_steps=50) as sess:
  for epoch in range(2):
    order = rng.permutation(len(train_x))
    for i in range(0, len(order) - 99, 100):
      batch = order[i:i + 100]
      _, l = sess.run([train, loss], {x: train_x[batch], y: train_y[batch]})
  acc = sess.run(accuracy, {x: test_x, y: test_y})
  weights = sess.run(tf.trainable_variables())
  print(f"RESULT accuracy={acc:.4f} loss={l:.4f}")
  print("MODEL", sum(float(np.abs(w).sum()) for w in weights))
