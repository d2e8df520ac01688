"""The inferred schema on real ExampleGen and StatisticsGen output: a column with a value in one
row, in the eval split or in the train split, is a feature typed from that value (TFX's
SchemaGen deprecates it), and shape inference on / off gives fixed-shape / variable-length
features."""

from __future__ import annotations

import pyarrow as pa
import pytest
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.schema_gen import executor as tfx_schema_executor
from tfx.components.statistics_gen import executor as statistics_executor
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils, standard_artifacts

from components.tfx_components.example_gen import csv_reader
from components.tfx_components.schema_gen import executor
from pipeline import preflight
from tests.components.helpers import IN_MEMORY, run_executor

SPLITS = ("train", "eval")
# run_executor's split: hash buckets 3 (train) and 1 (eval).
SPLIT_BUCKETS = (3, 1)
NULL_VALUES = ("", "NA")  # run_executor's


def _split_of(header: list[str], cells: list[str]) -> str:
    """The split ExampleGen puts a row in (the hash of its raw cells)."""
    table = pa.table(
        {
            name: pa.array([None if cell in NULL_VALUES else cell], pa.string())
            for name, cell in zip(header, cells, strict=True)
        }
    )
    buckets = csv_reader.hash_buckets(table, sum(SPLIT_BUCKETS))
    return SPLITS[int(csv_reader.split_of_buckets(buckets, SPLIT_BUCKETS)[0])]


@pytest.fixture(scope="module", params=["eval", "train"])
def statistics(request, tmp_path_factory, penguins_csv):
    """ExampleGen and StatisticsGen (TFX's executors) over the penguins plus two columns,
    `rare` (a number) and `rare_text`, each with a value in one row only, of the eval split (as
    chicago taxi's `pickup_census_tract`) or of the train split."""
    split = request.param
    tmp_path = tmp_path_factory.mktemp(f"schema_gen_{split}")
    with open(penguins_csv) as handle:
        lines = handle.read().splitlines()
    header = lines[0].split(",") + ["rare", "rare_text"]
    rows = [f"{line},," for line in lines[1:]]
    first = lines[1].split(",")
    rare = next(
        cells
        for index in range(100)
        if _split_of(header, cells := [*first, f"{3.5 + index}", "x"]) == split
    )
    rows.append(",".join(rare))
    data = tmp_path / "data"
    data.mkdir()
    (data / "birds.csv").write_text("\n".join([",".join(header), *rows]) + "\n")
    examples = run_executor(tmp_path, str(data), label_key="species")
    stats = standard_artifacts.ExampleStatistics()
    stats.uri = str(tmp_path / "statistics")
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=IN_MEMORY)
    statistics_executor.Executor(context).Do(
        {"examples": [examples]}, {"statistics": [stats]}, {"exclude_splits": "[]"}
    )
    by_split = {
        split: stats_artifact_utils.load_statistics(stats, split).proto() for split in SPLITS
    }
    rare_values = {
        split: [f for f in by_split[split].datasets[0].features if f.path.step == ["rare"]]
        for split in SPLITS
    }
    other = SPLITS[1 - SPLITS.index(split)]
    assert executor._values_in(rare_values[split][0]) == 1, f"the `rare` row is in {split}"
    assert not rare_values[other] or executor._values_in(rare_values[other][0]) == 0
    return stats, by_split, tmp_path, split


def infer_schema(statistics, infer_feature_shape: bool, executor_class=executor.Executor):
    """The executor's schema.pbtxt and its Schema artifact."""
    stats, _, tmp_path, _ = statistics
    schema = standard_artifacts.Schema()
    schema.uri = str(tmp_path / f"schema-{executor_class.__module__}-{infer_feature_shape}")
    executor_class().Do(
        {"statistics": [stats]},
        {"schema": [schema]},
        {"infer_feature_shape": int(infer_feature_shape), "exclude_splits": "[]"},
    )
    path = f"{schema.uri}/{tfx_schema_executor.DEFAULT_FILE_NAME}"
    return preflight.load_schema(path), schema


def features_of(schema) -> dict[str, schema_pb2.Feature]:
    return {feature.name: feature for feature in schema.feature}


