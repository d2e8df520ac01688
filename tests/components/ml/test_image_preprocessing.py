"""The image preprocessing in a real tf.Transform run: the transform graph's output keeps the
encoded bytes (mixed sizes, grayscale and RGB, JPEG and PNG) and a label vocabulary of class names;
decode_transformed gives [size, size, 3] float32 in [0, 1] equal to decode -> resize -> /255."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from components.ml import features, image_preprocessing
from tests.components.conftest import IMAGE_SIZE as SIZE
from tests.components.conftest import encode_image as _encode


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [
        (_encode(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8), "JPEG"), b"cat"),
        (_encode(rng.integers(0, 255, (64, 64), dtype=np.uint8), "PNG"), b"dog"),
        (_encode(rng.integers(0, 255, (17, 90), dtype=np.uint8), "JPEG"), b"dog"),
        (_encode(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), "PNG"), b"dog"),
    ]


def test_decode_resize_scale_matches_the_reference_steps(images):
    out = image_preprocessing.decode_and_resize(tf.constant([b for b, _ in images]), SIZE)
    assert out.shape == (len(images), SIZE, SIZE, 3)
    for (data, _), got in zip(images, out.numpy(), strict=True):
        reference = tf.image.resize(tf.io.decode_image(data, channels=3), [SIZE, SIZE]) / 255.0
        np.testing.assert_allclose(got, np.clip(reference.numpy(), 0, 1), atol=1e-6)
    assert out.numpy().min() >= 0.0 and out.numpy().max() <= 1.0
    # A grayscale file becomes three equal channels.
    gray = out.numpy()[1]
    np.testing.assert_allclose(gray[..., 0], gray[..., 2])


def test_transform_keeps_encoded_bytes_and_label_ids(image_transform_run):
    """The transform graph analyzes (label vocabulary, resize target) and passes the source
    bytes through as they are: no pixels, whoever applies it (the pipeline runs it with
    materialize=False for images; this fixture writes its output to check it)."""
    output = image_transform_run["output"]
    spec = output.transformed_feature_spec()
    assert set(spec) == {image_preprocessing.ENCODED_IMAGE, "class_name_xf"}
    assert spec[image_preprocessing.ENCODED_IMAGE].dtype == tf.string
    assert spec[image_preprocessing.ENCODED_IMAGE].shape == []
    assert sorted(output.vocabulary_by_name(features.LABEL_VOCABULARY)) == [b"bright", b"dark"]
    assert image_preprocessing.image_size_of(output) == SIZE
    files = tf.io.gfile.glob(image_transform_run["transformed_files"])
    records = list(tf.data.TFRecordDataset(files, compression_type="GZIP"))
    assert len(records) == len(image_transform_run["raw"])
    parsed = tf.io.parse_example(tf.stack(records), spec)
    kept = sorted(parsed[image_preprocessing.ENCODED_IMAGE].numpy())
    assert kept == sorted(row[features.IMAGE_KEY][0] for row in image_transform_run["raw"])
    # On disk: the encoded bytes plus a few bytes of framing and label per image.
    source_bytes = sum(len(row[features.IMAGE_KEY][0]) for row in image_transform_run["raw"])
    assert sum(len(r.numpy()) for r in records) < 1.1 * source_bytes


def test_tabular_transform_output_has_no_image_size(transform_run):
    assert image_preprocessing.image_size_of(transform_run["output"]) is None


def test_decode_transformed_rejects_pixels():
    with pytest.raises(TypeError, match="expected encoded bytes"):
        image_preprocessing.decode_transformed(
            {image_preprocessing.ENCODED_IMAGE: tf.zeros([1, 4, 4, 3])}, 4
        )


def test_missing_image_feature_is_a_clear_error():
    with pytest.raises(ValueError, match="'image' is not in the schema"):
        image_preprocessing.preprocessing_fn(
            {"class_name": tf.constant([b"a"])},
            {features.LABEL_KEY_CONFIG: "class_name", features.IMAGE_SIZE_CONFIG: SIZE},
        )
