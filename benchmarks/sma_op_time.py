"""What SMA adds to a wave's work: the op time of sma against none.

The `replicas` suite gives SMA's cost as 1 - sma / none of two throughputs,
which on this shared 2-core machine scatter by +-10 % from one sample to
the next, more than ResNet-32's SMA cost. This measures the cost where it
is paid instead: TensorBow's sma and none sessions of one model run traced
waves, interleaved (`--repeats` rounds of `--waves` waves each), and the
op times (start to end on the op's thread) of replica 0, whose run
metadata TensorBowSession returns, are summed per wave. Replicas do the
same work, and SMA changes only the apply ops (the step fused with the
correction and the central update, DESIGN.md, "Synchronous model averaging"), so

  SMA work = (apply ops' time with sma - with none) / all ops' time with none

is the share of a replica's work that SMA adds. With the cores busy, as at
L >= 2, throughput falls by about that share. Each round gives one paired
value (medians of its waves, sma against none); the median over rounds is
printed with its 95 % interval (harness.median_interval), and so are the
differences of all ops' time and of the traced waves' wall time, which
also hold what SMA might cost other ops (the cache its buffers take) and
the noise that the apply ops' difference leaves out.

  python -m benchmarks.sma_op_time --model resnet32 --replicas 8 --batch_size 16
"""
import argparse
import json
import statistics
import sys
import time

import tensorflow as tf

from benchmarks.suite import harness


def is_apply(op_type):
  """An optimizer's apply op, TensorFlow's or TensorBow's fused SMA one."""
  return "Apply" in op_type


def traced_waves(config, waves):
  """[(wall ms, all ops ms, apply ops ms)] of `waves` traced waves."""
  options = tf.compat.v1.RunOptions(
      trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
  out = []
  for _ in range(waves):
    metadata = tf.compat.v1.RunMetadata()
    start = time.perf_counter()
    config.session.run(config.net.train_op, config.feed, options=options,
                       run_metadata=metadata)
    wall = (time.perf_counter() - start) * 1e3
    all_ops = apply_ops = 0
    for _, op_type, micros in harness.op_times(metadata):
      all_ops += micros
      if is_apply(op_type):
        apply_ops += micros
    out.append((wall, all_ops / 1e3, apply_ops / 1e3))
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="resnet32",
                      choices=sorted(harness.IMAGE_SHAPES))
  parser.add_argument("--replicas", type=int, default=8)
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--waves", type=int, default=5)
  parser.add_argument("--warmup", type=int, default=5)
  parser.add_argument("--json", default=None, help="also write the result")
  args = parser.parse_args(argv)
  tf.compat.v1.disable_eager_execution()
  configs = {a: harness.Throughput(args.model, "tensorbow", args.batch_size,
                                   args.replicas, a)
             for a in ("sma", "none")}
  for c in configs.values():
    for _ in range(args.warmup):
      c.step()
  rounds = {a: [] for a in configs}  # per round: median (wall, all, apply)
  order = list(configs)
  for r in range(args.repeats):
    for a in (order if r % 2 == 0 else order[::-1]):
      waves = traced_waves(configs[a], args.waves)
      rounds[a].append([statistics.median(w[i] for w in waves)
                        for i in range(3)])
  for c in configs.values():
    c.close()
  pairs = list(zip(rounds["sma"], rounds["none"]))
  paired = {
      "sma_work": [(s[2] - n[2]) / n[1] for s, n in pairs],
      "all_ops_difference": [s[1] / n[1] - 1 for s, n in pairs],
      "wall_difference": [s[0] / n[0] - 1 for s, n in pairs],
  }
  result = dict(
      model=args.model, replicas=args.replicas, batch_size=args.batch_size,
      repeats=args.repeats, waves=args.waves, machine=harness.machine(),
      command="python -m benchmarks.sma_op_time " + " ".join(
          sys.argv[1:] if argv is None else argv),
      median_ms={a: dict(zip(("wall", "all_ops", "apply_ops"),
                             [statistics.median(r[i] for r in rounds[a])
                              for i in range(3)]))
                 for a in rounds},
      rounds_ms=rounds,
      **{k: dict(median=statistics.median(v),
                 interval=harness.median_interval(v))
         for k, v in paired.items()})
  print(f"{args.model}, L = {args.replicas}, batch {args.batch_size}: "
        f"{args.repeats} rounds of {args.waves} traced waves each, replica "
        f"0's ops (ms, medians)")
  print(f"{'':6s}{'wall':>10s}{'all ops':>10s}{'apply ops':>11s}")
  for a, m in result["median_ms"].items():
    print(f"{a:6s}{m['wall']:10.1f}{m['all_ops']:10.1f}"
          f"{m['apply_ops']:11.2f}")
  for key, text in (("sma_work", "SMA work (apply ops' difference / all "
                     "ops with none)"),
                    ("all_ops_difference", "all ops, sma / none - 1"),
                    ("wall_difference", "wall, sma / none - 1")):
    interval = result[key]["interval"]
    print(f"{text}: {100 * result[key]['median']:.2f} %" + (
        "" if interval is None else
        f" (95 % interval {100 * interval[0]:.2f} to "
        f"{100 * interval[1]:.2f} %)"))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  return result


if __name__ == "__main__":
  main()
