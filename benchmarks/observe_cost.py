"""What watching a session costs: LeNet's training throughput with the
timeline, TensorBoard scalars and progress lines on, against off.

    PYTHONPATH=. .venv/bin/python -m benchmarks.observe_cost \
        [--replicas 2] [--batch_size 16] [--repeats 9] [--seconds 3]

Two `TensorBowSession`s of the reference LeNet (`models/lenet.py`) on
synthetic images, in one process, each in its own graph: one with nothing
asked for, one with `timeline=`, `logdir=` and `progress=30` (files in a
temporary directory). After a warm-up each trains for `--seconds` in turn,
the order reversed every other repeat; the table gives each one's median
images/s and the median of the per-repeat ratios on / off. The paired
ratio moves several per cent between runs on a shared 2-core machine, so
it also times the observer's own work (`observe.Recorder.wave`, wrapped
here) against the "on" session's wave.
"""
import argparse
import os
import platform
import statistics
import tempfile
import time

import numpy as np
import tensorflow as tf

import tensorbow as tb
from models import lenet
from tensorbow import observe

_OBSERVED = [0, 0.0]  # Recorder.wave's calls and seconds


def _timed(wave):
  def timed(*args):
    start = time.perf_counter()
    wave(*args)
    _OBSERVED[0] += 1
    _OBSERVED[1] += time.perf_counter() - start
  return timed


def _session(replicas, batch_size, **options):
  """(session, train op, feed) of a LeNet trained by `replicas` replicas
  of `batch_size` rows."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    model = lenet.build((28, 28, 1), 10, 0.01)
    init = tf.compat.v1.global_variables_initializer()
  rng = np.random.RandomState(0)
  rows = replicas * batch_size
  feed = {model.x: rng.rand(rows, 28, 28, 1).astype(np.float32),
          model.y: rng.randint(0, 10, rows)}
  if model.training is not None:
    feed[model.training] = True
  sess = tb.TensorBowSession(graph=graph, replicas=replicas, **options)
  sess.run(init)
  return sess, model.train_op, feed


def _rate(run, seconds):
  """Images a second of `run` (session, op, feed) over `seconds`."""
  sess, op, feed = run
  rows = len(next(iter(feed.values())))
  start, waves = time.monotonic(), 0
  while time.monotonic() - start < seconds:
    sess.run(op, feed)
    waves += 1
  return waves * rows / (time.monotonic() - start)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--seconds", type=float, default=3.0)
  args = parser.parse_args(argv)
  tf.compat.v1.disable_v2_behavior()
  observe.Recorder.wave = _timed(observe.Recorder.wave)
  with tempfile.TemporaryDirectory() as out:
    runs = {
        "off": _session(args.replicas, args.batch_size),
        "on": _session(args.replicas, args.batch_size,
                       timeline=os.path.join(out, "timeline.json"),
                       logdir=os.path.join(out, "logs"), progress=30.0)}
    for run in runs.values():
      _rate(run, 1.0)  # warm-up: plans, kernel choices, first runs
    _OBSERVED[:] = [0, 0.0]
    rates = {name: [] for name in runs}
    for repeat in range(args.repeats):
      for name in (list(runs) if repeat % 2 == 0 else list(runs)[::-1]):
        rates[name].append(_rate(runs[name], args.seconds))
    for sess, _, _ in runs.values():
      sess.close()
    trace_bytes = os.path.getsize(os.path.join(out, "timeline.json"))
  ratios = [on / off for on, off in zip(rates["on"], rates["off"])]
  print(f"machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, oneDNN "
        f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'default')}; LeNet "
        f"{args.replicas} x {args.batch_size}, {args.repeats} repeats of "
        f"{args.seconds:g} s; timeline {trace_bytes / 2**20:.1f} MB")
  print("| observed | median img/s | min | max |")
  print("|---|---|---|---|")
  for name, values in rates.items():
    print(f"| {name} | {statistics.median(values):.0f} | {min(values):.0f} "
          f"| {max(values):.0f} |")
  print(f"median on / off, paired: {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
  rows = args.replicas * args.batch_size
  wave = rows / statistics.median(rates["on"])
  each = _OBSERVED[1] / max(_OBSERVED[0], 1)
  print(f"observer: {1e6 * each:.0f} us a wave ({_OBSERVED[0]} waves), "
        f"{100 * each / wave:.2f} % of the median wave ({1e3 * wave:.1f} ms)")


if __name__ == "__main__":
  main()
