# TensorBow in Debian bookworm, its libraries built with Bazel, tested in a
# container. CI builds and runs it (.ci/run's Docker stage) with
# scripts/docker_build.sh, which needs no image registry: it installs and
# starts a Docker engine if need be, makes the base image locally when
# debian:bookworm-slim cannot be pulled, and lends the build the host's apt
# mirror, CA bundle and pip settings as secrets, which no layer keeps.
#
#   bash scripts/docker_build.sh                       # the image `tensorbow`
#   docker run --rm tensorbow                          # C++ tests, fast tier
#   docker run --rm tensorbow bash scripts/test.sh     # the whole suite
#   docker run --rm tensorbow bash scripts/main.sh     # the main job
#
# It needs BuildKit (RUN --mount). Where the base can be pulled, a plain
# `DOCKER_BUILDKIT=1 docker build -t tensorbow .` builds it too: every
# secret is optional.
#
# The CPU image (tensorflow-cpu) is the default, deliberately: TensorBow's
# kernels are CPU kernels. `--build-arg TENSORFLOW=tensorflow` (or
# scripts/docker_build.sh --gpu) installs TensorFlow's GPU wheel at the same
# pinned version instead and builds the libraries against it. TensorFlow's
# own kernels may then use a GPU, given NVIDIA's CUDA libraries
# (`TENSORFLOW=tensorflow[and-cuda]`), `docker run --gpus all` and NVIDIA's
# container toolkit on the host; untested, as no GPU is at hand. TensorBow's
# ops cannot: it has no GPU kernels and no per-stream virtual devices yet.
# CI does not build it.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

# What the scripts would install: compilers, Python, Bazel (Debian's
# bazel-bootstrap, offline) and Fashion-MNIST. apt uses the host's mirror
# when the build is given it. Unpinned: bookworm's versions are what the
# scripts are tested against.
# hadolint ignore=DL3008
RUN --mount=type=secret,id=debian.sources,target=/etc/apt/sources.list.d/debian.sources \
    apt-get update \
    && apt-get install -y --no-install-recommends \
       bazel-bootstrap bazel-platforms build-essential ca-certificates \
       dataset-fashion-mnist python3 python3-dev python3-venv \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

# The virtualenv of scripts/setup.sh, in a layer that only a change to
# requirements.txt rebuilds. pip reads the host's settings and trusts the
# host's CA bundle, both mounted for this step only. The checkout's folder
# is not named tensorbow: tests look for "tensorbow/" in tracebacks to
# find frames of the package's own.
WORKDIR /workspace
ARG TENSORFLOW=tensorflow-cpu
COPY requirements.txt ./
RUN --mount=type=secret,id=pip.conf --mount=type=secret,id=ca-certificates.crt \
    --mount=type=cache,target=/root/.cache/pip \
    sed -i "s/^tensorflow-cpu==/${TENSORFLOW}==/" requirements.txt \
    && python3 -m venv .venv \
    && PIP_CONFIG_FILE=/run/secrets/pip.conf .venv/bin/pip install -q \
       --disable-pip-version-check -r requirements.txt

# The libraries, built once, by Bazel; its C++ tests and the kernel tests
# on them (scripts/bazel_build.sh), then the package set up to load them
# (scripts/docker/use_bazel_build.sh). Bazel's disk cache outlives the
# layer, so a change to the Python alone recompiles nothing.
COPY . .
RUN --mount=type=cache,target=/root/.cache/bazel-disk \
    sed -i "s/^tensorflow-cpu==/${TENSORFLOW}==/" requirements.txt \
    && bash scripts/bazel_build.sh --disk_cache=/root/.cache/bazel-disk \
    && bash scripts/docker/use_bazel_build.sh \
    && bazel shutdown

CMD ["bash", "scripts/docker/test.sh"]
