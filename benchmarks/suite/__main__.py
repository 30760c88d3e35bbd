"""Command line of the benchmark suites (see benchmarks/suite/__init__.py).

  PYTHONPATH=. python -m benchmarks.suite replicas --models lenet \
      --batch_sizes 4 --replicas 1,2,4 --repeats 5 --seconds 2
"""
import argparse
import json
import os
import sys
import time

import tensorflow as tf

from benchmarks.suite import harness
from benchmarks.suite import report
from benchmarks.suite import suites

SUITES = ("replicas", "batch", "tta", "overhead", "auto")


def _ints(text):
  return [int(v) for v in text.split(",") if v]


def _floats(text):
  return [float(v) for v in text.split(",") if v]


def parse_args(argv):
  p = argparse.ArgumentParser(
      prog="python -m benchmarks.suite",
      description="TensorBow against tf.compat.v1.Session, interleaved.")
  p.add_argument("suite", choices=SUITES)
  p.add_argument("--out", default="benchmarks/results",
                 help="folder for SUITE.json, SUITE.md and SUITE.png")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--tf_mode", choices=("graph", "v1"), default="graph",
                 help="graph: eager execution disabled alone (resource "
                 "variables, control flow v2); v1: disable_v2_behavior() "
                 "(reference variables, control flow v1)")
  p.add_argument("--seconds", type=float, default=2.0,
                 help="seconds per measurement")
  p.add_argument("--models", default="logistic_regression,lenet,resnet32",
                 help="replicas: models to measure")
  p.add_argument("--model", default="lenet", help="batch: the model")
  p.add_argument("--batch_sizes", default=None, type=_ints,
                 help="replicas: 4,16,32; batch: 4,8,...,256; auto: rows "
                 "per run, 4,16,64,256")
  p.add_argument("--replicas", default=None, type=_ints,
                 help="replicas: 1,2,3,4,6,8; batch: 1,2; overhead and auto: "
                 "1,2,4,8")
  p.add_argument("--algorithms", default="sma,none")
  p.add_argument("--target", type=float, default=0.9, help="tta: accuracy")
  p.add_argument("--tf_batch_sizes", default="8,16,32,64,128", type=_ints)
  p.add_argument("--tensorbow_batch_sizes", default="4,8", type=_ints)
  p.add_argument("--tensorbow_replicas", default="2,3,4", type=_ints)
  p.add_argument("--max_epochs", type=int, default=15)
  p.add_argument("--learning_rate", type=float, default=0.01)
  p.add_argument("--train_size", type=int, default=None,
                 help="tta: keep the first N training images")
  p.add_argument("--merge", default=None,
                 help="tta: an earlier tta.json whose rows are kept and "
                 "whose configurations are not run again")
  return p.parse_args(argv)


def run(args, log):
  """Runs the suite `args` name; returns its JSON-ready result."""
  if args.suite == "replicas":
    return suites.replicas(
        args.models.split(","), args.batch_sizes or [4, 16, 32],
        args.replicas or [1, 2, 3, 4, 6, 8], args.algorithms.split(","),
        args.repeats, args.seconds, log)
  if args.suite == "batch":
    return suites.batch(args.model,
                        args.batch_sizes or [4, 8, 16, 32, 64, 128, 256],
                        args.replicas or [1, 2], args.repeats, args.seconds,
                        log)
  if args.suite == "tta":
    previous = None
    if args.merge:
      with open(args.merge) as f:
        previous = json.load(f)
    result = suites.tta(args.target, args.tf_batch_sizes,
                        args.tensorbow_batch_sizes, args.tensorbow_replicas,
                        args.max_epochs, args.learning_rate, args.train_size,
                        log, previous)
    if previous is not None:
      result["merged_commands"] = (previous.get("merged_commands", []) +
                                   [previous["command"]])
    return result
  if args.suite == "auto":
    return suites.auto(args.models.split(","),
                       args.batch_sizes or [4, 16, 64, 256],
                       args.replicas or [1, 2, 4, 8], args.repeats,
                       args.seconds, log)
  return suites.overhead(args.replicas or [1, 2, 4, 8], args.repeats,
                         args.seconds, log)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  log = lambda text: print(text, file=sys.stderr, flush=True)
  start = time.time()
  result = run(args, log)
  result = dict(suite=args.suite, machine=harness.machine(),
                tf_mode=args.tf_mode,
                command="python -m benchmarks.suite " + " ".join(
                    sys.argv[1:] if argv is None else argv),
                seconds_taken=round(time.time() - start, 1), **result)
  os.makedirs(args.out, exist_ok=True)
  base = os.path.join(args.out, args.suite)
  with open(base + ".json", "w") as f:
    json.dump(result, f, indent=1)
  table = report.markdown(args.suite, result)
  with open(base + ".md", "w") as f:
    f.write(table)
  report.plot(args.suite, result, base + ".png")
  print(table)
  print(f"wrote {base}.json, {base}.md, {base}.png")
  return result


if __name__ == "__main__":
  main()
