"""The package as a user meets it: the import-time version check, the README."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

import tensorbow

PACKAGE_ROOT = os.path.dirname(os.path.dirname(tensorbow.__file__))
README = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "README.md")


def run_python(source):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
  return subprocess.run([sys.executable, "-c", source], env=env,
                        cwd=tempfile.gettempdir(), capture_output=True,
                        text=True, timeout=300)


@pytest.mark.slow
def test_import_rejects_another_tensorflow_version():
  result = run_python(
      "import tensorflow as tf\n"
      "tf.__version__ = '2.20.0'\n"
      "try:\n"
      "  import tensorbow\n"
      "except ImportError as e:\n"
      "  print('ImportError:', e)\n")
  assert result.returncode == 0, result.stderr[-2000:]
  assert ("TensorBow was built for TensorFlow 2.21.0 but found TensorFlow "
          "2.20.0; install the matching version with `pip install "
          "tensorflow-cpu==2.21.0`") in result.stdout


@pytest.mark.slow
def test_readme_example_runs():
  with open(README) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  assert blocks, "README.md has no python example"
  result = run_python(blocks[0])
  assert result.returncode == 0, result.stderr[-2000:]
  # It prints [loss, None]: a finite mean loss of 10 classes near log(10).
  match = re.search(r"\[(?:np\.float32\()?([0-9.e+-]+)\)?, None\]",
                    result.stdout)
  assert match, result.stdout
  assert abs(float(match.group(1)) - 2.3026) < 0.1
