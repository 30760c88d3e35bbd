#!/usr/bin/env bash
# Sets TensorBow up (scripts/setup.sh) and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
# The pytest entry point (not `python -m pytest`) imports the installed
# package rather than the source tree, which holds no built libraries.
.venv/bin/pytest -q tests "$@"
