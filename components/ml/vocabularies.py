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
the one OOV bucket at the vocabulary's size). The indexed columns' own files are then no
outputs of the analyzer (each output is fingerprinted against every input and gets Beam stages
of its own): they are written beside the lookup file and made assets of the transform graph
with it.
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
    lookup file of the indexed columns. Returns the analyzer's outputs: the paths of the files
    of the columns not indexed, of the counts files and of the lookup file (the indexed columns'
    own files sit beside the lookup file: column_vocabularies)."""
    tf.io.gfile.makedirs(directory)
    tokens = [ordered_tokens(counts) for counts in counters]
    outputs = []
    for index, (column, name) in enumerate(zip(tokens, names, strict=True)):
        path = _write_file(os.path.join(directory, file_name(name)), column)
        if index not in indexed:
            outputs.append(path)
    for index in counted:
        counts = counters[index]
        outputs.append(
            _write_file(
                os.path.join(directory, file_name(counts_name(names[index]))),
                (b"%d %s" % (counts.get(token, 0), token) for token in tokens[index]),
            )
        )
    lookup = lookup_lines([tokens[index] for index in indexed])
    outputs.append(_write_file(os.path.join(directory, LOOKUP_FILE_NAME), lookup))
    return tuple(outputs)


def _pick(paths: tuple, index: int):
    return paths[index]


class _ColumnVocabularies(tft_beam.experimental.PTransformAnalyzer):
    """[batch, columns] string batches -> the vocabulary file paths of the columns not indexed,
    the counted columns' files with counts, and the lookup file of the indexed columns (the
    indexed columns' files are written beside it)."""

    def __init__(self, names: Sequence[str], counted: Sequence[int], indexed: Sequence[int]):
        super().__init__()
        self._names = tuple(names)
        self._counted = tuple(counted)
        self._indexed = tuple(indexed)

    @property
    def unindexed(self) -> list[str]:
        """The names of the columns not indexed, whose vocabulary files are outputs, in order."""
        return [name for index, name in enumerate(self._names) if index not in self._indexed]

    @property
    def output_count(self) -> int:
        """The outputs _write_vocabularies returns: one per column not indexed, one per counted
        column, and the lookup file."""
        return len(self.unindexed) + len(self._counted) + 1

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
            for index in range(self.output_count)
        )


@dataclasses.dataclass(frozen=True)
class ColumnVocabularies:
    """What column_vocabularies gives: the vocabulary file of each column not indexed, by name
    (`paths`), and the lookup file of the indexed columns (`lookup_path`, for
    apply_column_vocabularies). Every column's vocabulary file, and the counted columns' files
    with counts, are transform graph assets, read by name (vocabulary_by_name)."""

    paths: dict[str, tf.Tensor]
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
    columns in `indexed`.

    The indexed columns' own files are not outputs of the analyzer: tf.Transform fingerprints
    each output against every input it depends on and gives each its own Beam stages and graph
    tensor, a cost per column of a wide table. They are written beside the lookup file and
    become assets of the transform graph with it (_assets_beside)."""
    if stacked.shape.rank != 2 or stacked.shape[1] != len(names) or not names:
        raise ValueError(f"{stacked.shape} columns for {len(names)} vocabulary name(s)")
    indexed = tuple(indexed)
    analyzer = _ColumnVocabularies(names, counted, indexed)
    unindexed = analyzer.unindexed
    outputs = analyzer.output_count
    paths = tft.experimental.ptransform_analyzer(
        inputs=[stacked],
        ptransform=analyzer,
        output_dtypes=[tf.string] * outputs,
        output_shapes=[[]] * outputs,
        # Before analysis: files a table can be initialized from (not empty), which hold none
        # of the values looked up.
        output_asset_default_values=[_EMPTY_VOCABULARY_TOKEN] * outputs,
        name="column_vocabularies",
    )
    for name in [*names, *(counts_name(names[index]) for index in counted)]:
        tft.annotate_asset(name, file_name(name))
    lookup_path = paths[-1]
    _assets_beside(lookup_path, [file_name(names[index]) for index in indexed])
    return ColumnVocabularies(
        paths=dict(zip(unindexed, paths[: len(unindexed)], strict=True)),
        lookup_path=lookup_path,
    )


def _assets_beside(path: tf.Tensor, file_names: Sequence[str]) -> None:
    """Make the files `file_names` in the directory of the analyzer output `path` assets of the
    transform graph, as the output itself is. tf.Transform turns every path in the graph's
    ASSET_FILEPATHS collection into a `tf.saved_model.Asset` of the SavedModel it writes
    (saved_transform_io_v2.trace_and_update_module), and in the trace it writes after analysis
    an analyzer's output is its value, an eager constant; in the traces before, a placeholder
    that names no file yet."""
    if tf.is_symbolic_tensor(path):
        return
    directory = os.path.dirname(path.numpy().decode())
    # The paths as eager constants, as tf.Transform's own asset outputs are, in the collection of
    # the graph being traced (under init_scope the default graph is the global one).
    graph = tf.compat.v1.get_default_graph()
    with tf.init_scope():
        paths = [tf.constant(os.path.join(directory, name)) for name in file_names]
    for asset_path in paths:
        graph.add_to_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS, asset_path)


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
