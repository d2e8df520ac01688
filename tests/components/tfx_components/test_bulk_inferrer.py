"""The BulkInferrer executor's CSV: columns from the model's outputs, one row per PredictionLog
as tfx_bsl's RunInference writes it (the request's serialized tf.Example, the response's
per-row tensors), the class named from the label vocabulary; and a real Beam run of the
PTransform over gzip PredictionLogs."""

from __future__ import annotations

import csv
import io
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.tfx_components.bulk_inferrer import executor
from pipeline import datasets

CLASSES = ["Adelie", "Gentoo", "Chinstrap"]


def _log(features: dict, outputs: dict) -> prediction_log_pb2.PredictionLog:
    """A PredictionLog shaped as tfx_bsl 1.16's _PredictModelHandler._post_process makes it."""
    feature = {}
    for name, value in features.items():
        if isinstance(value, str):
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
        elif isinstance(value, int):
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request.inputs["examples"]
    request.dtype = tf.string.as_datatype_enum
    request.string_val.append(example.SerializeToString())
    for name, value in outputs.items():
        value = np.asarray(value)
        log.predict_log.response.outputs[name].CopyFrom(
            tf.make_tensor_proto(value, shape=np.expand_dims(value, 0).shape)
        )
    return log


def test_classification_row_names_the_class_and_keeps_missing_cells_empty():
    log = _log(
        {"island": "Dream", "bill_length_mm": 39.1, "year": 2008},
        {"probabilities": np.array([0.1, 0.7, 0.2], np.float32), "class_ids": np.int64(1)},
    )
    columns = ("island", "bill_length_mm", "sex", "year")
    outputs = executor.log_parts(log)[1]
    layout = executor.output_layout(columns, outputs, "species", CLASSES)
    assert layout.header == [
        *columns,
        "predicted_species",
        "probability_Adelie",
        "probability_Gentoo",
        "probability_Chinstrap",
    ]
    row = executor.csv_row(log, layout, tuple(CLASSES))
    # 39.1 read back as the float32 it was, as the CSV wrote it; sex missing: an empty cell.
    assert row == ["Dream", "39.1", "", "2008", "Gentoo", "0.1", "0.7", "0.2"]


def test_regression_and_unknown_outputs():
    log = _log({"age": 50}, {"prediction": np.float32(151.5), "prediction_xf": np.float32(0.2)})
    layout = executor.output_layout(("age",), executor.log_parts(log)[1], "progression", [])
    assert layout.header == ["age", "predicted_progression"]
    assert executor.csv_row(log, layout) == ["50", "151.5"]
    logits = _log({"age": 50}, {"outputs": np.array([1.5, -0.25], np.float32)})
    layout = executor.output_layout(("age",), executor.log_parts(logits)[1], "species", [])
    assert layout.header == ["age", "outputs_0", "outputs_1"]
    assert executor.csv_row(logits, layout) == ["50", "1.5", "-0.25"]


def test_write_predictions_csv_on_beam_quotes_cells_and_writes_one_header(tmp_path):
    logs = [
        _log(
            {"island": f"Isle, {index}", "year": 2000 + index},
            {"probabilities": np.array([0.5, 0.25, 0.25], np.float32), "class_ids": np.int64(0)},
        )
        for index in range(5)
    ]
    with tf.io.TFRecordWriter(str(tmp_path / "prediction_logs-00000-of-00001.gz"), "GZIP") as out:
        for log in logs:
            out.write(log.SerializeToString())
    pattern = str(tmp_path / executor.PREDICTION_LOGS_PATTERN)
    first = executor.first_log(pattern)
    assert first == logs[0]
    layout = executor.output_layout(
        ("island", "year"), executor.log_parts(first)[1], "species", CLASSES
    )
    path = str(tmp_path / executor.PREDICTIONS_FILE)
    with beam.Pipeline() as pipeline:
        _ = pipeline | executor.WritePredictionsCsv(pattern, layout, path, tuple(CLASSES))
    with open(path, newline="") as handle:
        table = list(csv.reader(handle))
    assert table[0] == layout.header
    assert sorted(table[1:]) == [
        [f"Isle, {index}", str(2000 + index), "Adelie", "0.5", "0.25", "0.25"] for index in range(5)
    ]


