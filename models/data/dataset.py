"""The `Dataset` tuple every loader of models.data returns."""
import collections

Dataset = collections.namedtuple(
    "Dataset",
    "train_images train_labels test_images test_labels num_classes")
Dataset.__doc__ = """A classification data set held in memory.

Attributes:
  train_images: float32 [N, height, width, channels] in [0, 1].
  train_labels: int64 [N] in [0, num_classes).
  test_images: float32 [M, height, width, channels] in [0, 1].
  test_labels: int64 [M] in [0, num_classes).
  num_classes: the number of classes.
"""
