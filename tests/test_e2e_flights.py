"""The whole local pipeline on the flights look-alike with the real table's cardinalities
(pipeline.datasets.synthetic.write_flights): rows without the label rejected within
--max_rejected_fraction 0.05, the hourly timestamp read as numbers (and kept as text with
--keep_text_columns, a cache miss for Transform), the tail number's thousands of values
embedded, and a pushed model that predicts raw CSV rows."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.csv as pacsv
import pytest

from pipeline.datasets import synthetic as synth_data
from pipeline.mlmd import connection, records

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = 3_000


def _run(data_dir, output_root, *extra):
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"),
            "--output_root",
            str(output_root),
            "--data",
            str(data_dir),
            "--label",
            synth_data.FLIGHTS_LABEL_KEY,
            "--max_rejected_fraction",
            "0.05",
            "--train_steps",
            "40",
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    return result.stdout


def _latest(store, type_name: str, producer: str):
    artifacts = [a for a in store.get_artifacts_by_type(type_name) if producer in a.uri]
    return max(artifacts, key=lambda artifact: artifact.id)


def _transformed_eval(store) -> dict[str, np.ndarray]:
    import tensorflow as tf
    import tensorflow_transform as tft

    graph = _latest(store, "TransformGraph", "Transform")
    spec = tft.TFTransformOutput(graph.uri).transformed_feature_spec()
    examples = _latest(store, "Examples", "Transform")
    files = glob.glob(os.path.join(examples.uri, "Split-eval", "*"))
    columns: dict[str, list] = {name: [] for name in spec}
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        parsed = tf.io.parse_single_example(record, spec)
        for name in spec:
            columns[name].append(parsed[name].numpy())
    return {name: np.array(values) for name, values in columns.items()}


@pytest.fixture(scope="module")
def flights_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("flights")
    data_dir = root / "flights"
    synth_data.write_flights(str(data_dir), rows=ROWS, files=2, seed=5)
    output_root = root / "out"
    store_path = str(output_root / "flights-pipeline" / "metadata.sqlite")
    first = _run(data_dir, output_root)
    store = connection.open_store(store_path)
    parsed = _transformed_eval(store)
    kept = _run(data_dir, output_root, "--keep_text_columns", "time_hour")
    store = connection.open_store(store_path)
    return {
        "data_dir": data_dir,
        "output_root": output_root,
        "first": first,
        "parsed": parsed,
        "kept": kept,
        "as_text": _transformed_eval(store),
        "store": store,
    }


def test_rows_without_the_label_are_rejected_within_the_fraction(flights_runs):
    table = synth_data.flights_table(ROWS, seed=5)
    missing = table.column(synth_data.FLIGHTS_LABEL_KEY).null_count
    assert 0 < missing < 0.05 * ROWS
    assert f"{missing} row(s) have no label" in flights_runs["first"]
    examples = _latest(flights_runs["store"], "Examples", "CsvExampleGen")
    counts = json.loads(records.custom_value(examples, "split_example_counts"))
    assert sum(counts.values()) == ROWS - missing


def test_the_timestamp_becomes_hour_weekday_and_time(flights_runs):
    assert (
        "read as timestamps (hour, day of week, time): time_hour; "
        "--keep_text_columns time_hour keeps them as text" in flights_runs["first"]
    )
    parsed = flights_runs["parsed"]
    assert "time_hour_xf" not in parsed
    # z-scored: the 19 scheduled hours (05-23) and 7 weekdays, in their order.
    hours = np.unique(np.round(parsed["time_hour_hour_xf"], 4))
    assert len(hours) == 19
    assert len(np.unique(np.round(parsed["time_hour_weekday_xf"], 4))) == 7
    assert parsed["time_hour_hour_xf"].dtype == np.float32
    # The continuous time follows the date: the month (z-scored) explains nearly all of it.
    assert np.corrcoef(parsed["time_hour_time_xf"], parsed["month_xf"])[0, 1] > 0.95
    # The tail number's thousands of values keep a vocabulary (embedded by the model).
    assert parsed["tailnum_xf"].dtype == np.int64
    assert parsed["tailnum_xf"].max() > 256


def test_keep_text_columns_reruns_transform_with_a_vocabulary(flights_runs):
    kept = flights_runs["kept"]
    assert "read as timestamps" not in kept
    assert "Transform executed" in kept
    as_text = flights_runs["as_text"]
    assert "time_hour_hour_xf" not in as_text
    assert as_text["time_hour_xf"].dtype == np.int64


def test_the_pushed_model_predicts_raw_rows(flights_runs, tmp_path):
    rows = os.path.join(tmp_path, "new.csv")
    source = sorted(glob.glob(os.path.join(flights_runs["data_dir"], "*.csv")))[0]
    with open(source, encoding="utf-8") as handle:
        lines = handle.read().splitlines()[:11]
    with open(rows, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    serving = flights_runs["output_root"] / "flights-pipeline" / "serving_model"
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.predict", "--model", str(serving), "--csv", rows],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    predictions = [
        float(line.split("arr_delay=")[1])
        for line in result.stdout.splitlines()
        if "arr_delay=" in line
    ]
    assert len(predictions) == 10 and all(np.isfinite(predictions))
    table = pacsv.read_csv(rows)
    actual = np.array(table.column("arr_delay").to_pylist(), dtype=float)
    # A model of skill: closer to the actual delays than their mean is, on these rows.
    known = ~np.isnan(actual)
    error = np.abs(np.array(predictions)[known] - actual[known]).mean()
    assert error < np.abs(actual[known] - actual[known].mean()).mean()
