"""Shared fixtures. Importing `pipeline` first selects Keras 2 before TensorFlow loads."""

from __future__ import annotations

import os

import pytest

import pipeline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before any TensorFlow import)
from pipeline import datasets


@pytest.fixture(scope="session")
def penguins_csv() -> str:
    return os.path.join(datasets.penguins_data_root(), "penguins.csv")


@pytest.fixture(scope="session")
def penguins_schema_path() -> str:
    path = datasets.curated_schema_path(datasets.PENGUINS)
    assert path is not None, "schemas/penguins/schema.pbtxt is missing"
    return path


@pytest.fixture
def write_csv(tmp_path):
    """write_csv(name, text) -> path of a CSV file in a fresh data directory."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()

    def _write(name: str, text: str | bytes) -> str:
        path = data_dir / name
        if isinstance(text, str):
            path.write_text(text)
        else:
            path.write_bytes(text)
        return str(path)

    _write.dir = str(data_dir)
    return _write
