"""The serving export: a SavedModel whose signatures take raw serialized tf.Examples (or, for
image models, raw encoded image files) and apply the transform graph before the model, so
serving needs nothing but the model directory."""

from __future__ import annotations

import tensorflow as tf

from components.ml import features
from components.ml.model import class_names, image_input_shape


def export_serving_model(model, tf_transform_output, label_key: str, export_dir: str) -> None:
    """SavedModel with two signatures over raw serialized tf.Examples:
    serving_default -> probabilities, class_ids, classes (names); transform_features -> the
    transformed features, label included (TFMA reads the label from it).

    The Keras model is captured by the signature functions, not attached to the saved object:
    attached, tf.saved_model.save also serializes it as a Keras object by retracing every
    layer, which took 6x longer than the export itself. Only its variables are tracked.
    """
    module = tf.Module()
    module.model_variables = list(model.variables)
    module.tft_layer = tf_transform_output.transform_features_layer()
    raw_feature_spec = tf_transform_output.raw_feature_spec()
    serving_feature_spec = {k: v for k, v in raw_feature_spec.items() if k != label_key}
    if image_input_shape(tf_transform_output) is not None:
        # The model reads the image only (class id, path and size are bookkeeping features).
        serving_feature_spec = {features.IMAGE_KEY: raw_feature_spec[features.IMAGE_KEY]}
    names = tf.constant(class_names(tf_transform_output))
    signature = [tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")]

    def predict(raw_features):
        """Raw features -> the transform graph -> the model -> probabilities, ids, names."""
        transformed = module.tft_layer(raw_features)
        probabilities = model(
            {name: transformed[name] for name in model.input_names}, training=False
        )
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
        return module.tft_layer(tf.io.parse_example(serialized, raw_feature_spec))

    signatures = {features.SERVING_SIGNATURE: serve, features.TRANSFORM_SIGNATURE: transform}
    if image_input_shape(tf_transform_output) is not None:
        image_spec = raw_feature_spec[features.IMAGE_KEY]

        # Raw encoded image files (JPEG or PNG bytes), one per element: the same transform graph
        # (decode, resize, /255) and model as serving_default, without building tf.Examples.
        @tf.function(
            input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="images")],
            autograph=False,
        )
        def serve_images(images):
            return predict({features.IMAGE_KEY: _as_raw_feature(images, image_spec)})

        signatures[features.IMAGE_SERVING_SIGNATURE] = serve_images
    tf.saved_model.save(module, export_dir, signatures=signatures)


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
