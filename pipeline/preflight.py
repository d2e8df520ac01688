"""Checks on the raw input that run in the driver, before any component starts.

Each failure is an InputError whose message names the file and column (and the flag to change),
instead of a stack trace from deep inside a Beam worker.
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import math
import os
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

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


# --task auto: an integer label with at most this many distinct values is classified.
MAX_AUTO_CLASSES = 10
# Inferred schemas: a string column with at least this many values, nearly all distinct, is
# taken for an identifier (a name, a date, a key) and left out of the features.
IDENTIFIER_MIN_VALUES = 20
IDENTIFIER_DISTINCT_FRACTION = 0.9
# Curated schemas mark a column that is not a feature with one of these lifecycle stages
# (tf.Transform and TFDV leave such features out); ExampleGen then does not write it.
EXCLUDED_STAGES = ("DISABLED", "DEPRECATED")


NEAR_UNIQUE_TEXT = "near-unique text"
ROW_NUMBERS = "row numbers"


class Identifier(NamedTuple):
    """A column that identifies rows and is left out of the features of an inferred schema: a
    string column whose values nearly all differ (a name, a date, a key), or an integer column
    whose values are all distinct and consecutive (a row number: 1..N in some order)."""

    name: str
    distinct: int
    values: int
    kind: str = NEAR_UNIQUE_TEXT


@dataclasses.dataclass(frozen=True)
class CsvFacts:
    """What the pre-flight read of the CSV files found, and what it decided."""

    files: tuple[str, ...]
    # The header every file shares, in file order.
    columns: tuple[str, ...]
    total_bytes: int
    # (column, type) of the columns ExampleGen writes, in file order, from a curated schema;
    # empty for an inferred schema (ExampleGen infers the types).
    column_types: tuple[tuple[str, str], ...]
    # Data rows read (a ragged row, which ExampleGen rejects and lists, is not among them).
    rows: int
    rows_without_label: int
    # classification or regression (dataset.task "auto" resolved).
    task: str
    delimiter: str
    # The dataset's, the schema's DISABLED ones, then the identifiers left out.
    excluded_columns: tuple[str, ...]
    identifiers: tuple[Identifier, ...]
    # Text columns of an inferred schema whose every value is a date or date and time: parsed
    # into numbers by the project's preprocessing (components.ml.timestamps), unless kept as text.
    timestamps: tuple[str, ...] = ()
    # With check_dataset(features=True) only (rows to predict, pipeline.inference): the type of
    # every feature column (curated or inferred as ExampleGen infers it), and the columns with a
    # value in every row (an inferred schema gives them a fixed shape).
    feature_types: tuple[tuple[str, str], ...] = ()
    complete_columns: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        return f"{len(self.files)} CSV file(s)"


@dataclasses.dataclass(frozen=True)
class ImageFolderFacts:
    """The files of an image dataset's class folders."""

    files: tuple[str, ...]
    classes: tuple[str, ...]
    total_bytes: int

    @property
    def description(self) -> str:
        return f"{len(self.files)} image file(s) in {len(self.classes)} class folder(s)"


# What check_dataset or check_images found.
Facts = CsvFacts | ImageFolderFacts


def input_files(dataset: DatasetConfig) -> list[str]:
    if os.path.isfile(dataset.data_root):
        raise InputError(
            f"--data takes the directory that holds the CSV files, not a file: pass --data "
            f"{os.path.dirname(dataset.data_root) or '.'} (got the file {dataset.data_root}; "
            "every *.csv file in the directory is read)"
        )
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


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            line = handle.readline()
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror}") from error
    if not line.strip():
        raise InputError(f"{path}: the file is empty (a header row is required)")
    try:
        return csv_reader.first_line(line)
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: header row is not UTF-8 text ({error.reason})") from error


def sniff_delimiter(path: str) -> str:
    """The separator of the file's header row (comma, semicolon, tab or pipe)."""
    try:
        return csv_reader.sniff_delimiter(_first_line(path))
    except csv.Error as error:  # a NUL byte: not a text file
        raise InputError(f"{path}: header row is not CSV text ({error})") from error


def read_header(path: str, delimiter: str = ",") -> list[str]:
    text = _first_line(path)
    try:
        header = next(csv.reader([text], delimiter=delimiter), [])
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


