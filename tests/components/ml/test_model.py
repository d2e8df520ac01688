"""Model building, one distributed training step, export and serving on raw tf.Examples."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from components.ml import export, features, inputs, model
from components.training import strategies
from tests.components.helpers import serialize


def test_dataset_batches_transformed_shards(transform_run):
    dataset = inputs.make_dataset(
        transform_run["transformed_files"],
        transform_run["output"],
        "species",
        8,
        shuffle=False,
        repeat=False,
    )
    # No autotuning model, whose thread can hold up the iterator's deletion for seconds
    # (inputs.without_autotune_thread).
    assert dataset.options().autotune.enabled is False
    batches = list(dataset)
    assert sum(int(label.shape[0]) for _, label in batches) == len(transform_run["raw"])
    batch_features, label = batches[0]
    assert features.transformed_name("species") not in batch_features
    assert label.dtype == tf.int64
    assert batch_features[features.transformed_name("bill_length_mm")].dtype == tf.float32


def test_model_trains_under_a_strategy_and_serves_raw_examples(transform_run, tmp_path):
    output = transform_run["output"]
    strategy = strategies.make_strategy("mirrored")
    batch = strategies.global_batch_size(8, strategy)
    assert batch == 8 * strategy.num_replicas_in_sync
    dataset = inputs.make_dataset(
        transform_run["transformed_files"],
        output,
        "species",
        batch,
        shuffle=True,
        repeat=True,
        seed=1,
    )
    with strategy.scope():
        keras_model = model.build_keras_model(output, "species", hidden_units=(8,))
    weights_before = [w.numpy().copy() for w in keras_model.trainable_weights]
    history = keras_model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert any(
        not np.array_equal(before, after.numpy())
        for before, after in zip(weights_before, keras_model.trainable_weights, strict=True)
    )

    export_dir = str(tmp_path / "serving")
    export.export_serving_model(keras_model, output, "species", export_dir)
    loaded = tf.saved_model.load(export_dir)
    serve = loaded.signatures[features.SERVING_SIGNATURE]
    raw = transform_run["raw"][:5]
    # Serving gets raw examples without the label, exactly as clients send them.
    unlabeled = [{k: v for k, v in row.items() if k != "species"} for row in raw]
    result = serve(examples=tf.constant([serialize(row) for row in unlabeled]))
    probabilities = result[features.PROBABILITIES].numpy()
    assert probabilities.shape == (5, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    classes = [c.decode() for c in result[features.CLASSES].numpy()]
    vocabulary = [v.decode() for v in output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    assert classes == [vocabulary[i] for i in result[features.CLASS_IDS].numpy()]

    transformed = loaded.signatures[features.TRANSFORM_SIGNATURE](
        examples=tf.constant([serialize(row) for row in raw])
    )
    labels = transformed[features.transformed_name("species")].numpy()
    assert [vocabulary[i] for i in labels] == [row["species"][0].decode() for row in raw]
    # The Evaluator's preprocessing function: the same transformed label, and nothing else.
    label_only = loaded.signatures[features.TRANSFORM_LABEL_SIGNATURE](
        examples=tf.constant([serialize(row) for row in raw])
    )
    assert set(label_only) == {features.transformed_name("species")}
    np.testing.assert_array_equal(label_only[features.transformed_name("species")].numpy(), labels)

    # The export applies the transform graph without tft's Keras layer (which would be saved as
    # a Keras object); it computes what the layer computes, and the model's own outputs.
    parsed = tf.io.parse_example(
        tf.constant([serialize(row) for row in raw]), output.raw_feature_spec()
    )
    expected = output.transform_features_layer()(parsed)
    assert sorted(transformed) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(transformed[name].numpy(), value.numpy())
    model_probabilities = keras_model(
        {name: expected[name] for name in keras_model.input_names}, training=False
    ).numpy()
    np.testing.assert_allclose(probabilities, model_probabilities, rtol=1e-6, atol=1e-7)


def test_mixed_precision_and_xla_train(transform_run):
    """The GPU options: a mixed-precision policy (bfloat16 runs on CPU too) and an XLA-compiled
    train step; the output layer stays float32."""
    output = transform_run["output"]
    dataset = inputs.make_dataset(
        transform_run["transformed_files"],
        output,
        "species",
        8,
        shuffle=False,
        repeat=True,
        cache_records=True,
    )
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras_model = model.build_keras_model(
            output, "species", hidden_units=(8,), jit_compile=True
        )
        history = keras_model.fit(dataset, steps_per_epoch=3, epochs=1, verbose=0)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    hidden = [layer for layer in keras_model.layers if isinstance(layer, tf.keras.layers.Dense)]
    assert hidden[0].compute_dtype == "bfloat16"
    assert keras_model.output.dtype == tf.float32
    assert np.isfinite(history.history["loss"][0])


def _train_image_model(image_transform_run, image_model: str):
    output = image_transform_run["output"]
    strategy = strategies.make_strategy("mirrored")
    dataset = inputs.make_dataset(
        image_transform_run["raw_files"],
        output,
        features.IMAGE_LABEL_KEY,
        8,
        shuffle=True,
        repeat=True,
        seed=1,
    )
    with strategy.scope():
        keras_model = model.build_keras_model(
            output, features.IMAGE_LABEL_KEY, learning_rate=0.005, image_model=image_model
        )
    history = keras_model.fit(dataset, steps_per_epoch=15, epochs=3, verbose=0)
    return keras_model, history.history


def test_small_cnn_learns_and_serves_raw_image_bytes(image_transform_run, tmp_path):
    output = image_transform_run["output"]
    keras_model, history = _train_image_model(image_transform_run, "small_cnn")
    assert keras_model.input_shape == {"image_xf": (None, 32, 32, 3)}
    # The two classes differ by brightness: a few steps separate them.
    assert history["accuracy"][-1] >= 0.9, history
    export_dir = str(tmp_path / "export")
    export.export_serving_model(keras_model, output, features.IMAGE_LABEL_KEY, export_dir)
    loaded = tf.saved_model.load(export_dir)
    raw = image_transform_run["raw"]
    images = tf.constant([row[features.IMAGE_KEY][0] for row in raw])
    expected = [row[features.IMAGE_LABEL_KEY][0] for row in raw]
    by_bytes = loaded.signatures[features.IMAGE_SERVING_SIGNATURE](images=images)
    assert list(by_bytes[features.CLASSES].numpy()) == expected
    # serving_default takes tf.Examples holding only the image (no label, path or size).
    examples = tf.constant(
        [serialize({features.IMAGE_KEY: [row[features.IMAGE_KEY][0]]}) for row in raw]
    )
    by_example = loaded.signatures[features.SERVING_SIGNATURE](examples=examples)
    np.testing.assert_allclose(
        by_example[features.PROBABILITIES].numpy(),
        by_bytes[features.PROBABILITIES].numpy(),
        atol=1e-6,
    )


@pytest.mark.slow
def test_mobilenet_v2_builds_at_the_transformed_size_and_trains(image_transform_run):
    keras_model, history = _train_image_model(image_transform_run, "mobilenet_v2")
    assert keras_model.input_shape == {"image_xf": (None, 32, 32, 3)}
    assert keras_model.output_shape == (None, 2)
    assert any("mobilenetv2" in layer.name for layer in keras_model.layers)
    assert np.isfinite(history["loss"][-1])


def test_tabular_inputs_encode_every_vocabulary_column_as_its_own_one_hot():
    """One stack and one multi-hot for all vocabulary columns: the same vector as one one-hot
    per column concatenated (in name order), the float features after them."""
    from components.training.settings import TrainingConfig

    spec = {
        "b_xf": tf.io.FixedLenFeature([], tf.int64),
        "a_xf": tf.io.FixedLenFeature([], tf.int64),
        "x_xf": tf.io.FixedLenFeature([], tf.float32),
        "c_xf": tf.io.FixedLenFeature([], tf.int64),
    }
    depths = {"a_xf": 3, "b_xf": 5, "c_xf": 2}
    model_inputs = model.ModelInputs(
        feature_spec=spec,
        label_key="label_xf",
        task=features.CLASSIFICATION,
        class_names=("p", "q"),
        vocabulary_sizes=depths,
        image_shape=None,
        settings=TrainingConfig(),
        custom_config={},
        tf_transform_output=None,
    )
    inputs, encoded = model.tabular_inputs(model_inputs)
    encoder = tf.keras.Model(inputs, encoded)
    batch = {
        "a_xf": np.array([0, 2, 1]),
        "b_xf": np.array([4, 0, 4]),
        "c_xf": np.array([1, 1, 0]),
        "x_xf": np.array([0.5, -1.0, 2.0], np.float32),
    }
    expected = np.concatenate(
        [np.eye(depths[name])[batch[name]] for name in ("a_xf", "b_xf", "c_xf")]
        + [batch["x_xf"][:, None]],
        axis=1,
    )
    np.testing.assert_array_equal(encoder(batch).numpy(), expected)
    # The built-in model on top reads the same named inputs, one per feature.
    assert sorted(model.tabular_model(model_inputs).input_names) == sorted(spec)


def test_tabular_inputs_embed_vocabularies_of_many_values_in_one_table():
    """A vocabulary of more than ONE_HOT_MAX_INDICES indices is embedded, not one-hot encoded:
    each such column gets its own rows of one embedding table (EMBEDDING_WIDTH numbers), after
    the one-hot part; a small vocabulary stays one-hot."""
    from components.training.settings import TrainingConfig

    big = model.ONE_HOT_MAX_INDICES + 1
    spec = {
        "tail_xf": tf.io.FixedLenFeature([], tf.int64),
        "hour_xf": tf.io.FixedLenFeature([], tf.int64),
        "small_xf": tf.io.FixedLenFeature([], tf.int64),
        "x_xf": tf.io.FixedLenFeature([], tf.float32),
    }
    depths = {"tail_xf": 4_045, "hour_xf": big, "small_xf": 3}
    model_inputs = model.ModelInputs(
        feature_spec=spec,
        label_key="label_xf",
        task=features.REGRESSION,
        class_names=(),
        vocabulary_sizes=depths,
        image_shape=None,
        settings=TrainingConfig(),
        custom_config={},
        tf_transform_output=None,
    )
    inputs, encoded = model.tabular_inputs(model_inputs)
    encoder = tf.keras.Model(inputs, encoded)
    width = model.EMBEDDING_WIDTH
    assert encoder.output_shape == (None, 3 + 2 * width + 1)
    (table,) = encoder.get_layer("vocabulary_embeddings").get_weights()
    assert table.shape == (big + 4_045, width)
    batch = {
        "tail_xf": np.array([0, 4_044, 7]),
        "hour_xf": np.array([big - 1, 0, 5]),
        "small_xf": np.array([2, 0, 1]),
        "x_xf": np.array([0.5, -1.0, 2.0], np.float32),
    }
    # Name order: hour_xf's rows first, then tail_xf's.
    expected = np.concatenate(
        [np.eye(3)[batch["small_xf"]], table[batch["hour_xf"]], table[big + batch["tail_xf"]]]
        + [batch["x_xf"][:, None]],
        axis=1,
    )
    np.testing.assert_allclose(encoder(batch).numpy(), expected, rtol=1e-6)
    regressor = model.tabular_model(model_inputs)
    assert regressor.output_shape == (None, 1)
    # Trained on them, only the rows looked up move.
    before = regressor.get_layer("vocabulary_embeddings").get_weights()[0].copy()
    regressor.fit(batch, np.array([1.0, -1.0, 0.0], np.float32), epochs=1, verbose=0)
    after = regressor.get_layer("vocabulary_embeddings").get_weights()[0]
    moved = np.flatnonzero(np.abs(after - before).sum(axis=1) > 0)
    assert sorted(moved) == sorted([big - 1, 0, 5, big + 0, big + 4_044, big + 7])
