"""The package as a user meets it: the import-time version check, the README,
what the wheel holds, and the checkout's tools run beside it."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import setuptools

from tensorbow import options as tb_options
from tensorbow import ops as tb_ops

from children import CHECKOUT, child_env

# The README and the import-time checks, in child processes that choose
# their own TF1 mode (the README's example switches to graph mode itself):
# this run's mode cannot change them (conftest.py).
pytestmark = pytest.mark.mode_independent

README = os.path.join(CHECKOUT, "README.md")
# Packages of the checkout that are its tools, not the product.
TOOLS = ("models", "benchmarks", "examples")


def run_python(source, **environ):
  return subprocess.run([sys.executable, "-c", source],
                        env=child_env(**environ),
                        cwd=tempfile.gettempdir(), capture_output=True,
                        text=True, timeout=300)


def readme_example():
  with open(README) as f:
    return re.findall(r"```python\n(.*?)```", f.read(), re.S)[0]


def assert_readme_loss(stdout):
  # It prints [loss, None]: a finite mean loss of 10 classes near log(10).
  match = re.search(r"\[(?:np\.float32\()?([0-9.e+-]+)\)?, None\]", stdout)
  assert match, stdout
  assert abs(float(match.group(1)) - 2.3026) < 0.1


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
  result = run_python(readme_example())
  assert result.returncode == 0, result.stderr[-2000:]
  assert_readme_loss(result.stdout)


@pytest.mark.slow
def test_library_dir_chooses_the_libraries_loaded(tmp_path):
  # As scripts/bazel_build.sh's libraries are used: named as Bazel names them.
  for stem in ("_sma_ops", "_runtime"):
    shutil.copy(tb_ops.library_file(stem), tmp_path / f"{stem}.so")
  result = run_python(
      readme_example() +
      "import sys\n"
      "print('runtime:', sys.modules['tensorbow._runtime'].__file__)\n"
      "print('ops:', tb.ops.library_file('_sma_ops'))\n",
      TENSORBOW_LIBRARY_DIR=str(tmp_path))
  assert result.returncode == 0, result.stderr[-2000:]
  assert f"runtime: {tmp_path}/_runtime.so" in result.stdout
  assert f"ops: {tmp_path}/_sma_ops.so" in result.stdout
  assert_readme_loss(result.stdout)


@pytest.mark.slow
def test_library_dir_without_libraries_says_so(tmp_path):
  result = run_python("import tensorbow",
                      TENSORBOW_LIBRARY_DIR=str(tmp_path))
  assert result.returncode != 0
  assert (f"TensorBow's library _sma_ops*.so is missing from {tmp_path}"
          in result.stderr), result.stderr[-2000:]
  assert "$TENSORBOW_LIBRARY_DIR" in result.stderr


def test_readme_is_an_index_with_the_two_commands():
  with open(README) as f:
    text = f.read()
  assert text.count("\n") < 200
  assert "bash scripts/main.sh" in text and "bash scripts/test.sh" in text
  # It points at the design and the results, both in the repository.
  root = os.path.dirname(README)
  for path in ("docs/DESIGN.md", "benchmarks/RESULTS.md"):
    assert path in text and os.path.exists(os.path.join(root, path))
  assert "../" not in text  # never outside the repository


def wheel_packages():
  """The packages pyproject.toml's [tool.setuptools.packages.find] gives the
  wheel, found as setuptools finds them (namespace packages unless
  `namespaces = false`)."""
  tomllib = pytest.importorskip("tomllib")  # Python 3.11
  with open(os.path.join(CHECKOUT, "pyproject.toml"), "rb") as f:
    find = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]
  finder = (setuptools.find_namespace_packages if find.get("namespaces", True)
            else setuptools.find_packages)
  return [package for where in find.get("where", ["."])
          for package in finder(os.path.join(CHECKOUT, where),
                                include=find.get("include", ["*"]),
                                exclude=find.get("exclude", []))]


def test_the_wheel_holds_tensorbow_alone():
  packages = wheel_packages()
  product = {os.path.relpath(folder, CHECKOUT).replace(os.sep, ".")
             for folder, _, files in os.walk(os.path.join(CHECKOUT,
                                                          "tensorbow"))
             if "__init__.py" in files}
  assert {"tensorbow", "tensorbow.cli", "tensorbow.algorithms"} <= product
  assert product <= set(packages), sorted(product - set(packages))
  assert all(p.split(".")[0] == "tensorbow" for p in packages), packages
  # The tools are packages of the checkout, left out of the wheel.
  for tool in TOOLS:
    assert os.path.exists(os.path.join(CHECKOUT, tool, "__init__.py"))


@pytest.mark.slow
@pytest.mark.parametrize("module, says", [
    # Every algorithm the session takes, by name (its registry).
    ("models.lenet", "--algorithm {" + ",".join(tb_options.ALGORITHMS) +
     "}"),
    ("benchmarks.suite", "usage: python -m benchmarks.suite"),
    ("examples.demo", "--seeds SEEDS"),
])
def test_the_checkouts_tools_run_as_modules_from_its_root(module, says):
  # As README.md and scripts/main.sh run them: the root is on sys.path
  # because it is the working directory, not because they are installed.
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.pop("PYTHONPATH", None)
  result = subprocess.run([sys.executable, "-m", module, "--help"], env=env,
                          cwd=CHECKOUT, capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert says in " ".join(result.stdout.split()), result.stdout
