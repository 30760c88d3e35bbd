"""The main job: LeNet on Fashion-MNIST, tf.compat.v1.Session vs TensorBow.

Trains the reference LeNet (`models/lenet.py`) for a short, fixed budget
twice, on the same images in the same order of epochs: with
`tf.compat.v1.Session` at batch 16, and with `TensorBowSession` at 4
replicas x batch 4 (16 rows a step as well). Evaluates the central model's
test accuracy after every epoch, writes each run's JSON-lines log, draws
both curves (`python -m models.plot`) and prints the final accuracies
and the PNG's path. Without Fashion-MNIST (Debian's dataset-fashion-mnist)
it warns and uses synthetic images, whose accuracies mean nothing.

  python examples/demo.py [--train_size 20000] [--epochs 3] \
      [--log_dir logs/demo]
"""
import argparse
import os
import sys

import tensorflow as tf

from models import data as tb_data
from models import lenet
from models import plot
from models import training

RUNS = (dict(session="tf", replicas=1, batch_size=16),
        dict(session="tensorbow", replicas=4, batch_size=4))


def load(train_size, test_size):
  try:
    return "fashion_mnist", tb_data.load_dataset(
        "fashion_mnist", train_size=train_size, test_size=test_size)
  except (OSError, ValueError) as e:
    print(f"warning: Fashion-MNIST unavailable ({e}); training on synthetic "
          "images instead, so the accuracies below mean nothing",
          file=sys.stderr)
    return "synthetic", tb_data.load_dataset(
        "synthetic", image_shape=lenet.SYNTHETIC_IMAGE_SHAPE,
        train_size=train_size, test_size=test_size)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--train_size", type=int, default=20000)
  parser.add_argument("--test_size", type=int, default=10000)
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument("--log_dir", default=os.path.join("logs", "demo"))
  args = parser.parse_args()
  data_name, dataset = load(args.train_size, args.test_size)
  results = []
  for run in RUNS:
    config = training.Config(
        algorithm="sma", learning_rate=args.learning_rate, epochs=args.epochs,
        data=data_name, log_dir=args.log_dir, seed=0,
        train_size=args.train_size, test_size=args.test_size, **run)
    results.append((run, training.run(lenet.build, lenet.MODEL_NAME,
                                      lenet.SYNTHETIC_IMAGE_SHAPE, config,
                                      dataset)))
  png = os.path.join(args.log_dir, "lenet_" + data_name + ".png")
  plot.plot_logs([r["log_path"] for _, r in results], png,
                 title=f"LeNet on {data_name}")
  print()
  print(f"{'session':<34}{'test accuracy':>14}{'epochs':>8}{'wall s':>8}")
  for run, r in results:
    name = ("tf.compat.v1.Session, batch 16" if run["session"] == "tf" else
            f"TensorBowSession, {run['replicas']} x batch {run['batch_size']}")
    print(f"{name:<34}{r['test_accuracy']:>14.4f}{r['epochs']:>8.2f}"
          f"{r['wall_time']:>8.1f}")
  print(f"curves: {os.path.abspath(png)}")


if __name__ == "__main__":
  tf.compat.v1.disable_eager_execution()
  main()
