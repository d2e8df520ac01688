"""The vocabularies of many string columns from one tf.Transform analyzer, applied through one
lookup table.

`tft.vocabulary` is one analyzer per column: its own count, filter, sort and write stages in
the Beam graph and its own nodes in every trace of the preprocessing function, so a table's
Transform time grew with its text columns. `column_vocabularies` computes every column's
vocabulary in one pass (`tft.experimental.ptransform_analyzer`): one combine counts the values
of all columns, then one step sorts and writes one vocabulary file per column. Each file is
what `tft.vocabulary(x, vocab_filename=name)` writes for that column alone: its values by
decreasing count, equal counts by decreasing value (bytes), empty values and values holding a
newline left out, under the same sanitized file name, registered in the asset map, so
`TFTransformOutput.vocabulary_by_name(name)` reads it as before.

`tft.apply_vocabulary` is one lookup table per column, and a table is the costly part of a
transform graph: created and initialized from its file in each of the preprocessing function's
traces, serialized with functions of its own in every SavedModel that holds it (the transform
graph, the serving model) and rebuilt at every load. So the same step also writes one file
holding every `indexed` column's vocabulary, each entry prefixed with its column's number
(`lookup_key`) and each column headed by its number alone (`lookup_lines`);
`apply_column_vocabularies` looks all those columns up in one table and gives the index
`tft.apply_vocabulary` would have given in the column's own file (its line there; unseen values
the one OOV bucket at the vocabulary's size).
"""

from __future__ import annotations

import collections
import dataclasses
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


# The one lookup file of the indexed columns (a transform graph asset like the vocabularies).
LOOKUP_FILE_NAME = "column_vocabularies_lookup"


def lookup_key(column: int, token: bytes) -> bytes:
    """A token's entry in the lookup file: its column's number, a colon, the token (the number
    ends at the first colon, so no two columns' entries can be equal)."""
    return b"%d:%s" % (column, token)


def lookup_lines(vocabularies: Sequence[Sequence[bytes]]) -> list[bytes]:
    """The lookup file of these columns' vocabularies: for each column its number alone (no
    colon: never equal to an entry), then its entries (lookup_key) in vocabulary order; and the
    column count alone at the end. A column's index of a token is then the entry's line minus
    the line of the column's number, minus one; its size the distance to the next number, minus
    one."""
    lines = []
    for column, tokens in enumerate(vocabularies):
        lines.append(b"%d" % column)
        lines.extend(lookup_key(column, token) for token in tokens)
    lines.append(b"%d" % len(vocabularies))
    return lines


def _write_file(path: str, lines) -> np.ndarray:
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(b"".join(line + b"\n" for line in lines))
    return np.array(path.encode())


def _write_vocabularies(counters, directory: str, names: Sequence[str], counted, indexed) -> tuple:
    """One vocabulary file per column; then for each counted column the same tokens in the same
    order with their counts, one `COUNT TOKEN` line each (the format tft.vocabulary writes with
    store_frequency=True, which TFTransformOutput.vocabulary_by_name reads back); then the
    lookup file of the indexed columns."""
    tf.io.gfile.makedirs(directory)
    tokens = [ordered_tokens(counts) for counts in counters]
    paths = [
        _write_file(os.path.join(directory, file_name(name)), column)
        for column, name in zip(tokens, names, strict=True)
    ]
    for index in counted:
        counts = counters[index]
        paths.append(
            _write_file(
                os.path.join(directory, file_name(counts_name(names[index]))),
                (b"%d %s" % (counts.get(token, 0), token) for token in tokens[index]),
            )
        )
    lookup = lookup_lines([tokens[index] for index in indexed])
    paths.append(_write_file(os.path.join(directory, LOOKUP_FILE_NAME), lookup))
    return tuple(paths)


def _pick(paths: tuple, index: int):
    return paths[index]


