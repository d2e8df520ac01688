"""Bulk TFRecord I/O: every record written once into exactly N shards, read back as batches."""

from __future__ import annotations

import glob
import io
import os
import pathlib

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from components.records import bulk_tfrecord
from tests.components.helpers import serialize


def _records(path_glob):
    records = []
    for path in sorted(glob.glob(path_glob)):
        records.extend(r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP"))
    return records


def test_reads_files_as_record_batches_of_at_most_batch_size(tmp_path):
    path = str(tmp_path / "examples.gz")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for i in range(25):
            writer.write(serialize({"x": [i], "s": [b"v%d" % i]}))

    class Collect(beam.DoFn):
        def process(self, batch):
            yield batch.num_rows, sorted(v[0] for v in batch.column("x").to_pylist())

    with TestPipeline() as pipeline:
        result = (
            pipeline
            | bulk_tfrecord.ReadTFExamplesAsRecordBatches([path], None, batch_size=10)
            | beam.ParDo(Collect())
        )
        assert_that(
            result,
            equal_to([(10, list(range(10))), (10, list(range(10, 20))), (5, list(range(20, 25)))]),
        )


def test_streamed_batches_are_valid_tfrecords_framed_as_beam_frames_them(tmp_path):
    from apache_beam.io import tfrecordio

    prefix = str(tmp_path / "out" / "streamed")
    batches = [[b"x" * 100_000, b""], [bytes(range(256)) * 7], []]
    with TestPipeline() as pipeline:
        _ = pipeline | beam.Create(batches) | bulk_tfrecord.StreamBatchesToTFRecord(prefix)
    files = sorted(glob.glob(prefix + "-*"))
    assert files and all(f.endswith(f"-of-{len(files):05d}") for f in files)
    # TensorFlow's reader checks both checksums of every record.
    read = [r for f in files for r in tf.compat.v1.io.tf_record_iterator(f)]
    assert sorted(read) == sorted(r for batch in batches for r in batch)
    # Byte for byte what Beam's own TFRecord sink writes for a record.
    for record in (b"", b"abc", b"x" * 100_000):
        handle = io.BytesIO()
        tfrecordio._TFRecordUtil.write_record(handle, record)  # noqa: SLF001
        assert bulk_tfrecord.frame_record(record) == handle.getvalue()


def test_a_corrupt_record_fails_the_read_naming_no_silent_loss(tmp_path):
    path = str(tmp_path / "examples")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(5):
            writer.write(serialize({"x": [i]}))
    data = bytearray(pathlib.Path(path).read_bytes())
    data[-3] ^= 0xFF  # the last record's data checksum
    pathlib.Path(path).write_bytes(bytes(data))
    with (
        pytest.raises(Exception, match="(?i)corrupt|checksum|data ?loss"),
        TestPipeline() as pipeline,
    ):
        _ = pipeline | bulk_tfrecord.ReadTFExamplesAsRecordBatches([path], None, 10)


def _streamed_shards(tmp_path, batches, num_shards, beam_args=()):
    from apache_beam.options.pipeline_options import PipelineOptions

    prefix = str(tmp_path / "out" / "data")
    options = PipelineOptions(["--runner=DirectRunner", *beam_args])
    with beam.Pipeline(options=options) as pipeline:
        _ = (
            pipeline
            | beam.Create(batches)
            | bulk_tfrecord.StreamBatchesToShards(prefix, num_shards)
        )
    return prefix, sorted(glob.glob(prefix + "-*"))


def test_streamed_shards_in_process_are_exactly_n_files_with_every_record_once(tmp_path):
    batches = [[f"a{i}".encode() for i in range(10)], [b"b0"], [f"c{i}".encode() for i in range(3)]]
    prefix, files = _streamed_shards(tmp_path, batches, 5, ["--direct_running_mode=in_memory"])
    # One bundle in-process: shard i is one file with the plain name, an empty shard included.
    assert [os.path.basename(f) for f in files] == [f"data-{i:05d}-of-00005.gz" for i in range(5)]
    assert sorted(_records(prefix + "-*")) == sorted(r for batch in batches for r in batch)
    # The large batch is dealt out evenly, as the grouped writer deals it.
    assert [sum(r.startswith(b"a") for r in _records(f)) for f in files] == [2] * 5


def test_streamed_shards_from_worker_processes_are_parts_of_each_shard(tmp_path):
    batches = [[b"%d-%d" % (b, i) for i in range(7)] for b in range(40)]
    prefix, files = _streamed_shards(
        tmp_path,
        batches,
        3,
        ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    )
    names = [os.path.basename(f) for f in files]
    for shard in range(3):
        mine = [n for n in names if n.startswith(f"data-{shard:05d}-of-00003")]
        assert mine, names
        assert all(n.endswith(".gz") for n in mine)
        if len(mine) > 1:
            assert all(".part-" in n for n in mine), mine
    # TensorFlow's reader checks both checksums of every record; nothing lost or doubled.
    assert sorted(_records(prefix + "-*")) == sorted(r for batch in batches for r in batch)


def test_streamed_shards_frame_large_and_small_records_alike(tmp_path):
    big = b"y" * (bulk_tfrecord._JOIN_LIMIT_BYTES + 5)  # noqa: SLF001
    batches = [[b"s1", big, b"", b"s2"] + [b"z" * 1000] * 2000]
    prefix, files = _streamed_shards(tmp_path, batches, 1, ["--direct_running_mode=in_memory"])
    assert _records(prefix + "-*") == batches[0]


def test_streamed_shards_with_more_shards_than_records_are_valid_empty_files(tmp_path):
    prefix, files = _streamed_shards(tmp_path, [[b"only"]], 3, ["--direct_running_mode=in_memory"])
    assert [os.path.basename(f) for f in files] == [f"data-{i:05d}-of-00003.gz" for i in range(3)]
    assert _records(prefix + "-*") == [b"only"]
