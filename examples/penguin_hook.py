"""A custom Keras model for the penguins CSV, through the project's model hook.

    python pipeline/run_local.py --module_file examples/penguin_hook.py

The project's run_fn calls build_model(model_inputs) inside its strategy's scope, so this model
gets the project's preprocessing, input pipeline, every --strategy and launcher, checkpoints,
the serving and TFMA signatures and the Evaluator's default configuration without a line here.
It differs from the built-in MLP: vocabulary features are embedded instead of one-hot encoded,
and the hidden layers are a residual block whose width comes from --custom_config '{"width": N}'.
"""

import tensorflow as tf

keras = tf.keras  # tf-keras (TF_USE_LEGACY_KERAS=1, set by the project before TensorFlow loads)


def build_model(model_inputs):
    """model_inputs: components.ml.model.ModelInputs (feature_spec, vocabulary_sizes,
    class_names, settings, custom_config, ...). Returns a compiled keras.Model whose inputs are
    named after the transformed features and whose output is the class probabilities."""
    width = int(model_inputs.custom_config.get("width", 24))
    inputs, parts = {}, []
    for name, spec in sorted(model_inputs.feature_spec.items()):
        if spec.dtype == tf.int64:  # a vocabulary index (island, sex)
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.int64)
            embedding = keras.layers.Embedding(model_inputs.vocabulary_sizes[name], 3)
            parts.append(embedding(inputs[name]))
        else:  # a z-score or a missing-value indicator
            inputs[name] = keras.Input(shape=(), name=name, dtype=tf.float32)
            parts.append(keras.layers.Reshape((1,))(inputs[name]))
    x = keras.layers.Dense(width, activation="relu")(keras.layers.Concatenate()(parts))
    residual = keras.layers.Dense(width, activation="relu")(x)
    x = keras.layers.LayerNormalization()(keras.layers.Add()([x, residual]))
    probabilities = keras.layers.Dense(
        len(model_inputs.class_names), activation="softmax", name="probabilities"
    )(x)
    model = keras.Model(inputs=inputs, outputs=probabilities, name="penguin_residual")
    model.compile(
        optimizer=keras.optimizers.Adam(model_inputs.settings.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        steps_per_execution=model_inputs.settings.steps_per_execution,
    )
    return model
