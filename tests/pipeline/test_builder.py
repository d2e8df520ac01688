"""The pipeline builder's Transform: TFX's Transform with our executor and two defaults off."""

from __future__ import annotations

import tensorflow_model_analysis as tfma
from tfx.types import channel, standard_artifacts

from components.tfx_components.transform import executor as transform_executor
from components.tfx_components.transform.component import ShardedTransform
from pipeline import builder


def transform(**kwargs):
    return ShardedTransform(
        examples=channel.Channel(type=standard_artifacts.Examples),
        schema=channel.Channel(type=standard_artifacts.Schema),
        preprocessing_fn=builder.PREPROCESSING_FN,
        **kwargs,
    )


def test_statistics_and_the_analyzer_cache_are_off_by_default_and_can_be_turned_on():
    default = transform()
    assert default.executor_spec.executor_class is transform_executor.Executor
    assert default.exec_properties["disable_statistics"] == 1
    # No analyzer cache output that nothing reads (TFX expresses the setting by its absence),
    # and no statistics outputs.
    assert "updated_analyzer_cache" not in default.outputs
    assert "pre_transform_stats" not in default.outputs

    stock = transform(disable_statistics=False, disable_analyzer_cache=False)
    assert stock.exec_properties["disable_statistics"] == 0
    assert {"updated_analyzer_cache", "pre_transform_stats"} <= set(stock.outputs)


def test_images_default_to_the_transform_executor_s_streamed_output():
    from pipeline import config as config_lib
    from pipeline import datasets

    images = datasets.user_images("/data/flowers", 96)
    tabular = datasets.user_csv("/data/csv", "y")
    assert config_lib.IMAGE_TRANSFORM_SHARDS == transform_executor.STREAMING_SHARDS
    assert config_lib.transform_shards_for(images, None, 8) == transform_executor.STREAMING_SHARDS
    assert config_lib.transform_shards_for(images, 3, 8) == 3
    assert config_lib.transform_shards_for(tabular, None, 8) == 8
    assert config_lib.learning_rate_for(images, None) == config_lib.IMAGE_LEARNING_RATE
    assert config_lib.learning_rate_for(tabular, None) == config_lib.TrainingConfig.learning_rate
    assert config_lib.learning_rate_for(images, 0.05) == 0.05


def test_regression_eval_config_thresholds_skill_over_the_training_mean(tmp_path):
    from pipeline import config as config_lib
    from pipeline import datasets

    dataset = datasets.user_csv(str(tmp_path), "mpg", task="regression")
    config = config_lib.local_config(
        dataset=dataset, output_root=str(tmp_path), min_regression_skill=0.25
    )
    eval_config = builder.eval_config(config)
    [spec] = eval_config.model_specs
    assert dict(spec.label_keys) == {"prediction": "mpg", "prediction_xf": "mpg_xf"}
    units, normalized = eval_config.metrics_specs
    assert [m.class_name for m in units.metrics] == [
        "ExampleCount",
        "MeanAbsoluteError",
        "RootMeanSquaredError",
    ]
    [skill] = normalized.metrics
    assert skill.module == "components.ml.metrics" and list(normalized.output_names) == [
        "prediction_xf"
    ]
    assert skill.threshold.value_threshold.lower_bound.value == 0.25
    assert skill.threshold.change_threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER
