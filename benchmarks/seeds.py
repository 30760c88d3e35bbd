"""The seeds' experiments that a CPU can run, in miniature.

    PYTHONPATH=. .venv/bin/python -m benchmarks.seeds EXPERIMENT \
        --out benchmarks/results/seeds

EXPERIMENT is one of:

- `adaptive`: Adaptive SGD's Figures 6-7 in miniature. Adaptive SGD,
  EASGD, SMA and SSGD on the dense MLP (models/mlp.py) on Fashion-MNIST,
  one replica slowed per row of its batch by the test-only slowdown
  (TENSORBOW_TEST_SLOW_REPLICA), each trained to `--target` test accuracy
  once per seed, evaluated `--evals_per_epoch` times an epoch: time to
  accuracy (median over the seeds) and accuracy over epochs. Every
  replica steps on `--batch_size` rows. The synchronous algorithms'
  training run is one such batch per replica; Adaptive SGD's is
  `--chunks` times larger, so that it is cut into `--chunks` batches a
  replica that the free replicas take in turn (with one batch per
  replica there is nothing to hand a faster replica), and its
  mega-batch is `--mega_batch` such runs.
- `sweeps`: its Figures 9-12. Adaptive SGD alone, the same setting, one
  parameter moved at a time from the paper's default (mega-batch, initial
  batch size, beta, theta, delta, and the global momentum): time to
  accuracy, how often the merge perturbed, and the batch sizes and update
  counts per mega-batch.
- `gadei`: GaDei's Table 1 and Figure 3. ASGD on the MLP with
  communication interval 1 and 8, test accuracy after the same number of
  samples (`--epochs`); and plain TensorFlow's test accuracy after one
  epoch at batch sizes 1 to 128, one learning rate.
- `lenet`: the report's Figures 5.3-5.5 (LeNet's time and epochs to
  accuracy, TensorBow against TensorFlow's best batch), read from
  benchmarks/tuned_tta.py's results for LeNet (`--tuned_tta`, one JSON per
  TF1 mode) rather than run again.

Each writes EXPERIMENT.json (every run), EXPERIMENT.md (its table) and,
but for `lenet`, EXPERIMENT.png to `--out`.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import tensorflow as tf

from benchmarks import tuned_tta
from benchmarks.suite import harness
from models import data as tb_data
from models import plot
from models import training
from tensorbow import algorithms

EXPERIMENTS = ("adaptive", "sweeps", "gadei", "lenet")
_SLOW = "TENSORBOW_TEST_SLOW_REPLICA"
_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def parse_args(argv):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("experiment", choices=EXPERIMENTS)
  p.add_argument("--out", default="benchmarks/results/seeds")
  p.add_argument("--tf_mode", choices=("v1", "graph"), default="v1")
  p.add_argument("--model", default="mlp")
  p.add_argument("--replicas", type=int, default=2)
  p.add_argument("--batch_size", type=int, default=16,
                 help="rows per replica per training run")
  p.add_argument("--learning_rate", type=float, default=0.05)
  p.add_argument("--target", type=float, default=0.85)
  p.add_argument("--max_epochs", type=float, default=4)
  p.add_argument("--seeds", default="0,1,2")
  p.add_argument("--slow", default="1:0.05/row",
                 help="TENSORBOW_TEST_SLOW_REPLICA of the runs")
  p.add_argument("--chunks", type=int, default=4)
  p.add_argument("--mega_batch", type=int, default=12,
                 help="Adaptive SGD's training runs a mega-batch: 12 runs "
                 "of 4 batches a replica are the paper's 100 batches")
  p.add_argument("--evals_per_epoch", type=int, default=16)
  p.add_argument("--momentum", type=float, default=0.9,
                 help="Adaptive SGD's global momentum (the paper's 0.9)")
  p.add_argument("--algorithms", default="adaptive,easgd,sma,ssgd")
  p.add_argument("--epochs", type=float, default=2,
                 help="gadei: the samples every run sees, in epochs")
  p.add_argument("--intervals", default="1,8")
  p.add_argument("--gadei_replicas", type=int, default=4)
  p.add_argument("--train_size", type=int, default=None,
                 help="keep this many training images (tests)")
  p.add_argument("--tuned_tta", default=(
      "v1=benchmarks/results/tuned_tta_seconds/lenet_v1/tuned_tta.json,"
      "graph=benchmarks/results/tuned_tta_seconds/lenet_graph/"
      "tuned_tta.json"))
  args = p.parse_args(argv)
  args.seeds = [int(s) for s in args.seeds.split(",")]
  args.algorithms = args.algorithms.split(",")
  args.intervals = [int(k) for k in args.intervals.split(",")]
  return args


def run(args, dataset, session, algorithm, seed, *, replicas=None,
        batch_size=None, target=None, epochs=None, evals_per_epoch=None,
        slow=None, log_name="run"):
  """One training run of `args.model`: training.train's dict."""
  config = training.Config(
      session=session, replicas=replicas or args.replicas,
      algorithm=algorithm, batch_size=batch_size or args.batch_size,
      learning_rate=args.learning_rate,
      epochs=epochs if epochs is not None else args.max_epochs,
      target_accuracy=target, data="fashion_mnist", seed=seed,
      evals_per_epoch=evals_per_epoch,
      log_dir=os.path.join("/tmp/tensorbow_seeds", log_name))
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(seed)
    net = harness.load_model(args.model).build(
        dataset.train_images.shape[1:], dataset.num_classes,
        args.learning_rate)
  before = os.environ.pop(_SLOW, None)
  if slow:
    os.environ[_SLOW] = slow
  try:
    return training.train(net, dataset, config, args.model, verbose=False)
  finally:
    os.environ.pop(_SLOW, None)
    if before is not None:
      os.environ[_SLOW] = before


