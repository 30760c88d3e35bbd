#!/usr/bin/env bash
# Sets TensorBow up (scripts/setup.sh) and runs the test suite once in each
# TF1 mode (tests/conftest.py): v1 (disable_v2_behavior, how most TF1
# scripts run) and graph (disable_eager_execution alone). The switch is
# process-wide, so each mode gets its own pytest process. Tests marked
# mode_independent run in v1 mode only (`--all-modes`: in both). Each run
# spreads the tests over one pytest-xdist worker per CPU (`-n 0`: in the
# pytest process itself). Arguments go to both runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export TF_CPP_MIN_LOG_LEVEL=2
status=0
for mode in v1 graph; do
  echo "== TF1 mode: $mode =="
  .venv/bin/pytest -q tests --tf-mode="$mode" -n auto --dist worksteal "$@" \
    || status=$?
done
exit "$status"
