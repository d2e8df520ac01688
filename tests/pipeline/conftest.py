"""Fixtures of the MLMD inspection tests: a TFX-layout store with its artifact files."""

from __future__ import annotations

import pytest

from tests.pipeline.mlmd import tfx_store


@pytest.fixture(scope="module")
def penguin_store(tmp_path_factory):
    """Three runs in TFX's layout (executed, cached rerun, changed data with a baseline):
    {"path": the SQLite file, "root": the artifact root, "runs": the recorded ids}."""
    root = tmp_path_factory.mktemp("tfx-store")
    path = str(root / "metadata.sqlite")
    runs = tfx_store.record_runs(path, str(root / "pipeline_root"))
    return {"path": path, "root": str(root), "runs": runs}
