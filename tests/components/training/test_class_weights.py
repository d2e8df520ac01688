"""--class_weight balanced: the weights from Transform's label counts reach every training row
(in the dataset, so that parameter-server training gets them too), and the Trainer records them
on its Model artifact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from components.ml import inputs, model
from components.tfx_components.trainer import executor
from components.training import loop
from components.training.settings import TrainingConfig


def test_every_training_row_carries_its_class_weight_and_trains(transform_run):
    output = transform_run["output"]
    weights = loop.class_weights(TrainingConfig(class_weight="balanced"), output)
    dataset = inputs.make_dataset(
        transform_run["transformed_files"], output, "species", 16, shuffle=False, repeat=False
    )
    rows = 0
    for _, label, weight in loop._weighted(dataset, weights):
        np.testing.assert_allclose(weight.numpy(), np.array(weights)[label.numpy()], rtol=1e-6)
        rows += int(label.shape[0])
    assert rows == len(transform_run["raw"])
    # Keras takes (features, label, sample weight) batches as they come.
    keras_model = model.build_keras_model(output, "species", hidden_units=(8,))
    history = keras_model.fit(loop._weighted(dataset, weights), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert loop._weighted(dataset, None) is dataset


def test_the_trainer_records_the_class_weights_on_its_model(tmp_path):
    from tfx.types import standard_artifacts

    model_artifact, run = standard_artifacts.Model(), standard_artifacts.ModelRun()
    model_artifact.uri, run.uri = str(tmp_path / "model"), str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    outputs = {"model": [model_artifact], "model_run": [run]}
    executor.record_training_result(outputs)  # no training result: nothing recorded
    assert not model_artifact.has_custom_property(executor.CLASS_WEIGHTS_PROPERTY)
    weights = {"common": 0.555, "rare": 5.0}
    (tmp_path / "run" / loop.RESULT_FILE).write_text(json.dumps({"class_weights": weights}))
    executor.record_training_result(outputs)
    recorded = model_artifact.get_string_custom_property(executor.CLASS_WEIGHTS_PROPERTY)
    assert json.loads(recorded) == pytest.approx(weights)
