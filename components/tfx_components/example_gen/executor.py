"""Sharded CSV ExampleGen executor: Beam reads CSV files in bulk, splits by hash bucket and writes
a fixed number of gzip TFRecord shards per split (streamed, never grouped: see
components.records.bulk_tfrecord for what a shard count means on each runner), accounting for
every input row.

It runs inside TFX's stock FileBasedExampleGen component (same spec, driver, artifacts and input
fingerprinting), so caching and downstream components work unchanged. The stock CSV executor takes
no shard count, reads "NA" in a numeric column as a string column and fails on the first ragged
row; this one takes `num_shards`, treats configured null tokens as missing, and rejects bad rows
with file, line and reason, failing the run when they exceed `max_rejected_fraction`.

Parameters (see component.ShardedCsvExampleGenSpec): num_shards, null_values (JSON list),
column_types (JSON object; empty: inferred over all files), max_rejected_fraction, delimiter,
excluded_columns (JSON list: never written), label_key (rows without a label are rejected),
required_columns (JSON list; rows to predict: rows with no value in a column the model requires
in every row are rejected, as its tf.Example parse would fail on them).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import apache_beam as beam
import numpy as np
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs

from components.records import bulk_tfrecord
from components.tfx_components import ingestion
from components.tfx_components.example_gen import csv_reader

METRICS_NAMESPACE = "ShardedCsvExampleGen"
DEFAULT_NUM_SHARDS = 4
DEFAULT_NULL_VALUES = ("", "NA", "NaN", "nan", "null", "NULL")
REJECTED_DIR = "rejected_rows"
OUTPUT_FILE_PREFIX = "data_tfrecord"
# Execution parameters beyond FileBasedExampleGenSpec's (see component.ShardedCsvExampleGenSpec).
NUM_SHARDS_KEY = "num_shards"
NULL_VALUES_KEY = "null_values"
COLUMN_TYPES_KEY = "column_types"
MAX_REJECTED_FRACTION_KEY = "max_rejected_fraction"
DELIMITER_KEY = "delimiter"
EXCLUDED_COLUMNS_KEY = "excluded_columns"
LABEL_KEY = "label_key"
REQUIRED_COLUMNS_KEY = "required_columns"
# Why a required column of rows to predict needs a value, in a rejected row's reason.
WHY_REQUIRED = "the model requires a value in every row"


class TooManyRejectedRowsError(ValueError):
    pass


def _read_range(file_range: csv_reader.FileRange) -> bytes:
    with fileio.open(file_range.path, "rb") as handle:
        return csv_reader.read_range_bytes(file_range, handle)


@dataclasses.dataclass(frozen=True)
class CsvFormat:
    """How every file is read: missing-value tokens, separator, columns left out, the label."""

    null_values: tuple[str, ...] = DEFAULT_NULL_VALUES
    delimiter: str = ","
    excluded_columns: tuple[str, ...] = ()
    label_key: str = ""
    # Rows to predict: the columns the model requires a value in (fixed-shape features).
    required_columns: tuple[str, ...] = ()

    def read(self, file_range: csv_reader.FileRange, expected_columns) -> csv_reader.ParsedFile:
        return csv_reader.read_csv_as_strings(
            file_range.path,
            _read_range(file_range),
            self.null_values,
            expected_columns,
            delimiter=self.delimiter,
            excluded_columns=self.excluded_columns,
            line_offset=file_range.line_offset,
        )


class _PlanRanges(beam.DoFn):
    """A CSV file -> the FileRanges it is read as (csv_reader.RANGE_BYTES each), so that one
    task's memory is bounded however large the file, and a large file spreads over workers."""

    def __init__(self, range_bytes: int | None = None):
        self._range_bytes = range_bytes or csv_reader.RANGE_BYTES

    def process(self, path: str):
        stat = fileio.stat(path)
        size = getattr(stat, "length", None)
        size = stat.st_size if size is None else size
        # plan_ranges reads nothing of a file no larger than one range.
        with fileio.open(path, "rb") as handle:
            yield from csv_reader.plan_ranges(path, size, handle, self._range_bytes)


class _InferFileTypes(beam.DoFn):
    def __init__(self, csv_format: CsvFormat):
        self._format = csv_format

    def process(self, file_range: csv_reader.FileRange):
        yield csv_reader.infer_column_types(self._format.read(file_range, None))


class _UnifyTypes(beam.CombineFn):
    def create_accumulator(self):
        return {}

    def add_input(self, accumulator, types_of_file):
        return csv_reader.unify_column_types([accumulator, types_of_file])

    def merge_accumulators(self, accumulators):
        return csv_reader.unify_column_types(accumulators)

    def extract_output(self, accumulator):
        return accumulator


