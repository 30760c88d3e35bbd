#!/usr/bin/env bash
# Sets TensorBow up from a fresh clone: Fashion-MNIST (Debian's package, when
# this user may install it), a virtualenv in .venv with the pinned TensorFlow,
# and the C++ build (`pip install -e .`: the libraries are built into the
# source tree, so scripts run from the checkout with PYTHONPATH=. find
# them). Safe to run again.
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
.venv/bin/pip install -q --disable-pip-version-check --no-build-isolation -e .
