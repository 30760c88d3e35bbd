"""What extending TensorFlow's session costs when a one-shot iterator holds
a data set, and how often each session extends it.

    PYTHONPATH=. .venv/bin/python -m benchmarks.extend_cost [--images 20000] \
        [--repeats 5] [--steps 50]

A one-shot iterator over arrays given to `Dataset.from_tensor_slices`
keeps them inside its function, and TensorFlow's C API sends a session the
whole function library at every extension (a run after ops were added).

1. Plain `tf.compat.v1.Session`: a perceptron fed by such an iterator over
   `--images` images of 784 floats, and the same graph fed by an
   initializable iterator over placeholders (its library small). After
   the first run, one constant is added and the session extended,
   `--repeats` times: the median seconds an extension takes with and
   without the arrays in the library, and with the one-shot iterator's
   function removed from the Python graph's library after the first run
   (what the session itself still copies at each extension, having been
   sent the function once).
2. The same one-shot graph trained for `--steps` runs by
   `tf.compat.v1.Session`, `TensorBowSession(replicas=1)` and
   `replicas=2`: the seconds each spends extending the session, timed
   around TensorFlow's `ExtendSession`, and the calls that took 10 ms or
   more (Python's `Session` calls it before every run).
"""
import argparse
import statistics
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.client import session as tf_client_session

_EXTENSIONS = []  # seconds of each ExtendSession call while recording
# Python's Session calls ExtendSession before every run, a no-op where the
# graph has not grown: calls this long or longer are listed.
LONG = 0.01


def _timed_extend(original):
  def extend(session):
    start = time.perf_counter()
    try:
      return original(session)
    finally:
      _EXTENSIONS.append(time.perf_counter() - start)
  return extend


def _graph(images, one_shot):
  """(graph, train op, init op, feed of an initializable iterator's
  arrays or None)."""
  rng = np.random.RandomState(0)
  x_all = rng.rand(images, 784).astype(np.float32)
  y_all = rng.randint(0, 10, images).astype(np.int64)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    feed = None
    if one_shot:
      data = tf.data.Dataset.from_tensor_slices((x_all, y_all))
    else:
      xs = tf.compat.v1.placeholder(tf.float32, [None, 784])
      ys = tf.compat.v1.placeholder(tf.int64, [None])
      data = tf.data.Dataset.from_tensor_slices((xs, ys))
      feed = {xs: x_all, ys: y_all}
    data = data.repeat().batch(32)
    if one_shot:
      iterator = tf.compat.v1.data.make_one_shot_iterator(data)
    else:
      iterator = tf.compat.v1.data.make_initializable_iterator(data)
    x, y = iterator.get_next()
    w = tf.compat.v1.get_variable("w", [784, 10])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=y, logits=tf.matmul(x, w)))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
    init = [tf.compat.v1.global_variables_initializer()]
    if not one_shot:
      init.append(iterator.initializer)
  return graph, train, init, feed


def extension_seconds(images, one_shot, repeats, drop_library=False):
  """Median seconds of an extension after the first run (part 1);
  `drop_library`: with the graph's functions removed after it."""
  graph, train, init, feed = _graph(images, one_shot)
  times = []
  with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
    sess.run(init, feed)
    sess.run(train)
    if drop_library:
      for name in list(graph._functions):  # pylint: disable=protected-access
        graph._remove_function(name)  # pylint: disable=protected-access
    for i in range(repeats):
      tf.constant(float(i), name=f"added{i}")
      start = time.perf_counter()
      sess._extend_graph()  # pylint: disable=protected-access
      times.append(time.perf_counter() - start)
  return statistics.median(times)


def extensions_of(make, images, steps):
  """[seconds of each extension] of a session from `make(graph)` that
  initialises and trains `steps` runs (part 2)."""
  graph, train, init, _ = _graph(images, one_shot=True)
  del _EXTENSIONS[:]
  with make(graph) as sess:
    sess.run(init)
    for _ in range(steps):
      sess.run(train)
  return list(_EXTENSIONS)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--images", type=int, default=20000)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--steps", type=int, default=50)
  args = parser.parse_args(argv)
  tf.compat.v1.disable_v2_behavior()
  print(f"{args.images} images of 784 floats, {args.repeats} extensions")
  cases = [
      ("one-shot iterator (arrays in the library)", True, False),
      ("one-shot iterator, its function removed from the graph after the "
       "first run", True, True),
      ("initializable iterator (arrays fed)", False, False),
  ]
  for label, one_shot, drop in cases:
    seconds = extension_seconds(args.images, one_shot, args.repeats, drop)
    print(f"  {label}: an extension takes {seconds:.3f} s (median)")
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  tf_client_session.tf_session.ExtendSession = _timed_extend(
      tf_client_session.tf_session.ExtendSession)
  makers = [
      ("tf.compat.v1.Session", lambda g: tf.compat.v1.Session(graph=g)),
      ("TensorBowSession(replicas=1)",
       lambda g: tb.TensorBowSession(graph=g, replicas=1)),
      ("TensorBowSession(replicas=2)",
       lambda g: tb.TensorBowSession(graph=g, replicas=2)),
  ]
  print(f"one-shot graph, initialised and trained {args.steps} runs:")
  for name, make in makers:
    times = extensions_of(make, args.images, args.steps)
    long = [t for t in times if t >= LONG]
    print(f"  {name}: {sum(times):.3f} s in {len(times)} calls; "
          f"{len(long)} of {LONG * 1000:.0f} ms or more: "
          f"{', '.join(f'{t:.3f}' for t in long)} s")


if __name__ == "__main__":
  main()
