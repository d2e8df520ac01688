"""The datasets the pipeline knows, as DatasetConfigs: the embedded penguins CSV and digits
images, users' CSV directories and image class folders, the synthetic CSV data at scale."""

from __future__ import annotations

import dataclasses
import os

from components.ml import features
from pipeline import PROJECT_ROOT
from pipeline.config import DatasetConfig

SCHEMAS_DIR = os.path.join(PROJECT_ROOT, "schemas")
PENGUINS = "penguins"
# pipeline.datasets.synthetic writes it (imported only when used, so that
# `python -m pipeline.datasets.synthetic` runs a module not imported yet).
SYNTH = "synth"


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
    data_root: str,
    label_key: str,
    name: str | None = None,
    schema_path: str | None = None,
    *,
    task: str = "classification",
    excluded_columns: tuple[str, ...] = (),
) -> DatasetConfig:
    """task "auto" (the flag's default) and the delimiter are settled by the pre-flight check
    (preflight.resolved)."""
    data_root = os.path.abspath(data_root)
    name = name or os.path.basename(data_root.rstrip(os.sep)) or "csv"
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=label_key,
        schema_path=os.path.abspath(schema_path) if schema_path else curated_schema_path(name),
        task=task,
        excluded_columns=excluded_columns,
    )


# --- Image classification: folders of JPEG/PNG files, one sub-folder per class -----------------

DIGITS = "digits"
# Side of the square digits are resized to (they are written as 32x32 JPEG files).
DIGITS_IMAGE_SIZE = 32


def digits(output_root: str, image_size: int = DIGITS_IMAGE_SIZE) -> DatasetConfig:
    """scikit-learn's 1,797 handwritten digits, written once as JPEG files under
    <output_root>/data/digits/<digit>/ (nothing downloaded: they ship inside scikit-learn)."""
    from pipeline.datasets import images as image_data

    data_root = image_data.write_digits(os.path.join(os.path.abspath(output_root), "data", DIGITS))
    return DatasetConfig(
        name=DIGITS,
        data_root=data_root,
        label_key=features.IMAGE_LABEL_KEY,
        schema_path=curated_schema_path(DIGITS),
        kind="images",
        image_size=image_size,
    )


def user_images(
    data_root: str, image_size: int, name: str | None = None, schema_path: str | None = None
) -> DatasetConfig:
    data_root = os.path.abspath(data_root)
    name = name or os.path.basename(data_root.rstrip(os.sep)) or "images"
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=features.IMAGE_LABEL_KEY,
        schema_path=os.path.abspath(schema_path) if schema_path else curated_schema_path(name),
        kind="images",
        image_size=image_size,
    )


def synth(data_root: str) -> DatasetConfig:
    """A directory written by pipeline.datasets.synthetic, with its curated schema."""
    from pipeline.datasets.synthetic import SYNTH_LABEL_KEY

    return user_csv(
        data_root,
        SYNTH_LABEL_KEY,
        name=SYNTH,
        schema_path=curated_schema_path(SYNTH),
        task="classification",
    )


def local_dataset(choice, output_root: str) -> DatasetConfig:
    """The dataset a local run reads for the dataset flags' choice (pipeline.flags)."""
    if choice.kind == "images":
        return user_images(choice.location, choice.image_size, choice.name, choice.schema)
    if choice.kind == "csv":
        return user_csv(
            choice.location,
            choice.label,
            choice.name,
            choice.schema,
            task=choice.task,
            excluded_columns=choice.exclude_columns,
        )
    if choice.kind == DIGITS:
        dataset = digits(output_root, choice.image_size)
    else:
        dataset = dataclasses.replace(
            penguins(),
            task="classification" if choice.task == "auto" else choice.task,
            excluded_columns=choice.exclude_columns,
        )
    if choice.schema:
        dataset = dataclasses.replace(dataset, schema_path=os.path.abspath(choice.schema))
    return dataset
