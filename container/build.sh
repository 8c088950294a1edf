#!/usr/bin/env bash
# Build the dayzero image with podman, offline: a Debian base made from Debian's packages (mmdebstrap), a wheelhouse
# of dayzero and its dependencies made on the host, then the Containerfile.
#
#   bash container/build.sh [TAG] [podman build options ...]      e.g. --build-arg BAKE=1
#
# Needs podman, runc and mmdebstrap (`apt-get install -y podman runc mmdebstrap`). PYTHON (default python3) builds
# the wheelhouse: its minor version must be the base image's (Debian bookworm: 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-dayzero:cpu}"
shift || true
PYTHON="${PYTHON:-python3}"
for tool in podman runc mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "error: $tool is missing; apt-get install -y podman runc mmdebstrap" >&2; exit 2; }
done
# crun cannot set rlimits in this sandbox; runc with the cgroupfs manager and no default ulimits works
export CONTAINERS_CONF="$PWD/container/containers.conf"
printf '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n' > "$CONTAINERS_CONF"

if ! podman image exists localhost/debian-base:bookworm; then
  mmdebstrap --quiet --variant=apt --include=python3,python3-venv bookworm container/base.tar
  podman import container/base.tar localhost/debian-base:bookworm
  rm -f container/base.tar
fi

mkdir -p container/wheels container/bake
# TORCH: the torch build the image gets (the CPU one here; a CUDA build for a GPU image)
"$PYTHON" -m pip wheel --quiet --wheel-dir container/wheels "${TORCH:-torch==2.13.0+cpu}" .
podman build --format docker -f Containerfile -t "$TAG" "$@" .
