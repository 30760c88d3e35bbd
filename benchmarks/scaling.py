"""Scaling over workers, or over devices of one process, measured against
the scaling model's prediction (tensorbow/scaling.py: Lemma 3.1 of the HTC
guidelines, GaDei's bandwidth rule).

    PYTHONPATH=. .venv/bin/python -m benchmarks.scaling \
        [--models lenet,resnet32] [--workers 1,2,4 | --devices 1,2,4] \
        [--algorithms sma,local_sgd:8] [--waves 30] [--repeats 3]

With `--devices`, each count D is one process of D logical CPU devices
(`TensorBowSession(devices=...)`), `--replicas` replicas on each, and its
T_O is the sum across the devices' copies of the central model.

For each model and each W it starts W workers on this machine (as
`tensorbow-run --workers W` does, one intra-op thread each), every worker
training `--replicas` replicas of `--batch_size` rows on synthetic images
(weak scaling: the whole batch grows with W). After `--warmup` waves each
worker times `--waves` more: the wall time per wave and, from
`TensorBowSession.scaling_report()`, T_C and T_O (the slowest worker's).

Two efficiencies are measured at W: t(1) / t(W), what W workers sharing
this machine's cores give; and the synchronisation's alone, T(1) / T(W) of
the lemma with T_C and t_O = T_O / W as measured at W, i.e. (1 + r_W) /
(1 + W r_W) with r_W = T_O / (W T_C). The prediction is Lemma 3.1's
alpha(W) with r fitted at the smallest W > 1: it holds if t_O / T_C stays
put as W grows. It prints a Markdown table, with the model's alpha for 8
and 64 members at that r. Each algorithm of `--algorithms` (`local_sgd:H`
is local SGD exchanging every H waves) is measured at every W, all of
them interleaved in each repeat.
"""
import argparse
import io
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {"lenet": (28, 28, 1), "resnet32": (32, 32, 3)}


def algorithm(spec):
  """The session's algorithm for `spec`: a name, or local_sgd:H."""
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  name, _, period = spec.partition(":")
  if name == "local_sgd" and period:
    return tb.algorithms.LocalSGD(period=int(period))
  return name


