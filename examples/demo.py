"""The main job: time to accuracy of LeNet on Fashion-MNIST, TensorFlow's
best tuned setting against TensorBow's best tuned one and its auto-tuner.

Trains the reference LeNet (`models/lenet.py`) until its test accuracy
reaches `--target` (at most `--max_epochs` epochs), three times, on the
same images in the same order of epochs:

* `tf.compat.v1.Session` at batch 32, learning rate 0.005;
* `TensorBowSession` with EASGD at 2 replicas x batch 16, learning rate
  0.01;
* `TensorBowSession(replicas="auto")` on TensorFlow's own setting, as a
  user who only swaps the session runs it: batch 32, learning rate 0.005,
  SMA; the session picks L.

The first two are each side's best of the tuned time-to-accuracy protocol
in v1 mode (`benchmarks/tuned_tta.py --tf_mode v1`; benchmarks/RESULTS.md,
"Tuned time to accuracy, screened on wall seconds"). The script runs as
most TF1 scripts do, under `disable_v2_behavior()`. The central model's
test accuracy is evaluated `--evals_per_epoch` times an epoch. With
`--seeds N` each run is made with seeds 0 to N - 1 (initial weights and
the order of the images), the seeds interleaved, and the table gives each
run's medians; a median reached the target only if every seed did. Prints
each run's time and epochs to the target, its training images/s and the
L it ended at, which side wins and by how much, each seed's figures, and
the path of a PNG of accuracy against wall time and against epochs (the
first seed's). Each run trains in a Python process of its own, as a
user's script does, so that nothing one run leaves in a process reaches
the next (see `train_alone`).
Without Fashion-MNIST (Debian's dataset-fashion-mnist) it warns and uses
synthetic images, whose accuracies mean nothing.

  python -m examples.demo [--target 0.9] [--max_epochs 8] \
      [--evals_per_epoch 8] [--seeds 1] [--log_dir logs/demo] [--fixed 1,2,4]

`--fixed` runs, instead, TensorBow at each fixed L on TensorFlow's setting
(its 32 rows split among the replicas, SMA): what auto chooses among.

from the checkout's root (`bash scripts/main.sh` runs it so).
"""
import argparse
from concurrent import futures
import multiprocessing
import os
import sys

import numpy as np
import tensorflow as tf

from models import data as tb_data
from models import lenet
from models import plot
from models import training

RUNS = (
    ("TensorFlow, batch 32 (best tuned)",
     dict(session="tf", replicas=1, algorithm="sma", batch_size=32,
          learning_rate=0.005)),
    ("TensorBow, EASGD 2 x batch 16 (best tuned)",
     dict(session="tensorbow", replicas=2, algorithm="easgd", batch_size=16,
          learning_rate=0.01)),
    ('TensorBow, replicas="auto", batch 32',
     dict(session="tensorbow", replicas="auto", algorithm="sma",
          batch_size=32, learning_rate=0.005)),
)

# What `print_seeds` shows of a run, and how.
SEED_COLUMNS = (("wall_time", "{:.1f}"), ("epochs", "{:.2f}"),
                ("images_per_sec", "{:.0f}"), ("test_accuracy", "{:.4f}"))


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
        train_size=train_size or 20000, test_size=test_size)


