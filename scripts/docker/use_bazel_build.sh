#!/usr/bin/env bash
# In the image, after scripts/bazel_build.sh: TensorBow installed as
# scripts/setup.sh's `pip install -e .` would leave it, but with the
# libraries Bazel built instead of pip compiling the same sources again:
# * the two libraries in tensorbow/, under the names pip gives them;
# * the checkout on the virtualenv's path (a .pth file), so that
#   `tensorbow` imports from anywhere, as after the editable install (which
#   maps `tensorbow` alone; the checkout's models, benchmarks and examples
#   run as modules from its root, `python -m examples.demo`);
# * `tensorbow-run`, pyproject.toml's entry point.
# scripts/setup.sh (run by scripts/test.sh and scripts/main.sh) then finds
# TensorBow built and builds nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
python="$PWD/.venv/bin/python"
ext="$("$python" -c \
  'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
for lib in _sma_ops _runtime; do
  cp "bazel-bin/$lib.so" "tensorbow/$lib$ext"
done
site="$("$python" -c \
  'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$PWD" > "$site/tensorbow.pth"
printf '%s\n' "#!$python" 'import sys' 'from tensorbow.cli.main import main' \
  'sys.exit(main())' > .venv/bin/tensorbow-run
chmod +x .venv/bin/tensorbow-run
