"""Regression through the real pieces: the z-scored label in Transform (scikit-learn's diabetes
data, conftest.regression_transform_run), the linear head, the export that answers in the
label's units, and the skill metric the Evaluator thresholds."""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from components.ml import export, features, inputs, metrics, model, preprocessing
from tests.components.conftest import analyze_and_transform
from tests.components.helpers import serialize


def _labels(run) -> np.ndarray:
    return np.array([row[run["label"]][0] for row in run["raw"]], dtype=np.float64)


def test_label_is_z_scored_and_the_scale_is_read_back(regression_transform_run):
    run, label = regression_transform_run, regression_transform_run["label"]
    output = run["output"]
    assert output.transformed_feature_spec()[features.transformed_name(label)].dtype == tf.float32
    assert model.is_regression(output, label)
    truth = _labels(run)
    mean, std = export.label_scale(output, label)
    np.testing.assert_allclose([mean, std], [truth.mean(), truth.std()], rtol=1e-4)


def test_regressor_trains_and_serves_in_the_label_units(regression_transform_run, tmp_path):
    run, label = regression_transform_run, regression_transform_run["label"]
    output = run["output"]
    dataset = inputs.make_dataset(
        run["transformed_files"], output, label, 32, shuffle=True, repeat=True, seed=1
    )
    keras_model = model.build_keras_model(output, label, hidden_units=(16,), learning_rate=0.01)
    assert keras_model.output_shape == (None, 1)
    history = keras_model.fit(dataset, steps_per_epoch=14, epochs=8, verbose=0)
    assert history.history["loss"][-1] < 0.7, history.history  # below predicting the mean (1.0)

    export_dir = str(tmp_path / "serving")
    export.export_serving_model(keras_model, output, label, export_dir)
    serve = tf.saved_model.load(export_dir).signatures[features.SERVING_SIGNATURE]
    unlabeled = [{k: v for k, v in row.items() if k != label} for row in run["raw"]]
    result = serve(examples=tf.constant([serialize(row) for row in unlabeled]))
    predicted = result[features.PREDICTION].numpy()
    truth = _labels(run)
    mean, std = truth.mean(), truth.std()
    np.testing.assert_allclose(
        predicted, result[features.NORMALIZED_PREDICTION].numpy() * std + mean, rtol=1e-3
    )
    assert 25 < predicted.mean() < 346  # the label's range, not z-scores
    skill = 1 - np.mean((predicted - truth) ** 2) / np.mean((truth - mean) ** 2)
    assert skill > 0.3, skill
    description = export_description(export_dir)
    assert description["task"] == "regression" and description["label"] == label
    assert description["features"]["bmi"] == "float" and label not in description["features"]


def export_description(export_dir):
    """What pipeline.predict reads from the exported model: its serving signature's parse."""
    from pipeline import predict

    signature = tf.saved_model.load(export_dir).signatures[features.SERVING_SIGNATURE]
    return predict.model_description(export_dir, signature)


def test_mse_skill_metric():
    metric = metrics.MeanSquaredErrorSkill()
    truth = np.array([-1.0, 0.0, 1.0, 2.0])
    metric.update_state(truth, np.zeros(4))
    assert abs(float(metric.result())) < 1e-6  # the training mean scores 0
    metric.reset_state()
    metric.update_state(truth, truth[:, None])
    assert abs(float(metric.result()) - 1.0) < 1e-6
    metric.reset_state()
    metric.update_state(truth, truth + 2.0)  # MSE 4 vs 1.5 for the mean
    assert float(metric.result()) < 0  # worse than the mean


def test_integer_coded_classes_get_a_label_vocabulary(tmp_path):
    spec = {"x": tf.io.VarLenFeature(tf.float32), "y": tf.io.VarLenFeature(tf.int64)}
    metadata = dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(spec))
    raw = [{"x": [float(i)], "y": [i % 2]} for i in range(12)]
    fn = functools.partial(
        preprocessing.preprocessing_fn,
        custom_config={features.LABEL_KEY_CONFIG: "y", features.TASK_CONFIG: "classification"},
    )
    output = analyze_and_transform(tmp_path, raw, metadata, fn)["output"]
    assert sorted(model.class_names(output)) == ["0", "1"]
    assert not model.is_regression(output, "y")
