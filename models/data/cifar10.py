"""Reader for CIFAR-10 in its "python version" format (pickle batches).

The archive `cifar-10-python.tar.gz` unpacks to a folder `cifar-10-batches-py`
holding `data_batch_1` .. `data_batch_5` (the training set) and `test_batch`.
Each is a pickle, written by Python 2, of a dict with (among others)
  b"data": a uint8 array [N, 3072], one image a row, channel-planar: the
    1024 red values of the 32x32 image in row-major order, then the 1024
    green, then the 1024 blue;
  b"labels": a list of N ints in [0, 10).
The real files hold N = 10000 images each; any N is accepted here.

The pickles are read with an unpickler that only rebuilds NumPy arrays and
builtin containers, so a batch file cannot run code when it is loaded.
"""
import os
import pickle

import numpy as np

from models.data.dataset import Dataset

NUM_CLASSES = 10
HEIGHT, WIDTH, CHANNELS = 32, 32, 3
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
FOLDER = "cifar-10-batches-py"

# The globals a pickled NumPy array refers to: NumPy 1 (the real files) and
# NumPy 2 module names, protocols 2-5; `_codecs.encode` is how protocol 2
# spells a Python 3 bytes object.
_ALLOWED_GLOBALS = frozenset([
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
])


class _ArrayUnpickler(pickle.Unpickler):
  """An unpickler that refuses every global but those of NumPy arrays."""

  def find_class(self, module, name):
    if (module, name) not in _ALLOWED_GLOBALS:
      raise pickle.UnpicklingError(
          f"refusing to load global {module}.{name}: a CIFAR-10 batch holds "
          "only NumPy arrays, lists, bytes and numbers")
    return super().find_class(module, name)


def _batch_dir(data_dir):
  """`data_dir`, or its `cifar-10-batches-py` subfolder holding the batches."""
  nested = os.path.join(data_dir, FOLDER)
  if (not os.path.exists(os.path.join(data_dir, TRAIN_BATCHES[0])) and
      os.path.exists(os.path.join(nested, TRAIN_BATCHES[0]))):
    return nested
  return data_dir


def _to_float(images):
  """uint8 images as C-ordered float32 in [0, 1], with no float64 copy."""
  images = images.astype(np.float32, order="C")
  images /= np.float32(255)
  return images


def _read_batch_uint8(path):
  """`read_cifar10_batch` but with the images still uint8 [N, 32, 32, 3]."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: CIFAR-10 batch file not found")
  try:
    with open(path, "rb") as f:
      batch = _ArrayUnpickler(f, encoding="bytes").load()
  except (pickle.UnpicklingError, EOFError, ValueError, TypeError,
          AttributeError, IndexError, KeyError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a readable CIFAR-10 pickle batch: "
                     f"{type(e).__name__}: {e}") from e
  if not isinstance(batch, dict):
    raise ValueError(f"{path}: expected a pickled dict with keys b'data' and "
                     f"b'labels', got a {type(batch).__name__}")
  missing = [repr(k) for k in (b"data", b"labels") if k not in batch]
  if missing:
    raise ValueError(f"{path}: expected a dict with keys b'data' and "
                     f"b'labels'; missing {', '.join(missing)} (keys: "
                     f"{sorted(map(repr, batch))})")
  data, labels = batch[b"data"], batch[b"labels"]
  pixels = HEIGHT * WIDTH * CHANNELS
  if (not isinstance(data, np.ndarray) or data.dtype != np.uint8 or
      data.ndim != 2 or data.shape[1] != pixels):
    got = (f"a {data.dtype} array of shape {list(data.shape)}"
           if isinstance(data, np.ndarray) else f"a {type(data).__name__}")
    raise ValueError(f"{path}: expected b'data' to be a uint8 array of shape "
                     f"[N, {pixels}] (32x32x3 per image), got {got}")
  try:
    labels = np.asarray(labels)
  except ValueError as e:
    raise ValueError(f"{path}: expected b'labels' to be a list of ints, "
                     f"got {e}") from e
  if labels.shape != (len(data),) or labels.dtype.kind not in "iu":
    raise ValueError(f"{path}: expected b'labels' to be {len(data)} ints "
                     f"(one per row of b'data'), got {labels.dtype} values "
                     f"of shape {list(labels.shape)}")
  if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
    raise ValueError(f"{path}: expected labels in [0, {NUM_CLASSES}), got "
                     f"values from {labels.min()} to {labels.max()}")
  images = data.reshape(len(data), CHANNELS, HEIGHT, WIDTH)
  return images.transpose(0, 2, 3, 1), labels.astype(np.int64)


def read_cifar10_batch(path):
  """Reads one CIFAR-10 pickle batch.

  Args:
    path: the batch file, e.g. ".../cifar-10-batches-py/data_batch_1".

  Returns:
    (images, labels): images float32 [N, 32, 32, 3] (NHWC) in [0, 1], the
    file's bytes divided by 255; labels int64 [N] in [0, 10).

  Raises:
    FileNotFoundError: `path` does not exist.
    ValueError: the file is not a pickle of a dict with b"data", a uint8
      array [N, 3072], and b"labels", N ints in [0, 10).
  """
  images, labels = _read_batch_uint8(path)
  return _to_float(images), labels


def read_cifar10(data_dir):
  """Reads CIFAR-10's training and test sets from its pickle batches.

  Args:
    data_dir: the `cifar-10-batches-py` folder holding `data_batch_1` ..
      `data_batch_5` and `test_batch`, or a folder that contains
      `cifar-10-batches-py`. All six files are required.

  Returns:
    A `Dataset`: images float32 [N, 32, 32, 3] in [0, 1] (the training
    batches in order 1 to 5), labels int64 in [0, 10), num_classes 10.

  Raises:
    FileNotFoundError: a batch file is missing (the error names it).
    ValueError: a batch file is malformed (the error names it and what was
      expected), or `data_dir` is None.
  """
  if data_dir is None:
    raise ValueError("CIFAR-10 needs the folder of its python batches "
                     f"({FOLDER}); pass --data_dir")
  data_dir = _batch_dir(os.fspath(data_dir))
  names = TRAIN_BATCHES + (TEST_BATCH,)
  paths = [os.path.join(data_dir, name) for name in names]
  for path in paths:  # Name a missing file before reading anything.
    if not os.path.isfile(path):
      raise FileNotFoundError(
          f"{path}: CIFAR-10 batch file not found (expected data_batch_1 .. "
          f"data_batch_5 and test_batch in {data_dir})")
  train = [_read_batch_uint8(path) for path in paths[:-1]]
  test_images, test_labels = read_cifar10_batch(paths[-1])
  return Dataset(
      train_images=_to_float(np.concatenate([images for images, _ in train])),
      train_labels=np.concatenate([labels for _, labels in train]),
      test_images=test_images,
      test_labels=test_labels,
      num_classes=NUM_CLASSES)
