"""End-to-end: the TF1 tutorial on Fashion-MNIST, TensorFlow vs TensorBow.

Runs examples/tutorial_fashion_mnist.py's `main` once with
`tf.compat.v1.Session` and once with `TensorBowSession(replicas=4)`, the
session class being the only difference, on the full training set (two
epochs, then a restore and one more epoch) and the whole 10k test set.
About 15 s on a 2-core CPU.
"""
import os

import pytest
import tensorflow as tf

from examples import tutorial_fashion_mnist as tutorial
from models.data import idx
from tensorbow import TensorBowSession

# End-to-end: the fast tier (-m "not slow") leaves these out.
pytestmark = pytest.mark.slow

FLOOR = 0.80  # both reach about 0.85 after two epochs
MAX_GAP = 0.02  # TensorBow vs TensorFlow, absolute test accuracy
EPOCHS = 2
BATCH_SIZE = 100

@pytest.fixture(scope="module")
def results(tmp_path_factory):
  if not os.path.isdir(idx.FASHION_MNIST_DIR):
    pytest.skip(f"Fashion-MNIST is not installed in {idx.FASHION_MNIST_DIR} "
                "(needs train-/t10k-images-idx3-ubyte.gz and "
                "train-/t10k-labels-idx1-ubyte.gz)")
  data = idx.load_fashion_mnist()
  assert len(data[2]) == 10000  # evaluated on the whole test set
  factories = {
      "tf": tf.compat.v1.Session,
      "tensorbow": lambda **kw: TensorBowSession(replicas=4, **kw),
  }
  out = {}
  for name, factory in factories.items():
    out[name] = tutorial.main(
        factory, epochs=EPOCHS, batch_size=BATCH_SIZE, seed=0, data=data,
        checkpoint_dir=str(tmp_path_factory.mktemp(name)), verbose=False)
    print(f"{name}: {out[name]}")
  return out


def test_tensorbow_matches_tensorflow(results):
  tf_accuracy = results["tf"]["trained"]
  tb_accuracy = results["tensorbow"]["trained"]
  assert abs(tb_accuracy - tf_accuracy) <= MAX_GAP, (
      f"TensorBow (4 replicas) test accuracy {tb_accuracy:.4f} vs "
      f"tf.compat.v1.Session {tf_accuracy:.4f}")


@pytest.mark.parametrize("kind", ["tf", "tensorbow"])
def test_accuracy_above_floor(results, kind):
  assert results[kind]["trained"] > FLOOR, results[kind]


@pytest.mark.parametrize("kind", ["tf", "tensorbow"])
def test_restore_gives_saved_model(results, kind):
  assert results[kind]["restored"] == pytest.approx(
      results[kind]["trained"], abs=1e-6), results[kind]


@pytest.mark.parametrize("kind", ["tf", "tensorbow"])
def test_training_on_after_restore(results, kind):
  assert results[kind]["trained_on"] > FLOOR, results[kind]
