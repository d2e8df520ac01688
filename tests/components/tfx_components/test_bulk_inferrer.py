"""The BulkInferrer executor's CSV: columns from the model's outputs, one row per PredictionLog
as tfx_bsl's RunInference writes it (the request's serialized tf.Example, the response's
per-row tensors), the class named from the label vocabulary; and a real Beam run of the
PTransform over gzip PredictionLogs."""

from __future__ import annotations

import csv

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.tfx_components.bulk_inferrer import executor

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
