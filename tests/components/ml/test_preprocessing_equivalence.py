"""The preprocessing_fn with a few analyzers in all computes what one analyzer per column computed
(benchmarks/per_column_preprocessing.py, the reference): the same transformed features, dtypes,
vocabulary files and vocabulary sizes, and the same values (integers identical, z-scores within
float32 rounding: the statistics are reduced per column of one stacked tensor instead of per
tensor), on penguins (classification), the diabetes data (regression) and a generated wide
table."""

from __future__ import annotations

import functools
import pathlib

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

from benchmarks import per_column_preprocessing
from components.ml import features, model, preprocessing, vocabularies
from components.training.settings import TrainingConfig
from pipeline import preflight
from pipeline.datasets import synthetic
from tests.components.conftest import analyze_and_transform, penguin_instances
from tests.components.ml.test_preprocessing import transform

# z-scores: float32 statistics reduced in another order (about 1e-7 relative).
Z_SCORE_TOLERANCE = 1e-5


def run(tmp_path, fn, raw, schema, custom_config):
    output = analyze_and_transform(
        tmp_path / fn.__module__,
        raw,
        dataset_metadata.DatasetMetadata(schema),
        functools.partial(fn, custom_config=custom_config),
    )
    # Asset paths go into the traced graph's collection, never the process's global graph (from
    # where every later trace in the process would copy them).
    assert not tf.compat.v1.get_default_graph().get_collection(
        tf.compat.v1.GraphKeys.ASSET_FILEPATHS
    )
    return output


def both(tmp_path, raw, schema, custom_config):
    """(one analyzer per column, the project's), each analyzed and transformed on `raw`."""
    return tuple(
        run(tmp_path, fn, raw, schema, custom_config)
        for fn in (per_column_preprocessing.preprocessing_fn, preprocessing.preprocessing_fn)
    )


def vocabulary_names(output) -> list[str]:
    spec = output.transformed_feature_spec()
    return [
        features.vocabulary_name(features.raw_key(name))
        for name, value in spec.items()
        if value.dtype.is_integer
    ]


def meta_graph(output):
    saved_model = saved_model_pb2.SavedModel()
    path = pathlib.Path(output.transform_savedmodel_dir) / "saved_model.pb"
    saved_model.ParseFromString(path.read_bytes())
    (graph,) = saved_model.meta_graphs
    return graph


def lookup_tables(output) -> int:
    """The lookup tables (resources) the transform graph's SavedModel holds."""
    return sum(node.HasField("resource") for node in meta_graph(output).object_graph_def.nodes)


def transform_ops(output) -> int:
    """The ops of the transform graph's function (the largest in its library: the others
    create, initialize, save and restore its tables)."""
    return max(len(function.node_def) for function in meta_graph(output).graph_def.library.function)


def asset_files(output) -> set[str]:
    """The files the transform graph's SavedModel lists as its assets (what a save of a model
    holding the graph copies), against the ones only found in its assets directory."""
    return {asset.filename for asset in meta_graph(output).asset_file_def}


def assert_same_outputs(reference, stacked, label_key):
    old, new = reference["output"], stacked["output"]
    assert new.transformed_feature_spec() == old.transformed_feature_spec()
    # The schema too: each vocabulary index's int_domain [0, size] (OOV included).
    old_schema = {feature.name: feature for feature in old.transformed_metadata.schema.feature}
    new_schema = {feature.name: feature for feature in new.transformed_metadata.schema.feature}
    assert new_schema == old_schema
    # One table for every text feature and one for a class label, against one per column (two
    # for a feature: tft's StaticVocabularyTable wraps a hash table).
    text = [name for name in vocabulary_names(old) if name != features.vocabulary_name(label_key)]
    classes = len(vocabulary_names(old)) - len(text)
    assert lookup_tables(old) == 2 * len(text) + classes
    assert lookup_tables(new) == min(len(text), 1) + classes
    for name in vocabulary_names(old):
        if name == features.vocabulary_name(label_key):
            name = features.LABEL_VOCABULARY
        assert new.vocabulary_by_name(name) == old.vocabulary_by_name(name), name
    # Every vocabulary file is an asset of the graph, as each was when it was its own
    # analyzer's output; beside them the lookup file of all text features and (where the
    # reference did not count the classes) the label's vocabulary with counts.
    assert asset_files(old) <= asset_files(new)
    label_counts = vocabularies.file_name(vocabularies.counts_name(features.LABEL_VOCABULARY))
    extra = asset_files(new) - asset_files(old) - {label_counts}
    assert extra == ({vocabularies.LOOKUP_FILE_NAME} if text else set())
    settings = TrainingConfig()
    old_inputs = model.ModelInputs.of(old, label_key, settings)
    new_inputs = model.ModelInputs.of(new, label_key, settings)
    assert new_inputs.vocabulary_sizes == old_inputs.vocabulary_sizes
    assert new_inputs.class_names == old_inputs.class_names
    # The transform graphs on the raw rows, and a row with an unseen value everywhere.
    old_values, new_values = (
        transform(reference, reference["raw"]),
        transform(stacked, stacked["raw"]),
    )
    assert sorted(new_values) == sorted(old_values)
    for name, value in old_values.items():
        assert new_values[name].dtype == value.dtype, name
        if value.dtype.kind == "f":
            np.testing.assert_allclose(
                new_values[name], value, atol=Z_SCORE_TOLERANCE, err_msg=name
            )
        else:
            np.testing.assert_array_equal(new_values[name], value, err_msg=name)
    return old_inputs


