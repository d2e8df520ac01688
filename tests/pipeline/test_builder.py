"""The pipeline builder's Transform: TFX's Transform with our executor and two defaults off."""

from __future__ import annotations

from tfx.types import channel, standard_artifacts

from components.transform import executor as transform_executor
from pipeline import builder


def transform(**kwargs):
    return builder.ShardedTransform(
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
