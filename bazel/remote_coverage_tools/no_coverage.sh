#!/bin/sh
echo "coverage is not available in TensorBow's offline Bazel build" >&2
exit 1