def _excluded_by_schema(schema) -> list[str]:
    from tensorflow_metadata.proto.v0 import schema_pb2

    stages = {getattr(schema_pb2, name) for name in EXCLUDED_STAGES}
    return [f.name for f in schema.feature if f.lifecycle_stage in stages or f.deprecated]


def _files_text(files: list[str]) -> str:
    return ", ".join(files[:3]) + (f" (and {len(files) - 3} more)" if len(files) > 3 else "")


def _read_columns(files, dataset: DatasetConfig, delimiter: str, columns, wanted) -> pa.Table:
    """The wanted columns of every file, as strings (missing tokens as nulls), one table."""
    tables = []
    for path in files:
        with open(path, "rb") as handle:
            data = handle.read()
        try:
            parsed = csv_reader.read_csv_as_strings(
                path,
                data,
                dataset.null_values,
                None,
                delimiter=delimiter,
                excluded_columns=[name for name in columns if name not in wanted],
            )
        except csv_reader.CsvFormatError as error:
            raise InputError(str(error)) from None
        if parsed.table.num_rows == 0 and not parsed.rejected:
            raise InputError(
                f"{path}: has a header row but no data rows; add rows or remove the file "
                "from --data"
            )
        tables.append(parsed.table.select(list(wanted)))
    return pa.concat_tables(tables)


def resolve_task(dataset: DatasetConfig, label_type: str, values: pa.ChunkedArray, files) -> str:
    """classification or regression for --task (auto: string label, or integers with at most
    MAX_AUTO_CLASSES distinct values -> classification; other numbers -> regression), after
    checking that the label has something to learn."""
    label, where = dataset.label_key, _files_text(files)
    present = values.drop_null()
    if len(present) == 0:
        raise InputError(
            f"label column {label!r} (--label) has no values in {where}: every cell is empty; "
            "name the column to predict with --label"
        )
    numeric = label_type in (csv_reader.INT, csv_reader.FLOAT)
    if dataset.task == "regression" and not numeric:
        example = present[0].as_py()
        raise InputError(
            f"label column {label!r} (--label) in {where} holds text ({example!r}), not "
            "numbers: --task regression predicts a number; use --task classification"
        )
    distinct = pc.unique(pc.cast(present, pa.float64()) if numeric else present)
    task = dataset.task
    if task == "auto":
        few = label_type == csv_reader.INT and len(distinct) <= MAX_AUTO_CLASSES
        task = "classification" if not numeric or few else "regression"
    if len(distinct) < 2:
        what = "nothing to classify" if task == "classification" else "nothing to regress"
        raise InputError(
            f"label column {label!r} (--label) has one distinct value "
            f"({distinct[0].as_py()!r}) in {len(present)} row(s) of {where}: {what}; "
            "predict a column with at least two different values"
        )
    return task


def likely_identifiers(table: pa.Table, names) -> list[Identifier]:
    """The columns that identify rows and would be memorised as features: string columns whose
    values are nearly all distinct (names, dates, keys), and integer columns of row numbers
    (every cell filled, every value distinct, together a run of consecutive integers)."""
    found = []
    for name in names:
        column = table.column(name)
        values = column.drop_null()
        if len(values) < IDENTIFIER_MIN_VALUES:
            continue
        column_type = csv_reader.infer_column_type(values)
        if column_type == csv_reader.STRING:
            distinct = len(pc.unique(values))
            if distinct >= IDENTIFIER_DISTINCT_FRACTION * len(values):
                found.append(Identifier(name, distinct, len(values)))
        elif (
            column_type == csv_reader.INT
            and column.null_count == 0
            and _is_row_number(pc.cast(values, pa.int64()))
        ):
            found.append(Identifier(name, len(values), len(values), ROW_NUMBERS))
    return found


def _is_row_number(values: pa.ChunkedArray) -> bool:
    """Every value distinct and max - min + 1 of them: 1..N, 0..N-1 or any shifted run."""
    low, high = pc.min_max(values).values()
    span = high.as_py() - low.as_py() + 1
    return span == len(values) and len(pc.unique(values)) == len(values)


