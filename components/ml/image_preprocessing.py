"""Image preprocessing: what tf.Transform analyzes, and the pixel steps applied where the pixels
are consumed.

Transform (preprocessing_fn) analyzes the label (a vocabulary of class names; its index is the
target) and passes each image through as its encoded JPEG or PNG bytes. For images the pipeline
runs it with materialize=False: its output is the transform graph alone, and the Trainer reads
ExampleGen's shards (the encoded bytes, about the size of the source files) through that graph,
as TFMA and serving do (a copy of the same bytes through tf.Transform cost more per image than
ExampleGen's own work). The graph records the resize target (a one-entry vocabulary asset, since
open-source tf.Transform builds have no schema annotations), so that every consumer reads the
same size from it.

decode -> resize to image_size square (bilinear) -> scale to [0, 1] is one function,
`decode_transformed`, applied to the transform graph's output by the three consumers: the
trainer's tf.data pipeline (components.ml.inputs), and the exported signatures that TFMA and
serving call (components.ml.export). Grayscale and RGB files mix: decoding always gives 3
channels.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from components.ml import features
from components.ml.preprocessing import _dense_with_presence

CHANNELS = 3
# The transform graph's asset that holds the resize target (one line: the size in decimal).
IMAGE_SIZE_ASSET = "image_size"
ENCODED_IMAGE = features.transformed_name(features.IMAGE_KEY)


def decode_one(image_bytes: tf.Tensor, image_size: int) -> tf.Tensor:
    """One encoded image (scalar string) -> [size, size, 3] float32 in [0, 1]."""
    image = tf.io.decode_image(image_bytes, channels=CHANNELS, expand_animations=False)
    image = tf.image.resize(image, [image_size, image_size], method="bilinear")
    return tf.clip_by_value(image / 255.0, 0.0, 1.0)


def decode_and_resize(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """[batch] encoded images -> [batch, size, size, 3] float32 in [0, 1]."""
    return tf.map_fn(
        lambda image_bytes: decode_one(image_bytes, image_size),
        encoded,
        fn_output_signature=tf.TensorSpec([image_size, image_size, CHANNELS], tf.float32),
        parallel_iterations=32,
    )


def image_size_of(tf_transform_output: tft.TFTransformOutput) -> int | None:
    """The resize target the transform graph recorded; None for tabular data."""
    spec = tf_transform_output.transformed_feature_spec().get(ENCODED_IMAGE)
    if spec is None or spec.dtype != tf.string:
        return None
    (size,) = tf_transform_output.vocabulary_by_name(IMAGE_SIZE_ASSET)
    return int(size)


def decode_transformed(transformed: dict, image_size: int) -> dict:
    """The transform graph's output (encoded image bytes) -> the model's input (pixels): the
    one decode -> resize -> normalize that training, evaluation and serving apply."""
    encoded = transformed[ENCODED_IMAGE]
    if encoded.dtype != tf.string:
        raise TypeError(f"{ENCODED_IMAGE!r} is {encoded.dtype.name}, expected encoded bytes")
    return {**transformed, ENCODED_IMAGE: decode_and_resize(tf.reshape(encoded, [-1]), image_size)}


def decode_transformed_one(transformed: dict, image_size: int) -> dict:
    """decode_transformed for one example (scalar image bytes), for a map before batching."""
    return {
        **transformed,
        ENCODED_IMAGE: decode_one(tf.reshape(transformed[ENCODED_IMAGE], []), image_size),
    }


@tf.autograph.experimental.do_not_convert
def preprocessing_fn(inputs: dict, custom_config: dict) -> dict:
    label_key = custom_config[features.LABEL_KEY_CONFIG]
    image_size = int(custom_config[features.IMAGE_SIZE_CONFIG])
    for key in (features.IMAGE_KEY, label_key):
        if key not in inputs:
            raise ValueError(f"feature {key!r} is not in the schema's features {sorted(inputs)}")
    encoded, _ = _dense_with_presence(inputs[features.IMAGE_KEY], b"")
    label, _ = _dense_with_presence(inputs[label_key], features.MISSING_TOKEN)
    # The resize target as an asset of the graph: a vocabulary of the one value every row has.
    tft.vocabulary(
        tf.fill(tf.shape(label), tf.constant(str(image_size))), vocab_filename=IMAGE_SIZE_ASSET
    )
    return {
        ENCODED_IMAGE: encoded,
        features.transformed_name(label_key): tft.compute_and_apply_vocabulary(
            label, vocab_filename=features.LABEL_VOCABULARY
        ),
    }