def fixed_runs(replicas):
  """TensorBow at each L of `replicas` on TensorFlow's run's setting (its
  32 rows a run split among the replicas, SMA, learning rate 0.005): the
  settings `replicas="auto"` chooses among. Each L must divide the rows."""
  tensorflow = RUNS[0][1]
  rows = tensorflow["batch_size"]
  uneven = [l for l in replicas if l < 1 or rows % l]
  if uneven:
    raise ValueError(f"L must divide TensorFlow's {rows} rows, got {uneven}")
  return tuple(
      (f"TensorBow, fixed L = {l}, {l} x batch {rows // l}",
       dict(tensorflow, session="tensorbow", replicas=l,
            batch_size=rows // l)) for l in replicas)


def train_alone(config, dataset, train=None):
  """`train(config, dataset)` in a Python process of its own, started
  afresh; returns what it returns and raises what it raises. `train` is a
  module-level function (the child imports it); by default LeNet trained
  as `config` says (`training.run`).

  Runs in one process would not be alike: the first would pay the
  process's start-up (oneDNN compiling its kernels, TensorFlow's thread
  pools) that later ones skip, and a TensorBowSession sets the process's
  allocator (`tensorbow/allocator.py`), which TensorFlow's later runs
  would then share while its first did not."""
  spawn = multiprocessing.get_context("spawn")
  with futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
    return pool.submit(train or _train, config, dataset).result()


def _train(config, dataset):
  """`train_alone`'s child: v1 behaviour as in `main`'s process, then the
  run."""
  tf.compat.v1.disable_v2_behavior()
  return training.run(lenet.build, lenet.MODEL_NAME,
                      lenet.SYNTHETIC_IMAGE_SHAPE, config, dataset)


def verdict(label, result, baseline, target, first="TensorFlow"):
  """How run `result` compares with the `first` run's `baseline` at
  `target`."""
  if not _reached(result):
    return f"{label}: did not reach {target} in {result['epochs']:.2f} epochs"
  if not _reached(baseline):
    return f"{label}: reached {target}; {first} did not"
  ratio = result["wall_time"] / baseline["wall_time"]
  winner = (f"{label} wins, {1 / ratio:.2f}x as fast" if ratio < 1 else
            f"{first} wins, {ratio:.2f}x as fast")
  return f"{label}: {ratio:.2f}x {first}'s time to {target}: {winner}"


def _reached(result):
  return result["stop_reason"] == "target_accuracy"


def medians(results):
  """One run's results over several seeds as one: the median of each
  number, reached only if every seed reached the target; the first seed's
  log."""
  summary = dict(results[0])
  for key in ("wall_time", "epochs", "test_accuracy", "images_per_sec",
              "final_replicas"):
    summary[key] = float(np.median([r[key] for r in results]))
  if not all(_reached(r) for r in results):
    summary["stop_reason"] = "not every seed reached the target"
  return summary


def print_table(results):
  """Each run's (label, medians) as a row."""
  print(f"{'run':<44}{'reached':>8}{'wall s':>8}{'epochs':>8}"
        f"{'images/s':>10}{'L':>5}{'accuracy':>10}")
  for label, r in results:
    print(f"{label:<44}{'yes' if _reached(r) else 'no':>8}"
          f"{r['wall_time']:>8.1f}{r['epochs']:>8.2f}"
          f"{r['images_per_sec']:>10.0f}{r['final_replicas']:>5g}"
          f"{r['test_accuracy']:>10.4f}")


def print_seeds(by_run):
  """Each run's figures seed by seed, from `by_run` (label: a dict per
  seed in seed order)."""
  print("\nseed by seed (0, 1, ...): wall s; epochs; images/s; accuracy")
  for label, results in by_run.items():
    columns = [" ".join(form.format(r[key]) for r in results)
               for key, form in SEED_COLUMNS]
    print(f"{label}: " + "; ".join(columns))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--train_size", type=int, default=None,
                      help="training images (default: all 60,000)")
  parser.add_argument("--test_size", type=int, default=10000)
  parser.add_argument("--target", type=float, default=0.9)
  parser.add_argument("--max_epochs", type=int, default=8)
  parser.add_argument("--evals_per_epoch", type=int, default=8)
  parser.add_argument("--seeds", type=int, default=1,
                      help="seeds per run, interleaved; medians are shown")
  parser.add_argument("--log_dir", default=os.path.join("logs", "demo"))
  parser.add_argument("--fixed", default="",
                      help="comma list of L: instead of the three runs, "
                      "TensorBow at each fixed L on TensorFlow's setting")
  args = parser.parse_args()
  try:
    runs = (fixed_runs([int(l) for l in args.fixed.split(",")])
            if args.fixed else RUNS)
  except ValueError as e:
    parser.error(f"--fixed: {e}")
  data_name, dataset = load(args.train_size, args.test_size)
  by_run = {label: [] for label, _ in runs}
  for seed in range(args.seeds):
    for label, run in runs:
      config = training.Config(
          epochs=args.max_epochs, target_accuracy=args.target,
          data=data_name, log_dir=os.path.join(args.log_dir, f"seed{seed}"),
          seed=seed, train_size=args.train_size, test_size=args.test_size,
          evals_per_epoch=args.evals_per_epoch, **run)
      print(f"== {label}, seed {seed}", file=sys.stderr, flush=True)
      by_run[label].append(train_alone(config, dataset))
  results = [(label, medians(by_run[label])) for label, _ in runs]
  png = os.path.join(args.log_dir, "lenet_" + data_name + ".png")
  plot.plot_logs([r["log_path"] for _, r in results], png,
                 title=f"LeNet on {data_name}: time to {args.target}")
  print()
  if args.seeds > 1:
    print(f"medians over seeds 0 to {args.seeds - 1}")
  print_table(results)
  if args.seeds > 1:
    print_seeds(by_run)
  print()
  first, baseline = results[0]
  for label, r in results[1:]:
    print(verdict(label, r, baseline, args.target,
                  "TensorFlow" if runs is RUNS else first))
  print(f"curves: {os.path.abspath(png)}")
  print("Measurements across machines and both TF1 modes: "
        "benchmarks/RESULTS.md")


if __name__ == "__main__":
  # As most TF1 scripts run: reference variables, v1 shapes.
  tf.compat.v1.disable_v2_behavior()
  main()
