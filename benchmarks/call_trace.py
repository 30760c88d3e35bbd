"""Which of TensorBow's modules one steady-state training run goes through.

A least-squares model trained by SGD at L = `--replicas` in one process,
fed its batch: after `--warm` training runs (planning, seeding and the
first waves behind it), one more runs under `sys.setprofile`. Printed:
the package modules its Python calls enter, in order (a call into a
module that has a frame on the stack already is not a new entry), the
lines of those modules, how many entries come back to a module the run
had entered and left (none of its frames on the stack any more), and how
many calls of the package's Python functions the run makes. A run that
goes one way, as TensorFlow's `session.run` does, comes back to none.

  PYTHONPATH=. .venv/bin/python -m benchmarks.call_trace [--replicas 2]
"""
import argparse
import json
import os
import sys

import numpy as np
import tensorflow as tf


def _model():
  """(graph, x, y, train op) of a least-squares model."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w = tf.compat.v1.get_variable("w", [4, 1])
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, y, train, loss, init


def trace(replicas, warm):
  """(the package modules, as relative paths, one training run enters in
  order of entry; the calls of the package's functions it makes)."""
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  package = os.path.dirname(os.path.abspath(tb.__file__))
  graph, x, y, train, loss, init = _model()
  feed = {x: np.ones([8, 4], np.float32), y: np.ones([8, 1], np.float32)}
  entered, active, calls = [], {}, [0]

  def profile(frame, event, arg):
    del arg
    name = frame.f_code.co_filename
    if event not in ("call", "return") or not name.startswith(package):
      return
    module = os.path.relpath(name, os.path.dirname(package))
    if event == "return":
      active[module] = active.get(module, 0) - 1
      return
    calls[0] += 1
    if active.get(module, 0) <= 0:
      entered.append(module)
    active[module] = max(active.get(module, 0), 0) + 1

  with tb.TensorBowSession(graph=graph, replicas=replicas) as sess:
    sess.run(init)
    for _ in range(warm):
      sess.run([train, loss], feed)
    sys.setprofile(profile)
    try:
      sess.run([train, loss], feed)
    finally:
      sys.setprofile(None)
  return entered, calls[0]


def summary(entered, calls, root):
  """{modules entered, their lines, entries coming back to a module left,
  the package's function calls}."""
  modules = list(dict.fromkeys(entered))
  lines = sum(open(os.path.join(root, m)).read().count("\n")
              for m in modules)
  return {"order": entered, "modules": modules, "lines": lines,
          "returns": len(entered) - len(modules), "calls": calls}


def root():
  """The checkout's folder, which the trace's module paths are relative
  to."""
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  return os.path.dirname(os.path.dirname(os.path.abspath(tb.__file__)))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--warm", type=int, default=3)
  args = parser.parse_args()
  entered, calls = trace(args.replicas, args.warm)
  result = summary(entered, calls, root())
  print(" -> ".join(result["order"]))
  print(json.dumps({k: result[k] for k in ("modules", "lines", "returns",
                                           "calls")}, indent=1))


if __name__ == "__main__":
  main()
