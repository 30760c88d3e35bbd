"""Tests of models.data: CIFAR-10, load_dataset, synthetic data, batches."""
import gzip
import itertools
import os
import pickle
import struct

import numpy as np
import pytest

from models import data
from models.data import idx

# NumPy and files only, no graph or session: the TF1 mode cannot change
# them (conftest.py).
pytestmark = pytest.mark.mode_independent

# ----------------------------------------------------------------- helpers


def _write_batch(path, batch, protocol=2):
  with open(path, "wb") as f:
    pickle.dump(batch, f, protocol=protocol)


def _cifar_dir(root, rows=(2, 1, 3, 2, 2), test_rows=3, seed=0, protocol=2):
  """Writes data_batch_1..5 and test_batch with `rows` images each.

  Returns:
    (raw data [N, 3072] uint8, labels [N]) for the training batches in
    order and for the test batch.
  """
  rng = np.random.RandomState(seed)
  os.makedirs(root, exist_ok=True)
  written = []
  for name, n in [(f"data_batch_{i + 1}", r) for i, r in enumerate(rows)] + [
      ("test_batch", test_rows)]:
    raw = rng.randint(0, 256, (n, 3072)).astype(np.uint8)
    labels = [int(v) for v in rng.randint(0, 10, n)]
    _write_batch(os.path.join(root, name),
                 {b"batch_label": name.encode(), b"data": raw,
                  b"labels": labels,
                  b"filenames": [b"x.png"] * n}, protocol)
    written.append((raw, labels))
  train = written[:-1]
  return ((np.concatenate([r for r, _ in train]),
           np.concatenate([l for _, l in train]).astype(np.int64)),
          (written[-1][0], np.array(written[-1][1], np.int64)))


def _idx_bytes(array):
  array = np.asarray(array, np.uint8)
  return (bytes([0, 0, 0x08, array.ndim]) +
          struct.pack(f">{array.ndim}i", *array.shape) + array.tobytes())


