"""TFX's BulkInferrer executor, then the predictions as CSV.

TFX's executor (tfx.components.bulk_inferrer.executor) runs the inference on Beam (tfx_bsl's
RunInference over the model's serving signature) and writes PredictionLogs into the
InferenceResult; it returns without predicting when the model is not blessed. This executor then
reads those PredictionLogs in a second Beam pipeline on the same runner and writes
`predictions.csv` inside the InferenceResult: each row's input columns (from the tf.Example the
log carries; a missing value as an empty cell), then what the model says:

  the project's classifier   predicted_<label> (the class name: class_ids of its serving_numeric
                             signature, named by the label vocabulary in the model's assets),
                             probability_<class> per class
  the project's regression   predicted_<label> (in the label's units)
  another model's outputs    one column per output value: <output> or <output>_<index>

Rows are in no particular order (Beam's); the input columns identify them. The InferenceResult
records the file and the row accounting: rows read by the ExampleGen = rows predicted + rows
rejected (listed where the ExampleGen lists them).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from typing import Any

import apache_beam as beam
from absl import logging
from tfx import types
from tfx.components.bulk_inferrer import executor as tfx_executor
from tfx.components.util import model_utils
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import path_utils

from components.ml import features
from components.tfx_components import ingestion

METRICS_NAMESPACE = "CsvBulkInferrer"
COLUMNS_KEY = "csv_columns"
LABEL_KEY = "label_key"
PREDICTIONS_FILE = "predictions.csv"
# TFX's executor writes prediction_logs-*.gz in the InferenceResult's folder.
PREDICTION_LOGS_PATTERN = "prediction_logs-*"
# Properties of the InferenceResult artifact (pipeline.local.summary reads them by these names).
PREDICTIONS_PROPERTY = "predictions_csv_uri"
PREDICTED_PROPERTY = "num_rows_predicted"
BLESSED_PROPERTY = "blessed"
# Copied from the rows' Examples artifact (components.tfx_components.example_gen.executor).
INT_ACCOUNTING = ("num_rows_read", "num_rows_rejected")
STRING_ACCOUNTING = ("rejected_rows_uri",)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The CSV's columns: the input's, then the outputs' (output name, index or None, header)."""

    inputs: tuple[str, ...]
    outputs: tuple[tuple[str, int | None, str], ...]

    @property
    def header(self) -> list[str]:
        return [*self.inputs, *(name for _, _, name in self.outputs)]


def output_layout(
    inputs, outputs: dict[str, Any], label_key: str, class_names: list[str]
) -> Layout:
    """The columns for a model whose outputs (one row's, {name: array}) are these."""
    import numpy as np

    predicted = f"predicted_{label_key}" if label_key else "predicted"
    columns: list[tuple[str, int | None, str]]
    if {features.CLASS_IDS, features.PROBABILITIES} <= set(outputs):
        width = int(np.asarray(outputs[features.PROBABILITIES]).size)
        names = class_names if len(class_names) == width else [str(i) for i in range(width)]
        columns = [(features.CLASS_IDS, None, predicted)] + [
            (features.PROBABILITIES, index, f"probability_{name}")
            for index, name in enumerate(names)
        ]
    elif features.PREDICTION in outputs:
        columns = [(features.PREDICTION, None, predicted)]
    else:
        columns = []
        for name in sorted(outputs):
            width = int(np.asarray(outputs[name]).size)
            columns += [
                (name, None if width == 1 else i, name if width == 1 else f"{name}_{i}")
                for i in range(width)
            ]
    return Layout(tuple(inputs), tuple(columns))


def log_parts(log) -> tuple[Any, dict[str, Any]]:
    """(the tf.Example, {output: the row's values as a flat array}) of one PredictLog."""
    import tensorflow as tf

    [request_input] = log.predict_log.request.inputs.values()
    example = tf.train.Example.FromString(request_input.string_val[0])
    outputs = {
        name: _flat_values(tensor) for name, tensor in log.predict_log.response.outputs.items()
    }
    return example, outputs


# TensorProto dtype enum -> (numpy type, repeated field): the numbers tfx_bsl logs.
_FIELDS = {1: ("float32", "float_val"), 2: ("float64", "double_val"), 9: ("int64", "int64_val")}


