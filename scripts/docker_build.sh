#!/usr/bin/env bash
# Builds the TensorBow image (Dockerfile) on a machine with no image
# registry, as root; with --ci, also runs its tests and a short main job in
# containers, as CI's Docker stage does.
#
#   bash scripts/docker_build.sh [--ci] [--gpu] [--tag NAME]
#
# * Installs Debian's docker.io and debootstrap when missing, and starts
#   dockerd when none answers (stopped again on exit: only that one).
# * The base: debian:bookworm-slim when present or pullable, else one made
#   here with debootstrap from the host's apt mirror and imported as
#   tensorbow-base:bookworm (made once, kept), passed as BASE_IMAGE. The
#   Dockerfile defaults to debian:bookworm-slim, so it builds unchanged
#   where a registry answers.
# * The host's apt mirror, CA bundle and pip settings go to the build as
#   BuildKit secrets (scripts/docker/host_config.py), mounted only for the
#   RUN that needs them; scripts/docker/check_image.py then reads every
#   layer of the image and fails the build if one holds any of them.
# * --gpu builds TensorFlow's GPU wheel instead (TENSORFLOW=tensorflow; see
#   the Dockerfile for what that gives today); the default is the CPU image.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
tag=tensorbow
tensorflow=tensorflow-cpu
while [ "$#" -gt 0 ]; do
  case "$1" in
    --ci) ci=1 ;;
    --gpu) tensorflow=tensorflow ;;
    --tag) tag="$2"; shift ;;
    *) echo "usage: $0 [--ci] [--gpu] [--tag NAME]" >&2; exit 2 ;;
  esac
  shift
done
start=$SECONDS
step() { echo "== docker: $1 at $((SECONDS - start)) s =="; }

work="$(mktemp -d)"
dockerd_pid=
cleanup() {
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
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
# The package's own service cannot start without systemd: run it here.
if ! docker info >/dev/null 2>&1; then
  dockerd >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    tail -20 "$work/dockerd.log" >&2
    echo "error: dockerd did not start" >&2
    exit 1
  fi
fi
step "engine ready"

python3 scripts/docker/host_config.py "$work/secrets"
secrets=()
for file in "$work"/secrets/*; do
  [ -f "$file" ] || continue
  secrets+=(--secret "id=$(basename "$file"),src=$file")
done

make_base() {  # a stand-in for debian:bookworm-slim, from Debian's packages
  local rootfs="$work/rootfs" mirror
  mirror="$(awk '/^URIs:/ {uri = $2} /^Suites: bookworm$/ {print uri; exit}' \
    "$work/secrets/debian.sources" 2>/dev/null)"
  debootstrap --variant=minbase bookworm "$rootfs" \
    "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" \
    || { tail -20 "$work/debootstrap.log" >&2; return 1; }
  # Nothing of this machine: no mirror, name or resolver of its own. The
  # sources are debian:bookworm-slim's; builds mount the host's over them.
  rm -rf "$rootfs"/etc/apt/sources.list "$rootfs"/etc/hostname \
    "$rootfs"/etc/resolv.conf "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  printf '%s\n' 'Types: deb' \
    'URIs: http://deb.debian.org/debian' \
    'Suites: bookworm bookworm-updates' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' '' \
    'Types: deb' 'URIs: http://deb.debian.org/debian-security' \
    'Suites: bookworm-security' 'Components: main' \
    'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
    > "$rootfs/etc/apt/sources.list.d/debian.sources"
  tar --numeric-owner -C "$rootfs" -c . \
    | docker import -c 'CMD ["bash"]' \
      -m "debootstrap --variant=minbase bookworm" - "$1" >/dev/null
  rm -rf --one-file-system "$rootfs"
}

base=debian:bookworm-slim
if ! docker image inspect "$base" >/dev/null 2>&1 \
    && ! timeout 120 docker pull -q "$base" >/dev/null 2>&1; then
  base=tensorbow-base:bookworm
  docker image inspect "$base" >/dev/null 2>&1 || make_base "$base"
fi
step "base image $base ready"

# BuildKit (RUN --mount): buildx when installed, else the builder built
# into Debian's docker.io client.
build=(docker build)
docker buildx version >/dev/null 2>&1 || build=(env DOCKER_BUILDKIT=1
                                               /usr/bin/docker build)
"${build[@]}" --progress=plain -t "$tag" --build-arg "BASE_IMAGE=$base" \
  --build-arg "TENSORFLOW=$tensorflow" "${secrets[@]}" .
step "image $tag built"
python3 scripts/docker/check_image.py "$tag"
step "image $tag checked"

if [ "$ci" = 1 ]; then
  docker run --rm "$tag"
  step "C++ tests and fast tier (v1 mode) passed in a container"
  docker run --rm "$tag" bash scripts/main.sh --train_size 4000 \
    --test_size 2000 --max_epochs 1 --evals_per_epoch 2
  step "short main job done in a container"
fi
