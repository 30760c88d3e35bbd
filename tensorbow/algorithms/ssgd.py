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

from tensorbow import hooks
from tensorbow.algorithms import base


class SSGD(base.Algorithm):
  """Synchronous SGD (no parameters)."""

  name = "ssgd"
  model_from_replica = True
  spans_workers = True
  spans_devices = True
  replicas_equal = True

  def check(self, nonfinite=None, sparse=(), split=True):
    super().check(nonfinite=nonfinite)
    if nonfinite == "skip":
      raise ValueError(f"algorithm {self.name!r} averages every replica's "
                       "gradients: nonfinite cannot be 'skip'")
    if sparse:
      raise tf.errors.UnimplementedError(
          None, None,
          f"TensorBow's {self.name} averages the replicas' gradients, which "
          f"a sparse update ('{sparse[0]}') does not allow")
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

  def wave_hooks(self, setting):
    return [_Average(setting.runtime, setting.job.reduce)]


class _Average(hooks.WaveHook):
  """Between a wave's computation and its commit, the gradients the
  runtime kept become their mean over the replicas weighted by rows: over
  every process's replicas where there are several.

  Args:
    runtime: the setting's `runtime.Runtime`, which kept them.
    reduce: the job's `reduce(wave, arrays)`, summing arrays over the
      processes (hooks.Job; None: one process).
  """

  def __init__(self, runtime, reduce):
    self._runtime = runtime
    self._reduce = reduce

  def between(self, opened, weights):
    rows = np.asarray(weights, np.float64)
    if self._reduce is None:
      self._runtime.average_kept(rows / rows.sum())
      return
    *sums, total = self._reduce(opened.number, self._runtime.kept_sums(rows) +
                                [np.sum(rows)[None]])
    self._runtime.replace_kept([s / total[0] for s in sums])
