#!/bin/sh
# The image's entry point when it was built with BEAM_BOOT_IMAGE=no-beam-boot (no registry to
# copy Beam's SDK harness boot program from; see kubeflow/Dockerfile): runs the given command,
# as `podman run IMAGE CMD...` expects. Beam's runners start SDK containers with boot's flags
# (--id, --provision_endpoint, ...): refused, since there is no harness to start.
case "${1:-}" in
  ""|-*)
    echo "this image was built without Beam's SDK harness boot program" \
      "(BEAM_BOOT_IMAGE=no-beam-boot): it cannot be a Beam SDK container; rebuild with the" \
      "default BEAM_BOOT_IMAGE for Dataflow, Flink or Spark" >&2
    exit 64 ;;
esac
exec "$@"
