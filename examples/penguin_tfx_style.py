"""Penguins in TFX's own style: a module with preprocessing_fn and run_fn, as TFX 1.16's Transform
and Trainer take it (nothing in it is specific to this project).

    python pipeline/run_local.py --module_file examples/penguin_tfx_style.py

preprocessing_fn z-scores the four measurements (missing ones imputed with the mean) and indexes
island and the species label by vocabulary. run_fn reads the transformed examples through
fn_args.data_accessor, builds its strategy from TF_CONFIG (MultiWorkerMirroredStrategy for
several workers, ParameterServerStrategy when the cluster has parameter servers, else
MirroredStrategy), trains fn_args.train_steps steps and saves a model whose serving_default
signature takes serialized tf.Examples and whose transform_features signature gives the
transformed features, as TFX's examples do. --custom_config '{"hidden": [16, 8]}' sets the layers.
"""

import json
import os
import tempfile

import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

keras = tf.keras

LABEL = "species"
NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")
CATEGORICAL = ("island",)
BATCH_SIZE = 32


def transformed_name(key):
    return key + "_xf"


def _dense(value, default):
    """A [batch] tensor from a column the schema lets be missing (a SparseTensor) or not."""
    if isinstance(value, tf.sparse.SparseTensor):
        shape = tf.stack([value.dense_shape[0], 1])
        value = tf.sparse.to_dense(tf.SparseTensor(value.indices, value.values, shape), default)
    return tf.reshape(value, [-1])


def preprocessing_fn(inputs, custom_config):
    outputs = {}
    for key in NUMERIC:
        value = inputs[key]
        observed = tf.cast(
            value.values if isinstance(value, tf.sparse.SparseTensor) else value, tf.float32
        )
        mean = tft.mean(observed)
        column = tf.cast(_dense(value, tf.constant(-1, value.dtype)), tf.float32)
        present = tf.not_equal(column, -1.0)
        outputs[transformed_name(key)] = tft.scale_to_z_score(tf.where(present, column, mean))
    for key in CATEGORICAL:
        outputs[transformed_name(key)] = tft.compute_and_apply_vocabulary(
            _dense(inputs[key], ""), num_oov_buckets=1, vocab_filename=key
        )
    outputs[transformed_name(LABEL)] = tft.compute_and_apply_vocabulary(
        _dense(inputs[LABEL], ""), vocab_filename=LABEL
    )
    return outputs


def _strategy():
    """The strategy TF_CONFIG asks for (the launcher sets it in every task of a cluster)."""
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if cluster.get("ps"):
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.experimental.ParameterServerStrategy(resolver)
    if len(cluster.get("worker", [])) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy()


def _is_chief(strategy):
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    if resolver.task_type == "chief":
        return True
    return (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and ("chief" not in resolver.cluster_spec().as_dict())
    )


def _build_keras_model(tf_transform_output, hidden):
    inputs, parts = [], []
    for key in NUMERIC:
        layer = keras.layers.Input(shape=(1,), name=transformed_name(key))
        inputs.append(layer)
        parts.append(layer)
    for key in CATEGORICAL:
        layer = keras.layers.Input(shape=(1,), name=transformed_name(key), dtype=tf.int64)
        inputs.append(layer)
        depth = tf_transform_output.vocabulary_size_by_name(key) + 1
        parts.append(keras.layers.CategoryEncoding(num_tokens=depth, output_mode="one_hot")(layer))
    x = keras.layers.concatenate(parts)
    for units in hidden:
        x = keras.layers.Dense(units, activation="relu")(x)
    classes = tf_transform_output.vocabulary_size_by_name(LABEL)
    model = keras.Model(inputs=inputs, outputs=keras.layers.Dense(classes)(x))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def _input_fn(fn_args, files, tf_transform_output, batch_size):
    return fn_args.data_accessor.tf_dataset_factory(
        files,
        tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=transformed_name(LABEL)),
        tf_transform_output.transformed_metadata.schema,
    ).repeat()


def _serving_signatures(model, tf_transform_output):
    model.tft_layer = tf_transform_output.transform_features_layer()
    raw_spec = tf_transform_output.raw_feature_spec()

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")])
    def serve_tf_examples_fn(serialized_tf_example):
        spec = {k: v for k, v in raw_spec.items() if k != LABEL}
        transformed = model.tft_layer(tf.io.parse_example(serialized_tf_example, spec))
        return {"outputs": model(transformed)}

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")])
    def transform_features_fn(serialized_tf_example):
        return model.tft_layer(tf.io.parse_example(serialized_tf_example, raw_spec))

    return {
        "serving_default": serve_tf_examples_fn,
        "transform_features": transform_features_fn,
    }


def run_fn(fn_args):
    strategy = _strategy()  # first: a cluster's collective ops before anything else runs
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    hidden = (fn_args.custom_config or {}).get("hidden", [16, 8])
    with strategy.scope():
        model = _build_keras_model(tf_transform_output, hidden)
    chief = _is_chief(strategy)
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):

        def dataset_fn(context):
            batch = context.get_per_replica_batch_size(BATCH_SIZE)
            dataset = _input_fn(fn_args, fn_args.train_files, tf_transform_output, batch)
            return dataset.shard(context.num_input_pipelines, context.input_pipeline_id)

        train, validation = keras.utils.experimental.DatasetCreator(dataset_fn), None
    else:
        train = _input_fn(fn_args, fn_args.train_files, tf_transform_output, BATCH_SIZE)
        validation = _input_fn(fn_args, fn_args.eval_files, tf_transform_output, BATCH_SIZE)
    model.fit(
        train,
        steps_per_epoch=fn_args.train_steps,
        validation_data=validation,
        validation_steps=fn_args.eval_steps if validation is not None else None,
        callbacks=[keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir)] if chief else [],
        verbose=2,
    )
    # Every worker of a multi-worker cluster saves (saving is collective); only the chief to
    # the serving directory.
    directory = fn_args.serving_model_dir if chief else tempfile.mkdtemp()
    tf.saved_model.save(
        model, directory, signatures=_serving_signatures(model, tf_transform_output)
    )
