#!/usr/bin/env bash
# Sets TensorBow up (scripts/setup.sh) and runs the demo: the same TF1 script
# trained with tf.compat.v1.Session and with TensorBowSession.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
# As a module from the checkout's root: `examples` and `models` are the
# checkout's, not installed with the package.
.venv/bin/python -m examples.demo "$@"