def _idx_dir(root, train=5, test=3, size=(28, 28), seed=0):
  """Writes the four (Fashion-)MNIST IDX files; returns the raw arrays."""
  rng = np.random.RandomState(seed)
  arrays = {}
  for prefix, n in (("train", train), ("t10k", test)):
    images = rng.randint(0, 256, (n,) + size).astype(np.uint8)
    labels = rng.randint(0, 10, n).astype(np.uint8)
    with gzip.open(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"),
                   "wb") as f:
      f.write(_idx_bytes(images))
    with open(os.path.join(root, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
      f.write(_idx_bytes(labels))  # Raw, to read both kinds.
    arrays[prefix] = (images, labels)
  return arrays


def _check_layout(dataset, num_classes):
  for images, labels in ((dataset.train_images, dataset.train_labels),
                         (dataset.test_images, dataset.test_labels)):
    assert images.dtype == np.float32 and labels.dtype == np.int64
    assert images.ndim == 4 and labels.shape == (len(images),)
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert labels.min() >= 0 and labels.max() < num_classes
  assert dataset.num_classes == num_classes


# ----------------------------------------------------------------- Dataset


def test_dataset_fields():
  assert data.Dataset._fields == ("train_images", "train_labels",
                                  "test_images", "test_labels", "num_classes")


def test_exports_keep_idx():
  assert data.read_idx is idx.read_idx
  assert data.load_fashion_mnist is idx.load_fashion_mnist


# ----------------------------------------------------------------- CIFAR-10


def test_cifar10_pixel_positions(tmp_path):
  """Channel-planar rows become [h, w, c]: R, G, B planes of 32x32."""
  row = np.zeros(3072, np.uint8)
  row[0 * 1024 + 1 * 32 + 2] = 255  # R at h=1, w=2
  row[1 * 1024 + 3 * 32 + 0] = 51  # G at h=3, w=0
  row[2 * 1024 + 31 * 32 + 31] = 102  # B at h=31, w=31
  row[2 * 1024 + 0 * 32 + 5] = 1  # B at h=0, w=5
  for i in range(1, 6):
    _write_batch(tmp_path / f"data_batch_{i}",
                 {b"data": np.stack([row, np.full(3072, i, np.uint8)]),
                  b"labels": [i, 9 - i]})
  _write_batch(tmp_path / "test_batch",
               {b"data": row[None], b"labels": [7]})
  ds = data.read_cifar10(str(tmp_path))
  _check_layout(ds, 10)
  assert ds.train_images.shape == (10, 32, 32, 3)
  assert ds.test_images.shape == (1, 32, 32, 3)
  image = ds.test_images[0]
  assert image[1, 2, 0] == 1.0
  assert image[3, 0, 1] == np.float32(51 / 255) == np.float32(0.2)
  assert image[31, 31, 2] == np.float32(0.4)
  assert image[0, 5, 2] == np.float32(1 / 255)
  assert np.count_nonzero(image) == 4
  np.testing.assert_array_equal(ds.train_images[0], image)
  # The constant rows: batch i's second image is i/255 everywhere.
  for i in range(1, 6):
    np.testing.assert_array_equal(ds.train_images[2 * i - 1],
                                  np.full((32, 32, 3), np.float32(i / 255)))
  np.testing.assert_array_equal(ds.train_labels,
                                [1, 8, 2, 7, 3, 6, 4, 5, 5, 4])
  np.testing.assert_array_equal(ds.test_labels, [7])
  assert ds.train_images.flags.c_contiguous
  assert ds.test_images.flags.c_contiguous


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar10_every_pixel(tmp_path, protocol):
  (raw, labels), (test_raw, test_labels) = _cifar_dir(tmp_path,
                                                      protocol=protocol)
  ds = data.read_cifar10(tmp_path)  # A pathlib.Path works too.
  assert ds.train_images.shape == (10, 32, 32, 3)
  assert ds.test_images.shape == (3, 32, 32, 3)
  for images, rows in ((ds.train_images, raw), (ds.test_images, test_raw)):
    for n in range(len(rows)):
      for h, w, c in itertools.product(range(32), range(32), range(3)):
        expected = np.float32(rows[n, c * 1024 + h * 32 + w]) / np.float32(255)
        assert images[n, h, w, c] == expected, (n, h, w, c)
  np.testing.assert_array_equal(ds.train_labels, labels)
  np.testing.assert_array_equal(ds.test_labels, test_labels)


def test_cifar10_numpy1_pickle(tmp_path):
  """The real files name NumPy 1's numpy.core.multiarray._reconstruct."""
  raw = np.arange(2 * 3072, dtype=np.int64).astype(np.uint8).reshape(2, 3072)
  content = pickle.dumps({b"data": raw, b"labels": [3, 4]}, protocol=2)
  assert b"numpy._core.multiarray\n_reconstruct" in content
  content = content.replace(b"numpy._core.multiarray\n",
                            b"numpy.core.multiarray\n")
  for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    (tmp_path / name).write_bytes(content)
  ds = data.read_cifar10(tmp_path)
  assert ds.train_images.shape == (10, 32, 32, 3)
  assert ds.test_images[1, 0, 0, 0] == np.float32(3072 % 256 / 255)
  np.testing.assert_array_equal(ds.test_labels, [3, 4])


def test_cifar10_load_dataset_and_nested_folder(tmp_path):
  (raw, labels), (test_raw, test_labels) = _cifar_dir(
      tmp_path / "cifar-10-batches-py")
  for data_dir in (tmp_path, tmp_path / "cifar-10-batches-py"):
    ds = data.load_dataset("cifar10", data_dir=str(data_dir))
    _check_layout(ds, 10)
    assert ds.train_images.shape == (10, 32, 32, 3)
    np.testing.assert_array_equal(
        ds.train_images * 255,
        raw.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32))
    np.testing.assert_array_equal(ds.test_labels, test_labels)
  small = data.load_dataset("cifar10", data_dir=tmp_path, train_size=4,
                            test_size=1, image_shape=(32, 32, 3))
  assert small.train_images.shape == (4, 32, 32, 3)
  assert small.test_images.shape == (1, 32, 32, 3)
  np.testing.assert_array_equal(small.train_images, ds.train_images[:4])
  np.testing.assert_array_equal(small.train_labels, labels[:4])
  np.testing.assert_array_equal(small.test_labels, test_labels[:1])


@pytest.mark.parametrize("missing", ["data_batch_3", "test_batch"])
def test_cifar10_missing_file(tmp_path, missing):
  _cifar_dir(tmp_path)
  os.remove(tmp_path / missing)
  with pytest.raises(FileNotFoundError, match=rf"{missing}.*not found"):
    data.read_cifar10(tmp_path)


def test_cifar10_empty_folder(tmp_path):
  with pytest.raises(FileNotFoundError, match="data_batch_1"):
    data.load_dataset("cifar10", data_dir=tmp_path)


def test_cifar10_needs_data_dir():
  with pytest.raises(ValueError, match="--data_dir"):
    data.load_dataset("cifar10")


_GOOD = np.zeros((2, 3072), np.uint8)


@pytest.mark.parametrize("batch, message", [
    ({b"labels": [1, 2]}, r"missing b'data'"),
    ({b"data": _GOOD}, r"missing b'labels'"),
    ({"data": _GOOD, "labels": [1, 2]}, r"keys b'data' and b'labels'"),
    ([_GOOD, [1, 2]], r"expected a pickled dict.*got a list"),
    ({b"data": np.zeros((2, 3000), np.uint8), b"labels": [1, 2]},
     r"uint8 array of shape \[N, 3072\].*got a uint8 array of shape "
     r"\[2, 3000\]"),
    ({b"data": np.zeros(6144, np.uint8), b"labels": [1, 2]},
     r"\[N, 3072\].*shape \[6144\]"),
    ({b"data": np.zeros((2, 3072), np.float32), b"labels": [1, 2]},
     r"uint8 array.*got a float32 array"),
    ({b"data": b"\x00" * 6144, b"labels": [1, 2]},
     r"uint8 array.*got a bytes"),
    ({b"data": _GOOD, b"labels": [1, 2, 3]},
     r"expected b'labels' to be 2 ints.*shape \[3\]"),
    ({b"data": _GOOD, b"labels": [1.0, 2.0]},
     r"expected b'labels' to be 2 ints.*float64"),
    ({b"data": _GOOD, b"labels": [1, 10]},
     r"expected labels in \[0, 10\), got values from 1 to 10"),
    ({b"data": _GOOD, b"labels": [-1, 0]}, r"labels in \[0, 10\)"),
])
def test_cifar10_malformed(tmp_path, batch, message):
  _cifar_dir(tmp_path)
  _write_batch(tmp_path / "data_batch_4", batch)
  with pytest.raises(ValueError, match=r"data_batch_4: .*" + message):
    data.read_cifar10(tmp_path)


@pytest.mark.parametrize("content", [b"", b"not a pickle", b"\x80\x02}q\x00("])
def test_cifar10_not_a_pickle(tmp_path, content):
  _cifar_dir(tmp_path)
  (tmp_path / "test_batch").write_bytes(content)
  with pytest.raises(ValueError,
                     match=r"test_batch: not a readable CIFAR-10 pickle"):
    data.read_cifar10(tmp_path)


class _Payload:
  """Unpickles as a call to os.mkdir: what a hostile batch file could do."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return os.mkdir, (self.path,)


def test_cifar10_pickle_cannot_run_code(tmp_path):
  _cifar_dir(tmp_path / "c")
  target = tmp_path / "created_by_pickle"
  _write_batch(tmp_path / "c" / "data_batch_1",
               {b"data": _GOOD, b"labels": [0, 1], b"x": _Payload(str(target))})
  with pytest.raises(ValueError, match=r"data_batch_1.*refusing to load "
                     r"global (posix|nt|os)\.mkdir"):
    data.read_cifar10(tmp_path / "c")
  assert not target.exists()


# ----------------------------------------------------------------- IDX


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_idx_load_dataset(tmp_path, name):
  raw = _idx_dir(tmp_path)
  ds = data.load_dataset(name, data_dir=tmp_path)
  _check_layout(ds, 10)
  assert ds.train_images.shape == (5, 28, 28, 1)
  assert ds.test_images.shape == (3, 28, 28, 1)
  for images, (expected, labels), split in (
      (ds.train_images, raw["train"], "train"),
      (ds.test_images, raw["t10k"], "t10k")):
    np.testing.assert_array_equal(images[..., 0] * np.float32(255),
                                  expected.astype(np.float32), err_msg=split)
    assert images[1, 27, 3, 0] == np.float32(expected[1, 27, 3]) / 255
  np.testing.assert_array_equal(ds.train_labels, raw["train"][1])
  np.testing.assert_array_equal(ds.test_labels, raw["t10k"][1])


def test_idx_truncate(tmp_path):
  raw = _idx_dir(tmp_path)
  ds = data.load_dataset("mnist", data_dir=str(tmp_path), train_size=2,
                         test_size=0, image_shape=[28, 28, 1])
  assert ds.train_images.shape == (2, 28, 28, 1)
  assert ds.test_images.shape == (0, 28, 28, 1)
  assert ds.test_labels.shape == (0,)
  np.testing.assert_array_equal(ds.train_labels, raw["train"][1][:2])
  assert ds.train_images.base is None  # A copy, not a view of all 5.


def test_idx_errors(tmp_path):
  with pytest.raises(ValueError, match="MNIST has no default.*--data_dir"):
    data.load_dataset("mnist")
  with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
    data.load_dataset("mnist", data_dir=tmp_path)
  _idx_dir(tmp_path)
  with pytest.raises(ValueError, match=r"train_size=6 but the data set has "
                     r"only 5 train examples"):
    data.load_dataset("mnist", data_dir=tmp_path, train_size=6)
  with pytest.raises(ValueError, match=r"test_size must be None or an int "
                     r">= 0, got -1"):
    data.load_dataset("mnist", data_dir=tmp_path, test_size=-1)
  with pytest.raises(ValueError, match=r"images have shape \(28, 28, 1\), "
                     r"not the requested image_shape \(32, 32, 3\)"):
    data.load_dataset("mnist", data_dir=tmp_path, image_shape=(32, 32, 3))


def test_idx_wrong_image_size(tmp_path):
  _idx_dir(tmp_path, size=(32, 32))
  with pytest.raises(ValueError, match=r"28x28 pixels \(784 values\), got "
                     r"1024"):
    data.load_dataset("mnist", data_dir=tmp_path)


@pytest.mark.skipif(not os.path.isdir(idx.FASHION_MNIST_DIR),
                    reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_default_dir():
  ds = data.load_dataset("fashion_mnist", train_size=100, test_size=50)
  _check_layout(ds, 10)
  assert ds.train_images.shape == (100, 28, 28, 1)
  assert ds.test_images.shape == (50, 28, 28, 1)
  assert ds.train_images.max() == 1.0  # Some pixel is 255.
  assert len(np.unique(ds.train_labels)) == 10


def test_unknown_name():
  with pytest.raises(ValueError, match=r"unknown data set 'imagenet'; "
                     r"accepted names: cifar10, fashion_mnist, mnist, "
                     r"synthetic"):
    data.load_dataset("imagenet")


# ----------------------------------------------------------------- synthetic


def test_synthetic_defaults():
  ds = data.load_dataset("synthetic")
  _check_layout(ds, 10)
  assert ds.train_images.shape == (2048, 28, 28, 1)
  assert ds.test_images.shape == (512, 28, 28, 1)
  # Balanced: 2048 = 10 * 204 + 8, 512 = 10 * 51 + 2.
  assert sorted(np.bincount(ds.train_labels)) == [204] * 2 + [205] * 8
  assert sorted(np.bincount(ds.test_labels)) == [51] * 8 + [52] * 2
  # Shuffled, not class after class.
  assert np.count_nonzero(np.diff(ds.train_labels)) > 1500
  # Noise and clipping: both ends are reached, the mean is the middle.
  assert np.mean(ds.train_images == 0.0) > 0.001
  assert np.mean(ds.train_images == 1.0) > 0.001
  assert abs(ds.train_images.mean() - 0.5) < 0.01


def test_synthetic_seeded():
  a = data.synthetic_dataset((8, 6, 3), train_size=64, test_size=32, seed=1)
  b = data.load_dataset("synthetic", image_shape=(8, 6, 3), train_size=64,
                        test_size=32, seed=1)
  c = data.synthetic_dataset((8, 6, 3), train_size=64, test_size=32, seed=2)
  assert a.train_images.shape == (64, 8, 6, 3)
  assert a.test_images.shape == (32, 8, 6, 3)
  for x, y, z in zip(a[:4], b[:4], c[:4]):
    np.testing.assert_array_equal(x, y)
    assert not np.array_equal(x, z)
  # The test set does not depend on the training set's size.
  d = data.synthetic_dataset((8, 6, 3), train_size=10, test_size=32, seed=1)
  np.testing.assert_array_equal(d.test_images, a.test_images)
  np.testing.assert_array_equal(d.test_labels, a.test_labels)


def test_synthetic_learnable():
  """Nearest class mean of the training set classifies the test set."""
  ds = data.synthetic_dataset((8, 8, 1), num_classes=5, train_size=500,
                              test_size=200, seed=3)
  _check_layout(ds, 5)
  x = ds.train_images.reshape(500, -1)
  means = np.stack([x[ds.train_labels == k].mean(0) for k in range(5)])
  test = ds.test_images.reshape(200, -1)
  distances = ((test[:, None, :] - means[None]) ** 2).sum(-1)
  accuracy = np.mean(distances.argmin(1) == ds.test_labels)
  assert accuracy > 0.95
  # Same-class images correlate more than images of different classes.
  assert np.linalg.norm(means[0] - means[1]) > 1.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(image_shape=(28, 28)), r"image_shape must be \(height, width, "
     r"channels\).*\(28, 28\)"),
    (dict(image_shape=(28, 0, 1)), r"three positive ints"),
    (dict(image_shape=None), r"image_shape must be"),
    (dict(image_shape=(4, 4, 1), num_classes=0), r"num_classes must be an "
     r"int >= 1, got 0"),
    (dict(image_shape=(4, 4, 1), train_size=-1), r"train_size .* got -1"),
    (dict(image_shape=(4, 4, 1), test_size=1.5), r"test_size .* got 1.5"),
])
def test_synthetic_invalid(kwargs, message):
  with pytest.raises(ValueError, match=message):
    data.synthetic_dataset(**kwargs)


# ----------------------------------------------------------------- batches


def _ids(n):
  """Images whose every value is the example's index, and labels 1000 + i."""
  images = np.repeat(np.arange(n, dtype=np.float32), 6).reshape(n, 2, 3, 1)
  return images, np.arange(n, dtype=np.int64) + 1000


def test_batches_each_example_once_per_epoch():
  images, labels = _ids(12)
  got = list(data.batches(images, labels, 4, seed=5, epochs=3))
  assert [epoch for epoch, _, _ in got] == [0] * 3 + [1] * 3 + [2] * 3
  for _, x, y in got:
    assert x.shape == (4, 2, 3, 1) and x.dtype == np.float32
    assert y.shape == (4,) and y.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1, 2, 0] + 1000, y)  # Paired.
    assert np.all(x == x[:, :1, :1, :1])
  orders = []
  for epoch in range(3):
    ids = np.concatenate([y for e, _, y in got if e == epoch]) - 1000
    assert sorted(ids) == list(range(12))
    orders.append(ids)
  assert not np.array_equal(orders[0], orders[1])  # Reshuffled.
  # The permutations are the RandomState(seed)'s, one per epoch.
  rng = np.random.RandomState(5)
  for ids in orders:
    np.testing.assert_array_equal(ids, rng.permutation(12))


