"""Time to accuracy with the same tuning effort for both sessions.

    PYTHONPATH=. .venv/bin/python -m benchmarks.tuned_tta \
        --model logistic_regression --target 0.84 \
        --out benchmarks/results/tuned_tta_logistic_regression

Protocol (the defaults are #16's grid):

1. The grids. TensorFlow: batch {16, 32, 64, 128} x learning rate.
   TensorBow: per-replica batch {4, 8, 16} x L {2, 4, 8} x algorithm
   {sma, easgd, ssgd, asgd, adaptive} x learning rate. Learning rates
   {0.005, 0.01, 0.02, 0.05} on both sides; every other setting is the
   algorithm's default.
2. Screening, identical for both sides: successive halving. Every
   configuration of a side trains from scratch for the first rung's budget
   of epochs (`--rungs`, default 1/8, 1/4, 1/2) and is scored by the test
   accuracy of its central model then; the best third (at least
   `--finalists`) goes on to the next rung's budget, again from scratch.
   Seed 0 throughout. With `--rung_seconds` the budgets are seconds of
   wall time instead (evaluations included, as in the finals), so that a
   configuration whose epochs are slow is scored on the epochs it gets
   through in that time: accuracy after a fixed fraction of an epoch
   favours the smallest shards, whose epochs take longest.
   `--tensorbow_grid` screens a list of TensorBow configurations in
   place of its grid (their algorithms' own parameters given, e.g. local
   SGD's outer step at L = 1: `local_sgd:1:32:0.005:period=5:
   outer_learning_rate=0.5`, one spec without the line break).
3. Finals: the best `--finalists` of each side after the last rung train
   to `--target` test accuracy (evaluated four times an epoch, at most
   `--max_epochs`), once per seed (`--seeds`, default 0, 1, 2). A
   configuration's time is the median over its seeds (a run that misses
   the target counts as infinitely slow); each side's best is its
   finalist with the least median time; the ratio is TensorBow's best
   over TensorFlow's. `--lower_targets` reads the same runs' logs for the
   time and epochs to each lower accuracy too (their first evaluation at
   or above it), reported beside the target's.

4. After the protocol, `--tensorbow_extra` runs more TensorBow
   configurations as finals (the same seeds and target), each
   `ALGORITHM:L:BATCH:LR[:PARAM=VALUE...]`, the parameters going to the
   algorithm's class (e.g. `easgd:2:16:0.01:period=2`). They are the extra
   tuning TensorBow got beyond the protocol, and are reported apart from it
   (`extra_tensorbow`, `ratio_extra`).

Writes tuned_tta.json (every screening score and final run), tuned_tta.md
and tuned_tta.png (test accuracy against time and epochs of the median run
of each side's best).
"""
import argparse
import ast
import json
import math
import os
import statistics
import sys
import time

import tensorflow as tf

from benchmarks.suite import harness
from models import data as tb_data
from models import plot
from models import training
from tensorbow import algorithms


def _list(kind):
  return lambda text: [kind(v) for v in text.split(",") if v]


def parse_args(argv):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model", default="lenet")
  p.add_argument("--target", type=float, default=0.9)
  p.add_argument("--tf_batch_sizes", type=_list(int), default=[16, 32, 64, 128])
  p.add_argument("--tensorbow_batch_sizes", type=_list(int), default=[4, 8, 16])
  p.add_argument("--replicas", type=_list(int), default=[2, 4, 8])
  p.add_argument("--algorithms", type=_list(str),
                 default=["sma", "easgd", "ssgd", "asgd", "adaptive"])
  p.add_argument("--learning_rates", type=_list(float),
                 default=[0.005, 0.01, 0.02, 0.05])
  p.add_argument("--rungs", type=_list(float), default=[0.125, 0.25, 0.5])
  p.add_argument("--rung_seconds", type=_list(float), default=[],
                 help="screen on these budgets of wall seconds instead of "
                 "--rungs' epochs")
  p.add_argument("--finalists", type=int, default=3)
  p.add_argument("--seeds", type=_list(int), default=[0, 1, 2])
  p.add_argument("--max_epochs", type=float, default=10)
  p.add_argument("--lower_targets", type=_list(float), default=[],
                 help="also report each final run's time to these "
                 "accuracies, below --target, from its log")
  p.add_argument("--out", default="benchmarks/results/tuned_tta")
  p.add_argument("--screen_only", action="store_true",
                 help="stop after screening both sides")
  p.add_argument("--tensorbow_grid", type=_list(str), default=[],
                 help="screen these TensorBow configurations in place of "
                 "the grid of batch sizes, L, algorithms and learning "
                 "rates: ALGORITHM:L:BATCH:LR[:PARAM=VALUE...] each")
  p.add_argument("--tensorbow_extra", type=_list(str), default=[],
                 help="after the protocol, more TensorBow finals: "
                 "ALGORITHM:L:BATCH:LR[:PARAM=VALUE...]")
  p.add_argument("--tf_mode", choices=("graph", "v1"), default="graph",
                 help="graph: eager execution disabled alone (resource "
                 "variables); v1: disable_v2_behavior() (reference "
                 "variables, as most TF1 scripts run)")
  p.add_argument("--resume", action="store_true",
                 help="keep the stages OUT/tuned_tta.json already holds "
                 "(run with the same settings) and run only the others")
  return p.parse_args(argv)


