"""The local cluster's builds (kubeflow/local_cluster/builds.py): cache keys, flags, the Go
modules' pins, a failed build naming its log, and the vendored CRDs being the ones the
operators' own releases ship (the releases the cluster builds and deploys)."""

from __future__ import annotations

import filecmp
import os
import shutil
from unittest import mock

import pytest

from kubeflow.local_cluster import builds

CRDS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "components", "training", "crds"
)


def test_the_kubernetes_build_is_keyed_by_release_and_pins(tmp_path):
    module = tmp_path / "kubernetes"
    shutil.copytree(builds.KUBERNETES_MODULE, module)
    with mock.patch.object(builds, "KUBERNETES_MODULE", str(module)):
        version = builds.kubernetes_version()
        first = builds.kubernetes_cache_dir()
        assert os.path.basename(first).startswith(f"{version}-")
        with open(module / "go.sum", "a") as handle:
            handle.write("example.com/m v1.0.0 h1:AAAA=\n")
        assert builds.kubernetes_cache_dir() != first
    assert version.startswith("v1.")
    flags = builds.kubernetes_build_flags()
    assert flags[0] == "-trimpath"
    assert f"-X k8s.io/component-base/version.gitVersion={version}" in flags[1]
    assert flags[1].startswith("-ldflags=-s -w ")


def test_the_go_module_replaces_every_staging_module_with_its_release():
    """k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by ./staging there):
    each must be replaced here by the release that matches v1.X.Y, v0.X.Y."""
    with open(os.path.join(builds.KUBERNETES_MODULE, "go.mod")) as handle:
        text = handle.read()
    version = builds.kubernetes_version()
    staging = f"v0.{version.split('.', 1)[1]}"
    replaced = [line.split() for line in text.splitlines() if "=>" in line]
    assert len(replaced) >= 25
    for old, arrow, new, release in replaced:
        assert arrow == "=>" and old == new and old.startswith("k8s.io/"), (old, new)
        assert release == staging, (old, release)
    for tool in builds.KUBERNETES_TOOLS:
        assert f"\tk8s.io/kubernetes/cmd/{tool}\n" in text, tool


def test_the_jobset_module_requires_exactly_the_release_it_builds():
    with open(os.path.join(os.path.dirname(builds.KUBERNETES_MODULE), "jobset", "go.mod")) as h:
        text = h.read()
    jobset = builds.CONTROLLERS["jobset"]
    assert (
        f"\t{jobset.module} {jobset.version}" in text
        or f"require {jobset.module} {jobset.version}" in text
    )
    assert f"tool {jobset.package}" in text


def test_a_failed_build_names_its_log_and_its_last_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    broken = builds.GoInstall(
        "broken", "example.invalid/no-such-module/cmd/x", "v0.0.1", "example.invalid/no-such-module"
    )
    with pytest.raises(builds.BuildFailed) as failure:
        builds.build_controller(broken)
    message = str(failure.value)
    log = os.path.join(str(tmp_path), "tfx-scaleout", "controllers")
    assert "the build of broken v0.0.1 failed (log: " + log in message
    assert "example.invalid/no-such-module" in message.splitlines()[-1]


@pytest.mark.parametrize(
    "file_name, controller, path",
    [
        ("kubeflow.org_tfjobs.yaml", "training-operator", "manifests/base/crds"),
        ("trainer.kubeflow.org_trainjobs.yaml", "trainer", "manifests/base/crds"),
        ("trainer.kubeflow.org_trainingruntimes.yaml", "trainer", "manifests/base/crds"),
        ("trainer.kubeflow.org_clustertrainingruntimes.yaml", "trainer", "manifests/base/crds"),
        ("jobset.x-k8s.io_jobsets.yaml", "jobset", "config/components/crd/bases"),
    ],
)
def test_the_vendored_crds_are_the_ones_the_deployed_releases_ship(file_name, controller, path):
    release = builds.CONTROLLERS[controller]
    shipped = os.path.join(builds.module_dir(release.module, release.version), path, file_name)
    assert filecmp.cmp(os.path.join(CRDS, file_name), shipped, shallow=False), shipped
