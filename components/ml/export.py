"""The serving export: a SavedModel whose signatures take raw serialized tf.Examples (or, for
image models, raw encoded image files) and apply the transform graph before the model, so
serving needs nothing but the model directory."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from components import compat
from components.ml import features, image_preprocessing
from components.ml.model import class_names, is_regression

# Written beside the SavedModel (assets.extra/): the raw columns serving reads and their types,
# the label and the task, so that a client (pipeline.predict) can build tf.Examples from CSV.
RAW_FEATURES_FILE = "raw_features.json"
_DTYPE_NAMES = {tf.int64: "int", tf.float32: "float", tf.string: "string"}


def export_serving_model(model, tf_transform_output, label_key: str, export_dir: str) -> None:
    """SavedModel with two signatures over raw serialized tf.Examples:
    serving_default -> probabilities, class_ids, classes (names), or for regression prediction
    (in the label's units) and prediction_xf (z-scored as the training label was);
    transform_features -> the transformed features, label included;
    transform_label -> the transformed label alone (the Evaluator's TFMA reads it from there).

    Neither the Keras model nor tft's TransformFeaturesLayer (a Keras model too) is attached to
    the saved object: attached, tf.saved_model.save also serializes each as a Keras object by
    retracing it under AutoGraph, which took longer than the export itself. The signature
    functions capture them; only the model's variables and the transform graph's objects
    (tables, assets) are tracked, and the signatures compute the same outputs.
    """
    module = tf.Module()
    module.model_variables = list(model.variables)
    transform_graph = compat.TransformGraph(tf_transform_output.transform_savedmodel_dir)
    module.transform_graph = transform_graph.trackable
    raw_feature_spec = tf_transform_output.raw_feature_spec()
    serving_feature_spec = {k: v for k, v in raw_feature_spec.items() if k != label_key}
    image_size = image_preprocessing.image_size_of(tf_transform_output)
    images = image_size is not None
    if images:
        # The model reads the image only (class id, path and size are bookkeeping features).
        serving_feature_spec = {features.IMAGE_KEY: raw_feature_spec[features.IMAGE_KEY]}
    signature = [tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")]
    regression = not images and is_regression(tf_transform_output, label_key)

    def transformed_features(raw_features):
        """The transform graph, then (images) the decode -> resize -> normalize the trainer's
        input pipeline applies: one path from raw features to the model's inputs."""
        transformed = transform_graph(raw_features)
        if image_size is not None:
            transformed = image_preprocessing.decode_transformed(transformed, image_size)
        return transformed

    def model_output(raw_features):
        transformed = transformed_features(raw_features)
        return model({name: transformed[name] for name in model.input_names}, training=False)

    if regression:
        mean, std = label_scale(tf_transform_output, label_key)

        def predict(raw_features):
            """Raw features -> transform graph -> model -> the number in the label's units."""
            normalized = tf.reshape(model_output(raw_features), [-1])
            return {
                features.PREDICTION: normalized * std + mean,
                features.NORMALIZED_PREDICTION: normalized,
            }

    else:
        names = tf.constant(class_names(tf_transform_output))

        def predict(raw_features):
            """Raw features -> the transform graph -> the model -> probabilities, ids, names."""
            probabilities = model_output(raw_features)
            class_ids = tf.argmax(probabilities, axis=1)
            return {
                features.PROBABILITIES: probabilities,
                features.CLASS_IDS: class_ids,
                features.CLASSES: tf.gather(names, class_ids),
            }

    # autograph=False: straight-line code; AutoGraph conversion only adds export time.
    @tf.function(input_signature=signature, autograph=False)
    def serve(serialized):
        return predict(tf.io.parse_example(serialized, serving_feature_spec))

    @tf.function(input_signature=signature, autograph=False)
    def transform(serialized):
        return transformed_features(tf.io.parse_example(serialized, raw_feature_spec))

    @tf.function(input_signature=signature, autograph=False)
    def serve_numeric(serialized):
        outputs = predict(tf.io.parse_example(serialized, serving_feature_spec))
        return {name: value for name, value in outputs.items() if name != features.CLASSES}

    transformed_label = features.transformed_name(label_key)

    @tf.function(input_signature=signature, autograph=False)
    def transform_label(serialized):
        """The transformed label alone (TFMA's preprocessing function in the Evaluator): the
        same transform graph, its other outputs pruned from the function's graph."""
        raw = tf.io.parse_example(serialized, raw_feature_spec)
        return {transformed_label: transform_graph(raw)[transformed_label]}

    signatures = {
        features.SERVING_SIGNATURE: serve,
        features.TRANSFORM_SIGNATURE: transform,
        features.BULK_INFERENCE_SIGNATURE: serve_numeric,
        features.TRANSFORM_LABEL_SIGNATURE: transform_label,
    }
    if images:
        image_spec = raw_feature_spec[features.IMAGE_KEY]

        # Raw encoded image files (JPEG or PNG bytes), one per element: the same transform graph,
        # decode -> resize -> /255 and model as serving_default, without building tf.Examples.
        @tf.function(
            input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="images")],
            autograph=False,
        )
        def serve_images(images):
            return predict({features.IMAGE_KEY: _as_raw_feature(images, image_spec)})

        signatures[features.IMAGE_SERVING_SIGNATURE] = serve_images
    tf.saved_model.save(module, export_dir, signatures=signatures)
    _write_raw_features(export_dir, label_key, regression, serving_feature_spec)


