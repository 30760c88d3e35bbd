"""What the `tensorbow-run` tests (test_cli_*.py) share: the least-squares
data and model their TF1 scripts train, and running a script under the
command in a child process."""
import os
import subprocess
import sys

import numpy as np

import tensorbow

PACKAGE_ROOT = os.path.dirname(os.path.dirname(tensorbow.__file__))

LR, STEPS = 0.1, 4
RNG = np.random.RandomState(7)
X = RNG.randn(10, 3).astype(np.float32)
Y = RNG.randn(10, 1).astype(np.float32)
W0 = np.array([[0.5], [-0.3], [0.8]], np.float32)
B0 = np.array([0.1], np.float32)
X16 = RNG.randn(16, 3).astype(np.float32)
Y16 = RNG.randn(16, 1).astype(np.float32)

# The least-squares model of the tests' scripts, `tf` imported.
MODEL = """\
data = np.load(sys.argv[1])
x = tf.compat.v1.placeholder(tf.float32, [None, 3])
y = tf.compat.v1.placeholder(tf.float32, [None, 1])
w = tf.Variable(data["w0"])
b = tf.Variable(data["b0"])
loss = 0.5 * tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
train = tf.compat.v1.train.GradientDescentOptimizer({lr}).minimize(loss)
"""


def run_child(tmp_path, script_text, *args):
  """Runs `script_text` as script.py under `python -m tensorbow.run
  --replicas 4`, with `args`; returns the command's stderr."""
  script = tmp_path / "script.py"
  script.write_text(script_text)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", "--replicas", "4",
       str(script)] + [str(a) for a in args],
      env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stderr
