"""The cluster's container images, with no registry: each controller's static binary in a
`FROM scratch` image built with podman, and the project's image (kubeflow/build_images.sh),
saved from podman's store and imported into the node's containerd (namespace k8s.io, where the
kubelet's CRI looks). A controller image's tag carries its binary's hash, so a rebuilt binary is
a new tag and an unchanged one is imported once; the project's image is imported again only when
its podman image ID differs from the one containerd holds under that reference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile

from kubeflow.local_cluster.builds import BuildFailed, Say, cache_root

NAMESPACE = "k8s.io"
REPOSITORY = "localhost/tfx-scaleout-cluster"


@dataclasses.dataclass(frozen=True)
class ScratchImage:
    name: str
    binary: str  # the file on this machine
    path: str  # where the image holds it (and runs it: the entry point)
    user: str = "65532:65532"
    # ENV lines, e.g. (("PATH", "/bin"),) for a program that pods run by name (KFP's driver and
    # launcher, Argo's executor: their commands are "driver", "launcher-v2", "argoexec").
    env: tuple[tuple[str, str], ...] = ()
    # A /tmp (mode 1777): KFP's driver writes its outputs under /tmp/outputs in pods Argo
    # makes, where no volume can be added.
    tmp: bool = False

    def containerfile(self) -> str:
        return (
            "FROM scratch\n"
            f"COPY program {self.path}\n"
            # ADD of an archive keeps the folder's mode (COPY makes it 0755).
            + ("ADD tmp.tar /\n" if self.tmp else "")
            + "".join(f"ENV {name}={value}\n" for name, value in self.env)
            + f"USER {self.user}\n"
            f'ENTRYPOINT ["{self.path}"]\n'
        )

    def reference(self) -> str:
        """Tagged by the hash of the program and the Containerfile: what the image holds."""
        digest = hashlib.sha256(self.containerfile().encode())
        with open(self.binary, "rb") as handle:
            digest.update(handle.read())
        return f"{REPOSITORY}/{self.name}:{digest.hexdigest()[:16]}"


def _run(command: list[str], what: str, **options) -> str:
    result = subprocess.run(command, capture_output=True, text=True, **options)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()[-2000:]
        raise BuildFailed(f"{what} failed ({' '.join(command[:4])} ...):\n{detail}")
    return result.stdout


def podman_image_id(reference: str) -> str:
    """podman's image ID (the config digest) of `reference`, or "" when podman has none."""
    result = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", reference],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() if result.returncode == 0 else ""


def build_scratch(image: ScratchImage, say: Say) -> str:
    """The image in podman's store (built if missing); returns its reference."""
    reference = image.reference()
    if podman_image_id(reference):
        return reference
    say(f"building image {reference} (podman, FROM scratch)")
    with tempfile.TemporaryDirectory(prefix="tfxs-image-") as context:
        shutil.copy2(image.binary, os.path.join(context, "program"))
        if image.tmp:
            with tarfile.open(os.path.join(context, "tmp.tar"), "w") as archive:
                entry = tarfile.TarInfo("tmp")
                entry.type, entry.mode = tarfile.DIRTYPE, 0o1777
                archive.addfile(entry)
        with open(os.path.join(context, "Containerfile"), "w") as handle:
            handle.write(image.containerfile())
        _run(
            ["podman", "build", "--isolation", "chroot", "--quiet", "-t", reference, context],
            f"podman build of {reference}",
        )
    return reference


class Containerd:
    """The node's containerd, through its socket and Debian's ctr."""

    def __init__(self, socket: str):
        self.socket = socket

    def ctr(self, *args: str, what: str = "ctr") -> str:
        return _run(["ctr", "--address", self.socket, "-n", NAMESPACE, *args], what)

    def config_digest(self, reference: str) -> str:
        """The config digest of `reference` in containerd ("" when it has none)."""
        listing = subprocess.run(
            ["ctr", "--address", self.socket, "-n", NAMESPACE, "images", "ls"],
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        manifest = ""
        for line in listing[1:]:
            fields = line.split()
            if fields and fields[0] == reference:
                manifest = fields[2]
        if not manifest:
            return ""
        document = json.loads(self.ctr("content", "get", manifest, what=f"reading {reference}"))
        if "manifests" in document:  # an index: the first platform's manifest
            document = json.loads(
                self.ctr("content", "get", document["manifests"][0]["digest"], what=reference)
            )
        return document["config"]["digest"].split(":", 1)[-1]

    def load_from_podman(self, reference: str, say: Say) -> bool:
        """Imports podman's `reference` unless containerd holds the same image under it;
        returns whether it imported."""
        image_id = podman_image_id(reference)
        if not image_id:
            raise BuildFailed(
                f"podman has no image {reference}: build it with kubeflow/build_images.sh "
                "--no-push (and kubeflow/local_base.sh where no registry is reachable)"
            )
        if self.config_digest(reference) == image_id:
            return False
        say(f"loading {reference} into the node's containerd")
        folder = os.path.join(cache_root(), "cluster", "image-transfer")
        os.makedirs(folder, exist_ok=True)
        archive = os.path.join(folder, "image.tar")
        try:
            _run(
                ["podman", "save", "--format", "docker-archive", "-o", archive, reference],
                f"podman save {reference}",
            )
            self.ctr("images", "import", archive, what=f"importing {reference}")
        finally:
            if os.path.exists(archive):
                os.remove(archive)
        return True
