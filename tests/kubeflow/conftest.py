"""Fixtures of the Kubeflow tests, built once per session:
- every variant the conformance checks cover, compiled, and the documents of each compiled file
  (tests/kubeflow/test_conformance.py reads them; tests/kubeflow/test_kfp_backend.py hands the
  same files to KFP's own backend code);
- the project's image (kubeflow/local_base.sh, then kubeflow/build_images.sh with podman) for
  every test that runs containers of it (test_image_build.py, test_kfp_local.py)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time

import pytest
import yaml

from kubeflow import run_kubeflow
from pipeline import datasets
from tests import session
from tests.kubeflow import variants

ROOT = datasets.PROJECT_ROOT
BASE = "localhost/tfx-scaleout-base:py3.10-bookworm"
IMAGE = "localhost/tfx-scaleout:ci-test"


def _ensure_tools() -> None:
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
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    return time.monotonic() - started


@pytest.fixture(scope="session")
def image() -> str:
    """The base (when missing) and the image, built by the project's scripts."""
    _ensure_tools()
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
    # Each rebuild under the same tag leaves the image it replaced dangling, with its layers:
    # on a machine that runs the suite again and again they would fill the disk.
    pruned = subprocess.run(["podman", "image", "prune", "--force"], capture_output=True, text=True)
    assert pruned.returncode == 0, pruned.stderr[-2000:]
    return IMAGE


CLUSTER_PACKAGES = (
    "podman",
    "debootstrap",
    "runc",
    "etcd-server",
    "containerd",
    "containernetworking-plugins",
    "iptables",
    "conntrack",
)


@dataclasses.dataclass(frozen=True)
class LocalCluster:
    root: str
    info: dict

    @property
    def layout(self):
        from kubeflow.local_cluster import node

        return node.Layout(self.root)

    @property
    def kubeconfig(self) -> str:
        return self.info["kubeconfig"]

    @property
    def shared(self) -> str:
        return self.info["shared"]

    def kube(self):
        from kubeflow.local_cluster import addons, builds

        return addons.Kube(self.layout, os.path.join(builds.kubernetes_cache_dir(), "kubectl"))

    def api(self):
        """The API server as the cluster admin (tests/components/training/real_kube.ApiServer),
        from the admin kubeconfig `up` wrote."""
        from tests.components.training.real_kube import ApiServer

        with open(self.kubeconfig) as handle:
            config = yaml.safe_load(handle)
        server = config["clusters"][0]["cluster"]
        token = config["users"][0]["user"]["token"]
        return ApiServer(server["server"], server["certificate-authority"], token)


@pytest.fixture(scope="session")
def local_cluster(image, tmp_path_factory, request):
    """`python -m kubeflow.local_cluster up` with the project's image, once per session (the
    Kubernetes binaries, operators and images built once per machine, cached); `down` at the
    end, also when a test failed."""
    from kubeflow.local_cluster import cluster

    say = session.say(request.config)
    root = str(tmp_path_factory.mktemp("local-cluster"))
    lines: list[str] = []
    started = time.monotonic()
    try:
        with session.phase("local_cluster: up (Go builds and image loads when not cached)") as p:
            info = cluster.up(cluster.UpOptions(root, image), say=lines.append)
            p["detail"] = ", ".join(f"{k} {v:.0f}s" for k, v in info["steps"].items() if v >= 1)
    except cluster.ClusterError as error:
        pytest.fail("\n".join([*lines[-40:], f"local cluster up failed: {error}"]))
    say(
        f"tests: local cluster up in {time.monotonic() - started:.0f}s "
        f"({'; '.join(f'{k} {v:.0f}s' for k, v in info['steps'].items() if v >= 1)})"
    )
    try:
        yield LocalCluster(root, info)
    finally:
        cluster.down(root, say=lambda line: None)


@pytest.fixture(scope="session")
def compiled_files(tmp_path_factory) -> dict[str, str]:
    """variant -> its pipeline.yaml, `run_kubeflow.py compile` with the variant's flags."""
    out = {}
    for name, flags in variants.VARIANTS.items():
        output = tmp_path_factory.mktemp(name) / "pipeline.yaml"
        argv = [
            "compile",
            f"--pipeline_root={variants.PIPELINE_ROOT}",
            f"--image={variants.IMAGE}",
            f"--gpu_image={variants.GPU_IMAGE}",
            f"--output={output}",
            *flags,
        ]
        assert run_kubeflow.main(argv) == 0, name
        assert os.path.exists(output), name
        out[name] = str(output)
    return out


@pytest.fixture(scope="session")
def compiled(compiled_files) -> dict[str, tuple[dict, dict | None]]:
    """variant -> (PipelineSpec, PlatformSpec or None), the documents of its compiled file."""
    out = {}
    for name, path in compiled_files.items():
        with open(path) as handle:
            documents = list(yaml.safe_load_all(handle))
        assert len(documents) <= 2
        out[name] = (documents[0], documents[1] if len(documents) > 1 else None)
    return out


@pytest.fixture(scope="session")
def kfp_cluster(local_cluster, request):
    """Kubeflow Pipelines added to the session's cluster (`up --kfp` on a cluster that is up:
    cluster.add_kfp), once per session; it goes with the cluster's `down`."""
    from kubeflow.local_cluster import cluster

    say = session.say(request.config)
    lines: list[str] = []
    started = time.monotonic()
    try:
        with session.phase("local_cluster: up --kfp (KFP's images built when not cached)") as p:
            info = cluster.add_kfp(local_cluster.root, say=lines.append)
            steps = info["kfp"]["steps"]
            p["detail"] = ", ".join(f"{k} {v:.0f}s" for k, v in steps.items() if v >= 1)
    except cluster.ClusterError as error:
        pytest.fail("\n".join([*lines[-40:], f"up --kfp failed: {error}"]))
    say(f"tests: Kubeflow Pipelines up in {time.monotonic() - started:.0f}s")
    return LocalCluster(local_cluster.root, info)
