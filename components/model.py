"""Keras (tf-keras) classifier over the transformed features, and the TFX Trainer's run_fn.

The model is built from the Transform output: float features go in as they are (z-scores, missing
indicators), integer features are vocabulary indices and are one-hot encoded with the vocabulary
size. The exported SavedModel's serving signature takes raw serialized tf.Examples and applies
the transform graph, so serving needs nothing but the model directory.
"""

from __future__ import annotations

import logging as std_logging
import os
import time
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_transform as tft
from absl import logging

from components import features, preprocessing, strategies

# Under TF_USE_LEGACY_KERAS=1 this is tf-keras (Keras 2), which tf.Transform 1.16 requires.
keras = tf.keras
# The local runner prints records of this logger as progress lines (pipeline/progress.py).
progress_log = std_logging.getLogger("tfx_scaleout.progress")


class EpochProgress(keras.callbacks.Callback):
    """One progress line per epoch (at most ~20 per run): epoch, loss, accuracy, time."""

    def __init__(self, epochs: int):
        super().__init__()
        self._epochs = epochs
        self._every = max(1, epochs // 20)
        self._started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        done = epoch + 1
        if done % self._every and done != self._epochs:
            return
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in sorted((logs or {}).items()))
        progress_log.info(
            "epoch %d/%d: %s (%.1fs)",
            done,
            self._epochs,
            metrics,
            time.monotonic() - self._started,
        )


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
    model = _StepsWithoutAutograph(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    return model


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
    names = tf.constant(class_names(tf_transform_output))
    signature = [tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")]

    # autograph=False: straight-line code; AutoGraph conversion only adds export time.
    @tf.function(input_signature=signature, autograph=False)
    def serve(serialized):
        transformed = module.tft_layer(tf.io.parse_example(serialized, serving_feature_spec))
        probabilities = model(
            {name: transformed[name] for name in model.input_names}, training=False
        )
        class_ids = tf.argmax(probabilities, axis=1)
        return {
            features.PROBABILITIES: probabilities,
            features.CLASS_IDS: class_ids,
            features.CLASSES: tf.gather(names, class_ids),
        }

    @tf.function(input_signature=signature, autograph=False)
    def transform(serialized):
        return module.tft_layer(tf.io.parse_example(serialized, raw_feature_spec))

    tf.saved_model.save(
        module,
        export_dir,
        signatures={features.SERVING_SIGNATURE: serve, features.TRANSFORM_SIGNATURE: transform},
    )


def _steps(num_examples: int | None, batch_size: int) -> int | None:
    return None if not num_examples else max(1, -(-num_examples // batch_size))


def run_fn(fn_args) -> None:
    """TFX Trainer entry point (referenced by module path: components.model.run_fn).

    fn_args: tfx.components.FnArgs (train/eval files, transform output, custom_config, ...).
    """
    config = fn_args.custom_config or {}
    label_key = config[features.LABEL_KEY_CONFIG]
    seed = int(config.get("seed", 42))
    keras.utils.set_random_seed(seed)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)

    strategy = strategies.make_strategy(config.get("strategy", "mirrored"))
    batch_size = strategies.global_batch_size(
        int(config.get("per_replica_batch_size", 32)), strategy
    )
    train_steps = fn_args.train_steps
    epochs = 1 if train_steps else int(config.get("epochs", 20))
    train_dataset = make_dataset(
        fn_args.train_files,
        tf_transform_output,
        label_key,
        batch_size,
        shuffle=True,
        repeat=bool(train_steps),
        seed=seed,
    )
    eval_dataset = make_dataset(
        fn_args.eval_files,
        tf_transform_output,
        label_key,
        batch_size,
        shuffle=False,
        repeat=False,
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
        strategy.__class__.__name__,
        batch_size,
        strategy.num_replicas_in_sync,
        f"{train_steps} steps" if train_steps else f"{epochs} epoch(s)",
    )
    history = model.fit(
        train_dataset,
        epochs=epochs,
        steps_per_epoch=train_steps,
        validation_data=eval_dataset,
        validation_steps=fn_args.eval_steps,
        # Validate once, after the last epoch: per-epoch validation under a distribution
        # strategy re-creates the distributed eval iterator every epoch and was 8x slower.
        validation_freq=epochs,
        callbacks=[
            keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
            EpochProgress(epochs if not train_steps else 1),
        ],
        verbose=0,
    )
    final = {name: values[-1] for name, values in history.history.items()}
    logging.info("Final training metrics: %s", final)
    export_serving_model(model, tf_transform_output, label_key, fn_args.serving_model_dir)
    logging.info("Exported serving model to %s", os.path.abspath(fn_args.serving_model_dir))
