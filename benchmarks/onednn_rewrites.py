"""Which kernels TensorFlow runs for LeNet's step: tf.compat.v1.Session
against a TensorBow wave.

TensorFlow rewrites a graph for oneDNN when a session runs it (fused
Conv2D + BiasAdd + ReLU, `_MklNative...` kernels). TensorBow's wave runs
copies of the user's ops in a graph of its own; this prints, for each,
how many of the ops TensorFlow actually ran (the partition graphs of a
traced run) are convolutions, products, poolings and activations, by
type, so that a copy that missed a rewrite shows.

  TF_ENABLE_ONEDNN_OPTS=1 python -m benchmarks.onednn_rewrites \
      --batch_size 16 --replicas 2
"""
import argparse
import collections

import tensorflow as tf

from benchmarks.lenet_throughput import Config

_KINDS = ("Conv", "MatMul", "Pool", "Relu", "BiasAdd", "Mkl", "Fused")


def executed_types(config):
  """{op type: count} of what one traced run of `config` executed."""
  for _ in range(3):
    config.session.run(config.train, config.feed)
  options = tf.compat.v1.RunOptions(output_partition_graphs=True)
  metadata = tf.compat.v1.RunMetadata()
  config.session.run(config.train, config.feed, options=options,
                     run_metadata=metadata)
  counts = collections.Counter(
      node.op for graph in metadata.partition_graphs for node in graph.node)
  return {t: n for t, n in sorted(counts.items())
          if any(kind in t for kind in _KINDS)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--batch_size", type=int, default=16)
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--tf_mode", choices=("graph", "v1"), default="v1")
  args = parser.parse_args()
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  for name, replicas in (("tf.compat.v1.Session", None),
                         (f"TensorBow L={args.replicas}", args.replicas)):
    types = executed_types(Config(name, replicas, args.batch_size))
    print(f"{name}: " + ", ".join(f"{t} {n}" for t, n in types.items()))


if __name__ == "__main__":
  main()
