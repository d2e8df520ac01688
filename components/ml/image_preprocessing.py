"""tf.Transform preprocessing_fn for image classification.

image (encoded JPEG or PNG bytes) -> decode (always 3 channels, so grayscale and RGB files mix)
-> resize to custom_config['image_size'] square (bilinear) -> scale to [0, 1]: the same steps as
decode_jpeg -> resize -> /255, inside the transform graph, so the serving signatures apply them
to raw image bytes too. The label (class name) gets a vocabulary; its index is the target.

Transform materializes the float32 pixels (image_size^2 x 3 x 4 bytes per image: 12 KB at 32,
110 KB at 96, 602 KB at 224); pick image_size with that in mind (see README).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

from components.ml import features
from components.ml.preprocessing import _dense_with_presence

CHANNELS = 3


def decode_and_resize(encoded: tf.Tensor, image_size: int) -> tf.Tensor:
    """[batch] encoded images -> [batch, size, size, 3] float32 in [0, 1]."""

    def one(image_bytes):
        image = tf.io.decode_image(image_bytes, channels=CHANNELS, expand_animations=False)
        image = tf.image.resize(image, [image_size, image_size], method="bilinear")
        return image / 255.0

    images = tf.map_fn(
        one,
        encoded,
        fn_output_signature=tf.TensorSpec([image_size, image_size, CHANNELS], tf.float32),
        parallel_iterations=32,
    )
    return tf.clip_by_value(images, 0.0, 1.0)


@tf.autograph.experimental.do_not_convert
def preprocessing_fn(inputs: dict, custom_config: dict) -> dict:
    label_key = custom_config[features.LABEL_KEY_CONFIG]
    image_size = int(custom_config[features.IMAGE_SIZE_CONFIG])
    for key in (features.IMAGE_KEY, label_key):
        if key not in inputs:
            raise ValueError(f"feature {key!r} is not in the schema's features {sorted(inputs)}")
    encoded, _ = _dense_with_presence(inputs[features.IMAGE_KEY], b"")
    label, _ = _dense_with_presence(inputs[label_key], features.MISSING_TOKEN)
    return {
        features.transformed_name(features.IMAGE_KEY): decode_and_resize(encoded, image_size),
        features.transformed_name(label_key): tft.compute_and_apply_vocabulary(
            label, vocab_filename=features.LABEL_VOCABULARY
        ),
    }
