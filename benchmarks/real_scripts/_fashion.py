"""Fashion-MNIST as the tutorials read it: IDX files into NumPy arrays
(flattened, scaled to [0, 1]); synthetic images of the same shapes when
Debian's dataset-fashion-mnist is not installed."""
import gzip
import os

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def _idx(name):
  with gzip.open(os.path.join(DATA_DIR, name)) as f:
    data = f.read()
  dims = data[3]
  shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
           for i in range(dims)]
  return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(train_size, test_size=10000):
  """(train images, train labels, test images, test labels)."""
  if not os.path.isdir(DATA_DIR):
    rng = np.random.RandomState(0)
    return (rng.rand(train_size, 784).astype(np.float32),
            rng.randint(0, 10, train_size),
            rng.rand(test_size, 784).astype(np.float32),
            rng.randint(0, 10, test_size))
  def images(name, n):
    return _idx(name)[:n].reshape(n, 784).astype(np.float32) / 255.0
  return (images("train-images-idx3-ubyte.gz", train_size),
          _idx("train-labels-idx1-ubyte.gz")[:train_size].astype(np.int64),
          images("t10k-images-idx3-ubyte.gz", test_size),
          _idx("t10k-labels-idx1-ubyte.gz")[:test_size].astype(np.int64))
