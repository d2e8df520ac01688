"""pipeline.predict's CSV rows -> tf.Examples: missing cells as ExampleGen reads them, and a row
without a value in a column the model requires refused with the column's name."""

from __future__ import annotations

import pytest
import tensorflow as tf

from pipeline import predict
from pipeline.config import DatasetConfig

TYPES = {"island": "string", "bill_length_mm": "float", "year": "int"}
NULLS = set(DatasetConfig.null_values)


def features_of(serialized: bytes) -> dict:
    example = tf.train.Example.FromString(serialized)
    return {
        name: getattr(feature, feature.WhichOneof("kind")).value
        for name, feature in example.features.feature.items()
    }


def test_empty_and_null_cells_are_missing_as_example_gen_reads_them():
    row = {"island": "", "bill_length_mm": "NA", "year": " 2007 ", "species": "Adelie"}
    assert features_of(predict._example(row, TYPES, NULLS)) == {"year": [2007]}


def test_a_required_column_without_a_value_names_the_column():
    row = {"island": "Dream", "bill_length_mm": "40.1", "year": ""}
    with pytest.raises(ValueError, match=r"column 'year': no value, and the model requires one"):
        predict._example(row, TYPES, NULLS, {"island", "year"})
    assert features_of(predict._example(dict(row, year="2008"), TYPES, NULLS, {"year"})) == {
        "island": [b"Dream"],
        "bill_length_mm": [pytest.approx(40.1)],
        "year": [2008],
    }
