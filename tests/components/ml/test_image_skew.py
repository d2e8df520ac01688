"""No training/serving skew for images: the pixels and predictions the trainer's input pipeline
gives equal those of the exported signatures (transform_features: labels and features;
transform_label, which TFMA calls for the label; serving_default on tf.Examples) and of
serving_images on raw bytes, on the same images.

Transform materializes nothing for images: the trainer reads the raw examples (encoded bytes)
and applies the transform graph, as TFMA and serving do; decode -> resize -> normalize runs in
each consumer from the one function image_preprocessing.decode_transformed, which this test
holds to that.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from components.ml import export, features, image_preprocessing, inputs, model
from tests.components.conftest import IMAGE_SIZE as SIZE
from tests.components.helpers import reference_pixels, serialize

LABEL_XF = features.transformed_name(features.IMAGE_LABEL_KEY)


@pytest.fixture(scope="module")
def exported(image_transform_run, tmp_path_factory):
    output = image_transform_run["output"]
    tf.keras.utils.set_random_seed(3)
    keras_model = model.build_keras_model(output, features.IMAGE_LABEL_KEY, image_model="small_cnn")
    export_dir = str(tmp_path_factory.mktemp("skew") / "export")
    export.export_serving_model(keras_model, output, features.IMAGE_LABEL_KEY, export_dir)
    return keras_model, tf.saved_model.load(export_dir)


def _trainer_batches(image_transform_run, per_element: bool, cache_decoded: bool = False):
    """(encoded bytes, pixels, label ids) in file order, through the trainer's make_dataset over
    the raw examples (ExampleGen's shards: Transform materializes nothing for images)."""
    output = image_transform_run["output"]
    spec = {features.IMAGE_KEY: tf.io.FixedLenFeature([], tf.string)}
    encoded, pixels, labels = [], [], []
    for path in sorted(tf.io.gfile.glob(image_transform_run["raw_files"])):
        records = tf.stack(list(tf.data.TFRecordDataset(path, compression_type="GZIP")))
        encoded.extend(tf.io.parse_example(records, spec)[features.IMAGE_KEY].numpy())
        dataset = inputs.make_dataset(
            path,
            output,
            features.IMAGE_LABEL_KEY,
            5,
            shuffle=False,
            repeat=False,
            decode_images_per_element=per_element,
            cache_decoded_images=cache_decoded,
        )
        assert dataset.options().autotune.enabled is False  # inputs.without_autotune_thread
        for batch, label in dataset:
            assert set(batch) == {image_preprocessing.ENCODED_IMAGE}
            pixels.append(batch[image_preprocessing.ENCODED_IMAGE].numpy())
            labels.append(label.numpy())
    return encoded, np.concatenate(pixels), np.concatenate(labels)


@pytest.mark.parametrize(
    "per_element, cache_decoded",
    [(False, False), (True, False), (False, True)],
    ids=["on_batches", "per_element", "decoded_cache"],
)
def test_trainer_tfma_and_serving_see_the_same_pixels_and_predictions(
    image_transform_run, exported, per_element, cache_decoded
):
    keras_model, loaded = exported
    encoded, pixels, labels = _trainer_batches(image_transform_run, per_element, cache_decoded)
    assert pixels.shape == (len(image_transform_run["raw"]), SIZE, SIZE, 3)
    trainer_probabilities = keras_model(
        {image_preprocessing.ENCODED_IMAGE: pixels}, training=False
    ).numpy()

    label_of = {
        row[features.IMAGE_KEY][0]: row[features.IMAGE_LABEL_KEY][0]
        for row in image_transform_run["raw"]
    }
    examples = tf.constant(
        [
            serialize({features.IMAGE_KEY: [data], features.IMAGE_LABEL_KEY: [label_of[data]]})
            for data in encoded
        ]
    )
    # TFMA: the transform_features signature (labels and features) and serving_default.
    tfma_features = loaded.signatures[features.TRANSFORM_SIGNATURE](examples=examples)
    np.testing.assert_allclose(
        tfma_features[image_preprocessing.ENCODED_IMAGE].numpy(), pixels, atol=1e-6
    )
    np.testing.assert_array_equal(tfma_features[LABEL_XF].numpy().reshape(-1), labels)
    # The Evaluator's preprocessing function: the label alone, the same values.
    label_only = loaded.signatures[features.TRANSFORM_LABEL_SIGNATURE](examples=examples)
    assert set(label_only) == {LABEL_XF}
    np.testing.assert_array_equal(label_only[LABEL_XF].numpy().reshape(-1), labels)
    tfma_probabilities = loaded.signatures[features.SERVING_SIGNATURE](examples=examples)
    np.testing.assert_allclose(
        tfma_probabilities[features.PROBABILITIES].numpy(), trainer_probabilities, atol=1e-5
    )
    # Serving raw image files.
    served = loaded.signatures[features.IMAGE_SERVING_SIGNATURE](images=tf.constant(encoded))
    np.testing.assert_allclose(
        served[features.PROBABILITIES].numpy(), trainer_probabilities, atol=1e-5
    )
    # And the reference steps, written out independently of the project's function (the DCT
    # scale as Pillow picks it: the 64x64 JPEGs decode at half scale).
    for data, got in zip(encoded, pixels, strict=True):
        np.testing.assert_allclose(got, reference_pixels(data, SIZE), atol=1e-6)


def test_decoded_cache_gives_the_same_batches_on_every_epoch(image_transform_run):
    """The decoded cache (the Trainer's choice when the decoded images fit in memory): the
    second pass comes from the cache and equals the first, pixels and labels."""
    dataset = inputs.make_dataset(
        image_transform_run["raw_files"],
        image_transform_run["output"],
        features.IMAGE_LABEL_KEY,
        7,
        shuffle=False,
        repeat=False,
        cache_decoded_images=True,
    )
    first, second = (
        [(b[image_preprocessing.ENCODED_IMAGE].numpy(), y.numpy()) for b, y in dataset]
        for _ in range(2)
    )
    assert sum(len(y) for _, y in first) == len(image_transform_run["raw"])
    for (pixels_a, labels_a), (pixels_b, labels_b) in zip(first, second, strict=True):
        np.testing.assert_array_equal(pixels_a, pixels_b)
        np.testing.assert_array_equal(labels_a, labels_b)


def test_the_trainer_caches_decoded_images_only_when_they_fit(image_transform_run):
    from components.training import loop

    files = sorted(tf.io.gfile.glob(image_transform_run["raw_files"]))
    assert loop.cache_decoded_images(files, SIZE)  # 24 images: a few hundred KB of pixels
    fits = loop.CACHE_DECODED_IMAGES_BELOW_BYTES // inputs.decoded_bytes(1, 224)
    assert loop.cache_decoded_images(files, 224, num_images=fits)
    assert not loop.cache_decoded_images(files, 224, num_images=fits + 1)
