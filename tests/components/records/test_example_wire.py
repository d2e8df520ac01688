"""Wire-format Examples parse back to the Examples the proto classes build."""

from __future__ import annotations

import struct

import numpy as np
import tensorflow as tf

from components.records import example_wire


def _proto(features: dict) -> tf.train.Example:
    feature = {}
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif kind == "int":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def _wire(features: dict) -> bytes:
    encoders = {
        "bytes": example_wire.bytes_feature,
        "int": example_wire.int64_feature,
        "float": lambda *values: example_wire.float32_feature(
            struct.pack(f"<{len(values)}f", *values)
        ),
    }
    return example_wire.example(
        {name: encoders[kind](*values) for name, (kind, values) in features.items()}
    )


def test_every_kind_and_edge_value_parses_back_equal():
    features = {
        "image": ("bytes", [bytes(range(256)) * 300]),
        "names": ("bytes", [b"", "é".encode(), b"x" * 200]),
        "empty_bytes": ("bytes", []),
        "label": ("int", [0]),
        "ints": ("int", [1, 127, 128, 2**31, 2**63 - 1, -1, -(2**63)]),
        "empty_ints": ("int", []),
        "floats": ("float", [0.0, -1.5, 3.25, 1e-30]),
        "empty_floats": ("float", []),
        "clé unicode": ("int", [7]),
    }
    parsed = tf.train.Example.FromString(_wire(features))
    assert parsed == _proto(features)


def test_float32_bytes_feature_is_numpy_pixels():
    pixels = np.random.default_rng(0).random((4, 4, 3), dtype=np.float32)
    serialized = example_wire.example({"pixels": example_wire.float32_feature(pixels.tobytes())})
    parsed = tf.io.parse_single_example(
        serialized, {"pixels": tf.io.FixedLenFeature([4, 4, 3], tf.float32)}
    )
    np.testing.assert_array_equal(parsed["pixels"].numpy(), pixels)
