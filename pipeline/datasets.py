"""Datasets the pipeline knows: the embedded penguins CSV and users' own CSV directories."""

from __future__ import annotations

import os

from components import features
from pipeline.config import DatasetConfig

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS_DIR = os.path.join(PROJECT_ROOT, "schemas")
PENGUINS = "penguins"


def penguins_data_root() -> str:
    """palmerpenguins ships its CSV inside the package: real data with nothing downloaded."""
    import palmerpenguins

    return os.path.join(os.path.dirname(palmerpenguins.__file__), "data")


def curated_schema_path(dataset_name: str) -> str | None:
    path = os.path.join(SCHEMAS_DIR, dataset_name, "schema.pbtxt")
    return path if os.path.isfile(path) else None


def penguins() -> DatasetConfig:
    return DatasetConfig(
        name=PENGUINS,
        data_root=penguins_data_root(),
        # The package also ships penguins-raw.csv (other columns); read only the standard file.
        file_pattern="penguins.csv",
        label_key=features.PENGUINS_LABEL_KEY,
        schema_path=curated_schema_path(PENGUINS),
    )


def user_csv(
    data_root: str, label_key: str, name: str | None = None, schema_path: str | None = None
) -> DatasetConfig:
    data_root = os.path.abspath(data_root)
    name = name or os.path.basename(data_root.rstrip(os.sep)) or "csv"
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=label_key,
        schema_path=os.path.abspath(schema_path) if schema_path else curated_schema_path(name),
    )
