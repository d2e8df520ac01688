"""Keras (tf-keras) classifier over the transformed features, and the TFX Trainer's run_fn.

The model is built from the Transform output: float features go in as they are (z-scores, missing
indicators), integer features are vocabulary indices and are one-hot encoded with the vocabulary
size. The exported SavedModel's serving signature takes raw serialized tf.Examples and applies
the transform graph, so serving needs nothing but the model directory.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf
import tensorflow_transform as tft

from components import features, preprocessing

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


def compression_of(path):
    """TFRecord compression from the file name, as Beam's AUTO does: gzip for '.gz', else none
    (image payloads are written uncompressed: JPEG bytes and pixels barely compress)."""
    if isinstance(path, str):
        return "GZIP" if path.endswith(".gz") else ""
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def make_dataset(
    file_pattern: str | Sequence[str],
    tf_transform_output: tft.TFTransformOutput,
    label_key: str,
    batch_size: int,
    *,
    shuffle: bool,
    repeat: bool,
    seed: int | None = None,
    cache_records: bool = False,
) -> tf.data.Dataset:
    """Transformed gzip TFRecord shards -> (features, label) batches.

    Files are listed and interleaved across shards, records are batched before parsing (one
    vectorized parse per batch, label split off in the same map), and everything is parallel
    and prefetched with AUTOTUNE. cache_records (for data that fits in memory) keeps the
    decompressed records after the first pass, so later epochs skip reading and gzip decoding.
    (Caching parsed examples instead was slower: batching many small tensors per example costs
    more than one vectorized parse per batch.)
    """
    files = tf.data.Dataset.list_files(file_pattern, shuffle=shuffle, seed=seed)
    dataset = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression_of(path)),
        cycle_length=tf.data.AUTOTUNE,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )
    feature_spec = tf_transform_output.transformed_feature_spec()
    label_name = features.transformed_name(label_key)

    def parse(records):
        batch = tf.io.parse_example(records, feature_spec)
        label = batch.pop(label_name)
        return batch, label

    if cache_records:
        dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(buffer_size=10 * batch_size, seed=seed)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def class_names(tf_transform_output: tft.TFTransformOutput) -> list[str]:
    return [
        name.decode() if isinstance(name, bytes) else name
        for name in tf_transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)
    ]


def image_input_shape(tf_transform_output: tft.TFTransformOutput) -> list[int] | None:
    """[size, size, channels] of the transformed image feature; None for tabular data."""
    spec = tf_transform_output.transformed_feature_spec().get(
        features.transformed_name(features.IMAGE_KEY)
    )
    return list(spec.shape) if spec is not None and len(spec.shape) == 3 else None


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
        raise ValueError(
            f"image_model must be one of {features.IMAGE_MODELS}, got {image_model!r}"
        )
    shape = image_input_shape(tf_transform_output)
    name = features.transformed_name(features.IMAGE_KEY)
    image = keras.Input(shape=shape, name=name, dtype=tf.float32)
    if image_model == "mobilenet_v2":
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
    num_classes = len(class_names(tf_transform_output))
    # float32 output even under a mixed-precision policy, for a numerically stable softmax/loss.
    outputs = keras.layers.Dense(
        num_classes, activation="softmax", name=features.PROBABILITIES, dtype="float32"
    )(x)
    return _compile(
        _StepsWithoutAutograph(inputs=inputs, outputs=outputs), learning_rate, jit_compile
    )


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


def run_fn(fn_args) -> None:
    """TFX Trainer entry point (referenced by module path: components.model.run_fn).

    fn_args: tfx.components.FnArgs (train/eval files, transform output, custom_config, ...).
    Single-worker strategies train here; multi-worker ones run on a cluster of task processes.
    """
    from components import cluster, training

    config = fn_args.custom_config or {}
    task = training.TrainTask(
        train_files=_expand(fn_args.train_files),
        eval_files=_expand(fn_args.eval_files),
        transform_output=fn_args.transform_output,
        serving_model_dir=fn_args.serving_model_dir,
        model_run_dir=fn_args.model_run_dir,
        label_key=config[features.LABEL_KEY_CONFIG],
        strategy=config.get("strategy", "mirrored"),
        workers=int(config.get("workers", 1)),
        ps=int(config.get("ps", 0)),
        per_replica_batch_size=int(config.get("per_replica_batch_size", 32)),
        epochs=int(config.get("epochs", 20)),
        train_steps=fn_args.train_steps,
        eval_steps=fn_args.eval_steps,
        learning_rate=float(config.get("learning_rate", 0.01)),
        hidden_units=tuple(config.get("hidden_units", (32, 16))),
        seed=int(config.get("seed", 42)),
        checkpoint_every_steps=int(config.get("checkpoint_every_steps", 0)),
        shard_policy=config.get("shard_policy", "auto"),
        mixed_precision=config.get("mixed_precision") or None,
        xla=bool(config.get("xla", False)),
        cpu_devices=int(config.get("cpu_devices", 0)),
        image_model=config.get(features.IMAGE_MODEL_CONFIG, "small_cnn"),
    )
    if task.runs_in_process():
        training.train(task)
        return
    if config.get("launcher") == "tfjob":  # set by the Kubeflow compiler (kubeflow/compile.py)
        from kubeflow import tfjob

        launcher = tfjob.TFJobLauncher.from_custom_config(config)
    else:
        launcher = cluster.LocalProcessLauncher(max_restarts=int(config.get("max_restarts", 2)))
    launcher.run(cluster.ClusterSpec.for_task(task), task)


def _expand(patterns) -> list[str]:
    """FnArgs gives file patterns (one per split); tasks get the sorted list of shard files."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    return sorted(path for pattern in patterns for path in tf.io.gfile.glob(pattern))
