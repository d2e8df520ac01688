"""Keras (tf-keras) models over the transformed features, and the model hook's contract
(ModelInputs): the built-in MLP classifier or regressor for tabular data and the small CNN or
MobileNetV2 classifier for images are two users of it (tabular_model, image_model); a user's
build_model is another.

The model is built from the Transform output: float features go in as they are (z-scores, missing
indicators), integer features are vocabulary indices and are one-hot encoded with the vocabulary
size (an embedding for vocabularies of more than ONE_HOT_MAX_INDICES). Serving export:
components.ml.export; input pipeline: components.ml.inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import tensorflow as tf
import tensorflow_transform as tft

from components import compat
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
    tracing builds the same graph. The functions that run steps_per_execution steps a call are
    built without AutoGraph too (compat.keras_steps_function), where Keras allows it.
    """

    def make_train_function(self, force=False):
        return self._steps_function(
            ("train_function", "train_tf_function"),
            super().make_train_function,
            self.train_step,
            self._train_counter,
            force,
        )

    def make_test_function(self, force=False):
        return self._steps_function(
            ("test_function",),
            super().make_test_function,
            self.test_step,
            self._test_counter,
            force,
        )

    def _steps_function(self, attributes: tuple[str, ...], keras_own, step, counter, force: bool):
        """The model's cached function (attributes[0]: train_function, test_function), else
        compat.keras_steps_function over `step`, kept in every one of `attributes`, else (where
        Keras must build it) keras_own."""
        built = getattr(self, attributes[0], None)
        if built is not None and not force:
            return built
        if not compat.keras_runs_own_functions(self):
            return keras_own(force)
        # Keras's own train_step and test_step (called by the steps below) return the metric
        # results compute_metrics gives; a subclass that changes compute_metrics may not.
        returns_metrics = type(self).compute_metrics is keras.Model.compute_metrics
        built = compat.keras_steps_function(self, step, counter, returns_metrics)
        for attribute in attributes:
            setattr(self, attribute, built)
        return built

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