def test_tfx_schema_gen_deprecates_a_column_with_values_in_one_split_only(statistics):
    """What this project's SchemaGen repairs: TFX's own executor on the same statistics. With
    the value in train, TFDV infers min_count 1 there and deprecates both columns in eval; with
    it in eval, train's empty column is inferred as BYTES and the number in eval deprecates
    it (the text column stays, its type right by chance)."""
    schema, _ = infer_schema(statistics, True, tfx_schema_executor.Executor)
    deprecated = sorted(
        f.name for f in schema.feature if f.lifecycle_stage == schema_pb2.DEPRECATED
    )
    assert deprecated == (["rare"] if statistics[3] == "eval" else ["rare", "rare_text"])


@pytest.mark.parametrize("infer_feature_shape", [True, False])
def test_a_column_with_values_in_one_split_only_is_a_feature_typed_from_them(
    statistics, infer_feature_shape
):
    schema, artifact = infer_schema(statistics, infer_feature_shape)
    found = features_of(schema)
    assert found["rare"].type == schema_pb2.FLOAT
    assert found["rare_text"].type == schema_pb2.BYTES
    for name in ("rare", "rare_text"):
        feature = found[name]
        assert feature.lifecycle_stage == schema_pb2.UNKNOWN_STAGE
        assert not feature.deprecated
        assert feature.presence.min_count == 0 and not feature.presence.HasField("min_fraction")
        assert not feature.HasField("shape"), "missing in most rows: variable-length"
    restored = artifact.get_string_custom_property(executor.RESTORED_PROPERTY)
    if statistics[3] == "train":
        domains = {domain.name: list(domain.value) for domain in schema.string_domain}
        assert domains[found["rare_text"].domain] == ["x"]
        assert restored == "rare,rare_text"
    else:
        assert restored == "rare"
    # Every CSV column is an active feature.
    assert {f.name for f in schema.feature if f.lifecycle_stage == schema_pb2.UNKNOWN_STAGE} == {
        "species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm",
        "body_mass_g", "sex", "year", "rare", "rare_text",
    }  # fmt: skip


@pytest.mark.parametrize("infer_feature_shape", [True, False])
def test_the_data_validates_against_the_schema_in_every_split(statistics, infer_feature_shape):
    """ExampleValidator's check (TFDV) finds nothing in either split: the restored features are
    optional, and the train split's lack of values is no anomaly."""
    schema, _ = infer_schema(statistics, infer_feature_shape)
    _, by_split, _, _ = statistics
    for split in SPLITS:
        anomalies = tfdv.validate_statistics(by_split[split], schema)
        assert dict(anomalies.anomaly_info) == {}, (split, anomalies)


def test_shape_inference_fixes_the_shape_of_columns_present_in_every_row_only(statistics):
    """TFX's default: species, island and year are in every row of both splits (fixed-shape,
    dense in Transform); the measurements and sex miss some rows (variable-length, sparse)."""
    schema, _ = infer_schema(statistics, True)
    shaped = {f.name: list(f.shape.dim) for f in schema.feature if f.HasField("shape")}
    assert sorted(shaped) == ["island", "species", "year"]
    assert all(len(dims) == 1 and dims[0].size == 1 for dims in shaped.values())


def test_without_shape_inference_every_feature_is_variable_length(statistics):
    schema, _ = infer_schema(statistics, False)
    assert [f.name for f in schema.feature if f.HasField("shape")] == []


def test_a_column_without_any_value_is_left_as_tfdv_infers_it():
    """No split has a value: nothing to type the feature by; it stays as the inference left
    it (an empty column is a BYTES feature TFDV does not deprecate)."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    schema = schema_pb2.Schema()
    schema.feature.add(name="empty", type=schema_pb2.BYTES, lifecycle_stage=schema_pb2.DEPRECATED)
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = stats.datasets.add(num_examples=3)
    dataset.features.add(name="empty", type=statistics_pb2.FeatureNameStatistics.STRING)
    assert executor.restore_deprecated_features(schema, {"train": stats, "eval": stats}) == []
    assert schema.feature[0].lifecycle_stage == schema_pb2.DEPRECATED


def test_split_names_are_those_of_the_statistics(statistics):
    stats, _, _, _ = statistics
    assert artifact_utils.decode_split_names(stats.split_names) == list(SPLITS)
