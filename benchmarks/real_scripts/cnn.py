"""The "Deep MNIST for experts" network: two 5x5 convolutions with
pooling, a 1024-unit layer, Adam 1e-4, batch 50."""
import numpy as np
import tensorflow.compat.v1 as tf

import _fashion

tf.disable_v2_behavior()
tf.set_random_seed(0)
train_x, train_y, test_x, test_y = _fashion.load(6000, 2000)


def weight(name, shape):
  return tf.get_variable(name, shape,
                         initializer=tf.truncated_normal_initializer(
                             stddev=0.1))


def bias(name, shape):
  return tf.get_variable(name, shape,
                         initializer=tf.constant_initializer(0.1))


x = tf.placeholder(tf.float32, [None, 784])
y = tf.placeholder(tf.int64, [None])
image = tf.reshape(x, [-1, 28, 28, 1])
h1 = tf.nn.relu(tf.nn.conv2d(image, weight("c1", [5, 5, 1, 32]),
                             [1, 1, 1, 1], "SAME") + bias("b1", [32]))
p1 = tf.nn.max_pool(h1, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
h2 = tf.nn.relu(tf.nn.conv2d(p1, weight("c2", [5, 5, 32, 64]),
                             [1, 1, 1, 1], "SAME") + bias("b2", [64]))
p2 = tf.reshape(tf.nn.max_pool(h2, [1, 2, 2, 1], [1, 2, 2, 1], "SAME"),
                [-1, 7 * 7 * 64])
fc = tf.nn.relu(tf.matmul(p2, weight("f1", [7 * 7 * 64, 1024])) +
                bias("b3", [1024]))
logits = tf.matmul(fc, weight("f2", [1024, 10])) + bias("b4", [10])
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
    labels=y, logits=logits))
train = tf.train.AdamOptimizer(1e-4).minimize(loss)
accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y),
                                  tf.float32))
rng = np.random.RandomState(0)
with tf.Session() as sess:
  sess.run(tf.global_variables_initializer())
  order = rng.permutation(len(train_x))
  for i in range(0, len(order) - 49, 50):
    batch = order[i:i + 50]
    _, l = sess.run([train, loss], {x: train_x[batch], y: train_y[batch]})
  acc = sess.run(accuracy, {x: test_x, y: test_y})
  print(f"RESULT accuracy={acc:.4f} loss={l:.4f}")
