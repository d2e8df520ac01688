"""Fixtures of the launcher tests: a fake Kubernetes API server on a loopback port (per test), and
a real control plane (kube-apiserver built from source, Debian's etcd) with the vendored CRDs
installed (per session; tests/components/training/real_kube.py)."""

from __future__ import annotations

import time

import pytest

from kubeflow.local_cluster import builds
from tests import session
from tests.components.training import real_kube
from tests.components.training.fake_kube import FakeKube


@pytest.fixture
def fake_kube():
    fake = FakeKube().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="session")
def kube(request, tmp_path_factory):
    """The running control plane, the CRDs established; stopped at the end of the session, also
    when a test or the start failed."""
    say = session.say(request.config)
    try:
        with session.phase("kube: kube-apiserver and kube-controller-manager build") as p:
            built = real_kube.build(say=say)
            p["detail"] = "built" if built.seconds else "cached"
        plane = real_kube.ControlPlane(
            str(tmp_path_factory.mktemp("kube")),
            built.paths["kube-apiserver"],
            controller_manager=built.paths["kube-controller-manager"],
        )
    except real_kube.Unavailable as error:
        session.unavailable(str(error))
    started = time.monotonic()
    plane.start()
    try:
        real_kube.install_crds(plane)
        how = f"built in {built.seconds:.0f}s" if built.seconds else "cached"
        say(
            f"tests: kube-apiserver and kube-controller-manager {builds.kubernetes_version()} "
            f"({how}) and etcd up, CRDs established in {time.monotonic() - started:.1f}s"
        )
        yield plane
    finally:
        plane.stop()
