#!/usr/bin/env bash
# Builds the project's image and its GPU variant, and pushes them with --push. Needs a Docker
# engine with BuildKit (per-Dockerfile .dockerignore files).
#   REGISTRY=ghcr.io/you bash kubeflow/build_images.sh [--push] [--tag TAG]
# Prints the compile flags that use the images.
set -euo pipefail
cd "$(dirname "$0")/.."

registry=${REGISTRY:-}
tag=${TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}
push=false
while [ $# -gt 0 ]; do
  case "$1" in
    --push) push=true ;;
    --tag) tag=$2; shift ;;
    --registry) registry=$2; shift ;;
    *) echo "build_images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$registry" ]; then
  echo "build_images.sh: set REGISTRY (or --registry), e.g. ghcr.io/you or us-docker.pkg.dev/p/r" >&2
  exit 2
fi
if ! command -v docker >/dev/null 2>&1; then
  echo "build_images.sh: no docker command here; build on a machine with a Docker engine" >&2
  exit 1
fi

image="$registry/tfx-scaleout:$tag"
gpu_image="$registry/tfx-scaleout-gpu:$tag"
export DOCKER_BUILDKIT=1
docker build -f kubeflow/Dockerfile -t "$image" .
docker build -f kubeflow/Dockerfile.gpu -t "$gpu_image" .
if ! $push; then
  echo "images: $image $gpu_image (not pushed: no digest yet)"
  echo "push them (--push), then compile with the pinned references it prints"
  exit 0
fi
docker push "$image"
docker push "$gpu_image"
# Kubeflow Pipelines caches by image reference: compile with the registry's digests, so that a
# rebuilt image under the same tag is a new reference, not a cache hit for the old image.
image=$(docker inspect --format '{{index .RepoDigests 0}}' "$image")
gpu_image=$(docker inspect --format '{{index .RepoDigests 0}}' "$gpu_image")
echo "images: $image $gpu_image"
echo "compile with: --image $image --gpu_image $gpu_image --sdk_container_image $image"
