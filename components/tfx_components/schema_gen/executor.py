"""SchemaGen whose schema keeps every column ExampleGen wrote as a feature.

TFX's SchemaGen infers the schema from the first split's statistics (train) and updates it with
each further split's (eval). A column with values in some split but none in another, one with a
value in 1 of 15,002 rows for instance (`pickup_census_tract` in TFX's own chicago taxi data),
fails the update: TFDV's fix for a feature present in fewer rows than its inferred
`presence.min_count` is `lifecycle_stage: DEPRECATED`, and Transform then gives no module that
column, with nothing said. Here such a feature is inferred again from the statistics of the
splits that hold its values (its type and domain from all of them), made optional (min_count 0,
no fixed shape: some rows lack it) and active; each one is logged and recorded on the schema
artifact (RESTORED_PROPERTY). Shape inference (`infer_feature_shape`) is TFX's: a feature
present once in every row of every split is fixed-shape (a dense tensor in Transform), any other
is variable-length (a SparseTensor).
"""

from __future__ import annotations

import os
from typing import Any

from absl import logging
from tensorflow_metadata.proto.v0 import schema_pb2, statistics_pb2
from tfx.components.schema_gen import component as tfx_component
from tfx.components.schema_gen import executor as tfx_executor
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, json_utils

# Custom property of the Schema artifact: the features restored (comma-separated, sorted).
RESTORED_PROPERTY = "restored_features"


def _feature_stats(
    statistics: statistics_pb2.DatasetFeatureStatisticsList, name: str
) -> statistics_pb2.FeatureNameStatistics | None:
    for dataset in statistics.datasets:
        for feature in dataset.features:
            if feature.name == name or list(feature.path.step) == [name]:
                return feature
    return None


def _values_in(feature: statistics_pb2.FeatureNameStatistics) -> int:
    """Rows of the split where the feature has a value."""
    kind = feature.WhichOneof("stats")
    if kind is None:
        return 0
    return getattr(feature, kind).common_stats.num_non_missing


def _only(
    statistics: statistics_pb2.DatasetFeatureStatisticsList,
    feature: statistics_pb2.FeatureNameStatistics,
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The split's statistics with this one feature in them."""
    single = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = single.datasets.add()
    dataset.CopyFrom(statistics.datasets[0])
    del dataset.features[:]
    dataset.features.add().CopyFrom(feature)
    return single


def _deprecated(feature: schema_pb2.Feature) -> bool:
    return feature.lifecycle_stage == schema_pb2.DEPRECATED or feature.deprecated


def restore_deprecated_features(
    schema: schema_pb2.Schema,
    statistics_by_split: dict[str, statistics_pb2.DatasetFeatureStatisticsList],
) -> list[str]:
    """Makes every feature the inference deprecated, and that has values in some split, an
    active optional feature typed from those splits' values; returns their names, sorted.

    (TFDV infers a feature's presence.min_count from the first split that has it, then
    deprecates it in a split with fewer rows holding it: with statistics in split order, a
    feature with values in eval only, or in train only, ends deprecated.)"""
    import tensorflow_data_validation as tfdv

    restored = []
    for index, feature in enumerate(list(schema.feature)):
        if not _deprecated(feature):
            continue
        with_values = [
            (statistics, stats)
            for statistics in statistics_by_split.values()
            if (stats := _feature_stats(statistics, feature.name)) is not None
            and _values_in(stats) > 0
        ]
        if not with_values:
            continue  # no value in any split: nothing to type it by; left as inferred
        inferred = tfdv.infer_schema(_only(*with_values[0]), infer_feature_shape=False)
        for statistics, stats in with_values[1:]:
            inferred = tfdv.update_schema(inferred, _only(statistics, stats), False)
        (new,) = inferred.feature
        new.ClearField("lifecycle_stage")
        new.ClearField("deprecated")
        new.presence.Clear()
        new.presence.min_count = 0
        new.ClearField("shape")
        schema.feature[index].CopyFrom(new)
        old_domain = [d for d in schema.string_domain if d.name == feature.domain]
        for domain in old_domain:
            schema.string_domain.remove(domain)
        if new.domain:
            schema.string_domain.extend(d for d in inferred.string_domain if d.name == new.domain)
        restored.append(feature.name)
    return sorted(restored)


class Executor(tfx_executor.Executor):
    """TFX's SchemaGen executor, then restore_deprecated_features over the same splits."""

    def Do(self, input_dict, output_dict, exec_properties: dict[str, Any]) -> None:  # noqa: N802
        super().Do(input_dict, output_dict, exec_properties)
        excluded = (
            json_utils.loads(
                exec_properties.get(standard_component_specs.EXCLUDE_SPLITS_KEY, "null")
            )
            or []
        )
        stats_artifact = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.STATISTICS_KEY]
        )
        statistics_by_split = {
            split: stats_artifact_utils.load_statistics(stats_artifact, split).proto()
            for split in artifact_utils.decode_split_names(stats_artifact.split_names)
            if split not in excluded
        }
        schema_artifact = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.SCHEMA_KEY]
        )
        path = os.path.join(schema_artifact.uri, tfx_executor.DEFAULT_FILE_NAME)
        schema = io_utils.parse_pbtxt_file(path, schema_pb2.Schema())
        restored = restore_deprecated_features(schema, statistics_by_split)
        if restored:
            logging.warning(
                "SchemaGen: feature(s) %s have values in some split(s) only (TFDV deprecates "
                "them); kept as optional features typed from those values",
                restored,
            )
            io_utils.write_pbtxt_file(path, schema)
        schema_artifact.set_string_custom_property(RESTORED_PROPERTY, ",".join(restored))


class ColumnSchemaGen(tfx_component.SchemaGen):
    """TFX SchemaGen (same spec, parameters and artifact) that keeps every column a feature."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
