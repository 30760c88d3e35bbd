"""Synchronous SGD: every replica's optimizer step takes the gradients of
all replicas, averaged weighted by shard size, so the replicas and the
central model (replica 0's) stay equal: training on the whole batch, as
MirroredStrategy and Horovod do.

The gradients are what a wave's computation hands to its commit (the
tensors crossing phases.split's cut): between the two phases the runtime
replaces each by the replicas' weighted mean. On a cluster of workers the
mean is over every worker's replicas: each worker's row-weighted sums are
summed over the workers (an all-reduce) and divided by all their rows.
"""
import numpy as np
import tensorflow as tf

from tensorbow.algorithms import base


class SSGD(base.Algorithm):
  """Synchronous SGD (no parameters)."""

  name = "ssgd"
  model_from_replica = True
  spans_workers = True
  spans_devices = True
  replicas_equal = True

  def check_nonfinite(self, nonfinite):
    super().check_nonfinite(nonfinite)
    if nonfinite == "skip":
      raise ValueError(f"algorithm {self.name!r} averages every replica's "
                       "gradients: nonfinite cannot be 'skip'")

  def check_updates(self, sparse):
    if sparse:
      raise tf.errors.UnimplementedError(
          None, None,
          f"TensorBow's {self.name} averages the replicas' gradients, which "
          f"a sparse update ('{sparse[0]}') does not allow")

  def check_split(self, split):
    if not split:
      raise tf.errors.UnimplementedError(
          None, None,
          f"TensorBow's {self.name} needs a training run whose writes can "
          "run after its computation; in this one a write waits on a "
          "computed op through a control dependency")

  def fuses_outer(self, has_state):
    # The mean of the factors is not the factors of the mean.
    del has_state
    return False

  def before_commit(self, runtime, sizes, workers=None):
    rows = np.asarray(sizes, np.float64)
    if workers is None:
      runtime.average_kept(rows / rows.sum())
      return
    *sums, total = workers(runtime.kept_sums(rows) + [np.sum(rows)[None]])
    runtime.replace_kept([s / total[0] for s in sums])
