"""Fashion-MNIST, the TensorFlow 1 tutorial way, with or without TensorBow.

A classic TF1 script: a graph of placeholders and `tf.Variable`s (a
784-128-10 ReLU network), Adam's `minimize`, a session fed minibatches
through `feed_dict`, `Tensor.eval` for the test accuracy, and a
`tf.compat.v1.train.Saver` checkpoint that a second session restores and
trains on. `main` takes the session class as its only TensorBow-specific
argument: swapping `tf.compat.v1.Session` for `tensorbow.TensorBowSession`
is the whole port.

Run it from the checkout's root (it needs the Fashion-MNIST IDX files in
/usr/share/datasets/fashion-mnist):

  python -m examples.tutorial_fashion_mnist [--tf_mode graph]

in TF1's v1 mode (`tf.compat.v1.disable_v2_behavior()`, how most TF1
scripts run) or, with `--tf_mode graph`, with eager execution disabled
alone (resource variables).
"""
import argparse
import contextlib
import os
import tempfile
import time

import numpy as np
import tensorflow as tf

from models.data import load_fashion_mnist


def main(session_factory, epochs=2, batch_size=100, seed=0, data=None,
         checkpoint_dir=None, more_batches=None, learning_rate=1e-3,
         verbose=True):
  """Trains, evaluates, checkpoints, restores and trains on.

  Args:
    session_factory: called with no arguments, returns a session over the
      default graph: `tf.compat.v1.Session` or, e.g.,
      `lambda **kw: TensorBowSession(replicas=4, **kw)`.
    epochs: epochs of the first training.
    batch_size: rows per minibatch (the last, partial minibatch of an epoch
      is dropped).
    seed: seeds the initial weights and the shuffling.
    data: (train_images, train_labels, test_images, test_labels) as
      `load_fashion_mnist` returns them; None loads Fashion-MNIST.
    checkpoint_dir: where the checkpoint is written; None uses a temporary
      directory, removed afterwards.
    more_batches: minibatches of the training on after the restore; None
      means one epoch.
    learning_rate: Adam's learning rate.
    verbose: print progress.

  Returns:
    A dict: "trained" (test accuracy after the first training), "restored"
    (after restoring the checkpoint in a new session), "trained_on" (after
    training on), and "seconds" (wall time of each phase).

  Raises:
    RuntimeError: the restored model's accuracy differs from the saved one.
  """
  if data is None:
    data = load_fashion_mnist()
  train_images, train_labels, test_images, test_labels = data
  log = print if verbose else (lambda *args: None)
  rng = np.random.RandomState(seed)
  seconds = {}

  def train_epoch(sess, train_step, loss, max_batches=None):
    order = rng.permutation(len(train_images))
    starts = range(0, len(order) - batch_size + 1, batch_size)
    if max_batches is not None:
      starts = starts[:max_batches]
    losses = []
    for start in starts:
      batch = order[start:start + batch_size]
      _, batch_loss = sess.run(
          [train_step, loss],
          feed_dict={x: train_images[batch], y_: train_labels[batch]})
      losses.append(batch_loss)
    return float(np.mean(losses))

  with tf.Graph().as_default(), contextlib.ExitStack() as cleanup:
    if checkpoint_dir is None:
      checkpoint_dir = cleanup.enter_context(
          tempfile.TemporaryDirectory(prefix="tutorial_fashion_mnist_"))
    tf.compat.v1.set_random_seed(seed)

    # The model: 784 -> 128 (ReLU) -> 10.
    x = tf.compat.v1.placeholder(tf.float32, [None, 784], name="x")
    y_ = tf.compat.v1.placeholder(tf.int64, [None], name="y_")
    w1 = tf.Variable(tf.random.truncated_normal([784, 128], stddev=0.1),
                     name="w1")
    b1 = tf.Variable(tf.constant(0.1, shape=[128]), name="b1")
    w2 = tf.Variable(tf.random.truncated_normal([128, 10], stddev=0.1),
                     name="w2")
    b2 = tf.Variable(tf.zeros([10]), name="b2")
    hidden = tf.nn.relu(tf.matmul(x, w1) + b1)
    logits = tf.matmul(hidden, w2) + b2

    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y_, logits=logits))
    train_step = tf.compat.v1.train.AdamOptimizer(learning_rate).minimize(loss)

    start = time.time()
    with session_factory() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for epoch in range(epochs):
        mean_loss = train_epoch(sess, train_step, loss)
        log(f"epoch {epoch + 1}/{epochs}: mean training loss {mean_loss:.4f}")

      # Evaluation ops, added to the graph after the session was created.
      correct = tf.equal(tf.argmax(logits, 1), y_)
      accuracy = tf.reduce_mean(tf.cast(correct, tf.float32))
      trained = float(accuracy.eval({x: test_images, y_: test_labels}))
      log(f"test accuracy: {trained:.4f}")

      saver = tf.compat.v1.train.Saver()
      path = saver.save(sess, os.path.join(checkpoint_dir, "model.ckpt"))
      log(f"saved {path}")
    seconds["train"] = time.time() - start

    start = time.time()
    with session_factory() as sess:
      saver.restore(sess, path)
      restored = float(accuracy.eval({x: test_images, y_: test_labels}))
      log(f"restored test accuracy: {restored:.4f}")
      if abs(restored - trained) > 1e-6:
        raise RuntimeError(f"restored accuracy {restored} differs from the "
                           f"saved model's {trained}")
      mean_loss = train_epoch(sess, train_step, loss, more_batches)
      log(f"one more epoch: mean training loss {mean_loss:.4f}")
      trained_on = float(accuracy.eval({x: test_images, y_: test_labels}))
      log(f"test accuracy after training on: {trained_on:.4f}")
    seconds["restore_and_train_on"] = time.time() - start

  return {"trained": trained, "restored": restored, "trained_on": trained_on,
          "seconds": seconds}


if __name__ == "__main__":
  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tf_mode", choices=("v1", "graph"), default="v1")
  # The whole process's TF1 mode. `main` builds its own `tf.Graph`, so
  # tests call it in whichever mode they run in.
  if parser.parse_args().tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  from tensorbow import TensorBowSession

  fashion_mnist = load_fashion_mnist()
  print("== tf.compat.v1.Session ==")
  tf_result = main(tf.compat.v1.Session, data=fashion_mnist)
  print("== TensorBowSession(replicas=4) ==")
  tb_result = main(lambda **kw: TensorBowSession(replicas=4, **kw),
                   data=fashion_mnist)
  for name, result in (("tf.compat.v1.Session", tf_result),
                       ("TensorBowSession(replicas=4)", tb_result)):
    print(f"{name}: test accuracy {result['trained']:.4f}, restored "
          f"{result['restored']:.4f}, after training on "
          f"{result['trained_on']:.4f} ({result['seconds']})")
