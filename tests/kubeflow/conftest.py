"""Fixtures of the Kubeflow tests, built once per session:
- every variant the conformance checks cover, compiled, and the documents of each compiled file
  (tests/kubeflow/test_conformance.py reads them; tests/kubeflow/test_kfp_backend.py hands the
  same files to KFP's own backend code);
- the project's image (kubeflow/local_base.sh, then kubeflow/build_images.sh with podman) for
  every test that runs containers of it (test_image_build.py, test_kfp_local.py)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
import yaml

from kubeflow import run_kubeflow
from tests import session
from tests.kubeflow import project_image, variants


@pytest.fixture(scope="session")
def image() -> str:
    """The base (when missing) and the image, built by the project's scripts, once per session
    (tests/kubeflow/project_image.py; the session's early builds may have built it already)."""
    try:
        return project_image.build()
    except RuntimeError as error:
        pytest.fail(str(error), pytrace=False)


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