def _adaptive_run(args, dataset, seed, slow, log_name, mega_batch=None,
                  **params):
  """A run of Adaptive SGD whose training runs are `args.chunks` batches
  a replica, each replica starting at `args.batch_size` rows a step."""
  params.setdefault("batch_size", args.batch_size)
  params.setdefault("momentum", args.momentum)
  return run(args, dataset, "tensorbow", algorithms.Adaptive(
      mega_batch=mega_batch or args.mega_batch, **params), seed,
             batch_size=args.batch_size * args.chunks, target=args.target,
             evals_per_epoch=args.evals_per_epoch, slow=slow,
             log_name=log_name)


def _row(result, **extra):
  return dict(extra, reached=result["stop_reason"] == "target_accuracy",
              wall_time=result["wall_time"], epochs=result["epochs"],
              test_accuracy=result["test_accuracy"],
              log_path=result["log_path"],
              history=result["adaptive_history"])


def adaptive(args, dataset, log):
  rows = []
  for name in args.algorithms:
    for seed in args.seeds:
      result = (_adaptive_run(args, dataset, seed, args.slow,
                              "adaptive/adaptive") if name == "adaptive"
                else run(args, dataset, "tensorbow", name, seed,
                         target=args.target, slow=args.slow,
                         evals_per_epoch=args.evals_per_epoch,
                         log_name=f"adaptive/{name}"))
      rows.append(_row(result, algorithm=name, seed=seed))
      log(f"  {name} seed {seed}: {result['test_accuracy']:.4f} after "
          f"{result['epochs']:.2f} epochs, {result['wall_time']:.1f} s")
  summary = [dict(algorithm=name, median_time=tuned_tta.median_time(runs),
                  median_epochs=statistics.median(r["epochs"] for r in runs),
                  reached=sum(r["reached"] for r in runs), runs=len(runs),
                  median_log=tuned_tta.median_run(runs)["log_path"])
             for name in args.algorithms
             for runs in [[r for r in rows if r["algorithm"] == name]]]
  return dict(rows=rows, summary=summary)


