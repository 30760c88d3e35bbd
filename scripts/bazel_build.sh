#!/usr/bin/env bash
# Builds TensorBow's two libraries with Bazel, offline, and tests them: the
# runtime's C++ tests under `bazel test`, then the Python kernel tests with
# the Bazel-built libraries loaded (TENSORBOW_LIBRARY_DIR). Installs what it
# needs if missing: Debian's bazel-bootstrap and bazel-platforms (as root),
# and the virtualenv of scripts/setup.sh, whose TensorFlow wheel supplies
# the headers and libraries (bazel/tf_configure.bzl). Arguments go to
# `bazel build`. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

platforms() {  # where Debian's bazel-platforms put the repository
  dpkg -L bazel-platforms 2>/dev/null | grep -m1 '/platforms/WORKSPACE$' \
    | xargs -r dirname
}

missing=()
command -v bazel-4 >/dev/null || missing+=(bazel-bootstrap)
[ -n "$(platforms)" ] || missing+=(bazel-platforms)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "error: install Debian's ${missing[*]} first (as root)" >&2
    exit 1
  fi
fi
[ -x .venv/bin/python ] || bash scripts/setup.sh
# This machine's settings, read by .bazelrc, so that a plain `bazel build`
# or `bazel test` works afterwards too.
printf '%s\n' \
  "common --override_repository=platforms=$(platforms)" \
  "common --repo_env=TENSORBOW_PYTHON=$PWD/.venv/bin/python" \
  > bazel/local.bazelrc

bazel build //:_sma_ops.so //:_runtime.so "$@"
bazel test //:scheduler_test //:wave_test //:wave_runner_test
out="$(bazel info bazel-bin 2>/dev/null)"

# One TF1 mode: the kernels are the same in both, the kernel tests take
# reference and resource variables as parameters of their own, and the
# test tiers before this run them in both modes on pip's build.
echo "== Python kernel tests with the Bazel-built libraries, v1 mode =="
TF_CPP_MIN_LOG_LEVEL=2 TENSORBOW_LIBRARY_DIR="$out" .venv/bin/pytest -q \
  --tf-mode=v1 -n auto --dist worksteal tests/test_sma_ops.py \
  tests/test_sma_with_central_ops.py tests/test_matmul_ops.py \
  tests/test_replica_ops.py tests/test_op_nodes.py tests/test_bazel_build.py

echo "Bazel-built libraries: $out/_sma_ops.so $out/_runtime.so"
echo "Load them instead of pip's with TENSORBOW_LIBRARY_DIR=$out"
