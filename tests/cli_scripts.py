"""What the `tensorbow-run` tests (test_cli_*.py) share: the least-squares
data and model their TF1 scripts train, and running a script under the
command in a child process."""
import subprocess
import sys

import numpy as np

import tensorbow

from children import child_env
import references

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


def run_child(tmp_path, script_text, *args, status=0, flags=("--replicas",
                                                               "4")):
  """Runs `script_text` as script.py under `python -m tensorbow.run
  FLAGS` (default `--replicas 4`), with `args`; checks it exits with
  `status`; returns the command's stderr."""
  script = tmp_path / "script.py"
  script.write_text(script_text)
  done = subprocess.run(
      [sys.executable, "-m", "tensorbow.run", *flags, str(script)] +
      [str(a) for a in args],
      env=child_env(), cwd=tmp_path, capture_output=True, text=True,
      timeout=600)
  assert done.returncode == status, done.stderr[-3000:]
  return done.stderr


def assert_sma(w, b, replicas, x=X16, y=Y16):
  """Checks that `w` and `b` are SMA's central model (alpha 1 / replicas,
  momentum 0.9) after STEPS waves on (`x`, `y`) from (W0, B0)."""
  waves = references.sma([W0, B0], [(x, y)] * STEPS, replicas,
                         alpha=1.0 / replicas, mu=0.9, lr=LR)
  np.testing.assert_allclose(w, waves[-1][0][0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(b, waves[-1][0][1], rtol=1e-5, atol=1e-6)


def run_model_script(tmp_path, template, mode, *args, x=X16, y=Y16,
                     status=0):
  """Runs `template` (a script around MODEL; its {mode}, {lr} and
  {steps} filled in) under `run_child` on data.npz, the data (`x`, `y`)
  and the start (W0, B0), given as its first argument before `args`;
  returns the command's stderr."""
  data = tmp_path / "data.npz"
  np.savez(data, x=x, y=y, w0=W0, b0=B0)
  return run_child(tmp_path, template.format(mode=mode, lr=LR, steps=STEPS),
                   data, *args, status=status)


def record_sessions(monkeypatch):
  """[(type, options)] of every TensorBowSession made from now on (while
  `monkeypatch` holds)."""
  made = []
  init = tensorbow.TensorBowSession.__init__

  def recorded(self, target="", graph=None, config=None, **options):
    made.append((type(self), options))
    init(self, target, graph, config, **options)

  monkeypatch.setattr(tensorbow.TensorBowSession, "__init__", recorded)
  return made
