"""A two-layer perceptron fed by tf.data as the TF1 guide to importing data
shows it: the arrays given to `from_tensor_slices` (so held in the graph),
shuffled, repeated for 2 epochs, batches of 32 from a one-shot iterator,
trained until the input ends; Adam."""
import numpy as np
import tensorflow.compat.v1 as tf

import _fashion

tf.disable_v2_behavior()
tf.set_random_seed(0)
train_x, train_y, test_x, test_y = _fashion.load(20000)
data = tf.data.Dataset.from_tensor_slices((train_x, train_y))
data = data.shuffle(5000, seed=0).repeat(2).batch(32)
x, y = tf.data.make_one_shot_iterator(data).get_next()


def perceptron(x):
  w1 = tf.get_variable("w1", [784, 256])
  b1 = tf.get_variable("b1", [256], initializer=tf.zeros_initializer())
  w2 = tf.get_variable("w2", [256, 10])
  b2 = tf.get_variable("b2", [10], initializer=tf.zeros_initializer())
  return tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2


with tf.variable_scope("mlp"):
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=perceptron(x)))
train = tf.train.AdamOptimizer(1e-3).minimize(loss)
test_images = tf.placeholder(tf.float32, [None, 784])
test_labels = tf.placeholder(tf.int64, [None])
with tf.variable_scope("mlp", reuse=True):
  accuracy = tf.reduce_mean(tf.cast(tf.equal(
      tf.argmax(perceptron(test_images), 1), test_labels), tf.float32))
with tf.Session() as sess:
  sess.run(tf.global_variables_initializer())
  try:
    while True:
      _, l = sess.run([train, loss])
  except tf.errors.OutOfRangeError:
    pass
  acc = sess.run(accuracy, {test_images: test_x, test_labels: test_y})
  weights = sess.run(tf.trainable_variables())
  print(f"RESULT accuracy={acc:.4f} loss={l:.4f}")
  print("MODEL", sum(float(np.abs(w).sum()) for w in weights))
