"""Synthetic, learnable image classification data for tests and benchmarks.

Each class has a random template image; an example is its class's template
plus Gaussian noise, clipped to [0, 1]. A model (even a linear one) can learn
the classes, so a training run on this data shows a falling loss, while the
images have whatever shape a benchmark needs (e.g. CIFAR-10's 32x32x3, which
is not available offline). The data depend only on the arguments: the
templates, the training set and the test set each come from their own
stream of the seed, so the test set does not change with `train_size`.
"""
import numpy as np

from models.data.dataset import Dataset

# Templates are uniform in [_LOW, _HIGH]; the noise has this standard deviation.
_LOW, _HIGH = 0.25, 0.75
_NOISE = 0.25
_CHUNK = 4096  # Examples per step when adding templates (bounds temporaries).


def _check_count(name, value, minimum):
  if (isinstance(value, (bool, np.bool_)) or
      not isinstance(value, (int, np.integer)) or value < minimum):
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _examples(rng, templates, size):
  """`size` balanced, shuffled labels and their noisy template images."""
  num_classes = len(templates)
  labels = rng.permutation(np.arange(size, dtype=np.int64) % num_classes)
  images = rng.standard_normal((size,) + templates.shape[1:], np.float32)
  images *= np.float32(_NOISE)
  for start in range(0, size, _CHUNK):
    images[start:start + _CHUNK] += templates[labels[start:start + _CHUNK]]
  np.clip(images, 0.0, 1.0, out=images)
  return images, labels


def synthetic_dataset(image_shape, num_classes=10, train_size=2048,
                      test_size=512, seed=0):
  """Generates a seeded image classification data set.

  Args:
    image_shape: (height, width, channels) of one image.
    num_classes: the number of classes, >= 1.
    train_size: the number of training examples, >= 0.
    test_size: the number of test examples, >= 0.
    seed: the seed (a non-negative int); the same arguments give the same
      data.

  Returns:
    A `Dataset`: images float32 [N, height, width, channels] in [0, 1],
    labels int64 in [0, num_classes), each class appearing
    floor(N / num_classes) or one more times, in random order.

  Raises:
    ValueError: `image_shape` is not three positive ints, or a count is out
      of range.
  """
  try:
    image_shape = tuple(image_shape)
  except TypeError:
    image_shape = None
  if (image_shape is None or len(image_shape) != 3 or
      not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and
              d > 0 for d in image_shape)):
    raise ValueError("image_shape must be (height, width, channels), three "
                     f"positive ints; got {image_shape!r}")
  _check_count("num_classes", num_classes, 1)
  _check_count("train_size", train_size, 0)
  _check_count("test_size", test_size, 0)
  _check_count("seed", seed, 0)
  template_rng, train_rng, test_rng = (
      np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
  templates = template_rng.uniform(
      _LOW, _HIGH, (num_classes,) + image_shape).astype(np.float32)
  train_images, train_labels = _examples(train_rng, templates, train_size)
  test_images, test_labels = _examples(test_rng, templates, test_size)
  return Dataset(train_images=train_images, train_labels=train_labels,
                 test_images=test_images, test_labels=test_labels,
                 num_classes=num_classes)