# The settings a resumed run must share with the one it continues.
_SETTINGS = ("model", "target", "tf_batch_sizes", "tensorbow_batch_sizes",
             "replicas", "algorithms", "learning_rates", "rungs",
             "rung_seconds", "finalists", "seeds", "max_epochs", "tf_mode",
             "tensorbow_grid", "lower_targets")


def grids(args):
  """(TensorFlow's configurations, TensorBow's), as dicts."""
  tf_grid = [dict(session="tf", replicas=1, algorithm=None, batch_size=b,
                  learning_rate=lr)
             for b in args.tf_batch_sizes for lr in args.learning_rates]
  tb_grid = [dict(session="tensorbow", replicas=r, algorithm=a, batch_size=b,
                  learning_rate=lr)
             for b in args.tensorbow_batch_sizes for r in args.replicas
             for a in args.algorithms for lr in args.learning_rates]
  if args.tensorbow_grid:
    tb_grid = [extra_config(spec) for spec in args.tensorbow_grid]
  return tf_grid, tb_grid


def extra_config(spec):
  """The configuration `--tensorbow_extra`'s `spec` names.

  Raises:
    ValueError: a malformed spec, an unknown algorithm or parameter.
  """
  fields = spec.split(":")
  if len(fields) < 4:
    raise ValueError(f"want ALGORITHM:L:BATCH:LR[:PARAM=VALUE...], got "
                     f"{spec!r}")
  params = {}
  for item in fields[4:]:
    key, _, value = item.partition("=")
    params[key] = ast.literal_eval(value)
  config = dict(session="tensorbow", replicas=int(fields[1]),
                algorithm=fields[0], batch_size=int(fields[2]),
                learning_rate=float(fields[3]), params=params)
  algorithm(config)  # checks the algorithm and its parameters now
  return config


def algorithm(config):
  """What the session's `algorithm=` gets: the name, or an instance."""
  if not config.get("params"):
    return config["algorithm"] or "sma"
  return algorithms.by_name(config["algorithm"], **config["params"])


def name(config):
  if config["session"] == "tf":
    return f"tf b{config['batch_size']} lr {config['learning_rate']}"
  params = ",".join(f"{k}={v}" for k, v in
                    sorted(config.get("params", {}).items()))
  return (f"tensorbow {config['algorithm']}"
          f"{'(' + params + ')' if params else ''} L={config['replicas']} "
          f"b{config['batch_size']} lr {config['learning_rate']}")


def train(model, config, dataset, seed, epochs, target=None, seconds=None):
  """One run of `config`: training.train's dict."""
  run = training.Config(
      session=config["session"], replicas=config["replicas"],
      algorithm=algorithm(config),
      batch_size=config["batch_size"],
      learning_rate=config["learning_rate"], epochs=epochs,
      target_accuracy=target, data="fashion_mnist",
      log_dir=f"/tmp/tensorbow_tuned_tta/{model}", seed=seed,
      max_seconds=seconds)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(seed)
    net = harness.load_model(model).build(
        dataset.train_images.shape[1:], dataset.num_classes,
        config["learning_rate"])
  return training.train(net, dataset, run, model, verbose=False)


