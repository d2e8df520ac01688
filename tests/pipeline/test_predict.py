"""pipeline.predict's CSV rows -> tf.Examples: missing cells as ExampleGen reads them, and a row
without a value in a column the model requires refused with the column's name."""

from __future__ import annotations

import pytest
import tensorflow as tf

from pipeline import predict
from pipeline.config import DatasetConfig

TYPES = {"island": "string", "bill_length_mm": "float", "year": "int"}
NULLS = set(DatasetConfig.null_values)


def features_of(serialized: bytes) -> dict:
    example = tf.train.Example.FromString(serialized)
    return {
        name: getattr(feature, feature.WhichOneof("kind")).value
        for name, feature in example.features.feature.items()
    }


def test_empty_and_null_cells_are_missing_as_example_gen_reads_them():
    row = {"island": "", "bill_length_mm": "NA", "year": " 2007 ", "species": "Adelie"}
    assert features_of(predict._example(row, TYPES, NULLS)) == {"year": [2007]}


def test_a_required_column_without_a_value_names_the_column():
    row = {"island": "Dream", "bill_length_mm": "40.1", "year": ""}
    with pytest.raises(ValueError, match=r"column 'year': no value, and the model requires one"):
        predict._example(row, TYPES, NULLS, {"island", "year"})
    assert features_of(predict._example(dict(row, year="2008"), TYPES, NULLS, {"year"})) == {
        "island": [b"Dream"],
        "bill_length_mm": [pytest.approx(40.1)],
        "year": [2008],
    }


class _UsersModel(tf.Module):
    """A model as a user's run_fn exports it (TFX's penguin module's shape): serving_default
    parses tf.Examples with its own feature spec and returns logits under its own name."""

    SPEC = {
        "bill_length_mm": tf.io.FixedLenFeature([1], tf.float32),
        "island": tf.io.VarLenFeature(tf.string),
        "year": tf.io.FixedLenFeature([1], tf.int64, default_value=[2007]),
    }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(self, examples):
        parsed = tf.io.parse_example(examples, self.SPEC)
        length = parsed["bill_length_mm"]
        year = tf.cast(parsed["year"], tf.float32) - 2000.0
        return {"outputs": tf.concat([length, year], axis=1)}


@pytest.fixture(scope="module")
def users_model(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("users-model") / "1")
    model = _UsersModel()
    tf.saved_model.save(model, folder, signatures={"serving_default": model.serve})
    return folder


def test_the_columns_a_model_reads_come_from_its_serving_signature(users_model):
    signature = tf.saved_model.load(users_model).signatures["serving_default"]
    assert predict.serving_features(signature) == {
        "bill_length_mm": ("float", True),  # dense, no default: every row needs it
        "island": ("string", False),
        "year": ("int", False),  # dense with a default
    }
    description = predict.model_description(users_model, signature)
    assert description["task"] == "" and description["required"] == ["bill_length_mm"]


def test_a_users_model_predicts_csv_rows_and_prints_its_outputs(users_model, tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text(
        "species,island,bill_length_mm,year\n"
        "Adelie,Dream,39.5,2008\n"
        "Gentoo,,47.5,\n"  # island missing (optional), year missing (its default)
        "Adelie,Biscoe,,2009\n"  # the required column is empty
    )
    results = list(predict.predict_csv(users_model, str(rows)))
    assert results[0] == (4, None, results[0][2])
    assert "column 'bill_length_mm': no value, and the model requires one" in results[0][2]
    assert results[1:] == [(2, "outputs=[39.5, 8]", None), (3, "outputs=[47.5, 7]", None)]


def test_a_model_whose_signature_takes_no_examples_is_refused_by_name(tmp_path):
    class Raw(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            return {"y": x}

    model = Raw()
    tf.saved_model.save(model, str(tmp_path), signatures={"serving_default": model.serve})
    signature = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    with pytest.raises(ValueError, match=r"takes \['x'\], not serialized tf.Examples"):
        predict.serving_features(signature)
