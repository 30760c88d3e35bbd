"""Data sets for TensorBow's examples and tests.

`load_dataset(name, ...)` returns a `Dataset` (float32 NHWC images in [0, 1],
int64 labels) for Fashion-MNIST and MNIST (IDX files), CIFAR-10 (python
pickle batches) or synthetic data; `batches` iterates over shuffled
mini-batches of it. `read_idx` and `load_fashion_mnist` are the IDX reader
and the flat [N, 784] Fashion-MNIST loader.
"""
from models.data.batches import batches
from models.data.cifar10 import read_cifar10
from models.data.dataset import Dataset
from models.data.datasets import load_dataset
from models.data.idx import load_fashion_mnist
from models.data.idx import read_idx
from models.data.synthetic import synthetic_dataset

__all__ = [
    "Dataset",
    "batches",
    "load_dataset",
    "load_fashion_mnist",
    "read_cifar10",
    "read_idx",
    "synthetic_dataset",
]