def screen(model, configs, rungs, finalists, dataset, log, seconds=False,
           max_epochs=None):
  """Successive halving; returns (per rung [(config, accuracy)], the
  survivors of the last rung, best first). With `seconds` the rungs are
  budgets of wall seconds (within `max_epochs`), else of epochs."""
  history, alive = [], list(configs)
  for budget in rungs:
    scored = []
    for config in alive:
      result = (train(model, config, dataset, seed=0, epochs=max_epochs,
                      seconds=budget) if seconds else
                train(model, config, dataset, seed=0, epochs=budget))
      scored.append((config, result["test_accuracy"]))
      log(f"  rung {budget}: {name(config)}: {result['test_accuracy']:.4f} "
          f"({result['wall_time']:.1f} s)")
    scored.sort(key=lambda s: -s[1])
    history.append([dict(config, accuracy=a) for config, a in scored])
    alive = [c for c, _ in scored[:max(finalists, math.ceil(len(scored) / 3))]]
  return history, alive[:finalists]


def finalists(history, count):
  """The `count` best configurations of the last rung of `history`
  (screen's), each as it was screened: without its score, with its
  algorithm's params if it had any."""
  return [{k: v for k, v in scored.items() if k != "accuracy"}
          for scored in history[-1][:count]]


def finals(model, configs, seeds, target, max_epochs, dataset, log,
           lower_targets=()):
  rows = []
  for config in configs:
    for seed in seeds:
      result = train(model, config, dataset, seed, max_epochs, target)
      reached = result["stop_reason"] == "target_accuracy"
      rows.append(dict(config, seed=seed, reached=reached,
                       epochs=result["epochs"],
                       wall_time=result["wall_time"],
                       test_accuracy=result["test_accuracy"],
                       log_path=result["log_path"],
                       lower=(reached_in_log(result["log_path"],
                                             lower_targets)
                              if lower_targets else {})))
      log(f"  final: {name(config)} seed {seed}: "
          f"{result['test_accuracy']:.4f} after {result['epochs']:.2f} "
          f"epochs, {result['wall_time']:.1f} s ({result['stop_reason']})")
  return rows


def reached_in_log(path, targets):
  """{target: [wall seconds, epochs] of the first evaluation in the log at
  `path` at or above it, or None where none is} for each of `targets`."""
  _, series = plot.read_log(path)
  points = list(zip(series.test_accuracy, series.wall_time, series.epoch))
  return {str(target): next(([t, e] for a, t, e in points if a >= target),
                            None)
          for target in targets}


def _time_to_target(run):
  return run["wall_time"] if run["reached"] else math.inf


def median_time(runs):
  """The median time to target over `runs`, a miss counting as inf."""
  return statistics.median(_time_to_target(r) for r in runs)


