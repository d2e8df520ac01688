"""The RecordBatch coder: round trip, cheap size estimate, and that Beam picks it."""

from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from components.records import arrow_coder


def _batch(rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([[b"x" * 1000]] * rows, type=pa.large_list(pa.large_binary())),
            pa.array([[float(i)] * 50 for i in range(rows)], type=pa.large_list(pa.float32())),
        ],
        ["image", "pixels"],
    )


def test_round_trip_and_size_estimate_without_serializing():
    coder = arrow_coder.RecordBatchCoder()
    batch = _batch(64)
    encoded = coder.encode(batch)
    assert coder.decode(encoded).equals(batch)
    # The estimate is the buffers' size: within the IPC stream's framing of the real size.
    assert coder.estimate_size(batch) == batch.nbytes
    assert abs(len(encoded) - batch.nbytes) < 0.05 * len(encoded)


def test_two_batches_in_one_stream_are_refused():
    sink = pa.BufferOutputStream()
    batch = _batch(2)
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
        writer.write_batch(batch)
    with pytest.raises(ValueError, match="one RecordBatch"):
        arrow_coder.RecordBatchCoder().decode(sink.getvalue().to_pybytes())


def test_registered_for_record_batches_in_beam():
    from components.tfx_components.transform import executor  # noqa: F401 (registers it)

    coder = beam.coders.typecoders.registry.get_coder(pa.RecordBatch)
    assert isinstance(coder, arrow_coder.RecordBatchCoder)
    # Through a shuffle, so that every batch is encoded and decoded by the coder.
    with TestPipeline() as pipeline:
        rows = (
            pipeline
            | beam.Create([_batch(3), _batch(5)]).with_output_types(pa.RecordBatch)
            | beam.Reshuffle()
            | beam.Map(lambda batch: batch.num_rows)
        )
        assert_that(rows, equal_to([3, 5]))