class _ColumnVocabularies(tft_beam.experimental.PTransformAnalyzer):
    """[batch, columns] string batches -> one vocabulary file path per column, the counted
    columns' files with counts, and the lookup file of the indexed columns."""

    def __init__(self, names: Sequence[str], counted: Sequence[int], indexed: Sequence[int]):
        super().__init__()
        self._names = tuple(names)
        self._counted = tuple(counted)
        self._indexed = tuple(indexed)

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
                indexed=self._indexed,
            )
        )
        return tuple(
            paths | f"Path[{index}]" >> beam.Map(_pick, index=index)
            for index in range(len(self._names) + len(self._counted) + 1)
        )


@dataclasses.dataclass(frozen=True)
class ColumnVocabularies:
    """What column_vocabularies gives: the path of each column's vocabulary file (`paths`, in
    the order of `names`) and of the lookup file of the indexed columns (`lookup_path`, for
    apply_column_vocabularies). The counted columns' files with counts are assets too, read by
    name (vocabulary_by_name(counts_name(...)))."""

    paths: list[tf.Tensor]
    lookup_path: tf.Tensor


def column_vocabularies(
    stacked: tf.Tensor,
    names: Sequence[str],
    counted: Sequence[int] = (),
    indexed: Sequence[int] = (),
) -> ColumnVocabularies:
    """One analyzer over the columns of a dense [batch, columns] string tensor: each one's
    vocabulary file, written as `names[i]` (for vocabulary_by_name); for each index in `counted`
    that column's vocabulary with counts (`counts_name(names[i])`); and the lookup file of the
    columns in `indexed`."""
    if stacked.shape.rank != 2 or stacked.shape[1] != len(names) or not names:
        raise ValueError(f"{stacked.shape} columns for {len(names)} vocabulary name(s)")
    indexed = tuple(indexed)
    written = [*names, *(counts_name(names[index]) for index in counted)]
    paths = tft.experimental.ptransform_analyzer(
        inputs=[stacked],
        ptransform=_ColumnVocabularies(names, counted, indexed),
        output_dtypes=[tf.string] * (len(written) + 1),
        output_shapes=[[]] * (len(written) + 1),
        # Before analysis: files a table can be initialized from (not empty), which hold none
        # of the values looked up.
        output_asset_default_values=[_EMPTY_VOCABULARY_TOKEN] * (len(written) + 1),
        name="column_vocabularies",
    )
    for name in written:
        tft.annotate_asset(name, file_name(name))
    return ColumnVocabularies(
        paths=list(paths[: len(names)]),
        lookup_path=paths[len(written)],
    )


def apply_column_vocabularies(
    stacked: tf.Tensor, lookup_path: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """The indexed columns ([batch, columns] strings, in `indexed` order) -> ([batch, columns]
    int64 indices, [columns] vocabulary sizes): each value's index in its column's vocabulary,
    values not in it (unseen in the analyzed split, empty, holding a newline) the one OOV bucket
    at the vocabulary's size. What tft.apply_vocabulary(column, its file, num_oov_buckets=1)
    gives, from one table: the values prefixed with their column's number and the columns'
    numbers themselves are looked up together (lookup_lines)."""
    count = int(stacked.shape[1])
    prefixes = tf.constant([lookup_key(column, b"") for column in range(count)])
    keys = tf.reshape(
        tf.strings.join([tf.broadcast_to(prefixes, tf.shape(stacked)), stacked]), [-1]
    )
    numbers = tf.constant([b"%d" % column for column in range(count + 1)])
    lines = tft.apply_vocabulary(
        tf.concat([keys, numbers], axis=0),
        lookup_path,
        default_value=-1,
        name="apply_column_vocabularies",
    )
    entry_lines = tf.reshape(lines[: tf.size(keys)], [-1, count])
    number_lines = lines[tf.size(keys) :]
    first = number_lines[:-1] + 1
    sizes = number_lines[1:] - first
    return tf.where(entry_lines >= 0, entry_lines - first, sizes), sizes
