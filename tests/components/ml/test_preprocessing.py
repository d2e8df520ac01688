"""preprocessing_fn through a real tf.Transform analyze + transform (conftest.transform_run)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from components.ml import features
from tests.components.helpers import serialize

SPECIES = ["Adelie", "Chinstrap", "Gentoo"]


def transform(run, instances):
    parsed = tf.io.parse_example(
        tf.constant([serialize(i) for i in instances]), run["output"].raw_feature_spec()
    )
    return {k: v.numpy() for k, v in run["output"].transform_raw_features(parsed).items()}


def test_vocabularies_for_label_and_strings(transform_run):
    output = transform_run["output"]
    assert sorted(v.decode() for v in output.vocabulary_by_name(features.LABEL_VOCABULARY)) == (
        SPECIES
    )
    sex_vocabulary = {v.decode() for v in output.vocabulary_by_name("sex_vocabulary")}
    assert sex_vocabulary == {"female", "male", features.MISSING_TOKEN}
    assert output.vocabulary_size_by_name("island_vocabulary") == 3


def test_numeric_features_are_z_scored_and_missing_values_imputed(transform_run):
    raw = transform_run["raw"]
    out = transform(transform_run, raw)
    lengths = out[features.transformed_name("bill_length_mm")]
    assert lengths.shape == (len(raw),)
    assert abs(lengths.mean()) < 1e-5
    assert abs(lengths.std() - 1.0) < 0.05  # imputed rows sit at the mean, std slightly < 1
    missing = np.array([not row["bill_length_mm"] for row in raw])
    assert missing.sum() == 1  # row 3 of penguins.csv has no measurements
    indicator = out[features.missing_indicator_name("bill_length_mm")]
    assert indicator.tolist() == missing.astype(np.float32).tolist()
    # The imputed value is the training mean, which z-scores to ~0 (not the raw 0.0 default).
    raw_values = np.array([row["bill_length_mm"][0] for row in raw if row["bill_length_mm"]])
    zero_z = (0.0 - raw_values.mean()) / raw_values.std()
    assert abs(lengths[missing][0]) < 0.05 < abs(zero_z)


def test_label_and_string_columns_become_indices(transform_run):
    raw = transform_run["raw"]
    output = transform_run["output"]
    out = transform(transform_run, raw)
    label_vocab = [v.decode() for v in output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    decoded = [label_vocab[i] for i in out[features.transformed_name("species")]]
    assert decoded == [row["species"][0].decode() for row in raw]
    sex_vocab = [v.decode() for v in output.vocabulary_by_name("sex_vocabulary")]
    sex = out[features.transformed_name("sex")]
    for row, index in zip(raw, sex, strict=True):
        expected = row["sex"][0].decode() if row["sex"] else features.MISSING_TOKEN
        assert sex_vocab[index] == expected


def test_unseen_category_goes_to_the_oov_bucket(transform_run):
    row = dict(transform_run["raw"][0], island=[b"Atlantis"])
    out = transform(transform_run, [row])
    assert out[features.transformed_name("island")][0] == 3  # 3 islands, then the OOV bucket


def test_one_pass_statistics_equal_z_scoring_the_imputed_column(transform_run):
    """The z-score comes from one analysis pass (mean, variance, observed fraction); it must
    equal imputing the observed mean and z-scoring the imputed column with numpy."""
    raw = transform_run["raw"]
    out = transform(transform_run, raw)
    for key in ("bill_length_mm", "body_mass_g"):
        observed = np.array([row[key][0] for row in raw if row[key]], dtype=np.float64)
        imputed = np.array(
            [row[key][0] if row[key] else observed.mean() for row in raw], dtype=np.float64
        )
        expected = (imputed - imputed.mean()) / imputed.std()
        np.testing.assert_allclose(out[features.transformed_name(key)], expected, atol=1e-4)


def test_label_counts_of_the_analyzed_rows_give_balanced_class_weights(transform_run):
    from components.training import loop
    from components.training.settings import TrainingConfig

    output = transform_run["output"]
    names = [v.decode() for v in output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    seen = [row["species"][0].decode() for row in transform_run["raw"]]
    counts = loop.label_counts(output)
    assert counts == [seen.count(name) for name in names]
    assert counts == sorted(counts, reverse=True)  # index 0: the majority class
    weights = loop.class_weights(TrainingConfig(class_weight="balanced"), output)
    # scikit-learn's "balanced": rows / (classes x class rows); every class weighs the same.
    assert weights == pytest.approx([len(seen) / (len(names) * count) for count in counts])
    assert [w * c for w, c in zip(weights, counts, strict=True)] == pytest.approx(
        [len(seen) / len(names)] * len(names)
    )
    assert loop.class_weights(TrainingConfig(), output) is None


def test_stacked_columns_keep_each_value_in_its_column_and_refuse_a_second_value_in_a_row():
    from components.ml.preprocessing import stack_columns

    def one_per_row(rows: list[int], values: list[float]):
        """A nullable column of 3 rows, as parsed: values at (row, 0)."""
        return tf.SparseTensor([[row, 0] for row in rows], values, [3, 1])

    dense = tf.constant([1.0, 2.0, 3.0])
    missing_everywhere = tf.SparseTensor(
        tf.zeros([0, 2], tf.int64), tf.zeros([0], tf.float32), [3, 0]
    )
    values, present = stack_columns(
        [one_per_row([0, 2], [5.0, 6.0]), dense, missing_everywhere, one_per_row([1], [7.0])],
        tf.float32,
        0.0,
    )
    assert values.numpy().tolist() == [
        [5.0, 1.0, 0.0, 0.0],
        [0.0, 2.0, 0.0, 7.0],
        [6.0, 3.0, 0.0, 0.0],
    ]
    assert present.numpy().tolist() == [
        [True, True, False, False],
        [False, True, False, True],
        [True, True, False, False],
    ]
    two_in_a_row = tf.SparseTensor([[0, 0], [0, 1]], [1.0, 2.0], [3, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than one value in a row"):
        stack_columns([two_in_a_row, one_per_row([1], [7.0])], tf.float32, 0.0)


def _penguin_transform(tmp_path, penguins_csv, penguins_schema_path, edit_schema, edit_rows=None):
    """analyze + transform of the penguin rows (conftest.penguin_instances) under the curated
    schema as edit_schema(schema) leaves it."""
    import functools

    from tensorflow_transform.tf_metadata import dataset_metadata

    from components.ml import preprocessing
    from pipeline import preflight
    from tests.components.conftest import analyze_and_transform, penguin_instances

    schema = preflight.load_schema(penguins_schema_path)
    edit_schema(schema)
    raw = penguin_instances(penguins_csv)
    if edit_rows:
        raw = [edit_rows(row) for row in raw]
    fn = functools.partial(
        preprocessing.preprocessing_fn, custom_config={features.LABEL_KEY_CONFIG: "species"}
    )
    return analyze_and_transform(tmp_path, raw, dataset_metadata.DatasetMetadata(schema), fn)


def test_fixed_shape_and_variable_length_columns_give_the_same_features(
    tmp_path, penguins_csv, penguins_schema_path
):
    """SchemaGen's shape inference on (TFX's default: species, island and year, present in
    every row, are fixed-shape: dense tensors) or off (--no_infer_feature_shape: every column
    a SparseTensor): the same values, and a missing indicator only for a numeric column that
    may be missing (year's, all 0, without shapes)."""

    def without_shapes(schema):
        for feature in schema.feature:
            feature.ClearField("shape")
            if not feature.HasField("value_count"):
                feature.value_count.min = feature.value_count.max = 1

    shaped = _penguin_transform(
        tmp_path / "shaped", penguins_csv, penguins_schema_path, lambda schema: None
    )
    sparse = _penguin_transform(
        tmp_path / "sparse", penguins_csv, penguins_schema_path, without_shapes
    )
    raw_specs = [run["output"].raw_feature_spec() for run in (shaped, sparse)]
    assert isinstance(raw_specs[0]["year"], tf.io.FixedLenFeature)
    assert isinstance(raw_specs[1]["year"], tf.io.VarLenFeature)
    out_shaped, out_sparse = transform(shaped, shaped["raw"]), transform(sparse, sparse["raw"])
    year_missing = features.missing_indicator_name("year")
    assert set(out_sparse) - set(out_shaped) == {year_missing}
    assert out_sparse[year_missing].tolist() == [0.0] * len(shaped["raw"])
    # tf.Transform merges partial (count, mean, variance) accumulators in the order Beam's
    # bundles arrive, in the column's float32 (tensorflow_transform/analyzers.py, the mean and
    # variance combiner's merge), so two runs over the same rows may differ in the last bits of
    # the mean of year (about 2008, where one float32 step is 1.2e-4): z-scores of about 1
    # differed by 5.8e-6 in one run of the suite. A feature built differently differs by far more.
    for name, values in out_shaped.items():
        np.testing.assert_allclose(out_sparse[name], values, rtol=1e-6, atol=2e-5, err_msg=name)
    assert all(values.shape == (len(shaped["raw"]),) for values in out_shaped.values())


def test_a_numeric_column_without_values_in_the_analyzed_rows_stays_finite(
    tmp_path, penguins_csv, penguins_schema_path
):
    """A column the inferred schema keeps though the train split has none of its values
    (components.tfx_components.schema_gen): its statistics are 0 / 0, nothing scales its values
    (chicago taxi's census tract, 17031081500, swamped every other input): the feature is 0 in
    every row, never NaN, and the missing indicator says where it has a value."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    def with_rare(schema):
        rare = schema.feature.add(name="rare", type=schema_pb2.FLOAT)
        rare.presence.min_count = 0
        rare.value_count.min = rare.value_count.max = 1
        text = schema.feature.add(name="rare_text", type=schema_pb2.BYTES)
        text.presence.min_count = 0
        text.value_count.min = text.value_count.max = 1

    run = _penguin_transform(
        tmp_path,
        penguins_csv,
        penguins_schema_path,
        with_rare,
        lambda row: {**row, "rare": [], "rare_text": []},
    )
    rows = [dict(run["raw"][0], rare=[17031081500.0], rare_text=[b"x"]), run["raw"][1]]
    out = transform(run, rows)
    assert out[features.transformed_name("rare")].tolist() == [0.0, 0.0]
    assert out[features.missing_indicator_name("rare")].tolist() == [0.0, 1.0]
    # Unseen text: the out-of-vocabulary bucket after the one entry (the missing token).
    assert out[features.transformed_name("rare_text")].tolist() == [1, 0]
    assert all(np.isfinite(values).all() for values in out.values() if values.dtype.kind == "f")
