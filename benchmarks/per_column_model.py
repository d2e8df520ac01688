"""The built-in tabular model's input layer as it was before issue 30, kept to measure against
(benchmarks.wide_model): a Reshape per float feature and a Reshape + one-hot CategoryEncoding
per vocabulary feature, concatenated; the same MLP head (components.ml.model.tabular_head)."""

from __future__ import annotations

import tensorflow as tf

from components.ml import model


def per_column_inputs(model_inputs: model.ModelInputs):
    keras = tf.keras
    inputs, encoded = {}, []
    for name, spec in sorted(model_inputs.feature_spec.items()):
        if spec.dtype == tf.int64:
            depth = model_inputs.vocabulary_sizes[name]
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
    return inputs, x


def per_column_model(model_inputs: model.ModelInputs):
    inputs, x = per_column_inputs(model_inputs)
    return model.tabular_head(model_inputs, inputs, x)