class _CsvFileToExamples(beam.DoFn):
    """One CSV file (or range of one) -> per split, one list of its serialized tf.Examples
    (tagged with the split name), and rejected rows as JSON lines (tag 'rejected')."""

    REJECTED = "rejected"

    def __init__(self, csv_format: CsvFormat, split_names: list[str], split_buckets: list[int]):
        self._format = csv_format
        self._split_names = split_names
        self._split_buckets = split_buckets
        self._rows_read = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_read")
        self._rows_rejected = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_rejected")
        self._written = {
            name: beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"examples_{name}")
            for name in split_names
        }
        self._encoder: Any | None = None  # a tfx_bsl RecordBatchToExamplesEncoder, from setup()

    def setup(self):
        from tfx_bsl.coders import example_coder

        self._encoder = example_coder.RecordBatchToExamplesEncoder()

    def process(self, file_range: csv_reader.FileRange, column_types: dict[str, str]):
        parsed = self._format.read(file_range, list(column_types))
        label = [self._format.label_key] if self._format.label_key in column_types else []
        if self._format.required_columns:
            record_batch, bad_cells, keep = csv_reader.convert_table(
                parsed, column_types, self._format.required_columns, WHY_REQUIRED
            )
        else:
            record_batch, bad_cells, keep = csv_reader.convert_table(parsed, column_types, label)
        rejected = parsed.rejected + bad_cells
        self._rows_read.inc(parsed.table.num_rows + len(parsed.rejected))
        self._rows_rejected.inc(len(rejected))
        for row in rejected:
            yield beam.pvalue.TaggedOutput(self.REJECTED, row.to_json())
        splits = csv_reader.split_of_buckets(
            csv_reader.hash_buckets(parsed.table.filter(keep), sum(self._split_buckets)),
            self._split_buckets,
        )
        # One element per split (a list of serialized examples), not one per example: Beam's
        # per-element cost on the DirectRunner is larger than the encoding itself.
        assert self._encoder is not None, "Beam calls setup() before process()"
        encoded = np.array(self._encoder.encode(record_batch), dtype=object)
        for index, name in enumerate(self._split_names):
            examples = encoded[splits == index].tolist()
            if examples:
                self._written[name].inc(len(examples))
                yield beam.pvalue.TaggedOutput(name, examples)


@beam.ptransform_fn
def ReadCsvFilesToSplits(
    pipeline: beam.Pipeline,
    csv_files: list[str],
    column_types: dict[str, str] | None,
    csv_format: CsvFormat,
    split_names: list[str],
    buckets: list[int],
):
    """Pipeline root -> ({split: lists of serialized examples}, rejected rows as JSON lines)."""
    files = (
        pipeline
        | "ListFiles" >> beam.Create(sorted(csv_files))
        | "SplitLargeFiles" >> beam.ParDo(_PlanRanges())
    )
    if column_types:
        types_view = beam.pvalue.AsSingleton(
            pipeline | "GivenColumnTypes" >> beam.Create([dict(column_types)])
        )
    else:
        types_view = beam.pvalue.AsSingleton(
            files
            | "InferFileTypes" >> beam.ParDo(_InferFileTypes(csv_format))
            | "UnifyTypes" >> beam.CombineGlobally(_UnifyTypes())
        )
    results = (
        files
        # One element per file or range: spread them over workers before the heavy parse.
        | "SpreadFiles" >> beam.Reshuffle()
        | "CsvToExamples"
        >> beam.ParDo(
            _CsvFileToExamples(csv_format, split_names, buckets), types_view
        ).with_outputs(_CsvFileToExamples.REJECTED, *split_names)
    )
    return {name: results[name] for name in split_names}, results[_CsvFileToExamples.REJECTED]


def list_csv_files(input_base: str, pattern: str) -> list[str]:
    files = sorted(
        path for path in fileio.glob(os.path.join(input_base, pattern)) if not fileio.isdir(path)
    )
    if not files:
        raise FileNotFoundError(f"no input files match {os.path.join(input_base, pattern)!r}")
    return files


