"""Where a LeNet training step spends its time: TensorFlow's step stats.

Runs the LeNet of `lenet_throughput.py` with full tracing and sums each
op's time (start to end on its thread) over `--steps` steps, then prints
the wall time per step, the summed op time, and the ops that took longest.
For TensorBow, ops are those of replica 0 (names without their replica
prefix) plus the synchronisation; with L > 1 the replicas' op times overlap
in wall time.

  python -m benchmarks.step_profile --batch_size 4                # TF
  python -m benchmarks.step_profile --batch_size 4 --faster_kernels
  python -m benchmarks.step_profile --replicas 2 --algorithm sma  # TensorBow

Tracing itself costs time, so compare these numbers with each other, not
with lenet_throughput.py's.
"""
import argparse
import collections
import time

import tensorflow as tf

from benchmarks.lenet_throughput import Config
from benchmarks.suite import harness

_REPLICA_0 = "/replica_0/"


def profile(config, steps):
  """Wall ms per step and {(op, type): ms per step} of `config`."""
  for _ in range(20):
    config.session.run(config.train, config.feed)
  options = tf.compat.v1.RunOptions(
      trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
  times = collections.Counter()
  start = time.perf_counter()
  for _ in range(steps):
    metadata = tf.compat.v1.RunMetadata()
    config.session.run(config.train, config.feed, options=options,
                       run_metadata=metadata)
    for name, op_type, micros in harness.op_times(metadata):
      if "/replica_" in name and _REPLICA_0 not in name:
        continue
      # The op's name without the replica prefix.
      times[name.split(":")[0].split(_REPLICA_0)[-1], op_type] += micros
  wall = (time.perf_counter() - start) / steps * 1e3
  return wall, {key: micros / steps / 1e3 for key, micros in times.items()}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch_size", type=int, default=4)
  parser.add_argument("--replicas", type=int, default=None,
                      help="TensorBow with L replicas (default: TF)")
  parser.add_argument("--algorithm", default="sma")
  parser.add_argument("--faster_kernels", action="store_true",
                      help="TF on the replicas' kernel substitutions")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--top", type=int, default=20)
  args = parser.parse_args()
  tf.compat.v1.disable_eager_execution()
  config = Config("profiled", args.replicas, args.batch_size, args.algorithm,
                  faster_kernels=args.faster_kernels)
  wall, times = profile(config, args.steps)
  what = ("TF" if args.replicas is None else
          f"TensorBow L={args.replicas} {args.algorithm}")
  if args.faster_kernels:
    what += " on the replicas' kernels"
  print(f"{what}, batch {args.batch_size}: {wall:.2f} ms a step (traced), "
        f"ops {sum(times.values()):.2f} ms")
  for (name, op_type), ms in sorted(times.items(), key=lambda kv: -kv[1]
                                    )[:args.top]:
    print(f"{ms:8.3f} ms  {op_type:32s} {name}")


if __name__ == "__main__":
  main()
