"""Data sets for TensorBow's examples and tests: IDX (MNIST-format) files."""
from tensorbow.data.idx import load_fashion_mnist
from tensorbow.data.idx import read_idx

__all__ = ["load_fashion_mnist", "read_idx"]