def worker(args):
  """One worker: trains and prints its timings as a JSON line."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.compat.v1.disable_v2_behavior()
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  from models import lenet, resnet32  # pylint: disable=g-import-not-at-top
  tf.compat.v1.set_random_seed(0)
  shape = SHAPES[args.model]
  build = lenet.build if args.model == "lenet" else resnet32.build
  model = build(shape, 10, 0.01)
  devices = args.num_devices
  if devices > 1:
    sess = tb.TensorBowSession(
        replicas=args.replicas * devices,
        config=tf.compat.v1.ConfigProto(device_count={"CPU": devices}),
        devices=[f"/cpu:{d}" for d in range(devices)],
        algorithm=algorithm(args.algorithm))
  else:
    sess = tb.TensorBowSession(replicas=args.replicas,
                               algorithm=algorithm(args.algorithm))
  rows = args.replicas * args.batch_size * args.num_workers * devices
  rng = np.random.RandomState(0)
  images = rng.rand(rows, *shape).astype(np.float32)
  labels = rng.randint(0, 10, rows)
  feed = {model.x: images, model.y: labels}
  if model.training is not None:
    feed[model.training] = True
  sess.run(tf.compat.v1.global_variables_initializer())
  for _ in range(args.warmup):
    sess.run(model.train_op, feed)
  before = sess.scaling_report()
  start = time.perf_counter()
  for _ in range(args.waves):
    sess.run(model.train_op, feed)
  wall = (time.perf_counter() - start) / args.waves
  after = sess.scaling_report()
  n = after.waves - before.waves
  t_c = (after.compute_seconds * after.waves -
         before.compute_seconds * before.waves) / n
  t_o = (after.sync_seconds * after.waves -
         before.sync_seconds * before.waves) / n
  print("TIMING " + json.dumps({"wave": wall, "t_c": t_c, "t_o": t_o,
                                "model_bytes": after.model_bytes}),
        flush=True)
  sess.close()


def _command(args, model, workers, devices=1, spec="sma"):
  return [sys.executable, "-m", "benchmarks.scaling", "--worker",
          "--model", model, "--algorithm", spec,
          "--num_workers", str(workers),
          "--num_devices", str(devices),
          "--replicas", str(args.replicas),
          "--batch_size", str(args.batch_size), "--waves", str(args.waves),
          "--warmup", str(args.warmup)]


def measure(args, model, workers, devices=1, spec="sma"):
  """Per worker, its TIMING dict."""
  from tensorbow.cli import launch  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  if workers == 1:
    env.pop("TF_CONFIG", None)
    env["TF_NUM_INTRAOP_THREADS"] = "1"
    text = subprocess.run(_command(args, model, 1, devices, spec), env=env,
                          cwd=ROOT,
                          capture_output=True, text=True,
                          check=True).stdout
  else:
    out = io.StringIO()
    status = launch.run_workers(_command(args, model, workers, spec=spec),
                                workers,
                                threads=1, out=out, environ=env)
    text = out.getvalue()
    if status != 0:
      raise RuntimeError(f"{workers} workers of {model} failed:\n{text}")
  return [json.loads(line.split("TIMING ", 1)[1])
          for line in text.splitlines() if "TIMING " in line]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", default="lenet,resnet32")
  parser.add_argument("--workers", default="1,2,4")
  parser.add_argument("--devices", default="",
                      help="device counts of one process, instead of "
                      "workers")
  parser.add_argument("--algorithms", default="sma",
                      help="comma list: a name, or local_sgd:H (local SGD "
                      "exchanging every H waves)")
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--batch_size", type=int, default=4,
                      help="rows per replica")
  parser.add_argument("--waves", type=int, default=30)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--repeats", type=int, default=1,
                      help="sweeps over W, interleaved; the median wave of "
                      "each W is shown")
  parser.add_argument("--worker", action="store_true",
                      help=argparse.SUPPRESS)
  parser.add_argument("--model", help=argparse.SUPPRESS)
  parser.add_argument("--algorithm", default="sma", help=argparse.SUPPRESS)
  parser.add_argument("--num_workers", type=int, default=1,
                      help=argparse.SUPPRESS)
  parser.add_argument("--num_devices", type=int, default=1,
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    worker(args)
    return
  over_devices = bool(args.devices)
  counts = [int(w) for w in (args.devices or args.workers).split(",")]
  member = "device" if over_devices else "worker"
  print(f"machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores; {args.replicas} replicas x "
        f"{args.batch_size} rows per {member}, {args.waves} waves timed, "
        f"median of {args.repeats}")
  print(f"| model | algorithm | {'D' if over_devices else 'W'} | wave ms | "
        "T_C ms | T_O ms | r_W | t(1)/t(W) | "
        "sync efficiency at r_W | predicted alpha(W) at r | "
        "GaDei B_w MB/s |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  specs = args.algorithms.split(",")
  for model in args.models.split(","):
    runs = {(a, w): [] for a in specs for w in counts}
    for _ in range(args.repeats):
      for a, w in runs:
        timings = (measure(args, model, 1, w, a) if over_devices else
                   measure(args, model, w, spec=a))
        runs[(a, w)].append(max(timings, key=lambda t: t["wave"]))
    for a in specs:
      _print_rows(model, a, counts,
                  {w: sorted(runs[(a, w)], key=lambda t: t["wave"])[
                      args.repeats // 2] for w in counts})


def _print_rows(model, spec, counts, rows):
  """The table's rows of `model` under algorithm `spec`, from the median
  TIMING of each count of `counts`."""
  base = rows[counts[0]]["wave"]
  fitted = [w for w in counts if w > 1]
  r = (rows[fitted[0]]["t_o"] / (fitted[0] * rows[fitted[0]]["t_c"])
       if fitted else 0.0)
  for w in counts:
    t = rows[w]
    own_r = t["t_o"] / (w * t["t_c"]) if w > 1 else 0.0
    predicted = (1 + r) / (1 + w * r)
    bandwidth = 2 * t["model_bytes"] / t["wave"] / 1e6
    print(f"| {model} | {spec} | {w} | {1e3 * t['wave']:.1f} | "
          f"{1e3 * t['t_c']:.1f} | {1e3 * t['t_o']:.2f} | {own_r:.4f} | "
          f"{base / t['wave']:.3f} | {(1 + own_r) / (1 + w * own_r):.3f} | "
          f"{predicted:.3f} | {bandwidth:.2f} |")
  for g in (8, 64):
    print(f"| {model} | {spec} | {g} (model) | | | | | | | "
          f"{(1 + r) / (1 + g * r):.3f} | |")

if __name__ == "__main__":
  main()
