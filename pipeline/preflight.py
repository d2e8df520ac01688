"""Checks on the raw input that run in the driver, before any component starts.

Each failure is an InputError whose message names the file and column (and the flag to change),
instead of a stack trace from deep inside a Beam worker.
"""

from __future__ import annotations

import csv
import glob
import os

from components.tfx_components.example_gen import csv_reader
from pipeline.config import DatasetConfig


class InputError(ValueError):
    pass


def load_schema(path: str):
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils

    try:
        return io_utils.parse_pbtxt_file(path, schema_pb2.Schema())
    except Exception as error:  # a malformed pbtxt raises text_format.ParseError and others
        raise InputError(f"schema {path}: not a readable schema.pbtxt: {error}") from error


def input_files(dataset: DatasetConfig) -> list[str]:
    if not os.path.isdir(dataset.data_root):
        raise InputError(f"data directory {dataset.data_root} does not exist (--data)")
    files = sorted(
        path
        for path in glob.glob(os.path.join(dataset.data_root, dataset.file_pattern))
        if os.path.isfile(path)
    )
    if not files:
        raise InputError(f"no files match {dataset.file_pattern!r} in {dataset.data_root} (--data)")
    return files


def read_header(path: str) -> list[str]:
    try:
        with open(path, "rb") as handle:
            first_line = handle.readline()
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror}") from error
    if not first_line.strip():
        raise InputError(f"{path}: the file is empty (a header row is required)")
    try:
        # Old Mac files end lines with a bare \r.
        text = first_line.decode("utf-8-sig").replace("\r", "\n", 1).split("\n", 1)[0]
        header = next(csv.reader([text]), [])
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: header row is not UTF-8 text ({error.reason})") from error
    except csv.Error as error:
        raise InputError(f"{path}: header row is not readable CSV ({error})") from error
    if text.count('"') % 2:
        raise InputError(f"{path}: header row has an unterminated quote: {text!r}")
    if any(not name.strip() for name in header):
        raise InputError(f"{path}: header row has an empty column name: {text!r}")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise InputError(f"{path}: duplicate column name(s) {duplicates}")
    return header


def check_dataset(dataset: DatasetConfig) -> dict:
    """Returns facts the runner needs: files, columns, total bytes, schema column types."""
    files = input_files(dataset)
    headers = {path: read_header(path) for path in files}
    first_path, columns = next(iter(headers.items()))
    for path, header in headers.items():
        if header != columns:
            raise InputError(
                f"{path}: columns {header} differ from {first_path}'s {columns}; all files "
                "under --data must share one header"
            )
    if dataset.label_key not in columns:
        raise InputError(
            f"label column {dataset.label_key!r} (--label) is not in {first_path}; "
            f"columns are {columns}"
        )
    column_types = {}
    if dataset.schema_path:
        schema = load_schema(dataset.schema_path)
        column_types = csv_reader.schema_column_types(schema)
        missing = [name for name in column_types if name not in columns]
        unexpected = [name for name in columns if name not in column_types]
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(f"missing column(s) {missing}")
            if unexpected:
                parts.append(f"column(s) {unexpected} not in the schema")
            raise InputError(
                f"{first_path}: does not match schema {dataset.schema_path}: {'; '.join(parts)}"
            )
        if dataset.label_key not in column_types:
            raise InputError(
                f"label column {dataset.label_key!r} is not in schema {dataset.schema_path}"
            )
        # ExampleGen reads columns in file order; the schema fixes their types.
        column_types = {name: column_types[name] for name in columns}
    return {
        "files": files,
        "columns": columns,
        "total_bytes": sum(os.path.getsize(path) for path in files),
        "column_types": column_types,
        "description": f"{len(files)} CSV file(s)",
    }


def missing_image_features(schema, label_key: str) -> list[str]:
    """The features the image ExampleGen writes and the pipeline reads (the image bytes and the
    label) that the schema lacks, sorted."""
    from components.ml import features

    return sorted({features.IMAGE_KEY, label_key} - {feature.name for feature in schema.feature})


def check_images(dataset: DatasetConfig) -> dict:
    """Image folders: at least two class sub-folders holding files. The files themselves are
    validated (and rejected with reasons) by the image ExampleGen, in parallel."""
    from components.tfx_components.image_example_gen import reader

    try:
        classes = reader.list_class_names(dataset.data_root)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(f"{error} (--images)") from None
    files, empty = [], []
    for name in classes:
        in_class, _ = reader.list_class_files(dataset.data_root, name)
        files += in_class
        if not in_class:
            empty.append(name)
    if empty:
        raise InputError(
            f"class folder(s) {empty} under {dataset.data_root} hold no files (--images); "
            "remove them or add images"
        )
    if dataset.schema_path:
        missing = missing_image_features(load_schema(dataset.schema_path), dataset.label_key)
        if missing:
            raise InputError(
                f"schema {dataset.schema_path} lacks the image feature(s) {missing} (--schema)"
            )
    return {
        "files": files,
        "classes": classes,
        "total_bytes": sum(os.path.getsize(path) for path in files),
        "column_types": {},
        "description": f"{len(files)} image file(s) in {len(classes)} class folder(s)",
    }