def _write_raw_features(export_dir: str, label_key: str, regression: bool, spec: dict) -> None:
    extra = os.path.join(export_dir, "assets.extra")
    tf.io.gfile.makedirs(extra)
    description = {
        "label": label_key,
        "task": features.REGRESSION if regression else features.CLASSIFICATION,
        "features": {name: _DTYPE_NAMES.get(s.dtype, s.dtype.name) for name, s in spec.items()},
        # Fixed-shape features without a default (the schema's shape: SchemaGen's shape
        # inference gives one to a column with a value in every row): serving's parse fails on
        # a row without them, so a client refuses that row instead.
        "required": sorted(
            name
            for name, s in spec.items()
            if isinstance(s, tf.io.FixedLenFeature) and s.default_value is None
        ),
    }
    with tf.io.gfile.GFile(os.path.join(extra, RAW_FEATURES_FILE), "w") as handle:
        handle.write(json.dumps(description, indent=2, sort_keys=True))


def label_scale(tf_transform_output, label_key: str) -> tuple[float, float]:
    """(mean, std) of the training label as Transform z-scored it (label_xf = (label - mean) /
    std), read back from the transform graph itself: the map is affine, and it sends the raw
    labels 0 and 1 to -mean / std and (1 - mean) / std."""
    raw_spec = tf_transform_output.raw_feature_spec()
    raw = {name: _empty_feature(spec, 2) for name, spec in raw_spec.items()}
    label_spec = raw_spec[label_key]
    raw[label_key] = _as_raw_feature(tf.constant([0, 1], label_spec.dtype), label_spec)
    with compat.transform_graph_walks_once():
        layer = tf_transform_output.transform_features_layer()
    transformed = layer(raw)
    zero, one = tf.reshape(transformed[features.transformed_name(label_key)], [-1]).numpy()
    std = 1.0 / (float(one) - float(zero))
    return -float(zero) * std, std


def _empty_feature(spec, batch: int) -> tf.Tensor | tf.SparseTensor:
    """A raw feature with no value in any of `batch` rows (zeros for a fixed-length one)."""
    if isinstance(spec, tf.io.VarLenFeature):
        return tf.SparseTensor(
            indices=tf.zeros([0, 2], tf.int64),
            values=tf.constant([], spec.dtype),
            dense_shape=[batch, 1],
        )
    return tf.zeros([batch, *spec.shape], spec.dtype)


def _as_raw_feature(values: tf.Tensor, spec) -> tf.Tensor | tf.SparseTensor:
    """[batch] values shaped as parse_example would give them for the raw feature spec."""
    if isinstance(spec, tf.io.VarLenFeature):
        batch = tf.shape(values, out_type=tf.int64)[0]
        rows = tf.range(batch, dtype=tf.int64)
        return tf.SparseTensor(
            indices=tf.stack([rows, tf.zeros_like(rows)], axis=1),
            values=values,
            dense_shape=tf.stack([batch, tf.constant(1, tf.int64)]),
        )
    return tf.reshape(values, [-1, *spec.shape])
