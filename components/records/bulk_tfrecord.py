"""Bulk TFRecord I/O for Beam: whole batches of records per element, not one element per record.

Beam's WriteToTFRecord and ReadFromTFRecord move every record through the runner as its own
element and frame, checksum and (de)compress it in Python: on the DirectRunner that per-record
work costs more than the CSV parsing, encoding and TensorFlow work around it. Here a Beam element
is a batch.

Writers:
- StreamBatchesToShards (ExampleGen, Transform): deals the records of each batch round-robin into
  `num_shards` streams and writes each stream through Beam's FileBasedSink (one file per bundle,
  renamed when the write is finalized, so a retried bundle leaves nothing behind), with a
  hardware CRC32C. Nothing is grouped: memory stays flat however many records there are. On a
  runner that runs the whole write as one bundle (the DirectRunner in-process) shard i is one
  file, <prefix>-0000i-of-0000N<suffix>; where the runner splits the write into B bundles (worker
  processes, a cluster) shard i is B parts, <prefix>-0000i-of-0000N.part-0000b-of-0000B<suffix>.
- StreamBatchesToTFRecord (image Transform): one stream, files as the runner's bundles fall.

The reader turns each input file into Arrow RecordBatches with TensorFlow's C++ record reader and
tfx_bsl's C++ decoder. Readers glob the split folder, so the names above are all read alike.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import google_crc32c
from apache_beam.io import filebasedsink


def _masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record_header(record: bytes) -> bytes:
    """What precedes a TFRecord's data: its length and the masked CRC32C of the length."""
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", _masked_crc32c(length))


def record_footer(record: bytes) -> bytes:
    """What follows a TFRecord's data: the masked CRC32C of the data."""
    return struct.pack("<I", _masked_crc32c(record))


def frame_record(record: bytes) -> bytes:
    """One TFRecord: length, masked CRC32C of the length, data, masked CRC32C of the data."""
    return record_header(record) + record + record_footer(record)


_JOIN_LIMIT_BYTES = 1 << 20


class _TFRecordBatchSink(filebasedsink.FileBasedSink):
    """Beam FileBasedSink of TFRecord files whose elements are lists of serialized records.

    Beam's own TFRecord sink takes one element per record and checksums it with crcmod's
    table-driven CRC32C (about 0.3 ms per 110 KB image example, more than decoding and resizing
    the image); here the checksum is google-crc32c's hardware CRC32C and a whole batch is one
    element. Beam's sink machinery is unchanged: one temporary file per bundle, renamed to
    <prefix>-SSSSS-of-NNNNN<suffix> when the write is finalized."""

    def __init__(
        self, prefix: str, suffix: str, num_shards: int, compression_type, parts: bool = False
    ):
        super().__init__(
            file_path_prefix=prefix,
            coder=None,
            file_name_suffix=suffix,
            num_shards=num_shards,
            mime_type="application/octet-stream",
            compression_type=compression_type,
        )
        # parts: the prefix names one shard; its bundles' files are parts of it, and a shard
        # written as one bundle keeps the plain name <prefix><suffix>.
        self._parts = parts

    def _get_final_name(self, shard_num, num_shards):
        if not self._parts:
            return super()._get_final_name(shard_num, num_shards)
        part = "" if num_shards == 1 else f".part-{shard_num:05d}-of-{num_shards:05d}"
        return self.file_path_prefix.get() + part + self.file_name_suffix.get()

    def _get_final_name_glob(self, num_shards):
        if not self._parts:
            return super()._get_final_name_glob(num_shards)
        part = "" if num_shards == 1 else f".part-*-of-{num_shards:05d}"
        return self.file_path_prefix.get() + part + self.file_name_suffix.get()

    def write_record(self, file_handle, value: Sequence[bytes]):
        # Small records are framed into one string per ~1 MB (one call into the compressor
        # instead of three per record); large ones are written piece by piece, since copying
        # them into one framed string first doubled the cost of writing them.
        pieces: list[bytes] = []
        size = 0
        for record in value:
            if len(record) >= _JOIN_LIMIT_BYTES:
                if pieces:
                    file_handle.write(b"".join(pieces))
                    pieces, size = [], 0
                file_handle.write(record_header(record))
                file_handle.write(record)
                file_handle.write(record_footer(record))
                continue
            pieces += (record_header(record), record, record_footer(record))
            size += len(record) + 16
            if size >= _JOIN_LIMIT_BYTES:
                file_handle.write(b"".join(pieces))
                pieces, size = [], 0
        if pieces:
            file_handle.write(b"".join(pieces))