def _flat_values(tensor):
    """A TensorProto's values, flat: read from its bytes or repeated field directly (the CSV
    pays this per row; tf.make_ndarray's general path costs more), else through
    tf.make_ndarray."""
    import numpy as np

    known = _FIELDS.get(tensor.dtype)
    if known is not None:
        if tensor.tensor_content:
            return np.frombuffer(tensor.tensor_content, dtype=known[0])
        values = getattr(tensor, known[1])
        size = int(np.prod([dim.size for dim in tensor.tensor_shape.dim]))
        if len(values) == size:
            return np.asarray(values, dtype=known[0])
    import tensorflow as tf

    return tf.make_ndarray(tensor).reshape(-1)


def _cell(value) -> str:
    import numpy as np

    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float | np.floating):
        return str(np.float32(value))  # the shortest text that reads back as the same float32
    return str(value)


def csv_row(log, layout: Layout, class_names: tuple[str, ...] = ()) -> list[str]:
    """One PredictionLog as the CSV's cells."""
    example, outputs = log_parts(log)
    cells = []
    for name in layout.inputs:
        feature = example.features.feature.get(name)
        kind = feature.WhichOneof("kind") if feature is not None else None
        values = list(getattr(feature, kind).value) if kind else []
        cells.append(" ".join(_cell(value) for value in values))
    for name, index, _ in layout.outputs:
        value = outputs[name][0 if index is None else index]
        if name == features.CLASS_IDS and 0 <= int(value) < len(class_names):
            value = class_names[int(value)]
        cells.append(_cell(value))
    return cells


def csv_line(cells: list[str]) -> str:
    """One CSV line, without its end: csv.writer's minimal quoting, a cell holding a comma, a
    quote, \\r or \\n quoted (the line terminator's characters are what makes it quote them)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\r\n").writerow(cells)
    return buffer.getvalue()[: -len("\r\n")]


# Rows per Beam element in the CSV pass: the batch's tf.Examples are decoded into Arrow columns at
# once and each column is formatted by Arrow's kernels, not cell by cell in Python.
BATCH_MIN_ROWS = 1024
BATCH_MAX_ROWS = 8192
# Arrow's shortest float32 text (double-conversion) has the same digits as numpy's
# str(np.float32), positional from 1e-6 to 1e10 where numpy's is from 1e-4 to 1e16 (numpy 1e-05,
# Arrow 0.00001; numpy 109335446000.0, Arrow 1.09335446e+11): values outside [1e-3, 1e9), a few,
# are formatted by numpy so that every cell is as csv_row writes it.
_POSITIONAL = (1e-3, 1e9)
_QUOTE_NEEDED = '[,"\\r\\n]'  # csv.writer's QUOTE_MINIMAL for this dialect


def _float_texts(values):
    """float32 values (numpy) -> str(np.float32(v)) of each, as an Arrow string array."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    values = np.asarray(values, dtype=np.float32)
    texts = pc.cast(pa.array(values), pa.string())
    # Arrow writes an integral value without ".0" ("1", "-0", "123456790"); numpy keeps it.
    integral = pc.invert(pc.match_substring_regex(texts, "[.ena]"))
    texts = pc.if_else(integral, pc.binary_join_element_wise(texts, ".0", ""), texts)
    magnitude = np.abs(values)
    other = np.flatnonzero(
        np.isfinite(values)
        & (magnitude != 0)
        & ((magnitude < _POSITIONAL[0]) | (magnitude >= _POSITIONAL[1]))
    )
    if other.size:
        listed = texts.to_pylist()
        for index in other.tolist():
            listed[index] = str(values[index])
        texts = pa.array(listed, pa.string())
    return texts


def _value_texts(values):
    """The flat values of one input column (float32, int64 or bytes) as Arrow strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = values.type
    if pa.types.is_floating(kind):
        return _float_texts(values.to_numpy(zero_copy_only=False))
    if pa.types.is_integer(kind):
        return pc.cast(values, pa.string())
    try:
        return pc.cast(values, pa.string())
    except pa.ArrowInvalid:  # not UTF-8: as csv_row, each undecodable byte replaced
        return pa.array(
            [value.decode("utf-8", "replace") for value in values.to_pylist()], pa.string()
        )


def _input_cells(column, rows: int):
    """A decoded column (list of values per row, null where the feature is missing) -> one
    string per row, the values joined by a space, empty where missing."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column is None or pa.types.is_null(column.type):
        return pa.array([""] * rows, pa.string())
    first, last = column.offsets[0].as_py(), column.offsets[-1].as_py()  # a slice's, anywhere
    texts = _value_texts(column.values.slice(first, last - first))
    offsets = pc.subtract(column.offsets, first)
    lists = pa.ListArray.from_arrays(pc.cast(offsets, pa.int32()), texts)
    joined = pc.binary_join(lists, " ")
    return pc.if_else(column.is_null(), "", joined)


