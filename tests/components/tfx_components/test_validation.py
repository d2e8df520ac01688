"""The strict ExampleValidator: real ExampleGen output of a drifted CSV against the curated
penguin schema, through TFDV, must list each anomaly."""

from __future__ import annotations

import os

import pytest
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2

from components.tfx_components.example_gen import csv_reader
from components.tfx_components.validation import executor
from pipeline import preflight
from tests.components.helpers import run_executor


def split_statistics(examples_uri: str, split: str, work_dir):
    """TFDV statistics of one split of ExampleGen's gzip TFRecord shards."""
    return tfdv.generate_statistics_from_tfrecord(
        data_location=os.path.join(examples_uri, f"Split-{split}", "*.gz"),
        output_path=str(work_dir / f"{split}.stats.tfrecord"),
    )


@pytest.fixture
def drifted_penguins(tmp_path, write_csv, penguins_csv, penguins_schema_path):
    """Real penguin rows plus drift: a new species, a new island, sex missing everywhere."""
    with open(penguins_csv) as handle:
        lines = handle.read().splitlines()
    header, rows = lines[0], lines[1:]
    columns = header.split(",")
    drifted = []
    for index, row in enumerate(rows):
        cells = row.split(",")
        cells[columns.index("sex")] = "NA"
        if index % 10 == 0:
            cells[columns.index("species")] = "Emperor"
            cells[columns.index("island")] = "Ross"
        drifted.append(",".join(cells))
    write_csv("penguins.csv", "\n".join([header, *drifted]) + "\n")
    schema = preflight.load_schema(penguins_schema_path)
    examples = run_executor(
        tmp_path, write_csv.dir, column_types=csv_reader.schema_column_types(schema)
    )
    return examples, schema


def test_drifted_csv_yields_one_line_per_anomaly(drifted_penguins, tmp_path):
    examples, schema = drifted_penguins
    stats = split_statistics(examples.uri, "train", tmp_path)
    anomalies = tfdv.validate_statistics(stats, schema)
    lines = executor.describe_anomalies({"train": anomalies})
    assert len(lines) == 3, lines
    text = "\n".join(lines)
    assert "feature 'species': ENUM_TYPE_UNEXPECTED_STRING_VALUES" in text
    assert "Emperor" in text
    assert "feature 'island': ENUM_TYPE_UNEXPECTED_STRING_VALUES" in text
    assert "feature 'sex': FEATURE_TYPE_NOT_PRESENT" in text
    assert all(line.startswith("split 'train': ") for line in lines)


def test_clean_penguins_have_no_anomalies(tmp_path, write_csv, penguins_csv, penguins_schema_path):
    with open(penguins_csv) as handle:
        write_csv("penguins.csv", handle.read())
    schema = preflight.load_schema(penguins_schema_path)
    examples = run_executor(
        tmp_path, write_csv.dir, column_types=csv_reader.schema_column_types(schema)
    )
    anomalies = tfdv.validate_statistics(split_statistics(examples.uri, "train", tmp_path), schema)
    assert executor.describe_anomalies({"train": anomalies}) == []


def test_dataset_level_anomalies_are_listed():
    anomalies = anomalies_pb2.Anomalies()
    info = anomalies.dataset_anomaly_info
    info.description = "The ratio of num examples in the current dataset versus the previous"
    info.reason.add(type=anomalies_pb2.AnomalyInfo.DATASET_HIGH_NUM_EXAMPLES)
    assert executor.describe_anomalies({"eval": anomalies}) == [
        "split 'eval': dataset: DATASET_HIGH_NUM_EXAMPLES: The ratio of num examples in the "
        "current dataset versus the previous"
    ]