def _compile(model: keras.Model, settings) -> keras.Model:
    model.compile(
        optimizer=keras.optimizers.Adam(settings.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=settings.xla,
        steps_per_execution=steps_per_execution(settings),
    )
    return model


def steps_per_execution(settings) -> int:
    """The steps per call of the compiled train/eval function the Trainer planned (the settings
    a hook gets carry it; 1 where nothing was planned: tests, notebooks)."""
    return settings.steps_per_execution or 1


@dataclasses.dataclass(frozen=True)
class ModelInputs:
    """What a model hook receives: build_model(model_inputs) -> a compiled keras.Model.

    The project's run_fn calls the hook inside strategy.scope() on every strategy and launcher,
    then trains the model on its own input pipeline (batches of {feature name: tensor}, label
    apart), checkpoints and resumes it, and exports it with the serving and TFMA signatures
    (components.ml.export). The model's inputs are named after the features it reads (any of
    feature_spec's keys). Its output is, for classification, the class probabilities
    [batch, len(class_names)] (softmax), for regression one number per example in the
    z-scored units of the label ([batch, 1]; serving turns it back into the label's units).

    feature_spec       the transformed features (label excluded): name -> tf.io.FixedLenFeature
    label_key          the transformed label's name
    task               "classification" or "regression"
    class_names        the label vocabulary (classification), in class-index order
    vocabulary_sizes   integer features that index a vocabulary: name -> number of indices
                       (out-of-vocabulary buckets included), for one-hot or embedding layers
    image_shape        (height, width, channels) of the decoded image input; None for tables
    settings           the training settings (learning_rate, hidden_units, xla, image_model...)
    custom_config      the user's --custom_config
    tf_transform_output  the tft.TFTransformOutput, for anything else (vocabularies, statistics)
    """

    feature_spec: dict[str, Any]
    label_key: str
    task: str
    class_names: tuple[str, ...]
    vocabulary_sizes: dict[str, int]
    image_shape: tuple[int, int, int] | None
    settings: Any
    custom_config: dict[str, Any]
    tf_transform_output: Any

    @classmethod
    def of(
        cls,
        tf_transform_output: tft.TFTransformOutput,
        label_key: str,
        settings: Any,
        custom_config: dict[str, Any] | None = None,
    ) -> ModelInputs:
        label = features.transformed_name(label_key)
        spec = tf_transform_output.transformed_feature_spec()
        if label not in spec:
            raise ValueError(
                f"the transformed features {sorted(spec)} have no label {label!r}: the project's "
                f"run_fn trains on it; output it from preprocessing_fn"
            )
        shape = image_input_shape(tf_transform_output)
        feature_spec = {name: value for name, value in spec.items() if name != label}
        if shape is not None:
            feature_spec = {
                features.transformed_name(features.IMAGE_KEY): spec.get(
                    features.transformed_name(features.IMAGE_KEY)
                )
            }
        regression = is_regression(tf_transform_output, label_key)
        return cls(
            feature_spec=feature_spec,
            label_key=label,
            task=features.REGRESSION if regression else features.CLASSIFICATION,
            class_names=() if regression else tuple(class_names(tf_transform_output)),
            vocabulary_sizes={
                name: size
                for name, value in feature_spec.items()
                if shape is None
                and value is not None
                and value.dtype == tf.int64
                and (size := _vocabulary_size(tf_transform_output, name))
            },
            image_shape=None if shape is None else (shape[0], shape[1], shape[2]),
            settings=settings,
            custom_config=dict(custom_config or {}),
            tf_transform_output=tf_transform_output,
        )


def _vocabulary_size(tf_transform_output: tft.TFTransformOutput, name: str) -> int:
    """Indices of an integer feature: the schema's int_domain (tf.Transform records it for
    compute_and_apply_vocabulary), else the project's vocabulary of that feature plus its OOV
    bucket; 0 when neither is known."""
    schema = tf_transform_output.transformed_metadata.schema
    for feature in schema.feature:
        if feature.name == name and feature.HasField("int_domain") and feature.int_domain.max:
            return int(feature.int_domain.max) + 1
    try:
        vocabulary = features.vocabulary_name(features.raw_key(name))
        return (
            tf_transform_output.vocabulary_size_by_name(vocabulary) + preprocessing.NUM_OOV_BUCKETS
        )
    except (ValueError, OSError, tf.errors.NotFoundError):
        return 0


def check_hook_model(keras_model, model_inputs: ModelInputs, hook: str) -> None:
    """What the project needs of a hook's model, as one clear error naming the hook."""
    if not isinstance(keras_model, keras.Model):
        raise TypeError(
            f"model hook {hook} returned {type(keras_model).__name__}, not a keras.Model"
        )
    if keras_model.optimizer is None or not getattr(keras_model, "compiled_loss", None):
        raise ValueError(
            f"model hook {hook}: compile() the model (optimizer, loss) before returning it"
        )
    unknown = sorted(set(keras_model.input_names) - set(model_inputs.feature_spec))
    if unknown:
        raise ValueError(
            f"model hook {hook}: inputs {unknown} are not transformed features; name the "
            f"inputs after model_inputs.feature_spec's keys {sorted(model_inputs.feature_spec)}"
        )
    width = keras_model.output_shape[-1] if keras_model.output_shape else None
    expected = 1 if model_inputs.task == features.REGRESSION else len(model_inputs.class_names)
    if isinstance(keras_model.output_shape, list) or width != expected:
        raise ValueError(
            f"model hook {hook}: one output of width {expected} is needed ("
            + (
                "the z-scored prediction"
                if model_inputs.task == features.REGRESSION
                else f"probabilities over {expected} classes"
            )
            + f"), got output shape {keras_model.output_shape}"
        )


def image_model(model_inputs: ModelInputs) -> keras.Model:
    """The built-in image classifier, as a model hook: over the transformed [size, size, 3] image
    in [0, 1]. mobilenet_v2: Keras' MobileNetV2 (weights=None: nothing is downloaded) at the
    transformed size; small_cnn: two conv blocks, fast enough for CPU runs."""
    settings = model_inputs.settings
    architecture = settings.image_model
    if architecture not in features.IMAGE_MODELS:
        raise ValueError(
            f"image_model must be one of {features.IMAGE_MODELS}, got {architecture!r}"
        )
    shape = model_inputs.image_shape
    assert shape is not None, "image_model is the hook for image data"
    name = features.transformed_name(features.IMAGE_KEY)
    image = keras.Input(shape=shape, name=name, dtype=tf.float32)
    if architecture == "mobilenet_v2":
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
        x = keras.layers.Dropout(0.2 if settings.dropout is None else settings.dropout)(x)
    outputs = keras.layers.Dense(
        len(model_inputs.class_names),
        activation="softmax",
        name=features.PROBABILITIES,
        dtype="float32",
    )(x)
    return _compile(_StepsWithoutAutograph(inputs={name: image}, outputs=outputs), settings)


class StackColumns(keras.layers.Layer):
    """[batch] tensors -> one [batch, columns] tensor, plus a constant per column (offsets).

    One layer (one stack op) for any number of columns: per-column Reshape / CategoryEncoding
    layers made the step cost grow with every column (issue 30)."""

    def __init__(self, offsets: Sequence[int] = (), **kwargs):
        super().__init__(**kwargs)
        self.offsets = tuple(int(offset) for offset in offsets)

    def call(self, columns):
        stacked = tf.stack(columns, axis=1)
        if self.offsets:
            stacked += tf.constant(self.offsets, dtype=stacked.dtype)
        return stacked

    def get_config(self):
        return {**super().get_config(), "offsets": list(self.offsets)}


# Vocabulary columns of more indices than this are embedded, not one-hot encoded: a one-hot of
# thousands of values (a tail number, an id-like code) made every step multiply a
# [batch, thousands] mostly-zero matrix by the first layer's weights and update all of them
# (issue 46); a gather of EMBEDDING_WIDTH numbers per row costs the same at any vocabulary size.
ONE_HOT_MAX_INDICES = 256
EMBEDDING_WIDTH = 16


def tabular_inputs(model_inputs: ModelInputs) -> tuple[dict[str, Any], Any]:
    """The built-in model's inputs (one per feature, named after it) and their encoding: every
    vocabulary index of at most ONE_HOT_MAX_INDICES one-hot in its own range of one multi-hot
    vector (the concatenation of the per-column one-hots, built by one stack and one
    CategoryEncoding whatever the column count); every larger vocabulary's index looked up in
    one embedding table (each column its own rows of it, EMBEDDING_WIDTH numbers a column; one
    stack and one gather whatever the column count); then the float features (z-scores,
    missing indicators) stacked beside them."""
    inputs, floats = {}, []
    one_hot: tuple[list, list[int]] = ([], [])
    embedded: tuple[list, list[int]] = ([], [])
    for name, spec in sorted(model_inputs.feature_spec.items()):
        if spec.dtype == tf.int64:
            depth = model_inputs.vocabulary_sizes.get(name)
            if not depth:
                raise ValueError(
                    f"integer feature {name!r} indexes no known vocabulary: the built-in model "
                    "one-hot encodes vocabulary indices (tft.compute_and_apply_vocabulary)"
                )
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.int64)
            group = one_hot if depth <= ONE_HOT_MAX_INDICES else embedded
            group[0].append(inputs[name])
            group[1].append(depth)
        else:
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.float32)
            floats.append(inputs[name])
    encoded = []
    # Column i's indices [0, depth_i) move to [offset_i, offset_i + depth_i).
    if one_hot[0]:
        offsets = [sum(one_hot[1][:i]) for i in range(len(one_hot[1]))]
        stacked = StackColumns(offsets, name="vocabulary_indices")(one_hot[0])
        encoded.append(
            keras.layers.CategoryEncoding(num_tokens=sum(one_hot[1]), output_mode="multi_hot")(
                stacked
            )
        )
    if embedded[0]:
        offsets = [sum(embedded[1][:i]) for i in range(len(embedded[1]))]
        stacked = StackColumns(offsets, name="embedded_indices")(embedded[0])
        vectors = keras.layers.Embedding(
            sum(embedded[1]), EMBEDDING_WIDTH, name="vocabulary_embeddings"
        )(stacked)
        encoded.append(keras.layers.Reshape((len(embedded[0]) * EMBEDDING_WIDTH,))(vectors))
    if floats:
        encoded.append(StackColumns(name="float_features")(floats))
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    return inputs, x


