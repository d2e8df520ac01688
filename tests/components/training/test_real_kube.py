"""The tests' control plane itself (real_kube.py): the build's cache key and flags, and a start
that fails stopping what it started. The control plane at work is in test_kubernetes_*.py."""

from __future__ import annotations

import os
import shutil
from unittest import mock

import pytest

from tests.components.training import real_kube


def test_the_build_is_keyed_by_release_and_pins(tmp_path):
    module = tmp_path / "kube_build"
    shutil.copytree(real_kube.BUILD_MODULE, module)
    with mock.patch.object(real_kube, "BUILD_MODULE", str(module)):
        version = real_kube.kubernetes_version()
        first = real_kube.cache_dir()
        assert os.path.basename(first).startswith(f"{version}-")
        with open(module / "go.sum", "a") as handle:
            handle.write("example.com/m v1.0.0 h1:AAAA=\n")
        assert real_kube.cache_dir() != first
    assert version.startswith("v1.")
    flags = real_kube.go_build_flags()
    assert flags[0] == "-trimpath"
    assert f"-X k8s.io/component-base/version.gitVersion={version}" in flags[1]
    assert flags[1].startswith("-ldflags=-s -w ")


def test_the_go_module_replaces_every_staging_module_with_its_release(tmp_path):
    """k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by ./staging there):
    each must be replaced here by the release that matches v1.X.Y, v0.X.Y."""
    with open(os.path.join(real_kube.BUILD_MODULE, "go.mod")) as handle:
        text = handle.read()
    version = real_kube.kubernetes_version()
    staging = f"v0.{version.split('.', 1)[1]}"
    replaced = [line.split() for line in text.splitlines() if "=>" in line]
    assert len(replaced) >= 25
    for old, arrow, new, release in replaced:
        assert arrow == "=>" and old == new and old.startswith("k8s.io/"), (old, new)
        assert release == staging, (old, release)


@pytest.mark.system_packages("etcd-server")
def test_a_start_that_fails_stops_what_it_started(tmp_path):
    plane = real_kube.ControlPlane(str(tmp_path), apiserver=shutil.which("false") or "/bin/false")
    with pytest.raises(RuntimeError, match="kube-apiserver exited with 1"):
        plane.start(timeout=60)
    assert list(plane.processes) == ["etcd", "kube-apiserver"]
    # etcd had come up (the API server starts only then) and is stopped again.
    assert all(process.poll() is not None for process in plane.processes.values())
    assert "ready to serve client requests" in plane.log_tail("etcd", 200)
