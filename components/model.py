"""Keras (tf-keras) classifier over the transformed features, and the TFX Trainer's run_fn.

The model is built from the Transform output: float features go in as they are (z-scores, missing
indicators), integer features are vocabulary indices and are one-hot encoded with the vocabulary
size. The exported SavedModel's serving signature takes raw serialized tf.Examples and applies
the transform graph, so serving needs nothing but the model directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_transform as tft
from absl import logging
from tfx import v1 as tfx

from components import features, preprocessing, strategies

# Under TF_USE_LEGACY_KERAS=1 this is tf-keras (Keras 2), which tf.Transform 1.16 requires.
keras = tf.keras


def _split_label(batch: dict, label_name: str):
    label = batch.pop(label_name)
    return batch, label


def make_dataset(
    file_pattern: str | Sequence[str],
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    batch_size: int,
    *,
    shuffle: bool,
    repeat: bool,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Transformed gzip TFRecord shards -> (features, label) batches.

    Files are listed and interleaved across shards, records are batched before parsing (one
    vectorized parse per batch), and everything is parallel and prefetched with AUTOTUNE.
    """
    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    dataset = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP"),
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )
    if shuffle:
        dataset = dataset.shuffle(buffer_size=10 * batch_size, seed=seed)
    if repeat:
        dataset = dataset.repeat()
    feature_spec = tf_transform_output.transformed_feature_spec()
    label_name = features.transformed_name(label_key)
    dataset = (
        dataset.batch(batch_size)
        .map(
            lambda records: tf.io.parse_example(records, feature_spec),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .map(lambda batch: _split_label(batch, label_name), num_parallel_calls=tf.data.AUTOTUNE)
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def class_names(tf_transform_output: tft.TFTransformOutput) -> list[str]:
    return [
        name.decode() if isinstance(name, bytes) else name
        for name in tf_transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)
    ]


def build_keras_model(
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    hidden_units: Sequence[int] = (32, 16),
    learning_rate: float = 0.01,
) -> keras.Model:
    """Call inside strategy.scope()."""
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
    num_classes = len(class_names(tf_transform_output))
    outputs = keras.layers.Dense(num_classes, activation="softmax", name=features.PROBABILITIES)(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


class _ServingModule(tf.Module):
    """Signatures over raw serialized tf.Examples: predictions, and transformed features (TFMA)."""

    def __init__(self, model, tf_transform_output, label_key: str):
        super().__init__()
        self.model = model
        self.tft_layer = tf_transform_output.transform_features_layer()
        self._raw_feature_spec = tf_transform_output.raw_feature_spec()
        self._serving_feature_spec = {
            key: spec for key, spec in self._raw_feature_spec.items() if key != label_key
        }
        self._label_name = features.transformed_name(label_key)
        self._class_names = tf.constant(class_names(tf_transform_output))

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")])
    def serve(self, serialized):
        parsed = tf.io.parse_example(serialized, self._serving_feature_spec)
        transformed = self.tft_layer(parsed)
        model_inputs = {name: transformed[name] for name in self.model.input_names}
        probabilities = self.model(model_inputs, training=False)
        class_ids = tf.argmax(probabilities, axis=1)
        return {
            features.PROBABILITIES: probabilities,
            features.CLASS_IDS: class_ids,
            features.CLASSES: tf.gather(self._class_names, class_ids),
        }

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")])
    def transform(self, serialized):
        parsed = tf.io.parse_example(serialized, self._raw_feature_spec)
        return self.tft_layer(parsed)


def export_serving_model(model, tf_transform_output, label_key: str, export_dir: str) -> None:
    module = _ServingModule(model, tf_transform_output, label_key)
    tf.saved_model.save(
        module,
        export_dir,
        signatures={
            features.SERVING_SIGNATURE: module.serve,
            features.TRANSFORM_SIGNATURE: module.transform,
        },
    )


def _steps(num_examples: int | None, batch_size: int) -> int | None:
    return None if not num_examples else max(1, -(-num_examples // batch_size))


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """TFX Trainer entry point (referenced by module path: components.model.run_fn)."""
    config = fn_args.custom_config or {}
    label_key = config[features.LABEL_KEY_CONFIG]
    seed = int(config.get("seed", 42))
    keras.utils.set_random_seed(seed)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)

    strategy = strategies.make_strategy(config.get("strategy", "mirrored"))
    batch_size = strategies.global_batch_size(int(config.get("per_replica_batch_size", 16)),
                                              strategy)
    train_steps = fn_args.train_steps
    epochs = 1 if train_steps else int(config.get("epochs", 40))
    train_dataset = make_dataset(
        fn_args.train_files, tf_transform_output, label_key, batch_size,
        shuffle=True, repeat=bool(train_steps), seed=seed,
    )
    eval_dataset = make_dataset(
        fn_args.eval_files, tf_transform_output, label_key, batch_size,
        shuffle=False, repeat=False,
    )
    with strategy.scope():
        model = build_keras_model(
            tf_transform_output,
            label_key,
            hidden_units=config.get("hidden_units", (32, 16)),
            learning_rate=float(config.get("learning_rate", 0.01)),
        )
    logging.info(
        "Training %s: global batch %d (%d replica(s)), %s",
        strategy.__class__.__name__, batch_size, strategy.num_replicas_in_sync,
        f"{train_steps} steps" if train_steps else f"{epochs} epoch(s)",
    )
    history = model.fit(
        train_dataset,
        epochs=epochs,
        steps_per_epoch=train_steps,
        validation_data=eval_dataset,
        validation_steps=fn_args.eval_steps,
        callbacks=[keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch")],
        verbose=2,
    )
    final = {name: values[-1] for name, values in history.history.items()}
    logging.info("Final training metrics: %s", final)
    export_serving_model(model, tf_transform_output, label_key, fn_args.serving_model_dir)
    logging.info("Exported serving model to %s", os.path.abspath(fn_args.serving_model_dir))