def test_penguins_classification(tmp_path, transform_run, penguins_csv):
    raw = penguin_instances(penguins_csv)
    config = {features.LABEL_KEY_CONFIG: "species"}
    # transform_run: the project's preprocessing_fn on the same rows.
    stacked = transform_run
    reference = run(
        tmp_path, per_column_preprocessing.preprocessing_fn, raw, stacked["schema"], config
    )
    inputs = assert_same_outputs(reference, stacked, "species")
    assert inputs.vocabulary_sizes == {"island_xf": 4, "sex_xf": 4}  # 3 + OOV; 2 + missing + OOV
    unseen = dict(raw[0], island=[b"Atlantis"], sex=[b"?"])
    for outputs in (reference, stacked):
        out = transform(outputs, [unseen])
        assert (out["island_xf"][0], out["sex_xf"][0]) == (3, 3)


def test_diabetes_regression(tmp_path, regression_transform_run):
    stacked, label = regression_transform_run, regression_transform_run["label"]
    schema = schema_utils.schema_from_feature_spec(stacked["output"].raw_feature_spec())
    config = {features.LABEL_KEY_CONFIG: label, features.TASK_CONFIG: "regression"}
    reference = run(
        tmp_path, per_column_preprocessing.preprocessing_fn, stacked["raw"], schema, config
    )
    assert_same_outputs(reference, stacked, label)
    assert features.missing_indicator_name(label) not in transform(stacked, stacked["raw"][:1])


def wide_rows(rows: int, columns: int) -> list[dict]:
    table = synthetic.wide_table(rows, columns, seed=3).to_pylist()
    return [
        {
            key: [] if value is None else [value.encode() if isinstance(value, str) else value]
            for key, value in row.items()
        }
        for row in table
    ]


@pytest.mark.slow  # two analyze + transform runs of a 24-column table
def test_wide_table(tmp_path):
    columns = 24
    schema_path = tmp_path / "schema.pbtxt"
    schema_path.write_text(synthetic.wide_schema(columns))
    schema = preflight.load_schema(str(schema_path))
    raw = wide_rows(300, columns)
    config = {features.LABEL_KEY_CONFIG: synthetic.SYNTH_LABEL_KEY}
    reference, stacked = both(tmp_path, raw, schema, config)
    inputs = assert_same_outputs(reference, stacked, synthetic.SYNTH_LABEL_KEY)
    # What every trace, save and load of the transform graph handles: the inputs and outputs
    # (one identity each) and a few ops per column kind, not a densify, a table or a z-score per
    # column.
    assert transform_ops(stacked["output"]) * 2 < transform_ops(reference["output"])
    text, numeric = synthetic.wide_columns(columns)
    assert inputs.vocabulary_sizes == {
        **{features.transformed_name(k): synthetic.WIDE_TEXT_VALUES + 1 for k in text},
        "t_001_xf": synthetic.WIDE_TEXT_VALUES + 2,  # __missing__ too
    }
    spec = schema_utils.schema_as_feature_spec(schema).feature_spec
    assert len(inputs.feature_spec) == len(text) + 2 * len(numeric)  # z-scores + indicators
    assert set(spec) == {*text, *numeric, synthetic.SYNTH_LABEL_KEY}


@pytest.mark.parametrize("columns", [3])
def test_smallest_wide_table_has_one_column_of_each_kind(columns):
    text, numeric = synthetic.wide_columns(columns)
    assert (len(text), len(numeric)) == (1, 2)
    with pytest.raises(ValueError, match="at least 2"):
        synthetic.wide_columns(1)