def _example_log(feature: dict, outputs: dict) -> prediction_log_pb2.PredictionLog:
    """Like _log, with a feature's value given as a list (several values, or none: the feature
    present with no kind set) and None for a feature left out."""
    example = tf.train.Example()
    for name, values in feature.items():
        if values is None:
            continue
        slot = example.features.feature[name]
        slot.SetInParent()
        if values and isinstance(values[0], bytes):
            slot.bytes_list.value.extend(values)
        elif values and isinstance(values[0], int):
            slot.int64_list.value.extend(values)
        elif values:
            slot.float_list.value.extend(values)
    log = _log({}, outputs)
    log.predict_log.request.inputs["examples"].string_val[0] = example.SerializeToString()
    return log


def _penguin_features() -> list[dict]:
    """penguins.csv's rows (NA: left out), then rows with what a CSV cell can hold."""
    with open(os.path.join(datasets.penguins_data_root(), "penguins.csv"), newline="") as handle:
        rows = list(csv.DictReader(handle))
    numeric = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
    found = []
    for row in rows:
        feature: dict = {
            name: None if row[name] == "NA" else [row[name].encode()]
            for name in ("species", "island", "sex")
        }
        feature.update(
            {name: None if row[name] == "NA" else [float(row[name])] for name in numeric}
        )
        feature["year"] = [int(row["year"])]
        found.append(feature)
    found += [
        {"island": [b'Isle, "Dream"'], "sex": [b"line\nbreak"], "year": [-3]},
        {"island": [b"caf\xc3\xa9 \xff"], "sex": [b""], "bill_length_mm": [1e-7, 3e20, 0.0]},
        {"island": [], "sex": [b"a", b"b,c"], "bill_length_mm": [-0.0, 1.0, 123456789.0]},
        {"island": [b"cr\rlf"], "bill_depth_mm": [float("nan"), float("inf"), 0.00042]},
    ]
    return found


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_batched_csv_lines_are_the_per_row_text(batch):
    """csv_lines (Arrow, a batch at once) against csv_row + csv_line (Python, a row at a
    time) on penguins.csv's rows: the same text, cell for cell, for a classifier and a
    regression model."""
    features = _penguin_features()
    rng = np.random.default_rng(3)
    columns = ("species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm")
    columns += ("body_mass_g", "sex", "year", "not_in_any_row")
    # Probabilities from 1e-9 to 1 (numpy and Arrow write the small ones differently), a class
    # id outside the vocabulary (written as the number); predictions over many magnitudes.
    scale = 10.0 ** rng.integers(-9, 1, size=(len(features), 3))
    probabilities = (rng.random((len(features), 3)) * scale).astype(np.float32)
    ids = rng.integers(0, 3, size=len(features))
    ids[5] = 7
    predictions = (
        rng.standard_normal(len(features)) * 10.0 ** rng.integers(-8, 20, size=len(features))
    ).astype(np.float32)
    predictions[:4] = [3.0, -0.0, 1e16, 123.25]
    for outputs_of, class_names in (
        (lambda i: {"probabilities": probabilities[i], "class_ids": np.int64(ids[i])}, CLASSES),
        (lambda i: {"prediction": predictions[i]}, []),
    ):
        logs = [_example_log(feature, outputs_of(i)) for i, feature in enumerate(features)]
        layout = executor.output_layout(
            columns, executor.log_parts(logs[0])[1], "species", class_names
        )
        expected = [
            executor.csv_line(executor.csv_row(log, layout, tuple(class_names))) for log in logs
        ]
        got = []
        for start in range(0, len(logs), batch):
            got += executor.csv_lines(logs[start : start + batch], layout, tuple(class_names))
        assert got == expected
        # What the per-row text says, read back: the cells are the input's.
        table = list(csv.reader(io.StringIO("\r\n".join(got))))
        assert len(table) == len(features)
        assert table[0][:8] == [
            "Adelie",
            "Torgersen",
            "39.1",
            "18.7",
            "181.0",
            "3750.0",
            "male",
            "2007",
        ]
        assert table[3][2] == "" and table[3][7] == "2007"  # NA: empty cells
        assert table[-4][1] == 'Isle, "Dream"' and table[-4][6] == "line\nbreak"
        assert table[-3][1] == "café \ufffd" and table[-3][2] == "1e-07 3e+20 0.0"
        assert table[-2][1] == "" and table[-2][6] == "a b,c"
        assert table[-2][2] == "-0.0 1.0 123456790.0"
        assert all(row[8] == "" for row in table)
        if class_names:
            assert table[5][9] == "7" and {row[9] for row in table} <= {*CLASSES, "7"}
            assert np.array_equal(np.array(table[0][10:], np.float32), probabilities[0])
        else:
            assert [row[9] for row in table[:4]] == ["3.0", "-0.0", "1e+16", "123.25"]
            assert np.array_equal(np.array([row[9] for row in table], np.float32), predictions)
