"""Shuffled mini-batches over in-memory arrays, for training loops.

`batches` yields fixed-size batches in a fresh random order every epoch. The
order comes from one `np.random.RandomState(seed)`, so a run with the same
seed sees the same batches in the same order.
"""
import numpy as np


def _batches(images, labels, batch_size, rng, epochs):
  """The generator behind `batches` (its arguments already checked)."""
  steps = len(images) // batch_size
  epoch = 0
  while epochs is None or epoch < epochs:
    order = rng.permutation(len(images))
    for step in range(steps):
      index = order[step * batch_size:(step + 1) * batch_size]
      yield epoch, images[index], labels[index]
    epoch += 1


def batches(images, labels, batch_size, seed=0, epochs=None):
  """Iterates over shuffled mini-batches, epoch after epoch.

  Each epoch draws a new permutation of the examples from a
  `np.random.RandomState(seed)` created once per call, and yields
  len(images) // batch_size batches of exactly `batch_size` examples; the
  examples left over by the last, partial batch are dropped for that epoch
  (a later epoch, with another order, will likely include them).

  The arguments are checked when `batches` is called, not at the first
  `next`.

  Args:
    images: an array [N, ...] (or anything `np.asarray` takes).
    labels: an array [N, ...], the same length as `images`.
    batch_size: examples per batch, 1 <= batch_size <= N.
    seed: the seed of the shuffling.
    epochs: the number of passes over the data; None for no end.

  Returns:
    A generator of (epoch, images_batch, labels_batch): epoch counts from 0;
    the batches are copies, [batch_size, ...] each.

  Raises:
    ValueError: `images` and `labels` differ in length, `batch_size` is not
      a positive int or exceeds N, or `epochs` is negative.
  """
  images, labels = np.asarray(images), np.asarray(labels)
  if len(images) != len(labels):
    raise ValueError(f"images and labels differ in length: {len(images)} "
                     f"and {len(labels)}")
  if (isinstance(batch_size, (bool, np.bool_)) or
      not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
    raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
  if batch_size > len(images):
    raise ValueError(f"batch_size {batch_size} is larger than the "
                     f"{len(images)} examples; not one full batch fits")
  if epochs is not None and epochs < 0:
    raise ValueError(f"epochs must be None or >= 0, got {epochs!r}")
  rng = np.random.RandomState(seed)
  return _batches(images, labels, int(batch_size), rng, epochs)