@dataclasses.dataclass(frozen=True)
class _ColumnRoles:
    """What the schema (curated or to be inferred) makes of the columns: the columns left out,
    the types a curated schema fixes, the label's type, and the columns read to decide."""

    excluded: list[str]
    column_types: dict[str, str]
    label_type: str
    table: pa.Table
    identifiers: list[Identifier]
    timestamps: list[str] = dataclasses.field(default_factory=list)


def check_dataset(
    dataset: DatasetConfig,
    delimiter: str | None = None,
    keep_columns=(),
    keep_text_columns=(),
    features: bool = False,
) -> CsvFacts:
    """Reads the CSV files once (the label column; every column for an inferred schema) and
    returns the facts the runner needs: files, columns, total bytes, schema column types, the
    task (dataset.task "auto" resolved), the delimiter (sniffed unless given), the excluded
    columns (the dataset's, the schema's DISABLED ones, likely identifiers of an inferred
    schema unless in keep_columns), the identifiers found and the timestamp columns (text columns
    of an inferred schema whose every value is a date or date and time, unless in
    keep_text_columns). Raises InputError naming the file, the column and what to do."""
    files = input_files(dataset)
    delimiter = delimiter or sniff_delimiter(files[0])
    first_path, columns = _shared_header(files, delimiter)
    hint = csv_reader.one_column_hint(columns, delimiter)
    _check_named_columns(dataset, keep_columns, first_path, columns, hint)
    _check_named_columns(
        dataset, keep_text_columns, first_path, columns, hint, "--keep_text_columns"
    )
    if dataset.schema_path:
        schema = load_schema(dataset.schema_path)
        roles = _roles_by_schema(dataset, schema, files, delimiter, first_path, columns, hint)
    else:
        roles = _roles_inferred(dataset, files, delimiter, columns, keep_columns, keep_text_columns)
    _check_features_left(dataset.label_key, roles.excluded, first_path, columns, hint)
    label_values = roles.table.column(dataset.label_key)
    feature_names = [n for n in columns if n not in roles.excluded and n != dataset.label_key]
    feature_types: dict[str, str] = {}
    if features and roles.column_types:
        feature_types = {name: roles.column_types[name] for name in feature_names}
    elif features:
        feature_types = {
            n: csv_reader.infer_column_type(roles.table.column(n)) for n in feature_names
        }
    return CsvFacts(
        files=tuple(files),
        columns=tuple(columns),
        total_bytes=sum(os.path.getsize(path) for path in files),
        column_types=tuple(roles.column_types.items()),
        rows=roles.table.num_rows,
        rows_without_label=label_values.null_count,
        task=resolve_task(dataset, roles.label_type, label_values, files),
        delimiter=delimiter,
        excluded_columns=tuple(roles.excluded),
        identifiers=tuple(roles.identifiers),
        timestamps=tuple(roles.timestamps),
        feature_types=tuple(feature_types.items()),
        complete_columns=tuple(
            name
            for name in (feature_names if features else ())
            if name in roles.table.column_names and roles.table.column(name).null_count == 0
        ),
    )


def _shared_header(files: list[str], delimiter: str) -> tuple[str, list[str]]:
    """(the first file, its columns): every file's header, which must all be the same."""
    headers = {path: read_header(path, delimiter) for path in files}
    first_path, columns = next(iter(headers.items()))
    for path, header in headers.items():
        if header != columns:
            raise InputError(
                f"{path}: columns {header} differ from {first_path}'s {columns}; all files "
                "under --data must share one header"
            )
    return first_path, columns


def _check_named_columns(
    dataset: DatasetConfig, keep_columns, first_path, columns, hint, flag="--keep_columns"
) -> None:
    """The label and the columns the flags name are in the header."""
    label = dataset.label_key
    if label not in columns:
        raise InputError(
            f"label column {label!r} (--label) is not in {first_path}; columns are {columns}" + hint
        )
    unknown = [name for name in dataset.excluded_columns if name not in columns]
    if unknown:
        raise InputError(
            f"--exclude_columns names column(s) {unknown} that {first_path} does not have; "
            f"columns are {columns}"
        )
    unknown = [name for name in keep_columns if name not in columns]
    if unknown:
        raise InputError(
            f"{flag} names column(s) {unknown} that {first_path} does not have; "
            f"columns are {columns}"
        )


