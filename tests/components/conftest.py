"""Real tf.Transform runs (penguin rows; small images) shared by the component tests."""

from __future__ import annotations

import csv
import functools
import os

import apache_beam as beam
import pytest
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io, schema_utils

from components.ml import features, preprocessing
from pipeline import preflight

NUMERIC = {
    "bill_length_mm": float,
    "bill_depth_mm": float,
    "flipper_length_mm": int,
    "body_mass_g": int,
    "year": int,
}


def penguin_instances(csv_path: str, every: int = 6, offset: int = 3) -> list[dict]:
    """Every 6th row (all species; rows 3 and 9 have missing values) as tf.Transform instance
    dicts, [] for a missing value ("NA")."""
    rows = []
    with open(csv_path, newline="") as handle:
        for index, record in enumerate(csv.DictReader(handle)):
            if index % every != offset:
                continue
            instance = {}
            for key, value in record.items():
                if value == "NA":
                    instance[key] = []
                elif key in NUMERIC:
                    instance[key] = [NUMERIC[key](value)]
                else:
                    instance[key] = [value.encode()]
            rows.append(instance)
    return rows


def analyze_and_transform(out, raw: list[dict], raw_metadata, fn) -> dict:
    """A real tf.Transform analyze + transform of `raw` with `fn`, written as TFX's Transform
    writes it: the transform graph (raw metadata beside it, which serving parses with) and
    two gzip shards of transformed tf.Examples."""
    with beam.Pipeline() as pipeline, tft_beam.Context(temp_dir=str(out / "tmp")):
        raw_pc = pipeline | beam.Create(raw, reshuffle=False)
        (transformed, transformed_metadata), transform_fn = (
            raw_pc,
            raw_metadata,
        ) | tft_beam.AnalyzeAndTransformDataset(fn, output_record_batches=False)
        _ = transform_fn | tft_beam.WriteTransformFn(str(out / "transform_fn"))
        coder = tft.coders.ExampleProtoCoder(transformed_metadata.schema)
        _ = (
            transformed
            | beam.Map(coder.encode)
            | beam.io.WriteToTFRecord(
                str(out / "transformed" / "part"), file_name_suffix=".gz", num_shards=2
            )
        )
    metadata_io.write_metadata(
        raw_metadata,
        os.path.join(str(out / "transform_fn"), tft.TFTransformOutput.RAW_METADATA_DIR),
    )
    return {
        "raw": raw,
        "output": tft.TFTransformOutput(str(out / "transform_fn")),
        "transformed_files": os.path.join(str(out / "transformed"), "part*.gz"),
    }


@pytest.fixture(scope="session")
def transform_run(tmp_path_factory, penguins_csv, penguins_schema_path):
    """Analyze + transform 58 real penguin rows, missing values included."""
    out = tmp_path_factory.mktemp("transform")
    schema = preflight.load_schema(penguins_schema_path)
    raw_metadata = dataset_metadata.DatasetMetadata(schema)
    raw = penguin_instances(penguins_csv)
    fn = functools.partial(
        preprocessing.preprocessing_fn, custom_config={features.LABEL_KEY_CONFIG: "species"}
    )
    return {
        **analyze_and_transform(out, raw, raw_metadata, fn),
        "schema": schema,
        "feature_spec": schema_utils.schema_as_feature_spec(schema).feature_spec,
    }


def encode_image(pixels, fmt: str) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


IMAGE_SIZE = 32


@pytest.fixture(scope="session")
def image_transform_run(tmp_path_factory):
    """Analyze + transform 24 small images (JPEG and PNG, mixed sizes, grayscale and RGB) of two
    classes that differ by brightness, with the image preprocessing_fn; "raw_files": the same
    rows as raw tf.Example shards (what the Trainer reads for images)."""
    import numpy as np
    import tensorflow as tf

    from components.ml import image_preprocessing

    out = tmp_path_factory.mktemp("image_transform")
    rng = np.random.default_rng(0)
    raw = []
    for i in range(24):
        bright = i % 2 == 1
        shape = [(40, 30, 3), (64, 64), (17, 90), (32, 32, 3)][i % 4]
        pixels = rng.integers(150, 255, shape) if bright else rng.integers(0, 100, shape)
        data = encode_image(pixels.astype(np.uint8), "PNG" if i % 3 == 0 else "JPEG")
        raw.append(
            {
                features.IMAGE_KEY: [data],
                features.IMAGE_LABEL_KEY: [b"bright" if bright else b"dark"],
            }
        )
    feature_spec = {
        features.IMAGE_KEY: tf.io.VarLenFeature(tf.string),
        features.IMAGE_LABEL_KEY: tf.io.VarLenFeature(tf.string),
    }
    raw_metadata = dataset_metadata.DatasetMetadata(
        schema_utils.schema_from_feature_spec(feature_spec)
    )
    fn = functools.partial(
        image_preprocessing.preprocessing_fn,
        custom_config={
            features.LABEL_KEY_CONFIG: features.IMAGE_LABEL_KEY,
            features.IMAGE_SIZE_CONFIG: IMAGE_SIZE,
        },
    )
    run = analyze_and_transform(out, raw, raw_metadata, fn)
    # What the Trainer reads for images: ExampleGen's raw examples (Transform materializes
    # nothing for images), two gzip shards in the rows' order.
    from tests.components.helpers import serialize

    raw_dir = out / "raw"
    raw_dir.mkdir()
    for shard in range(2):
        path = str(raw_dir / f"data_tfrecord-{shard:05d}-of-00002.gz")
        with tf.io.TFRecordWriter(path, "GZIP") as writer:
            for row in raw[shard * len(raw) // 2 : (shard + 1) * len(raw) // 2]:
                writer.write(serialize(row))
    return {**run, "raw_files": os.path.join(str(raw_dir), "data_tfrecord-*.gz")}


@pytest.fixture(scope="session")
def regression_transform_run(tmp_path_factory):
    """Analyze + transform scikit-learn's diabetes data (real, 442 rows) for regression: float
    features and an integer label, all optional (VarLen) as an inferred schema has them."""
    import tensorflow as tf

    from pipeline.datasets import regression as regression_data

    out = tmp_path_factory.mktemp("regression_transform")
    root = regression_data.write_diabetes(str(out / "data"))
    with open(os.path.join(root, regression_data.DIABETES_FILE), newline="") as handle:
        records = list(csv.DictReader(handle))
    label = regression_data.DIABETES_LABEL
    raw = [
        {k: [int(v)] if k == label else [float(v)] for k, v in record.items()} for record in records
    ]
    feature_spec = {
        k: tf.io.VarLenFeature(tf.int64 if k == label else tf.float32) for k in records[0]
    }
    raw_metadata = dataset_metadata.DatasetMetadata(
        schema_utils.schema_from_feature_spec(feature_spec)
    )
    fn = functools.partial(
        preprocessing.preprocessing_fn,
        custom_config={features.LABEL_KEY_CONFIG: label, features.TASK_CONFIG: "regression"},
    )
    return {**analyze_and_transform(out, raw, raw_metadata, fn), "label": label}
