"""What the tests that start child Pythons share: where the package the
children import lies, and the environment they start in."""
import os

import tensorbow

# The directory holding the tensorbow this process imported (installed or
# the source tree): the children import the same one.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(tensorbow.__file__))
# The checkout: `models`, `benchmarks`, `examples` and the tests are its,
# not the wheel's.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(*paths, unset=(), **variables):
  """The environment of a child Python: this process's without the names
  in `unset`, TensorFlow's C++ log at level 2 unless `variables` set
  TF_CPP_MIN_LOG_LEVEL, `variables` set, and a PYTHONPATH that begins
  with PACKAGE_ROOT and `paths`, before what it held."""
  env = {k: v for k, v in os.environ.items() if k not in unset}
  env.update(dict({"TF_CPP_MIN_LOG_LEVEL": "2"}, **variables))
  held = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
  env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths, *held])
  return env