@beam.ptransform_fn
def StreamBatchesToTFRecord(  # noqa: N802 (Beam PTransform naming)
    batches,
    prefix: str,
    suffix: str = "",
    compression=beam.io.filesystem.CompressionTypes.UNCOMPRESSED,
):
    """PCollection of lists of serialized records -> TFRecord files, one per bundle (the runner
    decides how many), without grouping: memory stays flat however large the records are."""
    return batches | "Write" >> beam.io.Write(_TFRecordBatchSink(prefix, suffix, 0, compression))


class _DealIntoShards(beam.DoFn):
    """A list of records -> for each shard a list of its records (output tag str(shard)), the
    records dealt out in turn.

    Dealing round-robin from a per-batch offset keeps shards within one record of each other
    per batch, and the assignment depends only on the input (deterministic output)."""

    def __init__(self, num_shards: int):
        self._num_shards = num_shards

    def process(self, records: Sequence[bytes]):
        if not records:
            return
        # Small batches start at a shard picked from their content, so that many small batches
        # do not all land in shard 0.
        offset = zlib.crc32(records[0]) % self._num_shards if len(records) < self._num_shards else 0
        for shard in range(self._num_shards):
            start = (shard - offset) % self._num_shards
            chunk = records[start :: self._num_shards]
            if chunk:
                yield beam.pvalue.TaggedOutput(str(shard), chunk)


@beam.ptransform_fn
def StreamBatchesToShards(  # noqa: N802 (Beam PTransform naming)
    batches,
    prefix: str,
    num_shards: int,
    suffix: str = ".gz",
    compression=beam.io.filesystem.CompressionTypes.GZIP,
):
    """PCollection of lists of serialized records -> `num_shards` shards of TFRecord files,
    streamed without grouping (module docstring: one file per shard and bundle). Every shard
    has at least one file, empty when no record was dealt to it."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    tags = [str(shard) for shard in range(num_shards)]
    streams = batches | "DealIntoShards" >> beam.ParDo(_DealIntoShards(num_shards)).with_outputs(
        *tags
    )
    return [
        streams[tag]
        | f"WriteShard{shard}"
        >> beam.io.Write(
            _TFRecordBatchSink(
                f"{prefix}-{shard:05d}-of-{num_shards:05d}", suffix, 0, compression, parts=True
            )
        )
        for shard, tag in enumerate(tags)
    ]


class _ReadFileAsRecordBatches(beam.DoFn):
    def __init__(self, schema_bytes: bytes | None, batch_size: int, compression: str):
        self._schema_bytes = schema_bytes
        self._batch_size = batch_size
        self._compression = compression
        self._decoder: Any | None = None  # a tfx_bsl ExamplesToRecordBatchDecoder, from setup()

    def setup(self):
        from tfx_bsl.coders import example_coder

        self._decoder = example_coder.ExamplesToRecordBatchDecoder(self._schema_bytes)

    def process(self, path: str):
        from tensorflow.python.lib.io import _pywrap_record_io

        # AUTO: by file name, as Beam reads TFRecords ('.gz': gzip; image shards: none).
        compression = self._compression
        if compression == "AUTO":
            compression = "GZIP" if path.endswith(".gz") else ""
        # TensorFlow's C++ record reader (the one behind tf.data's TFRecordDataset), called
        # directly: a tf.data pipeline per file costs a graph trace and a copy of every record
        # into a NumPy object array.
        decoder = self._decoder
        assert decoder is not None, "Beam calls setup() before process()"
        reader = _pywrap_record_io.RecordIterator(path, compression)
        try:
            records: list[bytes] = []
            for record in reader:
                records.append(record)
                if len(records) == self._batch_size:
                    yield decoder.DecodeBatch(records)
                    records = []
            if records:
                yield decoder.DecodeBatch(records)
        finally:
            reader.close()


def list_files(file_patterns: Sequence[str]) -> list[str]:
    from tfx.dsl.io import fileio

    files = sorted({path for pattern in file_patterns for path in fileio.glob(pattern)})
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {list(file_patterns)}")
    return files


@beam.ptransform_fn
def ReadTFExamplesAsRecordBatches(  # noqa: N802 (Beam PTransform naming)
    pipeline,
    file_patterns: Sequence[str],
    schema_bytes: bytes | None,
    batch_size: int,
    compression: str = "AUTO",
):
    """Pipeline root -> Arrow RecordBatches of up to batch_size tf.Examples, one file per task."""
    return (
        pipeline
        | "ListFiles" >> beam.Create(list_files(file_patterns))
        | "SpreadFiles" >> beam.Reshuffle()
        | "ReadAndDecode"
        >> beam.ParDo(_ReadFileAsRecordBatches(schema_bytes, batch_size, compression))
    )
