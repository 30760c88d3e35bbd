"""What taking a training run's element in a run of its own costs in
TensorFlow itself: the bound on what reading `get_next()` inside one
replica's step would save TensorBow (#68).

    PYTHONPATH=. .venv/bin/python -m benchmarks.element_run \
        [--images 20000] [--steps 300] [--repeats 5]

The graph of benchmarks/real_scripts/dataset_mlp.py: a two-layer
perceptron fed by a one-shot iterator over the first `--images`
Fashion-MNIST images (models.data) given to `from_tensor_slices`
(shuffled, repeated, batches of 32), Adam, in one
`tf.compat.v1.Session`. Three ways of training, `--steps` runs each, in
turn, `--repeats` rounds:

- in the step: `sess.run(train)`, get_next inside the run, as the script;
- own run: `sess.run([x, y])`, then the step fed that element;
- pulled ahead: as own run, but the next element is taken on a second
  thread while the step runs, one element ahead, as TensorBow's prefetch
  does (prefetch.py).

Prints each way's median milliseconds per step over the rounds, and its
ratio to "in the step" (the rounds' median of the ratio within a round).
"""
import argparse
import concurrent.futures
import os
import statistics
import time

import tensorflow as tf

from models.data import datasets

tf1 = tf.compat.v1


def build(images, source="fashion_mnist"):
  """(x, y, train) of dataset_mlp.py's graph over `images` images of
  models.data's data set `source`, in the default graph."""
  loaded = datasets.load_dataset(source, train_size=images, test_size=1)
  data = tf.data.Dataset.from_tensor_slices(
      (loaded.train_images.reshape(images, 784), loaded.train_labels))
  x, y = tf1.data.make_one_shot_iterator(
      data.shuffle(5000, seed=0).repeat().batch(32)).get_next()
  w1 = tf1.get_variable("w1", [784, 256])
  b1 = tf1.get_variable("b1", [256], initializer=tf1.zeros_initializer())
  w2 = tf1.get_variable("w2", [256, 10])
  b2 = tf1.get_variable("b2", [10], initializer=tf1.zeros_initializer())
  logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=y, logits=logits))
  return x, y, tf1.train.AdamOptimizer(1e-3).minimize(loss)


def in_the_step(sess, x, y, train, steps, pool):
  del x, y, pool
  for _ in range(steps):
    sess.run(train)


def own_run(sess, x, y, train, steps, pool):
  del pool
  for _ in range(steps):
    xv, yv = sess.run([x, y])
    sess.run(train, {x: xv, y: yv})


def pulled_ahead(sess, x, y, train, steps, pool):
  pull = pool.submit(sess.run, [x, y])
  for _ in range(steps):
    xv, yv = pull.result()
    pull = pool.submit(sess.run, [x, y])
    sess.run(train, {x: xv, y: yv})
  pull.result()  # the one taken ahead of a step that never comes


WAYS = {"in the step": in_the_step, "own run": own_run,
        "pulled ahead": pulled_ahead}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)
  tf1.disable_v2_behavior()
  x, y, train = build(args.images)
  rounds = []
  with tf1.Session() as sess, \
      concurrent.futures.ThreadPoolExecutor(1) as pool:
    sess.run(tf1.global_variables_initializer())
    for way in WAYS.values():  # warm-up: every way's first runs
      way(sess, x, y, train, 20, pool)
    for _ in range(args.repeats):
      round_ms = {}
      for name, way in WAYS.items():
        start = time.perf_counter()
        way(sess, x, y, train, args.steps, pool)
        round_ms[name] = (time.perf_counter() - start) * 1e3 / args.steps
      rounds.append(round_ms)
  print(f"oneDNN {os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')}, "
        f"{args.images} images, {args.steps} steps x {args.repeats} rounds")
  for name in WAYS:
    ms = statistics.median(r[name] for r in rounds)
    ratio = statistics.median(r[name] / r["in the step"] for r in rounds)
    print(f"{name:14} {ms:7.3f} ms a step   {ratio:.3f}x in the step")


if __name__ == "__main__":
  main()
