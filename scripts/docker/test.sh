#!/usr/bin/env bash
# What `docker run --rm tensorbow` runs: the runtime's C++ tests under Bazel
# (run again, not taken from the image build's cache), then the fast tier
# of the suite in v1 mode, on the libraries Bazel built. Arguments go to
# pytest. The whole suite in both TF1 modes: `bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel test --cache_test_results=no //:scheduler_test //:wave_test \
  //:wave_runner_test
bazel shutdown
export TF_CPP_MIN_LOG_LEVEL=2
.venv/bin/pytest -q tests --tf-mode=v1 -m "not slow" -n auto --dist worksteal "$@"
