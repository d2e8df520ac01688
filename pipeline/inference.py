"""--infer_data DIR: rows without labels that TFX's BulkInferrer predicts with the blessed model.

Checked before any component runs: every *.csv file in DIR shares one header, which holds every
feature column the model reads (the training data's columns but the label and the excluded
ones) and no column the training data does not have; otherwise one line names the missing and
unexpected columns. The label column may be there: the model does not read it, and it is kept
in the predictions CSV as it is, like every other input column (an identifier column left out
of the features, say).

What the rows' ExampleGen is told (pipeline.builder): each column's type (a feature's as training
read it, so that the model's tf.Example parse gets the same types; any other column as text,
passed through unchanged) and the columns the model needs in every row (fixed-shape features:
its parse fails on a row without one), so that such rows are rejected and listed instead of
failing the inference.
"""

from __future__ import annotations

import dataclasses
import glob
import os

from components.tfx_components.example_gen import csv_reader
from pipeline import preflight
from pipeline.config import DatasetConfig, InferenceConfig

INFER_SPLIT = "infer"
FLAG = "--infer_data"


def _files(data_root: str, pattern: str) -> list[str]:
    if os.path.isfile(data_root):
        raise preflight.InputError(
            f"{FLAG} takes the directory that holds the CSV files to predict, not a file: pass "
            f"{FLAG} {os.path.dirname(data_root) or '.'}"
        )
    if not os.path.isdir(data_root):
        raise preflight.InputError(f"{FLAG}: directory {data_root} does not exist")
    files = sorted(p for p in glob.glob(os.path.join(data_root, pattern)) if os.path.isfile(p))
    if not files:
        raise preflight.InputError(f"{FLAG}: no files match {pattern!r} in {data_root}")
    return files


def required_features(dataset: DatasetConfig, facts: preflight.CsvFacts) -> tuple[str, ...]:
    """The features the serving signature parses with a fixed shape and no default: a curated
    schema's features with a shape; an inferred schema's (TFX's shape inference) the columns
    with a value in every training row."""
    names = [name for name, _ in facts.feature_types]
    if dataset.schema_path:
        schema = preflight.load_schema(dataset.schema_path)
        shaped = {feature.name for feature in schema.feature if feature.HasField("shape")}
        return tuple(name for name in names if name in shaped)
    if dataset.infer_feature_shape:
        return tuple(name for name in names if name in facts.complete_columns)
    return ()


def check_infer_data(
    data_root: str, dataset: DatasetConfig, facts: preflight.Facts
) -> InferenceConfig:
    """The rows to predict, checked against the training data's columns (facts from
    preflight.check_dataset(features=True)); InputError in one line otherwise."""
    if not isinstance(facts, preflight.CsvFacts) or dataset.is_images:
        raise preflight.InputError(
            f"{FLAG} predicts CSV rows: it is for CSV data (--data/--label or --dataset "
            "penguins), not image folders (predict images with python -m pipeline.predict)"
        )
    data_root = os.path.abspath(data_root)
    files = _files(data_root, "*.csv")
    delimiter = preflight.sniff_delimiter(files[0])
    header = preflight.read_header(files[0], delimiter)
    for path in files[1:]:
        other = preflight.read_header(path, delimiter)
        if other != header:
            raise preflight.InputError(
                f"{path}: columns {other} differ from {files[0]}'s {header}; all files under "
                f"{FLAG} must share one header"
            )
    types = dict(facts.feature_types)
    missing = [name for name in types if name not in header]
    unexpected = [name for name in header if name not in facts.columns]
    if missing or unexpected:
        parts = [f"missing column(s) {missing}"] if missing else []
        if unexpected:
            parts.append(f"unexpected column(s) {unexpected}")
        raise preflight.InputError(
            f"{FLAG} {files[0]}: columns do not match the model's features: {'; '.join(parts)} "
            f"(the model reads {list(types)}; the label {dataset.label_key!r} and the training "
            "data's other columns may be there too, and are kept in the output)"
            + csv_reader.one_column_hint(header, delimiter)
        )
    return InferenceConfig(
        data_root=data_root,
        delimiter=delimiter,
        column_types=tuple((name, types.get(name, csv_reader.STRING)) for name in header),
        required_columns=required_features(dataset, facts),
        label_present=dataset.label_key in header,
    )


def cluster_inference(data_root: str, dataset: DatasetConfig, schema_path: str) -> InferenceConfig:
    """Kubeflow: rows the pods read (a URI, or a mounted path), with the curated schema the
    training data is read with: the files hold the model's features (the schema's active
    columns but the label), in any order; their types and required columns are the schema's.
    When `data_root` is a directory on this machine too, its files are checked here as a local
    run checks them; otherwise the ExampleGen refuses, naming the columns, a file with others."""
    types = dict(dataset.column_types)
    features = {n: t for n, t in types.items() if n != dataset.label_key}
    shaped = {f.name for f in preflight.load_schema(schema_path).feature if f.HasField("shape")}
    if os.path.isdir(data_root):
        facts = preflight.CsvFacts(
            files=(),
            columns=(*types, *dataset.excluded_columns),
            total_bytes=0,
            column_types=(),
            rows=0,
            rows_without_label=0,
            task=dataset.task,
            delimiter=dataset.delimiter,
            excluded_columns=dataset.excluded_columns,
            identifiers=(),
            feature_types=tuple(features.items()),
        )
        local = check_infer_data(
            data_root, dataclasses.replace(dataset, schema_path=schema_path), facts
        )
        return dataclasses.replace(local, data_root=data_root)
    return InferenceConfig(
        data_root=data_root,
        delimiter=dataset.delimiter,
        column_types=tuple(features.items()),
        required_columns=tuple(name for name in features if name in shaped),
    )


def describe(inference: InferenceConfig, label_key: str) -> str:
    """The start line about the rows to predict."""
    label = (
        f"; the label column {label_key!r} is not read by the model and is kept in the output"
        if inference.label_present
        else ""
    )
    return (
        f"rows to predict: *.csv in {inference.data_root} ({FLAG}), {len(inference.columns)} "
        f"column(s){label}; predicted by BulkInferrer when the model is blessed"
    )