def _output_matrices(logs, names) -> dict[str, Any]:
    """The outputs named of every log in the batch, each as a row's values per row (numpy,
    rows x width); each log's output map read once (the proto map is costly to open)."""
    import numpy as np

    tensors: dict[str, list] = {name: [] for name in names}
    for log in logs:
        outputs = log.predict_log.response.outputs
        for name in names:
            tensors[name].append(outputs[name])
    matrices = {}
    for name, found in tensors.items():
        known = _FIELDS.get(found[0].dtype)
        if known is not None and all(tensor.dtype == found[0].dtype for tensor in found):
            if all(tensor.tensor_content for tensor in found):
                flat = np.frombuffer(b"".join(tensor.tensor_content for tensor in found), known[0])
                matrices[name] = flat.reshape(len(found), -1)
                continue
            values = [getattr(tensor, known[1]) for tensor in found]
            width = len(values[0])
            if width and all(len(row) == width for row in values):
                matrices[name] = np.array(values, dtype=known[0]).reshape(len(found), width)
                continue
        matrices[name] = np.stack([_flat_values(tensor) for tensor in found])
    return matrices


def _output_cells(column, name: str, class_names: tuple[str, ...]):
    """One output column (numpy) as strings, a class id named as csv_row names it."""
    import numpy as np
    import pyarrow as pa

    if name == features.CLASS_IDS and class_names:
        ids = column.astype(np.int64)
        known = (ids >= 0) & (ids < len(class_names))
        names = np.asarray(class_names, dtype=object)[np.where(known, ids, 0)]
        return pa.array(np.where(known, names, ids.astype(str).astype(object)), pa.string())
    if np.issubdtype(column.dtype, np.floating):
        return _float_texts(column)
    if np.issubdtype(column.dtype, np.integer):
        return pa.array(column.astype(str).astype(object), pa.string())
    return pa.array([_cell(value) for value in column.tolist()], pa.string())


def _quoted(cells):
    """csv.writer's minimal quoting, on a whole column: a cell holding a comma, a quote or a
    line break is quoted, its quotes doubled."""
    import pyarrow.compute as pc

    needs = pc.match_substring_regex(cells, _QUOTE_NEEDED)
    if not pc.any(needs).as_py():
        return cells
    escaped = pc.replace_substring(cells, '"', '""')
    return pc.if_else(needs, pc.binary_join_element_wise('"', escaped, '"', ""), cells)


def csv_lines(logs, layout: Layout, class_names: tuple[str, ...] = ()) -> list[str]:
    """A batch of PredictionLogs as CSV lines, column by column (the same text as csv_row and
    csv_line give row by row)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from tfx_bsl.coders import example_coder

    if not logs:
        return []
    serialized = []
    for log in logs:
        [request_input] = log.predict_log.request.inputs.values()
        serialized.append(request_input.string_val[0])
    batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(serialized)
    names = set(batch.schema.names)
    columns = [
        _input_cells(batch.column(name) if name in names else None, len(logs))
        for name in layout.inputs
    ]
    matrices = _output_matrices(logs, sorted({name for name, _, _ in layout.outputs}))
    for name, index, _ in layout.outputs:
        matrix = matrices[name]
        columns.append(_output_cells(matrix[:, 0 if index is None else index], name, class_names))
    columns = [_quoted(pc.cast(column, pa.string())) for column in columns]
    if len(columns) == 1:  # csv.writer writes a lone empty cell as ""
        columns = [pc.if_else(pc.equal(columns[0], ""), '""', columns[0])]
    return pc.binary_join_element_wise(*columns, ",").to_pylist()


class _ToCsvText(beam.DoFn):
    """A batch of PredictionLogs -> its CSV lines as one text element (WriteToText ends it)."""

    def __init__(self, layout: Layout, class_names: tuple[str, ...]):
        self._layout = layout
        self._class_names = class_names
        self._rows = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_predicted")

    def process(self, logs):
        if not logs:
            return
        self._rows.inc(len(logs))
        yield "\n".join(csv_lines(logs, self._layout, self._class_names))


@beam.ptransform_fn
def WritePredictionsCsv(
    pipeline, logs_pattern: str, layout: Layout, path: str, class_names: tuple[str, ...] = ()
):
    """PredictionLogs (gzip TFRecords) -> one CSV file with a header."""
    from tensorflow_serving.apis import prediction_log_pb2

    return (
        pipeline
        | "ReadPredictionLogs"
        >> beam.io.ReadFromTFRecord(
            logs_pattern, coder=beam.coders.ProtoCoder(prediction_log_pb2.PredictionLog)
        )
        | "Batch"
        >> beam.BatchElements(min_batch_size=BATCH_MIN_ROWS, max_batch_size=BATCH_MAX_ROWS)
        | "ToCsvText" >> beam.ParDo(_ToCsvText(layout, class_names))
        | "WriteCsv"
        >> beam.io.WriteToText(
            path[: -len(".csv")],
            file_name_suffix=".csv",
            num_shards=1,
            shard_name_template="",
            header=csv_line(layout.header),
        )
    )


def first_log(logs_pattern: str):
    """The first PredictionLog written, or None when there is none (no rows to predict)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    files = sorted(fileio.glob(logs_pattern))
    if not files:
        return None
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP").take(1):
        return prediction_log_pb2.PredictionLog.FromString(record.numpy())
    return None


