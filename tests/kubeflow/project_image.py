"""The project's image for the tests that run containers of it: kubeflow/local_base.sh (the base,
when missing), then kubeflow/build_images.sh with podman. Built under a lock, and once per test
session: the session's early builds (tests/prewarm.py) start it at the beginning, and the `image`
fixture (tests/kubeflow/conftest.py) then finds it built instead of building it again."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time

from pipeline import datasets
from tests import prewarm, session

ROOT = datasets.PROJECT_ROOT
BASE = "localhost/tfx-scaleout-base:py3.10-bookworm"
IMAGE = "localhost/tfx-scaleout:ci-test"
LOCK = os.path.join(os.path.expanduser("~"), ".cache", "tfx-scaleout", ".project-image.lock")


def ensure_tools() -> None:
    if os.geteuid() != 0:
        session.unavailable("debootstrap (kubeflow/local_base.sh) needs root")
    info = subprocess.run(["podman", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        session.unavailable(f"podman does not run here: {info.stderr.strip()[-500:]}")


def _script(name: str, *args: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(
        ["bash", os.path.join(ROOT, "kubeflow", name), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"kubeflow/{name} failed (exit {result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return time.monotonic() - started


def build() -> str:
    """IMAGE, built by the project's scripts unless this session built it already; prints the
    times of a build it did."""
    ensure_tools()
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if prewarm.done_this_session("image"):
            return IMAGE
        env = dict(
            os.environ,
            ENGINE="podman",
            LOCAL_BASE_IMAGE=BASE,
            BASE_IMAGE=BASE,
            BEAM_BOOT_IMAGE="no-beam-boot",
        )
        with session.phase("image: kubeflow/local_base.sh (the base, when missing)"):
            base_seconds = _script("local_base.sh", env=env)
        with session.phase("image: kubeflow/build_images.sh --cpu-only"):
            build_seconds = _script(
                "build_images.sh", "--no-push", "--cpu-only", "--tag", "ci-test", env=env
            )
        print(f"\nlocal base: {base_seconds:.0f} s; image build: {build_seconds:.0f} s")
        # Each rebuild under the same tag leaves the image it replaced dangling, with its
        # layers: on a machine that runs the suite again and again they would fill the disk.
        pruned = subprocess.run(
            ["podman", "image", "prune", "--force"], capture_output=True, text=True
        )
        if pruned.returncode != 0:
            raise RuntimeError(f"podman image prune failed: {pruned.stderr[-2000:]}")
        prewarm.mark_done("image")
        return IMAGE
