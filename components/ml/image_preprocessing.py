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

decode -> resize to image_size square (bilinear, rounded to 8 bits) -> scale to [0, 1] is one
function, `decode_transformed`, applied to the transform graph's output by the three consumers: the
trainer's tf.data pipeline (components.ml.inputs), and the exported signatures that TFMA and
serving call (components.ml.export). Grayscale and RGB files mix: decoding always gives 3
channels. The trainer runs its two halves apart (resize_transformed[_one], then
normalize_transformed on batches), so that it can batch and cache 8-bit pixels; composed they
are decode_transformed, bit for bit.

A JPEG at least twice the target on its shorter side is decoded at reduced scale (libjpeg's DCT
scaling, chosen from its header per image): fewer pixels out of the inverse DCT and less to
resize, for the same target size (benchmarks/training_input.py measures the CPU it saves).
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


# libjpeg's DCT scaling factors: a JPEG decodes directly at 1/r of its size.
JPEG_SCALES = (1, 2, 4, 8)


def jpeg_scale_index(image_bytes: tf.Tensor, image_size: int) -> tf.Tensor:
    """Index into JPEG_SCALES of the largest factor r with r * image_size <= the JPEG's shorter
    side (so that the scaled image still covers the target), read from its header alone."""
    shortest = tf.reduce_min(tf.image.extract_jpeg_shape(image_bytes)[:2])
    return tf.add_n([tf.cast(shortest >= r * image_size, tf.int32) for r in JPEG_SCALES[1:]])


def decode_pixels(image_bytes: tf.Tensor, image_size: int) -> tf.Tensor:
    """One encoded image (scalar string) -> [height, width, 3] uint8, decoded by its content
    (not its file name). A JPEG at least twice image_size on its shorter side decodes at 1/2,
    1/4 or 1/8 scale (libjpeg's DCT scaling: every coefficient is still entropy-decoded, the
    inverse DCT produces fewer pixels), never below image_size, so the resize that follows
    only shrinks; PNG and the rest decode at full size."""

    def jpeg() -> tf.Tensor:
        index = jpeg_scale_index(image_bytes, image_size)
        return tf.switch_case(
            index,
            [
                lambda r=r: tf.io.decode_jpeg(image_bytes, channels=CHANNELS, ratio=r)
                for r in JPEG_SCALES
            ],
        )

    def other() -> tf.Tensor:
        return tf.io.decode_image(image_bytes, channels=CHANNELS, expand_animations=False)

    return tf.cond(tf.io.is_jpeg(image_bytes), jpeg, other)


def resize_pixels(pixels: tf.Tensor, image_size: int) -> tf.Tensor:
    """[height, width, 3] uint8 -> [size, size, 3] uint8: bilinear, rounded to the nearest
    level. Kept as 8 bits so that a cache of resized images holds a quarter of float32's bytes."""
    image = tf.image.resize(pixels, [image_size, image_size], method="bilinear")
    return tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)


def normalize(pixels: tf.Tensor) -> tf.Tensor:
    """uint8 pixels (any shape) -> float32 in [0, 1]: the model's input."""
    return tf.cast(pixels, tf.float32) / 255.0


def decode_resized(image_bytes: tf.Tensor, image_size: int) -> tf.Tensor:
    """One encoded image (scalar string) -> [size, size, 3] uint8."""
    return resize_pixels(decode_pixels(image_bytes, image_size), image_size)


def decode_and_resize(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """[batch] encoded images -> [batch, size, size, 3] uint8."""
    return tf.map_fn(
        lambda image_bytes: decode_resized(image_bytes, image_size),
        encoded,
        fn_output_signature=tf.TensorSpec([image_size, image_size, CHANNELS], tf.uint8),
        parallel_iterations=32,
    )


def image_size_of(tf_transform_output: tft.TFTransformOutput) -> int | None:
    """The resize target the transform graph recorded; None for tabular data."""
    spec = tf_transform_output.transformed_feature_spec().get(ENCODED_IMAGE)
    if spec is None or spec.dtype != tf.string:
        return None
    (size,) = tf_transform_output.vocabulary_by_name(IMAGE_SIZE_ASSET)
    return int(size)


def _encoded(transformed: dict) -> tf.Tensor:
    encoded = transformed[ENCODED_IMAGE]
    if encoded.dtype != tf.string:
        raise TypeError(f"{ENCODED_IMAGE!r} is {encoded.dtype.name}, expected encoded bytes")
    return encoded


def decode_transformed(transformed: dict, image_size: int) -> dict:
    """The transform graph's output (encoded image bytes) -> the model's input (pixels): the
    one decode -> resize -> normalize that training, evaluation and serving apply."""
    return normalize_transformed(resize_transformed(transformed, image_size))


def resize_transformed(transformed: dict, image_size: int) -> dict:
    """decode_transformed's first two steps, on a batch: [batch] encoded -> uint8 pixels."""
    encoded = tf.reshape(_encoded(transformed), [-1])
    return {**transformed, ENCODED_IMAGE: decode_and_resize(encoded, image_size)}


def resize_transformed_one(transformed: dict, image_size: int) -> dict:
    """resize_transformed for one example (scalar image bytes), for a map before batching."""
    encoded = tf.reshape(_encoded(transformed), [])
    return {**transformed, ENCODED_IMAGE: decode_resized(encoded, image_size)}


def normalize_transformed(resized: dict) -> dict:
    """decode_transformed's last step: uint8 pixels (one image or a batch) -> float32 [0, 1]."""
    return {**resized, ENCODED_IMAGE: normalize(resized[ENCODED_IMAGE])}


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
