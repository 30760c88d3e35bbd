"""Reader for the IDX files of MNIST and Fashion-MNIST.

An IDX file is a 4-byte magic number (two zero bytes, a type code and the
number of dimensions), one big-endian int32 per dimension, then the data in
row-major order. Only the unsigned-byte type (0x08), the one MNIST uses, is
read here.
"""
import gzip
import os

import numpy as np

_UBYTE = 0x08

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
  """Reads an IDX file of unsigned bytes, raw or gzip-compressed.

  Args:
    path: the file; a name ending in ".gz" is read through gzip.

  Returns:
    A `np.uint8` array of the file's shape.

  Raises:
    ValueError: the file is truncated, has trailing data, or its magic
      number is not that of an unsigned-byte IDX file.
  """
  opener = gzip.open if str(path).endswith(".gz") else open
  with opener(path, "rb") as f:
    content = f.read()
  if len(content) < 4:
    raise ValueError(f"{path}: truncated IDX file: expected a 4-byte magic "
                     f"number, got {len(content)} bytes")
  zero, dtype, ndim = content[:2], content[2], content[3]
  if zero != b"\x00\x00" or dtype != _UBYTE:
    raise ValueError(f"{path}: bad IDX magic number 0x{content[:4].hex()}: "
                     f"expected 0x0000{_UBYTE:02x}<ndim> (unsigned bytes)")
  header = 4 + 4 * ndim
  if len(content) < header:
    raise ValueError(f"{path}: truncated IDX file: expected {ndim} "
                     f"dimensions ({header}-byte header), got "
                     f"{len(content)} bytes")
  shape = tuple(int(d) for d in np.frombuffer(content, ">i4", ndim, 4))
  size = int(np.prod(shape, dtype=np.int64))
  if len(content) != header + size:
    state = "truncated" if len(content) < header + size else "trailing data in"
    raise ValueError(f"{path}: {state} IDX file: expected {size} data bytes "
                     f"for shape {shape}, got {len(content) - header}")
  return np.frombuffer(content, np.uint8, size, header).reshape(shape)


def _find(data_dir, name):
  """The path of IDX file `name` in `data_dir`, gzip-compressed or raw."""
  for candidate in (name + ".gz", name):
    path = os.path.join(data_dir, candidate)
    if os.path.exists(path):
      return path
  raise FileNotFoundError(f"{data_dir}: neither {name}.gz nor {name} exists")


def load_fashion_mnist(data_dir=FASHION_MNIST_DIR):
  """Loads Fashion-MNIST (or MNIST, which has the same file names).

  Args:
    data_dir: the directory of train-images-idx3-ubyte(.gz),
      train-labels-idx1-ubyte(.gz), t10k-images-idx3-ubyte(.gz) and
      t10k-labels-idx1-ubyte(.gz).

  Returns:
    (train_images, train_labels, test_images, test_labels): images are
    float32 [N, 784] in [0, 1], labels int64 [N].

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: a file is not a valid IDX file, or images and labels do
      not match.
  """
  arrays = []
  for prefix in ("train", "t10k"):
    images_path = _find(data_dir, f"{prefix}-images-idx3-ubyte")
    labels_path = _find(data_dir, f"{prefix}-labels-idx1-ubyte")
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
      raise ValueError(
          f"{images_path}, {labels_path}: expected images [N, rows, cols] "
          f"and labels [N]; got shapes {images.shape} and {labels.shape}")
    arrays.append(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    arrays.append(labels.astype(np.int64))
  return tuple(arrays)
