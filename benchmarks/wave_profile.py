"""Where a wave's time goes, against TensorFlow's step at the same rows.

TensorFlow at `--tf_batch` rows a step and TensorBow at `--replicas` x
`--batch_size` rows a wave (LeNet of lenet_throughput.py, synthetic data),
each in its own session, interleaved `--repeats` times for `--seconds`
each. Per configuration, medians over repeats of:

* ms a run (wall, untraced) and the cores' busy share (the process's CPU
  seconds over wall seconds times the cores);
* for TensorBow, from the runtime's task timings of every wave: the
  computation phase's span (first start to last end of the replicas'
  computations), a replica's computation, the commit phase's span (the
  replicas' writes: the optimizer's step and, with SMA or EASGD, the
  correction and the central update fused into it), the synchronisation
  tasks' span, and what is left of the wall time: Python, feeding and the
  runtime starting the phases.

The commit of `none` is the optimizer's step alone, so an algorithm's
commit minus none's is what its synchronisation costs a wave.

  python -m benchmarks.wave_profile --algorithm none,sma,easgd
"""
import argparse
import json
import os
import platform
import statistics
import time

import tensorflow as tf

from benchmarks.lenet_throughput import Config


def _algorithm(spec):
  """An algorithm of `spec`: a name, or easgd:P (EASGD every P runs) or
  local_sgd:P (local SGD every P runs, DiLoCo's outer step)."""
  import tensorbow as tb  # pylint: disable=g-import-not-at-top
  name, _, period = spec.partition(":")
  if not period:
    return name
  if name == "local_sgd":
    return tb.algorithms.LocalSGD(int(period), outer_learning_rate=0.7,
                                  outer_momentum=0.9, nesterov=True)
  return tb.algorithms.by_name(name, period=int(period))


class Profiled(object):
  """One configuration and its samples (dicts of ms, one per repeat)."""

  def __init__(self, name, config):
    self.name = name
    self.config = config
    self.samples = []

  def measure(self, seconds):
    sess, train, feed = self.config.session, self.config.train, self.config.feed
    for _ in range(3):
      sess.run(train, feed)
    tensorbow = hasattr(sess, "task_timings")
    if tensorbow:
      sess.clear_task_timings()
    runs = 0
    cpu, start = time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
      sess.run(train, feed)
      runs += 1
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu
    sample = {"run": wall / runs * 1e3,
              "busy": cpu / (wall * os.cpu_count()),
              "images/s": runs * self.config.images_per_run / wall}
    if tensorbow:
      sample.update(_phases(sess.task_timings(), sample["run"]))
    self.samples.append(sample)


def _phases(timings, run_ms):
  """Per wave means of the phases' spans (ms) from task timings."""
  waves = {}
  for t in timings:
    waves.setdefault(t.wave, []).append(t)
  spans = {"compute": [], "replica compute": [], "commit": [], "sync": []}

  def span(tasks):
    return (max(t.end for t in tasks) - min(t.start for t in tasks)) * 1e3

  for tasks in waves.values():
    computed = [t for t in tasks if t.replica >= 0 and t.phase == 0]
    committed = [t for t in tasks if t.replica >= 0 and t.phase == 1]
    synced = [t for t in tasks if t.replica < 0]
    if computed:
      spans["compute"].append(span(computed))
      spans["replica compute"].extend((t.end - t.start) * 1e3
                                      for t in computed)
    spans["commit"].append(span(committed) if committed else 0.0)
    spans["sync"].append(span(synced) if synced else 0.0)
  out = {k: statistics.mean(v) if v else 0.0 for k, v in spans.items()}
  out["rest"] = run_ms - out["compute"] - out["commit"] - out["sync"]
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--tf_batch", type=int, default=32)
  parser.add_argument("--algorithm", default="none,sma,easgd",
                      help="comma-separated; easgd:P and local_sgd:P "
                      "exchange every P runs")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--seconds", type=float, default=3.0)
  parser.add_argument("--tf_mode", choices=("graph", "v1"), default="v1")
  parser.add_argument("--json", default="")
  args = parser.parse_args()
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  configs = [Profiled(f"tf b{args.tf_batch}",
                      Config("tf", None, args.tf_batch))]
  for spec in args.algorithm.split(","):
    configs.append(Profiled(
        f"tb {args.replicas}x{args.batch_size} {spec}",
        Config(spec, args.replicas, args.batch_size, _algorithm(spec))))
  for _ in range(args.repeats):
    for c in configs:
      c.measure(args.seconds)
  keys = ["images/s", "run", "busy", "compute", "replica compute", "commit",
          "sync", "rest"]
  print(f"LeNet ({args.tf_mode} mode), oneDNN "
        f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')}, medians of "
        f"{args.repeats} interleaved repeats of {args.seconds:.0f} s; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} "
        f"cores; times in ms a run")
  print(f"{'config':<22}" + "".join(f"{k:>16}" for k in keys))
  rows = []
  tf_images = statistics.median(s["images/s"] for s in configs[0].samples)
  for c in configs:
    row = {"config": c.name}
    for k in keys:
      values = [s[k] for s in c.samples if k in s]
      row[k] = statistics.median(values) if values else None
    row["vs tf"] = row["images/s"] / tf_images
    rows.append(row)
    print(f"{c.name:<22}" + "".join(
        f"{row[k]:>16.3f}" if row[k] is not None else f"{'-':>16}"
        for k in keys) + f"   vs tf {row['vs tf']:.2f}")
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"tf_mode": args.tf_mode, "batch_size": args.batch_size,
                 "replicas": args.replicas, "tf_batch": args.tf_batch,
                 "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS",
                                          "default"),
                 "rows": rows}, f, indent=1)


if __name__ == "__main__":
  main()
