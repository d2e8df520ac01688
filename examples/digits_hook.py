"""An image model of your own for the digits (or any image class folders), through the project's
model hook.

    python pipeline/run_local.py --dataset digits --module_file examples/digits_hook.py

The project decodes, resizes and scales every image (the transform graph, then its input
pipeline, the same steps at serving time); the model reads the decoded image, a float tensor
[height, width, 3] in [0, 1] named after the transformed image feature. This one replaces
the built-in second conv block by a depthwise-separable one with batch normalization.
"""

import tensorflow as tf

keras = tf.keras


def build_model(model_inputs):
    (name,) = model_inputs.feature_spec  # the transformed image feature
    image = keras.Input(shape=model_inputs.image_shape, name=name, dtype=tf.float32)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(image)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.SeparableConv2D(64, 3, padding="same", activation="relu")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    probabilities = keras.layers.Dense(
        len(model_inputs.class_names), activation="softmax", name="probabilities"
    )(x)
    model = keras.Model(inputs={name: image}, outputs=probabilities, name="separable_digits")
    model.compile(
        optimizer=keras.optimizers.Adam(model_inputs.settings.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model
