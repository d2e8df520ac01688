"""Timestamp-like text columns: what is recognised (the whole column parsed), and the hour, day
of week and continuous time the transform graph makes of each value, against Python's
datetime."""

from __future__ import annotations

import datetime

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf

from components.ml import preprocessing, timestamps


def _column(values):
    return pa.chunked_array([pa.array(values, pa.string())])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["2013-01-01 05:00:00", "2013-12-31T23:59", None, "2020-02-29"], True),
        (["2024-06-01 12:30:15.250"], True),
        (["2013-02-30"], False),  # no such date
        (["2021-02-29 10:00"], False),  # not a leap year
        (["2013-01-01 24:00"], False),
        (["2013-01-01 05:00:00+01:00"], False),  # a time zone: kept as text
        (["2013-01-01", "N123AB"], False),
        (["20130101"], False),
        ([None, None], False),
    ],
)
def test_a_column_is_a_timestamp_when_every_value_parses(values, expected):
    assert timestamps.is_timestamp_column(_column(values)) is expected


def test_a_bad_value_after_the_first_thousand_is_found():
    values = ["2013-01-01 05:00:00"] * 1_500 + ["2013-13-01 05:00:00"]
    assert not timestamps.is_timestamp_column(_column(values))
    assert timestamps.is_timestamp_column(_column(values[:-1]))


def test_parts_agree_with_python_datetime():
    rng = np.random.default_rng(0)
    start = datetime.datetime(1890, 1, 1)
    stamps = [
        start + datetime.timedelta(seconds=int(s)) for s in rng.integers(0, 210 * 365 * 86400, 500)
    ]
    strings = [
        stamp.strftime(["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"][i % 3])
        for i, stamp in enumerate(stamps)
    ]
    hour, weekday, time = timestamps.numeric_parts(tf.constant(strings + ["junk"]), tf)
    # The unparsed value is missing from all three.
    np.testing.assert_array_equal(hour.indices.numpy()[:, 0], np.arange(len(strings)))
    epoch = datetime.datetime(1970, 1, 1)
    expected = [datetime.datetime.fromisoformat(text.replace("T", " ")) for text in strings]
    np.testing.assert_allclose(
        hour.values.numpy(),
        [e.hour + e.minute / 60 + e.second / 3600 for e in expected],
        atol=1e-5,
    )
    np.testing.assert_array_equal(weekday.values.numpy(), [e.weekday() for e in expected])
    np.testing.assert_allclose(
        time.values.numpy(),
        [(e - epoch).total_seconds() / 86400 for e in expected],
        rtol=1e-6,
    )
    assert hour.dense_shape.numpy().tolist() == [len(strings) + 1, 1]


def test_a_sparse_column_keeps_its_rows_and_missing_values():
    column = tf.SparseTensor(
        [[0, 0], [2, 0]], tf.constant(["2013-01-07", "2013-01-08 06:30"]), [3, 1]
    )
    hour, weekday, _ = timestamps.numeric_parts(column, tf)
    assert hour.indices.numpy().tolist() == [[0, 0], [2, 0]]
    assert hour.values.numpy().tolist() == [0.0, 6.5]
    assert weekday.values.numpy().tolist() == [0.0, 1.0]  # a Monday, a Tuesday


def test_the_project_s_preprocessing_replaces_the_column_by_its_parts():
    inputs = {"when": tf.constant([["2013-01-07 05:00:00"]]), "y": tf.constant([[1.0]])}
    replaced = preprocessing._with_timestamp_parts(inputs, ["when"], "y")
    assert sorted(replaced) == ["when_hour", "when_time", "when_weekday", "y"]
    assert tf.sparse.to_dense(replaced["when_hour"]).numpy().tolist() == [[5.0]]
    with pytest.raises(ValueError, match=r"already has column\(s\) \['when_hour'\]"):
        preprocessing._with_timestamp_parts({**inputs, "when_hour": inputs["y"]}, ["when"], "y")
    with pytest.raises(ValueError, match="is not a text feature"):
        preprocessing._with_timestamp_parts(inputs, ["y"], "y")