def median_run(runs):
  """The run of `runs` whose time to target is the median."""
  return sorted(runs, key=_time_to_target)[len(runs) // 2]


def summarize(rows):
  """Per configuration: median time and epochs over its seeds."""
  by_config = {}
  for row in rows:
    by_config.setdefault(name(row), []).append(row)
  out = []
  for label, runs in by_config.items():
    out.append(dict(name=label, session=runs[0]["session"],
                    reached=sum(r["reached"] for r in runs), runs=len(runs),
                    median_time=median_time(runs),
                    median_epochs=statistics.median(r["epochs"] for r in runs),
                    median_log=median_run(runs)["log_path"],
                    lower=_lower_medians(runs)))
  return sorted(out, key=lambda s: s["median_time"])


def _lower_medians(runs):
  """{lower target: [median seconds, median epochs] to it over `runs`}, a
  run that never reached it counting as infinitely slow (its epochs too)."""
  medians = {}
  for target in runs[0].get("lower", {}):
    points = [r["lower"][target] or [math.inf, math.inf] for r in runs]
    medians[target] = [statistics.median(p[0] for p in points),
                       statistics.median(p[1] for p in points)]
  return medians


def _ratio(tensorbow, tf_best):
  if not (math.isfinite(tensorbow["median_time"]) and
          math.isfinite(tf_best["median_time"])):
    return None
  return tensorbow["median_time"] / tf_best["median_time"]


def _table_head(lower_targets):
  lower = "".join(f" to {t}: s / epochs |" for t in lower_targets)
  return ["| configuration | reached | median time (s) | median epochs |" +
          lower, "| --- | --- | --- | --- |" + " --- |" * len(lower_targets)]


def markdown(result):
  rungs = (f"{result['rung_seconds']} seconds"
           if result.get("rung_seconds") else f"{result['rungs']} epochs")
  lines = [f"Target {result['target']} on Fashion-MNIST, "
           f"{result['model']}, {result.get('tf_mode', 'graph')} mode; "
           f"screening rungs {rungs}.",
           ""] + _table_head(result.get("lower_targets", []))
  lines += [_row(s) for s in result["summary"]]
  ratio = result["ratio"]
  lines += ["", "TensorBow best / TensorFlow best (median time): " +
            (f"{ratio:.2f}" if ratio is not None else "n/a")]
  if result.get("summary_extra"):
    lines += ["", "Beyond the protocol (extra tuning for TensorBow):",
              ""] + _table_head(result.get("lower_targets", []))
    lines += [_row(s) for s in result["summary_extra"]]
    ratio = result["ratio_extra"]
    lines += ["", "Its best / TensorFlow best (median time): " +
              (f"{ratio:.2f}" if ratio is not None else "n/a")]
  return "\n".join(lines) + "\n"


def _row(s):
  time_text = ("missed" if math.isinf(s["median_time"])
               else f"{s['median_time']:.1f}")
  lower = "".join(" missed |" if math.isinf(seconds) else
                  f" {seconds:.1f} / {epochs:.2f} |"
                  for seconds, epochs in s.get("lower", {}).values())
  return (f"| {s['name']} | {s['reached']}/{s['runs']} | {time_text} | "
          f"{s['median_epochs']:.2f} |" + lower)


def main(argv=None):
  args = parse_args(sys.argv[1:] if argv is None else argv)
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  log = lambda text: print(text, file=sys.stderr, flush=True)
  start = time.time()
  dataset = tb_data.load_dataset("fashion_mnist")
  tf_grid, tb_grid = grids(args)
  settings = {k: getattr(args, k) for k in _SETTINGS}
  os.makedirs(args.out, exist_ok=True)
  base = os.path.join(args.out, "tuned_tta")
  result = dict(settings, machine=harness.machine(), commands=[])
  if args.resume and os.path.exists(base + ".json"):
    with open(base + ".json") as f:
      result = json.load(f)
    # A setting added since that run was made has its default there.
    defaults = vars(parse_args([]))
    differ = {k: (result.get(k, defaults[k]), v)
              for k, v in settings.items() if result.get(k, defaults[k]) != v}
    if differ:
      raise SystemExit(f"{base}.json was run with other settings "
                       f"(there, here): {differ}")
  result["commands"].append("python -m benchmarks.tuned_tta " + " ".join(
      sys.argv[1:] if argv is None else argv))
  result.setdefault("seconds_taken", 0.0)

  def save():
    nonlocal start
    now = time.time()
    result["seconds_taken"] += round(now - start, 1)
    start = now
    with open(base + ".json", "w") as f:
      json.dump(result, f, indent=1, default=str)

  for side, grid in (("tf", tf_grid), ("tensorbow", tb_grid)):
    if f"screening_{side}" not in result:
      log(f"{side}: screening {len(grid)} configurations")
      result[f"screening_{side}"], _ = screen(
          args.model, grid, args.rung_seconds or args.rungs, args.finalists,
          dataset, log, seconds=bool(args.rung_seconds),
          max_epochs=args.max_epochs)
      save()
  if args.screen_only:
    return result
  best = {}
  for side in ("tf", "tensorbow"):
    chosen = finalists(result[f"screening_{side}"], args.finalists)
    if f"finals_{side}" not in result:
      log(f"{side}: finals of {[name(c) for c in chosen]}")
      result[f"finals_{side}"] = finals(args.model, chosen, args.seeds,
                                        args.target, args.max_epochs,
                                        dataset, log, args.lower_targets)
      save()
    best[side] = summarize(result[f"finals_{side}"])[0]
  result["summary"] = (summarize(result["finals_tf"]) +
                       summarize(result["finals_tensorbow"]))
  result["best_tf"], result["best_tensorbow"] = best["tf"], best["tensorbow"]
  result["ratio"] = _ratio(best["tensorbow"], best["tf"])
  extra = result.setdefault("extra_tensorbow", [])
  for config in map(extra_config, args.tensorbow_extra):
    if any(name(row) == name(config) for row in extra):
      continue
    log(f"tensorbow, beyond the protocol: {name(config)}")
    extra += finals(args.model, [config], args.seeds, args.target,
                    args.max_epochs, dataset, log, args.lower_targets)
    save()
  if extra:
    result["summary_extra"] = summarize(extra)
    result["ratio_extra"] = _ratio(result["summary_extra"][0], best["tf"])
  save()
  table = markdown(result)
  with open(base + ".md", "w") as f:
    f.write(table)
  plot.plot_logs([best["tf"]["median_log"], best["tensorbow"]["median_log"]],
                 base + ".png", title=f"{args.model}: best of each side")
  print(table)
  return result


if __name__ == "__main__":
  main()