def tabular_model(model_inputs: ModelInputs) -> keras.Model:
    """The built-in MLP, as a model hook: float features as they are (z-scores, missing
    indicators), vocabulary indices one-hot encoded or, for large vocabularies, embedded
    (tabular_inputs); a softmax or one linear unit on top."""
    inputs, x = tabular_inputs(model_inputs)
    return tabular_head(model_inputs, inputs, x)


def tabular_head(model_inputs: ModelInputs, inputs: dict[str, Any], x) -> keras.Model:
    """The MLP over an encoded input x (of `inputs`), compiled for the task."""
    settings = model_inputs.settings
    dropout = getattr(settings, "dropout", None) or 0.0
    for units in settings.hidden_units:
        x = keras.layers.Dense(units, activation="relu")(x)
        if dropout:
            x = keras.layers.Dropout(dropout)(x)
    if model_inputs.task == features.REGRESSION:
        # One linear unit in z-score units of the training label (float32 under mixed precision).
        prediction = keras.layers.Dense(1, name=features.NORMALIZED_PREDICTION, dtype="float32")(x)
        regressor = _StepsWithoutAutograph(inputs=inputs, outputs=prediction)
        regressor.compile(
            optimizer=keras.optimizers.Adam(settings.learning_rate),
            loss=keras.losses.MeanSquaredError(),
            metrics=[keras.metrics.MeanAbsoluteError(name="mae")],
            jit_compile=settings.xla,
            steps_per_execution=steps_per_execution(settings),
        )
        return regressor
    # float32 output even under a mixed-precision policy, for a numerically stable softmax/loss.
    outputs = keras.layers.Dense(
        len(model_inputs.class_names),
        activation="softmax",
        name=features.PROBABILITIES,
        dtype="float32",
    )(x)
    return _compile(_StepsWithoutAutograph(inputs=inputs, outputs=outputs), settings)


def build_model(model_inputs: ModelInputs) -> keras.Model:
    """The project's default model hook: image_model for images, tabular_model otherwise."""
    if model_inputs.image_shape is not None:
        return image_model(model_inputs)
    return tabular_model(model_inputs)


def build_keras_model(
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    hidden_units: Sequence[int] = (32, 16),
    learning_rate: float = 0.01,
    jit_compile: bool = False,
    image_model: str = "small_cnn",
) -> keras.Model:
    """build_model with these settings (tests, benchmarks); call inside strategy.scope()."""
    from components.training.settings import TrainingConfig

    settings = TrainingConfig(
        hidden_units=tuple(hidden_units),
        learning_rate=learning_rate,
        xla=jit_compile,
        image_model=image_model,
    )
    return build_model(ModelInputs.of(tf_transform_output, label_key, settings))
