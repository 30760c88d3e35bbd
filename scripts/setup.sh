#!/usr/bin/env bash
# Sets TensorBow up from a fresh clone: Fashion-MNIST (Debian's package, when
# this user may install it), a virtualenv in .venv with the pinned TensorFlow,
# and the C++ build (`pip install -e .`: the libraries are built into the
# source tree, and the virtualenv imports `tensorbow` from it; the
# checkout's models, benchmarks and examples are not installed, and run as
# modules from its root, e.g. `python -m models.lenet`). Safe to run again;
# the build is skipped while it is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) \
      || echo "warning: could not install dataset-fashion-mnist" >&2
  else
    echo "warning: /usr/share/datasets/fashion-mnist is missing;" \
         "install Debian's dataset-fashion-mnist as root" >&2
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
# The build takes minutes: done again only when a source it compiles, or
# how it builds, is newer than a library it made.
built() {
  local lib
  for lib in _sma_ops _runtime; do
    lib=$(ls tensorbow/${lib}.*.so 2>/dev/null | head -1)
    [ -n "$lib" ] || return 1
    [ -z "$(find cc setup.py pyproject.toml requirements.txt -newer "$lib" \
             -print -quit)" ] || return 1
  done
  [ -x .venv/bin/tensorbow-run ]
}
built || .venv/bin/pip install -q --disable-pip-version-check \
  --no-build-isolation -e .
