#!/usr/bin/env bash
# Builds the project's image and its GPU variant with docker or podman, and pushes them with
# --push (then prints the digest-pinned references to compile with).
#   REGISTRY=ghcr.io/you bash kubeflow/build_images.sh [--push] [--tag TAG] [--cpu-only]
#   bash kubeflow/build_images.sh --no-push [--cpu-only]     # local images, no registry needed
# Environment:
#   ENGINE           docker or podman (default: docker when its daemon answers, else podman)
#   REGISTRY, TAG    as --registry, --tag (TAG defaults to the short commit)
#   BASE_IMAGE       the Python 3.10 base (default in the Dockerfile: python:3.10-slim-bookworm);
#                    kubeflow/local_base.sh builds a local one where no registry is reachable
#   BEAM_BOOT_IMAGE  where Beam's boot program comes from (default in the Dockerfile: Beam's SDK
#                    image; `no-beam-boot` for a build without a registry: not a Beam SDK
#                    container then, see the Dockerfile)
#   BUILD_ARGS       more build arguments, "NAME=VALUE NAME=VALUE"
#   BUILD_OPTIONS    more options for the engine's build command, as words ("--pull=never -v A:B")
#   BUILD_CA_BUNDLE  a CA bundle pip must trust during the build (default: the host's PIP_CERT,
#                    REQUESTS_CA_BUNDLE or SSL_CERT_FILE when one is a file); "none": no bundle
#   BUILD_PIP_HOST_CONFIG=0  do not carry the host's find-links / file:// indexes into the build
# podman only: the CA bundle, the host's local wheel folders (find-links) and file:// indexes are
# mounted read-only for the build (podman build -v, at /mnt/build-pip) with a pip configuration
# naming them; the image keeps none of them and installs exactly requirements.lock either way. docker build has
# no build-time mounts: with docker the build uses the default package index.
# Per-Dockerfile ignore files (kubeflow/Dockerfile*.dockerignore): docker with BuildKit reads them
# by name; podman gets them with --ignorefile.
set -euo pipefail
cd "$(dirname "$0")/.."

registry=${REGISTRY:-}
tag=${TAG:-$(git rev-parse --short HEAD 2>/dev/null || echo dev)}
push=false
no_push=false
gpu=true
while [ $# -gt 0 ]; do
  case "$1" in
    --push) push=true ;;
    --no-push) no_push=true ;;
    --cpu-only) gpu=false ;;
    --tag) tag=$2; shift ;;
    --registry) registry=$2; shift ;;
    *) echo "build_images.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
if $push && $no_push; then
  echo "build_images.sh: --push and --no-push together" >&2
  exit 2
fi
if [ -z "$registry" ] && ! $no_push; then
  echo "build_images.sh: set REGISTRY (or --registry), e.g. ghcr.io/you or us-docker.pkg.dev/p/r;" \
    "or build local images with --no-push" >&2
  exit 2
fi

engine=${ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  fi
fi
case "$engine" in
  docker|podman) ;;
  "") echo "build_images.sh: no container engine here: neither a docker daemon nor podman" \
        "(ENGINE=docker|podman chooses one)" >&2
      exit 1 ;;
  *) echo "build_images.sh: ENGINE must be docker or podman, not $engine" >&2; exit 2 ;;
esac
if ! command -v "$engine" >/dev/null 2>&1; then
  echo "build_images.sh: ENGINE=$engine, but there is no $engine command" >&2
  exit 1
fi

build_args=()
[ -n "${BASE_IMAGE:-}" ] && build_args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
[ -n "${BEAM_BOOT_IMAGE:-}" ] && build_args+=(--build-arg "BEAM_BOOT_IMAGE=$BEAM_BOOT_IMAGE")
for arg in ${BUILD_ARGS:-}; do
  build_args+=(--build-arg "$arg")
done
read -r -a build_options <<<"${BUILD_OPTIONS:-}"

