"""The main job: one TF1 script trained by tf.compat.v1.Session and TensorBow.

Runs examples/tutorial_fashion_mnist.py (a 784-128-10 network, Adam, batch
100, two epochs, then a checkpoint restored into a second session that
trains one more epoch) twice: with `tf.compat.v1.Session`, and with
`TensorBowSession(replicas=4)` in its place, and prints the test
accuracies and wall times side by side. Falls back to synthetic data, with
a warning, if Fashion-MNIST is not installed.

  python examples/demo.py [--replicas 4] [--epochs 2]
"""
import argparse
import os
import sys

import numpy as np
import tensorflow as tf

import tensorbow as tb
from tensorbow import data as tb_data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tutorial_fashion_mnist  # pylint: disable=g-import-not-at-top,wrong-import-position


def load_data():
  try:
    return tb_data.load_fashion_mnist()
  except (OSError, ValueError) as e:
    print(f"warning: Fashion-MNIST unavailable ({e}); using synthetic data, "
          "so the accuracies mean nothing", file=sys.stderr)
    rng = np.random.RandomState(0)
    centers = rng.rand(10, 784).astype(np.float32)

    def make(n):
      labels = rng.randint(0, 10, n).astype(np.int64)
      images = np.clip(centers[labels] + 0.3 * rng.randn(n, 784), 0, 1)
      return images.astype(np.float32), labels

    return make(6000) + make(1000)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--replicas", type=int, default=4)
  parser.add_argument("--epochs", type=int, default=2)
  args = parser.parse_args()
  data = load_data()
  sessions = [
      ("tf.compat.v1.Session", tf.compat.v1.Session),
      (f"TensorBowSession(replicas={args.replicas})",
       lambda **kw: tb.TensorBowSession(replicas=args.replicas, **kw)),
  ]
  rows = []
  for name, factory in sessions:
    print(f"== {name}")
    result = tutorial_fashion_mnist.main(factory, epochs=args.epochs,
                                         data=data)
    rows.append((name, result))
  print()
  print(f"{'session':<30}{'test acc':>10}{'restored':>10}{'trained on':>12}"
        f"{'train s':>9}")
  for name, r in rows:
    print(f"{name:<30}{r['trained']:>10.4f}{r['restored']:>10.4f}"
          f"{r['trained_on']:>12.4f}{r['seconds']['train']:>9.1f}")


if __name__ == "__main__":
  tf.compat.v1.disable_eager_execution()
  main()
