"""components.compat: the version check that guards every patch of TFX and Beam internals, and
the patches themselves."""

from __future__ import annotations

from importlib import metadata
from unittest import mock

import pytest

from components import compat


def test_the_installed_stack_is_the_one_the_patches_were_written_for():
    compat.check_versions()  # what importing the module ran
    for name, version in compat.WRITTEN_FOR.items():
        assert metadata.version(name) == version


def test_another_version_fails_naming_the_package_and_what_to_do():
    versions = dict(compat.WRITTEN_FOR, tfx="1.17.0")
    with pytest.raises(compat.CompatError) as error:
        compat.check_versions(installed=versions.__getitem__)
    message = str(error.value)
    assert "tfx 1.17.0 (written for 1.16.0)" in message
    assert "tfx-bsl" not in message
    assert "bash setup.sh" in message and "components/compat.py" in message


def test_a_missing_package_fails_too():
    def installed(name):
        if name == "apache-beam":
            raise metadata.PackageNotFoundError(name)
        return compat.WRITTEN_FOR[name]

    with pytest.raises(compat.CompatError, match="apache-beam not installed"):
        compat.check_versions(installed=installed)


def test_transform_processor_swap_is_undone_after_the_block():
    from tfx.components.transform import executor as tfx_transform_executor

    stock = tfx_transform_executor.TransformProcessor
    with compat.transform_processor(dict):
        assert tfx_transform_executor.TransformProcessor is dict
    assert tfx_transform_executor.TransformProcessor is stock
    assert compat.stock_transform_processor() is stock


def test_tfx_packages_itself_only_for_runners_off_this_machine(monkeypatch):
    from tfx.dsl.components.base import base_beam_executor
    from tfx.utils import dependency_utils

    built = []

    def stock(args):
        built.append(list(args))
        return [*args, "--extra_package=tfx_ephemeral.tar.gz"]

    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags", stock)
    direct = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
    flink = ["--runner=FlinkRunner", "--flink_master=localhost:8081"]
    with compat.no_tfx_sdist_for_direct_runner():
        # What every TFX Beam executor calls in its constructor.
        assert base_beam_executor.dependency_utils.make_beam_dependency_flags(direct) == direct
        assert dependency_utils.make_beam_dependency_flags([]) == []
        flink_args = dependency_utils.make_beam_dependency_flags(flink)
    assert flink_args == [*flink, "--extra_package=tfx_ephemeral.tar.gz"]
    assert built == [flink]
    # Outside the context TFX's own behaviour is back.
    assert dependency_utils.make_beam_dependency_flags(direct)[-1].startswith("--extra_package")


def _keras_metric_values(examples) -> dict:
    """TFMA's combiner for two Keras metrics, fed the examples eagerly as TFMA's Beam stage does."""
    import tf_keras
    from tensorflow_model_analysis.metrics import metric_util, tf_metric_wrapper

    computation = tf_metric_wrapper.tf_metric_computations(
        [
            tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            tf_keras.metrics.SparseCategoricalCrossentropy(name="crossentropy"),
        ]
    )[0]
    combiner = computation.combiner
    combiner.setup()
    accumulator = combiner.create_accumulator()
    for example in examples:
        accumulator = combiner.add_input(
            accumulator, metric_util.to_standard_metric_inputs(example)
        )
    accumulator = combiner.compact(accumulator)
    return {key.name: float(value) for key, value in combiner.extract_output(accumulator).items()}


def test_tfma_keras_metrics_without_autograph_compute_the_same_values():
    from tensorflow.python.autograph.impl import api as autograph_api
    from tensorflow_model_analysis.metrics import tf_metric_wrapper

    examples = [
        {"labels": [label], "predictions": probabilities, "example_weights": [1.0]}
        for label, probabilities in [
            (0, [0.7, 0.2, 0.1]),
            (1, [0.1, 0.8, 0.1]),
            (2, [0.5, 0.3, 0.2]),
            (2, [0.0, 0.1, 0.9]),
        ]
    ]
    converted = autograph_api.converted_call
    with mock.patch.object(autograph_api, "converted_call", side_effect=converted) as spy:
        with_autograph = _keras_metric_values(examples)
        assert spy.call_count > 0  # tf-keras converts update_state, even in eager code
        spy.reset_mock()
        stock_process_batch = tf_metric_wrapper._CompilableMetricsCombiner._process_batch
        with compat.tfma_keras_metrics_without_autograph():
            without_autograph = _keras_metric_values(examples)
        assert spy.call_count == 0
    assert tf_metric_wrapper._CompilableMetricsCombiner._process_batch is stock_process_batch
    assert without_autograph == with_autograph
    assert without_autograph["accuracy"] == 0.75


def _small_model(model_class, steps_per_execution: int):
    import tensorflow as tf

    keras = tf.keras
    keras.utils.set_random_seed(7)
    inputs = keras.Input(shape=(4,), name="x")
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    outputs = keras.layers.Dense(3, activation="softmax")(hidden)
    model = model_class(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


@pytest.mark.parametrize("strategy_name", ["default", "mirrored"])
def test_steps_without_autograph_train_and_evaluate_as_keras_s_own(strategy_name):
    """The built-in models' multi-step train/test functions (compat.keras_steps_function) give
    the weights, losses and metrics Keras's own give, with an epoch's last execution shorter
    than the others (7 steps, 3 a call) and under a distribution strategy; and they are used."""
    import numpy as np
    import tensorflow as tf

    from components.ml import model as model_lib

    rng = np.random.default_rng(0)
    features = rng.standard_normal((7 * 16, 4)).astype(np.float32)
    labels = (features[:, 0] > 0).astype(np.int64) + (features[:, 1] > 1)
    data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16)
    strategy = (
        tf.distribute.MirroredStrategy()
        if strategy_name == "mirrored"
        else tf.distribute.get_strategy()
    )
    results = {}
    for name, model_class in (
        ("keras", tf.keras.Model),
        ("ours", model_lib._StepsWithoutAutograph),
    ):
        with strategy.scope():
            model = _small_model(model_class, steps_per_execution=3)
        history = model.fit(
            data.repeat(),
            epochs=2,
            steps_per_epoch=7,
            verbose=0,
            validation_data=data,
            validation_steps=7,
        )
        results[name] = (model.get_weights(), history.history)
        if name == "ours":
            assert model.train_function.__name__ == "steps_function"
            assert model.test_function.__name__ == "steps_function"
    (keras_weights, keras_history), (our_weights, our_history) = results["keras"], results["ours"]
    for ours, theirs in zip(our_weights, keras_weights, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    assert our_history.keys() == keras_history.keys()
    for key, values in keras_history.items():
        np.testing.assert_allclose(our_history[key], values, rtol=1e-6, atol=1e-6)