def model_class_names(model_path: str) -> list[str]:
    """The project's classifier keeps Transform's label vocabulary among its assets."""
    path = os.path.join(model_path, "assets", features.LABEL_VOCABULARY)
    if not fileio.exists(path):
        return []
    with fileio.open(path, "rb") as handle:
        return [line.rstrip(b"\n").decode("utf-8", "replace") for line in handle]


class Executor(tfx_executor.Executor):
    """TFX's BulkInferrer, then predictions.csv in the InferenceResult, with the accounting."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        result = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.INFERENCE_RESULT_KEY]
        )
        examples = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.EXAMPLES_KEY]
        )
        for name in INT_ACCOUNTING:
            if examples.has_custom_property(name):
                result.set_int_custom_property(name, examples.get_int_custom_property(name))
        for name in STRING_ACCOUNTING:
            if examples.has_custom_property(name):
                result.set_string_custom_property(name, examples.get_string_custom_property(name))
        blessing = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.MODEL_BLESSING_KEY]
        )
        blessed = model_utils.is_model_blessed(blessing)
        result.set_int_custom_property(BLESSED_PROPERTY, int(blessed))
        super().Do(input_dict, output_dict, exec_properties)
        if not blessed:
            logging.info("CsvBulkInferrer: the model is not blessed; no predictions written")
            return
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        model_path = path_utils.serving_model_path(
            model.uri, path_utils.is_old_model_artifact(model)
        )
        logs_pattern = os.path.join(result.uri, PREDICTION_LOGS_PATTERN)
        first = first_log(logs_pattern)
        columns = json.loads(exec_properties[COLUMNS_KEY])
        outputs = log_parts(first)[1] if first is not None else {}
        class_names = model_class_names(model_path)
        layout = output_layout(columns, outputs, exec_properties.get(LABEL_KEY) or "", class_names)
        path = os.path.join(result.uri, PREDICTIONS_FILE)
        predicted = 0
        if first is None:
            with fileio.open(path, "w") as handle:
                handle.write(csv_line(layout.header) + "\n")
        else:
            pipeline = self._make_beam_pipeline()
            _ = pipeline | "WritePredictionsCsv" >> WritePredictionsCsv(
                logs_pattern, layout, path, tuple(class_names)
            )
            run = pipeline.run()
            run.wait_until_finish()
            predicted = ingestion.committed_counters(run, METRICS_NAMESPACE).get(
                "rows_predicted", 0
            )
        result.set_string_custom_property(PREDICTIONS_PROPERTY, path)
        result.set_int_custom_property(PREDICTED_PROPERTY, predicted)
        written = json.loads(examples.get_string_custom_property("split_example_counts") or "{}")
        expected = sum(written.values()) if written else predicted
        logging.info(
            "CsvBulkInferrer: %d row(s) predicted of %d written by the ExampleGen -> %s",
            predicted,
            expected,
            path,
        )
        if predicted != expected:
            raise AssertionError(
                f"row accounting failed: the ExampleGen wrote {expected} row(s) to predict, "
                f"{predicted} were predicted"
            )