def sweep_settings(args):
  """(parameter, value) pairs: the paper's default first, then one
  parameter moved at a time."""
  b0 = args.batch_size
  return [(None, None)] + [
      ("mega_batch", m) for m in (max(1, args.mega_batch // 4),
                                  args.mega_batch * 4)
  ] + [("batch_size", b) for b in (b0 // 2, b0 * 2)] + [
      # The default: b_max = 2 b0, b_min = b_max / 8, beta = b_min / 2.
      ("beta", b) for b in (b0 / 16, b0 / 2)
  ] + [("theta", t) for t in (0.01, 1.0)] + [
      ("delta", d) for d in (0.0, 0.3)] + [
          # Not one of the paper's sweeps: the global model's momentum.
          ("momentum", m) for m in (0.0, 0.5)]


def sweeps(args, dataset, log):
  rows = []
  seed = args.seeds[0]
  for key, value in sweep_settings(args):
    params = {} if key is None else {key: value}
    result = _adaptive_run(args, dataset, seed, args.slow, "sweeps",
                           **params)
    history = result["adaptive_history"]
    rows.append(_row(result, parameter=key or "default", value=value,
                     perturbed=sum(h["perturbed"] for h in history),
                     mega_batches=len(history)))
    log(f"  {key or 'default'}={value}: {result['test_accuracy']:.4f} "
        f"after {result['wall_time']:.1f} s, perturbed "
        f"{rows[-1]['perturbed']}/{len(history)}")
  return dict(rows=rows)


def gadei(args, dataset, log):
  table1 = []
  for k in args.intervals:
    for seed in args.seeds:
      result = run(args, dataset, "tensorbow",
                   algorithms.ASGD(communication_interval=k), seed,
                   replicas=args.gadei_replicas, epochs=args.epochs,
                   evals_per_epoch=8, log_name=f"gadei/ci{k}")
      table1.append(_row(result, interval=k, seed=seed))
      log(f"  ASGD CI={k} seed {seed}: {result['test_accuracy']:.4f} "
          f"after {result['epochs']:.2f} epochs, {result['wall_time']:.1f} s")
  figure3 = []
  for b in _BATCH_SIZES:
    for seed in args.seeds:
      result = run(args, dataset, "tf", None, seed, batch_size=b, epochs=1,
                   log_name=f"gadei/b{b}")
      figure3.append(_row(result, batch_size=b, seed=seed))
      log(f"  TF b{b} seed {seed}: {result['test_accuracy']:.4f} after "
          f"{result['wall_time']:.1f} s")
  return dict(table1=table1, figure3=figure3)


def lenet(args, log):
  """Per TF1 mode, every final configuration of the tuned-TTA protocol."""
  out = {}
  for item in args.tuned_tta.split(","):
    mode, path = item.split("=", 1)
    with open(path) as f:
      result = json.load(f)
    out[mode] = dict(path=path, summary=result["summary"],
                     ratio=result["ratio"])
    log(f"  {mode}: {len(result['summary'])} configurations from {path}")
  return dict(modes=out)


def _median(values):
  return statistics.median(values) if values else math.nan


def _time(t):
  return "missed" if math.isinf(t) else f"{t:.1f}"


def markdown(experiment, result, args):
  head = (f"{args.model} on Fashion-MNIST, {args.tf_mode} mode, "
          f"learning rate {args.learning_rate}")
  if experiment == "adaptive":
    lines = [f"{head}; {args.replicas} replicas x {args.batch_size} rows a "
             f"step (adaptive: runs of {args.chunks} batches a replica, "
             f"mega-batch {args.mega_batch} runs, momentum {args.momentum}),"
             f" slowdown {args.slow or 'none'}; "
             f"target {args.target}.", "",
             "| algorithm | reached | median time (s) | median epochs |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {s['algorithm']} | {s['reached']}/{s['runs']} | "
              f"{_time(s['median_time'])} | {s['median_epochs']:.2f} |"
              for s in result["summary"]]
  elif experiment == "sweeps":
    lines = [f"{head}; adaptive, {args.replicas} replicas, slowdown "
             f"{args.slow}; target {args.target}, seed {args.seeds[0]}.", "",
             "| parameter | value | time (s) | epochs | perturbed | "
             "last batch sizes | last updates |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
      last = r["history"][-1] if r["history"] else {}
      lines.append(
          f"| {r['parameter']} | {r['value']} | "
          f"{_time(r['wall_time'] if r['reached'] else math.inf)} | "
          f"{r['epochs']:.2f} | {r['perturbed']}/{r['mega_batches']} | "
          f"{last.get('batch_sizes')} | {last.get('updates')} |")
  elif experiment == "gadei":
    lines = [f"{head}; ASGD with {args.gadei_replicas} replicas x "
             f"{args.batch_size} rows, {args.epochs} epochs.", "",
             "| communication interval | median test accuracy | "
             "median time (s) |", "| --- | --- | --- |"]
    for k in args.intervals:
      runs = [r for r in result["table1"] if r["interval"] == k]
      lines.append(f"| {k} | {_median([r['test_accuracy'] for r in runs]):.4f}"
                   f" | {_median([r['wall_time'] for r in runs]):.1f} |")
    lines += ["", "TensorFlow, one epoch:", "",
              "| batch size | median test accuracy |", "| --- | --- |"]
    for b in _BATCH_SIZES:
      runs = [r for r in result["figure3"] if r["batch_size"] == b]
      lines.append(f"| {b} | {_median([r['test_accuracy'] for r in runs]):.4f}"
                   " |")
  else:
    lines = []
    for mode, part in result["modes"].items():
      lines += [f"LeNet, {mode} mode ({part['path']}):", "",
                "| configuration | reached | median time (s) | "
                "median epochs |", "| --- | --- | --- | --- |"]
      lines += [f"| {s['name']} | {s['reached']}/{s['runs']} | "
                f"{_time(s['median_time'])} | {s['median_epochs']:.2f} |"
                for s in part["summary"]]
      ratio = part["ratio"]
      lines += ["", "TensorBow best / TensorFlow best: " +
                (f"{ratio:.2f}" if ratio is not None else "n/a"), ""]
  return "\n".join(lines).rstrip("\n") + "\n"


def draw(experiment, result, path):
  """The experiment's figure: accuracy curves of the median runs, or the
  sweeps' batch sizes and updates per mega-batch."""
  # pylint: disable=g-import-not-at-top
  from matplotlib import figure
  from matplotlib.backends import backend_agg
  fig = figure.Figure(figsize=(11, 4.2))
  backend_agg.FigureCanvasAgg(fig)
  left, right = fig.subplots(1, 2)
  if experiment == "adaptive":
    for s in result["summary"]:
      _, series = plot.read_log(s["median_log"])
      for axes, x in ((left, series.wall_time), (right, series.epoch)):
        axes.plot(x, series.test_accuracy, marker="o", markersize=2,
                  label=f"{s['algorithm']} (median run)")
    left.set_xlabel("wall time (s)")
    right.set_xlabel("epoch")
    left.set_ylabel("test accuracy")
    right.legend(fontsize="small")
    fig.suptitle("one replica slowed")
  elif experiment == "sweeps":
    history = result["rows"][0]["history"]
    for i in range(len(history[0]["batch_sizes"]) if history else 0):
      left.plot([h["batch_sizes"][i] for h in history], marker="o",
                markersize=3, label=f"replica {i}")
      right.plot([h["updates"][i] for h in history], marker="o",
                 markersize=3, label=f"replica {i}")
    left.set_ylabel("batch size")
    right.set_ylabel("updates in the mega-batch")
    fig.suptitle("Adaptive SGD at the paper's defaults, one replica slowed")
    for axes in (left, right):
      axes.set_xlabel("mega-batch")
      axes.legend(fontsize="small")
  else:
    for k in sorted({r["interval"] for r in result["table1"]}):
      first = next(r for r in result["table1"] if r["interval"] == k)
      _, series = plot.read_log(first["log_path"])
      left.plot(series.epoch, series.test_accuracy, marker="o",
                markersize=3, label=f"ASGD CI={k}, seed {first['seed']}")
    left.set_xlabel("epoch")
    left.set_ylabel("test accuracy")
    left.legend(fontsize="small")
    right.plot(_BATCH_SIZES, [_median([r["test_accuracy"] for r in
                                       result["figure3"]
                                       if r["batch_size"] == b])
                              for b in _BATCH_SIZES], marker="o")
    right.set_xscale("log", base=2)
    right.set_xlabel("batch size (TensorFlow, one epoch)")
    right.set_ylabel("test accuracy")
  for axes in (left, right):
    axes.grid(True, alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def main(argv=None, set_mode=True):
  """Runs EXPERIMENT; `set_mode`: enter --tf_mode first (a test keeps the
  mode its process runs in, and the tables name the mode found)."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if set_mode and args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  elif set_mode:
    tf.compat.v1.disable_eager_execution()
  args.tf_mode = ("graph" if tf.compat.v1.resource_variables_enabled()
                  else "v1")
  log = lambda text: print(text, file=sys.stderr, flush=True)
  start = time.time()
  if args.experiment == "lenet":
    result = lenet(args, log)
  else:
    dataset = tb_data.load_dataset("fashion_mnist",
                                   train_size=args.train_size)
    experiment = {"adaptive": adaptive, "sweeps": sweeps,
                  "gadei": gadei}[args.experiment]
    result = experiment(args, dataset, log)
  result = dict(result, tf_mode=args.tf_mode, machine=harness.machine(),
                seconds_taken=round(time.time() - start, 1),
                command="python -m benchmarks.seeds " + " ".join(
                    sys.argv[1:] if argv is None else argv))
  os.makedirs(args.out, exist_ok=True)
  base = os.path.join(args.out, args.experiment)
  with open(base + ".json", "w") as f:
    json.dump(result, f, indent=1, default=str)
  table = markdown(args.experiment, result, args)
  with open(base + ".md", "w") as f:
    f.write(table)
  if args.experiment != "lenet":
    draw(args.experiment, result, base + ".png")
  print(table)
  return result


if __name__ == "__main__":
  main()