class Executor(base_beam_executor.BaseBeamExecutor):
    """Executor for FileBasedExampleGen: sharded, accounted CSV -> tf.Example conversion."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        split = ingestion.hash_split_output(exec_properties, output_dict, "ShardedCsvExampleGen")
        split_names, buckets, examples_artifact = split.names, split.buckets, split.examples
        num_shards = int(exec_properties.get(NUM_SHARDS_KEY, DEFAULT_NUM_SHARDS))
        null_values = tuple(
            json.loads(exec_properties.get(NULL_VALUES_KEY) or "null") or DEFAULT_NULL_VALUES
        )
        csv_format = CsvFormat(
            null_values=null_values,
            delimiter=exec_properties.get(DELIMITER_KEY) or ",",
            excluded_columns=tuple(json.loads(exec_properties.get(EXCLUDED_COLUMNS_KEY) or "[]")),
            label_key=exec_properties.get(LABEL_KEY) or "",
            required_columns=tuple(json.loads(exec_properties.get(REQUIRED_COLUMNS_KEY) or "[]")),
        )
        column_types = json.loads(exec_properties.get(COLUMN_TYPES_KEY) or "{}") or None
        max_rejected_fraction = float(exec_properties.get(MAX_REJECTED_FRACTION_KEY, 0.0))
        input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
        csv_files = list_csv_files(input_base, split.pattern)

        # Beside the Examples folder, not inside it: the listing survives a failed run.
        rejected_prefix = ingestion.listing_file(examples_artifact.uri, REJECTED_DIR, "rejected")[
            : -len(".jsonl")
        ]
        logging.info(
            "ShardedCsvExampleGen: %d file(s) under %s -> splits %s (buckets %s), %d shard(s) each",
            len(csv_files),
            input_base,
            split_names,
            buckets,
            num_shards,
        )

        pipeline = self._make_beam_pipeline()
        splits, rejected = pipeline | "ReadCsvFilesToSplits" >> ReadCsvFilesToSplits(
            csv_files, column_types, csv_format, split_names, buckets
        )
        for name, examples in splits.items():
            split_uri = artifact_utils.get_split_uri([examples_artifact], name)
            # Streamed, not grouped by shard: memory stays flat with the row count.
            _ = examples | f"Write[{name}]" >> bulk_tfrecord.StreamBatchesToShards(
                os.path.join(split_uri, OUTPUT_FILE_PREFIX), num_shards
            )
        _ = rejected | "WriteRejected" >> beam.io.WriteToText(
            rejected_prefix, file_name_suffix=".jsonl", num_shards=1, shard_name_template=""
        )
        result = pipeline.run()
        result.wait_until_finish()

        counts = ingestion.committed_counters(result, METRICS_NAMESPACE)
        rows_read = counts.get("rows_read", 0)
        rows_rejected = counts.get("rows_rejected", 0)
        written = {name: counts.get(f"examples_{name}", 0) for name in split_names}
        examples_artifact.set_int_custom_property("num_csv_files", len(csv_files))
        examples_artifact.set_int_custom_property("num_rows_read", rows_read)
        examples_artifact.set_int_custom_property("num_rows_rejected", rows_rejected)
        examples_artifact.set_int_custom_property("num_shards_per_split", num_shards)
        examples_artifact.set_string_custom_property(
            "rejected_rows_uri", rejected_prefix + ".jsonl"
        )
        examples_artifact.set_string_custom_property("split_example_counts", json.dumps(written))
        examples_artifact.set_string_custom_property("payload_format", "FORMAT_TF_EXAMPLE")
        examples_artifact.set_string_custom_property("file_format", "tfrecords_gzip")
        logging.info(
            "ShardedCsvExampleGen: %d row(s) read = %s written + %d rejected",
            rows_read,
            " + ".join(f"{n} {name}" for name, n in written.items()),
            rows_rejected,
        )
        if sum(written.values()) + rows_rejected != rows_read:
            raise AssertionError(
                f"row accounting failed: read {rows_read}, written {written}, "
                f"rejected {rows_rejected}"
            )
        if rows_rejected and rows_rejected > max_rejected_fraction * rows_read:
            raise TooManyRejectedRowsError(
                _rejection_message(
                    rejected_prefix + ".jsonl", rows_read, rows_rejected, max_rejected_fraction
                )
            )


def read_rejected_rows(uri: str) -> list[csv_reader.RejectedRow]:
    if not fileio.exists(uri):
        return []
    with fileio.open(uri, "r") as handle:
        return [csv_reader.RejectedRow(**json.loads(line)) for line in handle if line.strip()]


def _rejection_message(uri: str, read: int, rejected: int, max_fraction: float) -> str:
    return ingestion.rejection_listing(
        f"{rejected} of {read} CSV row(s) rejected (allowed fraction {max_fraction}: fix the "
        "rows, or allow more with --max_rejected_fraction)",
        uri,
        sorted(read_rejected_rows(uri), key=lambda r: (r.file, r.line)),
    )
