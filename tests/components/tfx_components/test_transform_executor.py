"""The Transform executor's bulk input: same RecordBatches as tfx_bsl's TFXIO, projections kept."""

from __future__ import annotations

import apache_beam as beam
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx_bsl.tfxio import tf_example_record

from components.tfx_components.transform import executor
from tests.components.helpers import serialize

SCHEMA = text_format.Parse(
    """
    feature { name: "x" type: INT }
    feature { name: "s" type: BYTES }
    """,
    schema_pb2.Schema(),
)


def _write(path, rows):
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        for row in rows:
            w.write(serialize(row))


class _Rows(beam.DoFn):
    def process(self, batch):
        yield from (tuple(sorted(row.items())) for row in batch.to_pylist())


def _check(tfxio, batch_size, expected):
    with TestPipeline() as pipeline:
        rows = pipeline | tfxio.BeamSource(batch_size) | beam.ParDo(_Rows())
        assert_that(rows, equal_to(expected))


def test_bulk_source_reads_what_the_stock_source_reads_and_keeps_projections(tmp_path):
    _write(tmp_path / "a.gz", [{"x": [i], "s": [b"v%d" % i]} for i in range(7)])
    _write(tmp_path / "b.gz", [{"x": [100]}, {"s": [b"only-s"]}])
    pattern = str(tmp_path / "*.gz")
    stock = tf_example_record.TFExampleRecord(file_pattern=pattern, schema=SCHEMA)
    bulk = executor.BulkTFExampleRecord(file_pattern=pattern, schema=SCHEMA)
    assert bulk.ArrowSchema().equals(stock.ArrowSchema())
    expected = [(("s", [b"v%d" % i]), ("x", [i])) for i in range(7)]
    expected += [(("s", None), ("x", [100])), (("s", [b"only-s"]), ("x", None))]
    _check(stock, 3, expected)  # the reference behaviour ...
    _check(bulk, 3, expected)  # ... and the bulk path gives the same rows

    projected = bulk.Project(["x"])
    assert isinstance(projected.projected, executor.BulkTFExampleRecord)
    assert projected.ArrowSchema().names == ["x"]
    _check(projected, 4, [(("x", [i]),) for i in [*range(7), 100]] + [(("x", None),)])


def test_batch_size_and_shards_come_from_custom_config():
    props = {"custom_config": '{"num_output_shards": 3, "batch_size": 500}'}
    assert executor.num_output_shards(props) == 3
    assert executor.batch_size(props) == 500
    assert executor.batch_size({}) == executor.DEFAULT_BATCH_SIZE
    processor = executor.ShardedTransformProcessor(2, 500)
    assert processor._GetDesiredBatchSize(0, SCHEMA) == 500  # noqa: SLF001