def _roles_by_schema(
    dataset: DatasetConfig, schema, files, delimiter: str, first_path: str, columns, hint: str
) -> _ColumnRoles:
    """A curated schema: the header must hold its active features (and nothing else but the
    excluded columns); it fixes the column types. Only the label column is read."""
    label = dataset.label_key
    excluded = list(dataset.excluded_columns)
    schema_types = csv_reader.schema_column_types(schema)
    disabled = _excluded_by_schema(schema)
    if label in disabled:
        raise InputError(
            f"label column {label!r} is marked excluded (lifecycle_stage) in schema "
            f"{dataset.schema_path}; the label must be an active feature"
        )
    active = [name for name in schema_types if name not in disabled]
    listed = [name for name in excluded if name in active]
    if listed:
        raise InputError(
            f"column(s) {listed} (--exclude_columns) are features of schema "
            f"{dataset.schema_path}: mark them `lifecycle_stage: DISABLED` there, or drop "
            "them from --exclude_columns"
        )
    excluded += [name for name in disabled if name in columns and name not in excluded]
    kept = [name for name in columns if name not in excluded]
    _check_schema_columns(dataset, schema_types, active, kept, first_path, columns, hint)
    # ExampleGen reads columns in file order; the schema fixes their types.
    return _ColumnRoles(
        excluded=excluded,
        column_types={name: schema_types[name] for name in kept},
        label_type=schema_types[label],
        table=_read_columns(files, dataset, delimiter, columns, [label]),
        identifiers=[],
    )


def _check_schema_columns(
    dataset: DatasetConfig, schema_types, active, kept, first_path: str, columns, hint: str
) -> None:
    missing = [name for name in active if name not in columns]
    unexpected = [name for name in kept if name not in schema_types]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing column(s) {missing}")
        if unexpected:
            parts.append(
                f"column(s) {unexpected} not in the schema (leave them out with --exclude_columns)"
            )
        raise InputError(
            f"{first_path}: does not match schema {dataset.schema_path}: {'; '.join(parts)}" + hint
        )
    if dataset.label_key not in schema_types:
        raise InputError(
            f"label column {dataset.label_key!r} is not in schema {dataset.schema_path}"
        )


def _roles_inferred(
    dataset: DatasetConfig, files, delimiter: str, columns, keep_columns, keep_text_columns=()
) -> _ColumnRoles:
    """No curated schema: every column not excluded is read, the label's type is inferred,
    timestamp columns (unless kept as text) are found, and likely identifiers (unless kept) are
    left out too. A timestamp is never taken for an identifier: its parts are numbers."""
    from components.ml import timestamps as timestamp_parts

    label = dataset.label_key
    excluded = list(dataset.excluded_columns)
    candidates = [name for name in columns if name not in excluded]
    table = _read_columns(files, dataset, delimiter, columns, candidates)
    label_type = csv_reader.infer_column_type(table.column(label))
    timestamps = [
        name
        for name in candidates
        if name != label
        and name not in keep_text_columns
        and timestamp_parts.is_timestamp_column(table.column(name))
    ]
    identifiers = likely_identifiers(
        table,
        [n for n in candidates if n != label and n not in keep_columns and n not in timestamps],
    )
    return _ColumnRoles(
        excluded=excluded + [identifier.name for identifier in identifiers],
        column_types={},
        label_type=label_type,
        table=table,
        identifiers=identifiers,
        timestamps=timestamps,
    )


def _check_features_left(label: str, excluded, first_path: str, columns, hint: str) -> None:
    features = [name for name in columns if name != label and name not in excluded]
    if not features:
        left_out = f"; excluded: {excluded}" if excluded else ""
        raise InputError(
            f"{first_path}: no feature columns to predict {label!r} from (columns {columns}"
            f"{left_out}); add columns, or keep excluded ones (--keep_columns)" + hint
        )


