"""The vocabularies of many string columns from one tf.Transform analyzer.

`tft.vocabulary` is one analyzer per column: its own count, filter, sort and write stages in
the Beam graph and its own nodes in every trace of the preprocessing function, so a table's
Transform time grew with its text columns. `column_vocabularies` computes every column's
vocabulary in one pass (`tft.experimental.ptransform_analyzer`): one combine counts the values
of all columns, then one step sorts and writes one vocabulary file per column. Each file is
what `tft.vocabulary(x, vocab_filename=name)` writes for that column alone: its values by
decreasing count, equal counts by decreasing value (bytes), empty values and values holding a
newline left out, under the same sanitized file name, registered in the asset map, so
`TFTransformOutput.vocabulary_by_name(name)` and `tft.apply_vocabulary` read it as before.
"""

from __future__ import annotations

import collections
import os
import uuid
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform import analyzers as tft_analyzers

# What tft.vocabulary writes for a column without any value (tf.lookup fails on an empty file).
_EMPTY_VOCABULARY_TOKEN = tft_analyzers.get_empy_vocabulary_dummy_value(tf.string)[1]


def file_name(vocabulary_name: str) -> str:
    """The file tft.vocabulary would write for vocab_filename=vocabulary_name (and the one
    TFTransformOutput.vocabulary_file_by_name looks for)."""
    return tft_analyzers.sanitized_vocab_filename(filename=vocabulary_name)


class _CountPerColumn(beam.CombineFn):
    """Accumulator: one Counter of values per column of the [batch, columns] input."""

    def __init__(self, columns: int):
        self._columns = columns

    def create_accumulator(self):
        return [collections.Counter() for _ in range(self._columns)]

    def add_input(self, accumulator, batch):
        (values,) = batch
        for column, counter in enumerate(accumulator):
            counter.update(values[:, column].tolist())
        return accumulator

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for accumulator in accumulators:
            for counter, other in zip(merged, accumulator, strict=True):
                counter.update(other)
        return merged

    def extract_output(self, accumulator):
        return accumulator


def ordered_tokens(counts: collections.Counter) -> list[bytes]:
    """A column's vocabulary as tft.vocabulary orders it: by count, then by value, largest
    first; empty values and values with a newline or carriage return are never entries."""
    kept = [
        (count, token)
        for token, count in counts.items()
        if token and b"\n" not in token and b"\r" not in token
    ]
    kept.sort(reverse=True)
    return [token for _, token in kept] or [_EMPTY_VOCABULARY_TOKEN]


def counts_name(vocabulary_name: str) -> str:
    """The asset that holds a counted column's vocabulary with its counts."""
    return f"{vocabulary_name}_counts"


def _write_vocabularies(counters, directory: str, names: Sequence[str], counted) -> tuple:
    """One vocabulary file per column, then for each counted column the same tokens in the same
    order with their counts, one `COUNT TOKEN` line each (the format tft.vocabulary writes with
    store_frequency=True, which TFTransformOutput.vocabulary_by_name reads back)."""
    tf.io.gfile.makedirs(directory)
    paths = []
    for counts, name in zip(counters, names, strict=True):
        path = os.path.join(directory, file_name(name))
        with tf.io.gfile.GFile(path, "wb") as handle:
            handle.write(b"".join(token + b"\n" for token in ordered_tokens(counts)))
        paths.append(np.array(path.encode()))
    for index in counted:
        counts, name = counters[index], counts_name(names[index])
        path = os.path.join(directory, file_name(name))
        with tf.io.gfile.GFile(path, "wb") as handle:
            handle.write(
                b"".join(
                    b"%d %s\n" % (counts.get(token, 0), token) for token in ordered_tokens(counts)
                )
            )
        paths.append(np.array(path.encode()))
    return tuple(paths)


def _pick(paths: tuple, index: int):
    return paths[index]


class _ColumnVocabularies(tft_beam.experimental.PTransformAnalyzer):
    """[batch, columns] string batches -> one vocabulary file path per column."""

    def __init__(self, names: Sequence[str], counted: Sequence[int] = ()):
        super().__init__()
        self._names = tuple(names)
        self._counted = tuple(counted)

    def expand(self, batches):
        # A directory of this analyzer's own: the file names are the vocabularies' names.
        directory = os.path.join(self.base_temp_dir, f"column_vocabularies_{uuid.uuid4().hex}")
        paths = (
            batches
            | "CountPerColumn" >> beam.CombineGlobally(_CountPerColumn(len(self._names)))
            | "SortAndWrite"
            >> beam.Map(
                _write_vocabularies,
                directory=directory,
                names=self._names,
                counted=self._counted,
            )
        )
        return tuple(
            paths | f"Path[{index}]" >> beam.Map(_pick, index=index)
            for index in range(len(self._names) + len(self._counted))
        )


def column_vocabularies(
    columns: Sequence[tf.Tensor], names: Sequence[str], counted: Sequence[int] = ()
) -> list[tf.Tensor]:
    """One analyzer over dense [batch] string tensors: the path of each one's vocabulary file,
    written as `names[i]` (for tft.apply_vocabulary and vocabulary_by_name), then for each index
    in `counted` the path of that column's vocabulary with counts (`counts_name(names[i])`)."""
    if len(columns) != len(names) or not columns:
        raise ValueError(f"{len(columns)} column(s) for {len(names)} vocabulary name(s)")
    stacked = tf.stack([tf.reshape(column, [-1]) for column in columns], axis=1)
    written = [*names, *(counts_name(names[index]) for index in counted)]
    paths = tft.experimental.ptransform_analyzer(
        inputs=[stacked],
        ptransform=_ColumnVocabularies(names, counted),
        output_dtypes=[tf.string] * len(written),
        output_shapes=[[]] * len(written),
        output_asset_default_values=[_EMPTY_VOCABULARY_TOKEN] * len(written),
        name="column_vocabularies",
    )
    for name in written:
        tft.annotate_asset(name, file_name(name))
    return list(paths)
