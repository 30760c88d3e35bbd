"""Tests of models.data.idx: the IDX reader and the Fashion-MNIST loader."""
import gzip
import struct

import numpy as np
import pytest

from models.data import idx

# NumPy and files only, no graph or session: the TF1 mode cannot change
# them (conftest.py).
pytestmark = pytest.mark.mode_independent


def _idx_bytes(array, magic=None):
  array = np.asarray(array, np.uint8)
  if magic is None:
    magic = bytes([0, 0, 0x08, array.ndim])
  return (magic + struct.pack(f">{array.ndim}i", *array.shape) +
          array.tobytes())


def _write(path, content):
  opener = gzip.open if str(path).endswith(".gz") else open
  with opener(path, "wb") as f:
    f.write(content)
  return path


@pytest.mark.parametrize("name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_round_trip_3d(tmp_path, name):
  expected = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 10
  path = _write(tmp_path / name, _idx_bytes(expected))
  got = idx.read_idx(path)
  assert got.dtype == np.uint8
  np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["labels-idx1-ubyte", "labels-idx1-ubyte.gz"])
def test_round_trip_1d(tmp_path, name):
  expected = np.array([0, 9, 255, 3, 1], np.uint8)
  path = _write(tmp_path / name, _idx_bytes(expected))
  np.testing.assert_array_equal(idx.read_idx(str(path)), expected)


def test_empty_dimension(tmp_path):
  path = _write(tmp_path / "empty-idx2-ubyte", _idx_bytes(np.zeros((0, 5))))
  assert idx.read_idx(path).shape == (0, 5)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_data(tmp_path, gz):
  content = _idx_bytes(np.ones((3, 4)))[:-1]
  path = _write(tmp_path / ("short" + (".gz" if gz else "")), content)
  with pytest.raises(ValueError,
                     match=r"short.*truncated.*expected 12 data bytes.*got 11"):
    idx.read_idx(path)


def test_truncated_header(tmp_path):
  content = _idx_bytes(np.ones((3, 4)))[:9]  # magic, one and a bit dims
  path = _write(tmp_path / "header", content)
  with pytest.raises(ValueError, match=r"header.*truncated.*2 dimensions"):
    idx.read_idx(path)


def test_truncated_magic(tmp_path):
  path = _write(tmp_path / "tiny", b"\x00\x00")
  with pytest.raises(ValueError, match=r"tiny.*truncated.*4-byte magic"):
    idx.read_idx(path)


def test_trailing_data(tmp_path):
  path = _write(tmp_path / "long", _idx_bytes(np.ones((2, 2))) + b"\x00")
  with pytest.raises(ValueError, match=r"long.*trailing data.*expected 4"):
    idx.read_idx(path)


@pytest.mark.parametrize("magic", [
    b"\x00\x00\x0d\x01",  # float32 data
    b"\x1f\x8b\x08\x00",  # a gzip stream read as raw
    b"\x01\x00\x08\x01",  # non-zero leading bytes
])
def test_wrong_magic(tmp_path, magic):
  path = _write(tmp_path / "bad-idx1-ubyte",
                _idx_bytes(np.ones(4), magic=magic))
  with pytest.raises(
      ValueError, match=rf"bad-idx1-ubyte.*0x{magic.hex()}.*expected 0x000008"):
    idx.read_idx(path)


def test_load_fashion_mnist_layout(tmp_path):
  rng = np.random.RandomState(0)
  train = rng.randint(0, 256, (5, 28, 28))
  test = rng.randint(0, 256, (3, 28, 28))
  _write(tmp_path / "train-images-idx3-ubyte.gz", _idx_bytes(train))
  _write(tmp_path / "train-labels-idx1-ubyte.gz", _idx_bytes([1, 2, 3, 4, 5]))
  _write(tmp_path / "t10k-images-idx3-ubyte", _idx_bytes(test))  # raw
  _write(tmp_path / "t10k-labels-idx1-ubyte.gz", _idx_bytes([7, 8, 9]))
  x, y, x_test, y_test = idx.load_fashion_mnist(str(tmp_path))
  assert x.dtype == x_test.dtype == np.float32
  assert y.dtype == y_test.dtype == np.int64
  np.testing.assert_allclose(x, train.reshape(5, 784) / 255.0, rtol=1e-6)
  np.testing.assert_allclose(x_test, test.reshape(3, 784) / 255.0, rtol=1e-6)
  np.testing.assert_array_equal(y, [1, 2, 3, 4, 5])
  np.testing.assert_array_equal(y_test, [7, 8, 9])


def test_load_fashion_mnist_mismatch(tmp_path):
  for prefix in ("train", "t10k"):
    _write(tmp_path / f"{prefix}-images-idx3-ubyte.gz",
           _idx_bytes(np.zeros((2, 28, 28))))
    _write(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", _idx_bytes([1, 2, 3]))
  with pytest.raises(ValueError, match=r"train-images.*\(2, 28, 28\).*\(3,\)"):
    idx.load_fashion_mnist(str(tmp_path))


def test_load_fashion_mnist_missing(tmp_path):
  with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
    idx.load_fashion_mnist(str(tmp_path))
