# TensorBow on CPU, built and tested the way CI does it, with the same
# scripts. Not built in CI (no Docker engine runs there); CI lints it with
# hadolint.
#
#   docker build -t tensorbow .
#   docker run --rm tensorbow                           # the test suite
#   docker run --rm tensorbow bash scripts/main.sh      # the main job
#
# Debian bookworm: its bazel-bootstrap and dataset-fashion-mnist packages
# are what scripts/bazel_build.sh and scripts/setup.sh install.
FROM debian:bookworm-slim

# Unpinned: bookworm's versions are what the scripts are tested against.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
       build-essential ca-certificates git python3 python3-dev python3-venv \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /tensorbow
COPY . .

# Fashion-MNIST, the virtualenv with the pinned TensorFlow, the pip build.
RUN bash scripts/setup.sh
# Bazel (offline), the same libraries again, the C++ and kernel tests; a
# layer of its own, so that a change to it keeps the slow one above.
# hadolint ignore=DL3059
RUN bash scripts/bazel_build.sh

CMD ["bash", "scripts/test.sh"]
