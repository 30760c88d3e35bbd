"""TensorBow: small-batch, multi-replica training for TensorFlow 1-style graphs.

Swap `tf.compat.v1.Session` for `tensorbow.TensorBowSession` and TensorBow
trains several replicas of the model at once, each on its own shard of the
batch, kept together by synchronous model averaging (DESIGN.md).

Importing the package checks the TensorFlow version, loads the op
library and the runtime extension it was built against, and has
TensorFlow note the constants it folds from static shapes
(compat.record_shape_folds).
"""
import tensorflow as _tf

TENSORFLOW_VERSION = "2.21.0"

if _tf.__version__ != TENSORFLOW_VERSION:
  raise ImportError(
      f"TensorBow was built for TensorFlow {TENSORFLOW_VERSION} but found "
      f"TensorFlow {_tf.__version__}; install the matching version with "
      f"`pip install tensorflow-cpu=={TENSORFLOW_VERSION}` and rebuild "
      "TensorBow with `pip install --no-build-isolation .`")

# pylint: disable=g-import-not-at-top,wrong-import-position
from tensorbow import algorithms
from tensorbow import compat
from tensorbow import hooks
from tensorbow import ops
from tensorbow import runtime
from tensorbow.monitored import TensorBowSessionCreator
from tensorbow.session import TensorBowSession

ops.library()
runtime.extension()
# Before the user's graph is built: which constants TensorFlow folds from a
# batch's static size (rewrite/batch_sizes.py).
compat.record_shape_folds()

__version__ = "0.1.0"
__all__ = ["TensorBowSession", "TensorBowSessionCreator", "algorithms", "hooks",
           "ops", "runtime"]
