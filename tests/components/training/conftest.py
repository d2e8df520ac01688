"""Fixtures of the launcher tests: a fake Kubernetes API server on a loopback port."""

from __future__ import annotations

import pytest

from tests.components.training.fake_kube import FakeKube


@pytest.fixture
def fake_kube():
    fake = FakeKube().start()
    try:
        yield fake
    finally:
        fake.stop()
