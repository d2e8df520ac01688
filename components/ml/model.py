"""Keras (tf-keras) models over the transformed features: an MLP classifier or regressor for
tabular data, a small CNN or MobileNetV2 classifier for images.

The model is built from the Transform output: float features go in as they are (z-scores, missing
indicators), integer features are vocabulary indices and are one-hot encoded with the vocabulary
size. Serving export: components.ml.export; input pipeline: components.ml.inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import tensorflow as tf
import tensorflow_transform as tft

from components.ml import features, image_preprocessing, preprocessing

if TYPE_CHECKING:
    # mypy reads TensorFlow as untyped: this import only lets `keras.X` name classes (as Any).
    from tensorflow import keras
else:
    # Under TF_USE_LEGACY_KERAS=1 this is tf-keras (Keras 2), which tf.Transform 1.16 requires.
    keras = tf.keras


class _StepsWithoutAutograph(keras.Model):
    """Functional Keras model whose train/test/predict steps are traced without AutoGraph.

    AutoGraph source-converts every Keras function reachable from the step (loss, metrics,
    optimizer, each layer's call), which costs about 13 s per process on a 2-core machine,
    before the first batch. These models have no data-dependent Python control flow, so plain
    tracing builds the same graph.
    """

    @tf.autograph.experimental.do_not_convert
    def train_step(self, data):
        return super().train_step(data)

    @tf.autograph.experimental.do_not_convert
    def test_step(self, data):
        return super().test_step(data)

    @tf.autograph.experimental.do_not_convert
    def predict_step(self, data):
        return super().predict_step(data)


def class_names(tf_transform_output: tft.TFTransformOutput) -> list[str]:
    return [
        name.decode() if isinstance(name, bytes) else name
        for name in tf_transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)
    ]


def is_regression(tf_transform_output: tft.TFTransformOutput, label_key: str) -> bool:
    """Transform decides the task: a class index (int64) or a z-scored number (float32)."""
    spec = tf_transform_output.transformed_feature_spec()[features.transformed_name(label_key)]
    return spec.dtype == tf.float32


def image_input_shape(tf_transform_output: tft.TFTransformOutput) -> list[int] | None:
    """[size, size, channels] of the image the model reads (decoded from the transformed
    image bytes by image_preprocessing.decode_transformed); None for tabular data."""
    size = image_preprocessing.image_size_of(tf_transform_output)
    return None if size is None else [size, size, image_preprocessing.CHANNELS]


def _compile(model: keras.Model, learning_rate: float, jit_compile: bool) -> keras.Model:
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


def build_image_model(
    tf_transform_output: tft.TFTransformOutput,
    image_model: str = "small_cnn",
    learning_rate: float = 0.001,
    jit_compile: bool = False,
) -> keras.Model:
    """Classifier over the transformed [size, size, 3] image in [0, 1]; call inside
    strategy.scope(). mobilenet_v2: Keras' MobileNetV2 (weights=None: nothing is downloaded)
    at the transformed size; small_cnn: two conv blocks, fast enough for CPU runs."""
    if image_model not in features.IMAGE_MODELS:
        raise ValueError(f"image_model must be one of {features.IMAGE_MODELS}, got {image_model!r}")
    shape = image_input_shape(tf_transform_output)
    name = features.transformed_name(features.IMAGE_KEY)
    image = keras.Input(shape=shape, name=name, dtype=tf.float32)
    if image_model == "mobilenet_v2":
        assert shape is not None, "keras.Input raised for tabular data (no image shape)"
        backbone = keras.applications.MobileNetV2(
            input_shape=tuple(shape), include_top=False, weights=None, pooling="avg"
        )
        # MobileNetV2 expects [-1, 1]; the transform graph gives [0, 1].
        x = backbone(keras.layers.Rescaling(2.0, offset=-1.0)(image))
    else:
        x = image
        for filters in (32, 64):
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(128, activation="relu")(x)
        x = keras.layers.Dropout(0.2)(x)
    num_classes = len(class_names(tf_transform_output))
    outputs = keras.layers.Dense(
        num_classes, activation="softmax", name=features.PROBABILITIES, dtype="float32"
    )(x)
    return _compile(
        _StepsWithoutAutograph(inputs={name: image}, outputs=outputs), learning_rate, jit_compile
    )


def build_keras_model(
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    hidden_units: Sequence[int] = (32, 16),
    learning_rate: float = 0.01,
    jit_compile: bool = False,
    image_model: str = "small_cnn",
) -> keras.Model:
    """Call inside strategy.scope(). jit_compile: XLA-compile the train step. Image data (a
    transformed image feature) gets build_image_model(image_model); tabular data an MLP."""
    if image_input_shape(tf_transform_output) is not None:
        return build_image_model(tf_transform_output, image_model, learning_rate, jit_compile)
    label_name = features.transformed_name(label_key)
    inputs, encoded = {}, []
    for name, spec in sorted(tf_transform_output.transformed_feature_spec().items()):
        if name == label_name:
            continue
        if spec.dtype == tf.int64:
            vocabulary = features.vocabulary_name(features.raw_key(name))
            depth = (
                tf_transform_output.vocabulary_size_by_name(vocabulary)
                + preprocessing.NUM_OOV_BUCKETS
            )
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.int64)
            encoded.append(
                keras.layers.CategoryEncoding(num_tokens=depth, output_mode="one_hot")(
                    keras.layers.Reshape((1,))(inputs[name])
                )
            )
        else:
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.float32)
            encoded.append(keras.layers.Reshape((1,))(inputs[name]))
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    for units in hidden_units:
        x = keras.layers.Dense(units, activation="relu")(x)
    if is_regression(tf_transform_output, label_key):
        # One linear unit in z-score units of the training label (float32 under mixed precision).
        prediction = keras.layers.Dense(1, name=features.NORMALIZED_PREDICTION, dtype="float32")(x)
        regressor = _StepsWithoutAutograph(inputs=inputs, outputs=prediction)
        regressor.compile(
            optimizer=keras.optimizers.Adam(learning_rate),
            loss=keras.losses.MeanSquaredError(),
            metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
            jit_compile=jit_compile,
        )
        return regressor
    num_classes = len(class_names(tf_transform_output))
    # float32 output even under a mixed-precision policy, for a numerically stable softmax/loss.
    outputs = keras.layers.Dense(
        num_classes, activation="softmax", name=features.PROBABILITIES, dtype="float32"
    )(x)
    return _compile(
        _StepsWithoutAutograph(inputs=inputs, outputs=outputs), learning_rate, jit_compile
    )