def check_rows_without_label(facts: CsvFacts, max_rejected_fraction: float) -> None:
    """Rows without a label are rejected by ExampleGen; when they alone exceed
    --max_rejected_fraction of the rows, ExampleGen would fail: say so before any component
    runs. (ExampleGen's fraction counts ragged rows too, which only adds rejects.)"""
    missing, rows = facts.rows_without_label, facts.rows
    if missing and missing > max_rejected_fraction * rows:
        raise InputError(
            f"{missing} of {rows} row(s) ({missing / rows:.1%}) in {_files_text(list(facts.files))}"
            f" have no value in the label column; ExampleGen rejects such rows and allows at "
            f"most {max_rejected_fraction:.1%} (--max_rejected_fraction {max_rejected_fraction:g}"
            "): fill in the labels, drop those rows, or raise --max_rejected_fraction to at "
            f"least {math.ceil(missing / rows * 1000) / 1000:g}"
        )


def cluster_csv_settings(
    label: str, schema_path: str, task: str, delimiter: str | None, exclude_columns=()
) -> dict:
    """DatasetConfig fields for CSV data this machine cannot read (Kubeflow: a URI the pods
    read), from the flags and the curated schema: the task ("auto" decides from the label's
    type: text classifies; a number could be either, so it asks for --task), the delimiter
    (comma unless given), the excluded columns (the flags' and the schema's DISABLED ones) and
    the column types of the columns ExampleGen writes."""
    schema = load_schema(schema_path)
    types = csv_reader.schema_column_types(schema)
    disabled = _excluded_by_schema(schema)
    if label not in types or label in disabled:
        raise InputError(f"label column {label!r} is not an active feature of {schema_path}")
    listed = [name for name in exclude_columns if name in types and name not in disabled]
    if listed:
        raise InputError(
            f"column(s) {listed} (--exclude_columns) are features of schema {schema_path}: "
            "mark them `lifecycle_stage: DISABLED` there, or drop them from --exclude_columns"
        )
    if task == "auto":
        if types[label] != csv_reader.STRING:
            raise InputError(
                f"label column {label!r} is numeric in {schema_path}: pass --task "
                "classification or --task regression (auto needs the data, which the cluster reads)"
            )
        task = "classification"
    elif task == "regression" and types[label] == csv_reader.STRING:
        raise InputError(f"label column {label!r} is text in {schema_path}: it cannot be regressed")
    excluded = (*exclude_columns, *(name for name in disabled if name not in exclude_columns))
    return {
        "task": task,
        "delimiter": delimiter or ",",
        "excluded_columns": tuple(excluded),
        "column_types": tuple((n, t) for n, t in types.items() if n not in excluded),
    }


def resolved(dataset: DatasetConfig, facts: Facts) -> DatasetConfig:
    """The dataset as the pre-flight facts fix it: column types, task, delimiter, exclusions."""
    if isinstance(facts, ImageFolderFacts):
        return dataclasses.replace(dataset, column_types=())
    return dataclasses.replace(
        dataset,
        column_types=facts.column_types,
        task=facts.task,
        delimiter=facts.delimiter,
        excluded_columns=facts.excluded_columns,
        timestamp_columns=facts.timestamps,
    )


def missing_image_features(schema, label_key: str) -> list[str]:
    """The features the image ExampleGen writes and the pipeline reads (the image bytes and the
    label) that the schema lacks, sorted."""
    from components.ml import features

    return sorted({features.IMAGE_KEY, label_key} - {feature.name for feature in schema.feature})


def _size_or_zero(path: str) -> int:
    """A file's size; 0 for one that cannot be read (the ExampleGen rejects and lists it)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def check_images(dataset: DatasetConfig) -> ImageFolderFacts:
    """Image folders: at least two class sub-folders holding files (nested folders included).
    The files themselves are validated (and rejected with reasons) by the image ExampleGen, in
    parallel."""
    from components.tfx_components.image_example_gen import reader

    try:
        classes = reader.list_class_names(dataset.data_root)
    except (FileNotFoundError, ValueError) as error:
        raise InputError(f"{error} (--images)") from None
    files, empty = [], []
    for name in classes:
        in_class = [f.path for f in reader.list_class_files(dataset.data_root, name).files]
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
    return ImageFolderFacts(
        files=tuple(files),
        classes=tuple(classes),
        total_bytes=sum(_size_or_zero(path) for path in files),
    )
