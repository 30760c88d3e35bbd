"""A denoising-free autoencoder, 784-256-64-256-784 with sigmoids, RMSProp,
batch 256; scalar and histogram summaries every 20 steps and a Saver
checkpoint at the end, as the tutorials write them."""
import os
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

import _fashion

tf.disable_v2_behavior()
tf.set_random_seed(0)
train_x, _, test_x, _ = _fashion.load(20000)
x = tf.placeholder(tf.float32, [None, 784])


def dense(inputs, name, units):
  w = tf.get_variable(name + "/w", [inputs.shape.as_list()[1], units])
  b = tf.get_variable(name + "/b", [units],
                      initializer=tf.zeros_initializer())
  tf.summary.histogram(name + "/w", w)
  return tf.nn.sigmoid(tf.matmul(inputs, w) + b)


code = dense(dense(x, "enc1", 256), "enc2", 64)
out = dense(dense(code, "dec1", 256), "dec2", 784)
loss = tf.reduce_mean(tf.square(out - x))
tf.summary.scalar("loss", loss)
summaries = tf.summary.merge_all()
train = tf.train.RMSPropOptimizer(0.01).minimize(loss)
saver = tf.train.Saver()
logdir = tempfile.mkdtemp()
rng = np.random.RandomState(0)
with tf.Session() as sess:
  writer = tf.summary.FileWriter(logdir, sess.graph)
  sess.run(tf.global_variables_initializer())
  step = 0
  for epoch in range(2):
    order = rng.permutation(len(train_x))
    for i in range(0, len(order) - 255, 256):
      feed = {x: train_x[order[i:i + 256]]}
      if step % 20 == 0:
        _, l, s = sess.run([train, loss, summaries], feed)
        writer.add_summary(s, step)
      else:
        _, l = sess.run([train, loss], feed)
      step += 1
  saver.save(sess, os.path.join(logdir, "model.ckpt"))
  test_loss = sess.run(loss, {x: test_x})
  print(f"RESULT accuracy=nan loss={test_loss:.5f}")
