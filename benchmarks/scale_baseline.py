"""The hand-written reference for the scale benchmark: one process, no Beam, no TFX.

    python -m benchmarks.scale_baseline --data DIR --out DIR [--schema schemas/synth/schema.pbtxt]

Reads every CSV file under --data with pyarrow, computes what the pipeline's preprocessing_fn
computes (per numeric column: mean, then mean and variance after imputing the mean; per string
column and the label: a vocabulary by descending frequency) with numpy/pyarrow, and writes the
transformed rows to gzip TFRecords, one tf.train.Example per row, with the pipeline's
transformed feature names. Prints one JSON line: rows, seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from components.ml import features

MISSING_TOKEN = features.MISSING_TOKEN
NUM_FILES = 4
NULL_VALUES = ("", "NA", "NaN", "nan", "null", "NULL")


@dataclasses.dataclass
class Statistics:
    # Per numeric column: (mean of present values, mean and std of the imputed column,
    # whether it has missing values).
    numeric: dict[str, tuple[float, float, float, bool]]
    # Per string column: vocabulary, most frequent first (ties by value, as tf.Transform).
    vocabularies: dict[str, list[str]]


def read_table(paths: list[str]) -> pa.Table:
    # The same cells read as missing as the pipeline's ExampleGen reads.
    options = pacsv.ConvertOptions(null_values=list(NULL_VALUES), strings_can_be_null=True)
    return pa.concat_tables(pacsv.read_csv(path, convert_options=options) for path in paths)


def vocabulary(column: pa.ChunkedArray) -> list[str]:
    counts = pc.value_counts(pc.fill_null(column, MISSING_TOKEN).combine_chunks())
    values = counts.field("values").to_pylist()
    frequency = counts.field("counts").to_numpy()
    order = sorted(range(len(values)), key=lambda i: (-frequency[i], values[i]))
    return [values[i] for i in order]


def compute_statistics(table: pa.Table, label_key: str) -> Statistics:
    numeric, vocabularies = {}, {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_string(column.type) or name == label_key:
            vocabularies[name] = vocabulary(column.cast(pa.string()))
            continue
        values = column.to_numpy().astype(np.float64)  # nulls -> NaN
        present = ~np.isnan(values)
        mean = float(values[present].mean())
        imputed = np.where(present, values, mean)
        numeric[name] = (mean, float(imputed.mean()), float(imputed.std()), not present.all())
    return Statistics(numeric, vocabularies)


def transformed_columns(table: pa.Table, stats: Statistics, label_key: str) -> dict:
    """Transformed name -> numpy array (float32 or int64), one value per row."""
    out = {}
    for name, (mean, imputed_mean, imputed_std, has_missing) in stats.numeric.items():
        values = table.column(name).to_numpy().astype(np.float64)
        present = ~np.isnan(values)
        imputed = np.where(present, values, mean)
        scale = imputed_std if imputed_std > 0 else 1.0
        out[features.transformed_name(name)] = ((imputed - imputed_mean) / scale).astype(np.float32)
        if has_missing:
            out[features.missing_indicator_name(name)] = (~present).astype(np.float32)
    for name, vocab in stats.vocabularies.items():
        column = pc.fill_null(table.column(name).cast(pa.string()), MISSING_TOKEN)
        index = pc.index_in(column.combine_chunks(), value_set=pa.array(vocab))
        index = index.to_numpy(zero_copy_only=False)
        # Unseen values go to the one OOV bucket after the vocabulary (none here: same data).
        index = np.where(np.isnan(index.astype(np.float64)), len(vocab), index).astype(np.int64)
        out[features.transformed_name(name)] = index
    return out


def write_examples(columns: dict, out_dir: str, num_files: int = NUM_FILES) -> int:
    import tensorflow as tf

    os.makedirs(out_dir, exist_ok=True)
    names = sorted(columns)
    floats = {n for n in names if columns[n].dtype == np.float32}
    rows = len(next(iter(columns.values())))
    lists = {n: columns[n].tolist() for n in names}
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    bounds = np.linspace(0, rows, num_files + 1).astype(int)
    for index in range(num_files):
        path = os.path.join(out_dir, f"transformed-{index:05d}-of-{num_files:05d}.gz")
        with tf.io.TFRecordWriter(path, options) as writer:
            for row in range(bounds[index], bounds[index + 1]):
                feature = {
                    n: tf.train.Feature(float_list=tf.train.FloatList(value=[lists[n][row]]))
                    if n in floats
                    else tf.train.Feature(int64_list=tf.train.Int64List(value=[lists[n][row]]))
                    for n in names
                }
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
    return rows


def run(data_dir: str, out_dir: str, label_key: str) -> dict:
    started = time.monotonic()
    paths = sorted(glob.glob(os.path.join(data_dir, "*.csv")))
    table = read_table(paths)
    stats = compute_statistics(table, label_key)
    rows = write_examples(transformed_columns(table, stats, label_key), out_dir)
    return {"rows": rows, "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--label", default="label")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.data, args.out, args.label)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