def test_batches_drop_partial():
  images, labels = _ids(10)
  got = list(data.batches(images, labels, 3, seed=0, epochs=2))
  assert len(got) == 6  # 3 full batches of 3 per epoch; 1 example dropped.
  rng = np.random.RandomState(0)
  for epoch in range(2):
    ids = np.concatenate([y for e, _, y in got if e == epoch]) - 1000
    assert len(ids) == len(set(ids)) == 9
    np.testing.assert_array_equal(ids, rng.permutation(10)[:9])


def test_batches_reproducible():
  images, labels = _ids(20)
  def run(seed):
    return [(e, y.tolist())
            for e, _, y in data.batches(images, labels, 5, seed, epochs=4)]
  assert run(7) == run(7)
  assert run(7) != run(8)


def test_batches_forever():
  images, labels = _ids(5)
  got = list(itertools.islice(data.batches(images, labels, 2), 101))
  assert len(got) == 101
  assert got[-1][0] == 50  # Two batches per epoch.
  assert all(len(y) == 2 for _, _, y in got)


def test_batches_zero_epochs_and_full_batch():
  images, labels = _ids(4)
  assert not list(data.batches(images, labels, 4, epochs=0))
  got = list(data.batches(images, labels, 4, epochs=2))
  assert [sorted(y - 1000) for _, _, y in got] == [[0, 1, 2, 3]] * 2


def test_batches_errors():
  images, labels = _ids(4)
  # Raised by the call itself, before the first next().
  with pytest.raises(ValueError, match=r"batch_size 5 is larger than the 4 "
                     r"examples"):
    data.batches(images, labels, 5)
  with pytest.raises(ValueError, match=r"batch_size must be a positive int, "
                     r"got 0"):
    data.batches(images, labels, 0)
  with pytest.raises(ValueError, match=r"differ in length: 4 and 3"):
    data.batches(images, labels[:3], 2)
  with pytest.raises(ValueError, match=r"epochs must be None or >= 0"):
    data.batches(images, labels, 2, epochs=-1)