work=$(mktemp -d "${TMPDIR:-/tmp}/build-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The build-time pip configuration (podman): $work/mnt is mounted over the image's (empty) /mnt,
# with build-pip/pip.conf, the CA bundle and a mount point for each local folder in it, so that
# no mount point is created inside the image (podman build -v leaves the ones it creates there).
mnt=$work/mnt/build-pip
mkdir -p "$mnt"
mounts=()
host_pip_config() {
  # find-links and extra/index URLs of the host's pip (its config files, then PIP_* variables,
  # which pip lets override them), one "key value" a line.
  command -v python3 >/dev/null 2>&1 || return 0
  python3 - <<'EOF'
import configparser, os
paths = ["/etc/xdg/pip/pip.conf", "/etc/pip.conf", os.path.expanduser("~/.pip/pip.conf"),
         os.path.expanduser("~/.config/pip/pip.conf")]
if os.environ.get("PIP_CONFIG_FILE"):
    paths.append(os.environ["PIP_CONFIG_FILE"])
values = {}
for path in paths:
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
    except configparser.Error:
        continue
    for section in ("global", "install"):
        for key in ("find-links", "index-url", "extra-index-url"):
            if parser.has_option(section, key):
                values[key] = parser.get(section, key).split()
for key in ("find-links", "index-url", "extra-index-url"):
    env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
    if env:
        values[key] = env.split()
for key, listed in values.items():
    for value in listed:
        print(key, value)
EOF
}
if [ "$engine" = podman ]; then
  conf=()
  ca=${BUILD_CA_BUNDLE:-}
  if [ -z "$ca" ]; then
    for candidate in "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}"; do
      if [ -n "$candidate" ] && [ -f "$candidate" ]; then ca=$candidate; break; fi
    done
  fi
  if [ -n "$ca" ] && [ "$ca" != none ]; then
    [ -f "$ca" ] || { echo "build_images.sh: BUILD_CA_BUNDLE $ca is not a file" >&2; exit 2; }
    cp "$ca" "$mnt/ca.crt"
    conf+=("cert = /mnt/build-pip/ca.crt")
  fi
  if [ "${BUILD_PIP_HOST_CONFIG:-1}" != 0 ]; then
    links=() indexes=() index_url=""
    n=0
    while read -r key value; do
      path=""
      case "$value" in
        file://*) path=${value#file://} ;;
        /*) path=$value ;;
      esac
      if [ -n "$path" ] && [ ! -e "$path" ]; then
        continue  # a local folder this host does not have: pip would skip it too
      fi
      if [ -n "$path" ]; then
        # An index's pages may link up to its parent (../../files/...): mount the parent.
        n=$((n + 1))
        mkdir "$mnt/$n"
        if [ "$key" = find-links ]; then
          mounts+=(-v "$(realpath "$path"):/mnt/build-pip/$n:ro")
          value=/mnt/build-pip/$n
        else
          path=$(realpath "$path")
          mounts+=(-v "$(dirname "$path"):/mnt/build-pip/$n:ro")
          value=file:///mnt/build-pip/$n/$(basename "$path")
        fi
      fi
      case "$key" in
        find-links) links+=("$value") ;;
        extra-index-url) indexes+=("$value") ;;
        index-url) index_url=$value ;;
      esac
    done < <(host_pip_config)
    [ ${#links[@]} -gt 0 ] && conf+=("find-links = ${links[*]}")
    [ -n "$index_url" ] && conf+=("index-url = $index_url")
    [ ${#indexes[@]} -gt 0 ] && conf+=("extra-index-url = ${indexes[*]}")
  fi
  if [ ${#conf[@]} -gt 0 ]; then
    printf '[global]\n' >"$mnt/pip.conf"
    printf '%s\n' "${conf[@]}" >>"$mnt/pip.conf"
    # The parent first: the folders' mount points are inside it.
    mounts=(-v "$work/mnt:/mnt:ro" "${mounts[@]}")
    echo "build_images.sh: build-time pip configuration (mounted at /mnt, not kept in the image):"
    sed 's/^/  /' "$mnt/pip.conf"
  fi
fi

build() {  # build DOCKERFILE IMAGE
  local started=$SECONDS
  echo "build_images.sh: $engine build -f $1 -t $2"
  if [ "$engine" = docker ]; then
    DOCKER_BUILDKIT=1 docker build -f "$1" -t "$2" "${build_args[@]}" "${build_options[@]}" .
  else
    # chroot isolation: no namespaces or cgroups needed for the build's RUN steps (the default
    # OCI isolation fails on hosts with hybrid cgroups); BUILDAH_ISOLATION overrides it.
    podman build --isolation "${BUILDAH_ISOLATION:-chroot}" --ignorefile "$1.dockerignore" \
      -f "$1" -t "$2" "${build_args[@]}" "${mounts[@]}" "${build_options[@]}" .
  fi
  echo "build_images.sh: built $2 in $((SECONDS - started)) s"
}

name=${registry:-localhost}
image="$name/tfx-scaleout:$tag"
gpu_image="$name/tfx-scaleout-gpu:$tag"
build kubeflow/Dockerfile "$image"
images=("$image")
if $gpu; then
  build kubeflow/Dockerfile.gpu "$gpu_image"
  images+=("$gpu_image")
fi
if ! $push; then
  echo "images: ${images[*]} (not pushed: no digest yet)"
  $no_push || echo "push them (--push), then compile with the pinned references it prints"
  exit 0
fi
# Kubeflow Pipelines caches by image reference: compile with the registry's digests, so that a
# rebuilt image under the same tag is a new reference, not a cache hit for the old image.
pinned=()
for reference in "${images[@]}"; do
  if [ "$engine" = docker ]; then
    docker push "$reference"
    pinned+=("$(docker inspect --format '{{index .RepoDigests 0}}' "$reference")")
  else
    podman push --digestfile "$work/digest" "$reference"
    pinned+=("${reference%:*}@$(cat "$work/digest")")
  fi
done
echo "images: ${pinned[*]}"
if $gpu; then
  echo "compile with: --image ${pinned[0]} --gpu_image ${pinned[1]} --sdk_container_image ${pinned[0]}"
else
  echo "compile with: --image ${pinned[0]} --sdk_container_image ${pinned[0]}"
fi
