"""The tests' control plane itself (real_kube.py): a start that fails stopping what it started.
The control plane at work is in test_kubernetes_*.py; its build (the local cluster's) is tested
in tests/kubeflow/test_local_cluster_builds.py."""

from __future__ import annotations

import shutil

import pytest

from tests.components.training import real_kube


@pytest.mark.system_packages("etcd-server")
def test_a_start_that_fails_stops_what_it_started(tmp_path):
    plane = real_kube.ControlPlane(str(tmp_path), apiserver=shutil.which("false") or "/bin/false")
    with pytest.raises(RuntimeError, match="kube-apiserver exited with 1"):
        plane.start(timeout=60)
    assert list(plane.processes) == ["etcd", "kube-apiserver"]
    # etcd had come up (the API server starts only then) and is stopped again.
    assert all(process.poll() is not None for process in plane.processes.values())
    assert "ready to serve client requests" in plane.log_tail("etcd", 200)
