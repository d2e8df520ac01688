"""The image preprocessing in a real tf.Transform run: the transform graph's output keeps the
encoded bytes (mixed sizes, grayscale and RGB, JPEG and PNG) and a label vocabulary of class names;
decode_transformed gives [size, size, 3] float32 in [0, 1] equal to decode (large JPEGs at reduced
DCT scale) -> resize -> round to 8 bits -> /255."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from components.ml import features, image_preprocessing
from tests.components.conftest import IMAGE_SIZE as SIZE
from tests.components.conftest import encode_image as _encode
from tests.components.helpers import reference_pixels


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [
        (_encode(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8), "JPEG"), b"cat"),
        (_encode(rng.integers(0, 255, (64, 64), dtype=np.uint8), "PNG"), b"dog"),
        (_encode(rng.integers(0, 255, (17, 90), dtype=np.uint8), "JPEG"), b"dog"),
        (_encode(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), "PNG"), b"dog"),
        # Decoded at 1/4 scale (shorter side 130 >= 4 * 32), and a large PNG at full size.
        (_encode(rng.integers(0, 255, (130, 300, 3), dtype=np.uint8), "JPEG"), b"cat"),
        (_encode(rng.integers(0, 255, (140, 140, 3), dtype=np.uint8), "PNG"), b"cat"),
    ]


def test_decode_resize_scale_matches_the_reference_steps(images):
    encoded = tf.constant([b for b, _ in images])
    out = image_preprocessing.decode_transformed(
        {image_preprocessing.ENCODED_IMAGE: encoded}, SIZE
    )[image_preprocessing.ENCODED_IMAGE].numpy()
    assert out.shape == (len(images), SIZE, SIZE, 3) and out.dtype == np.float32
    for (data, _), got in zip(images, out, strict=True):
        np.testing.assert_allclose(got, reference_pixels(data, SIZE), atol=1e-6)
    assert out.min() >= 0.0 and out.max() <= 1.0
    # A grayscale file becomes three equal channels.
    np.testing.assert_allclose(out[1][..., 0], out[1][..., 2])


def test_jpeg_scale_is_the_largest_that_still_covers_the_target(images):
    """1/4 for the 130x300 JPEG at 32 (1/8 would give 17 rows), full size for the 40x30 one."""
    scale = [
        image_preprocessing.JPEG_SCALES[int(image_preprocessing.jpeg_scale_index(data, SIZE))]
        for data, _ in (images[0], images[2], images[4])
    ]
    assert scale == [1, 1, 4]
    assert int(image_preprocessing.jpeg_scale_index(images[4][0], 16)) == 3  # 1/8: 17 >= 16


def test_the_trainer_halves_compose_to_decode_transformed(images):
    """resize_transformed (8-bit pixels: what the trainer batches and caches) followed by
    normalize_transformed is decode_transformed bit for bit, per image and on a batch."""
    encoded = tf.constant([b for b, _ in images])
    whole = image_preprocessing.decode_transformed(
        {image_preprocessing.ENCODED_IMAGE: encoded}, SIZE
    )[image_preprocessing.ENCODED_IMAGE].numpy()
    resized = image_preprocessing.resize_transformed(
        {image_preprocessing.ENCODED_IMAGE: encoded}, SIZE
    )
    assert resized[image_preprocessing.ENCODED_IMAGE].dtype == tf.uint8
    halves = image_preprocessing.normalize_transformed(resized)[image_preprocessing.ENCODED_IMAGE]
    np.testing.assert_array_equal(halves.numpy(), whole)
    for index, (data, _) in enumerate(images):
        one = image_preprocessing.resize_transformed_one(
            {image_preprocessing.ENCODED_IMAGE: tf.constant([data])}, SIZE
        )
        one = image_preprocessing.normalize_transformed(one)[image_preprocessing.ENCODED_IMAGE]
        np.testing.assert_array_equal(one.numpy(), whole[index])


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
