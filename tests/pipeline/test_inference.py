"""--infer_data's pre-flight check: the rows' columns against the training data's, the types the
rows' ExampleGen reads them with, the columns the model needs in every row; one line naming
the columns otherwise."""

from __future__ import annotations

import dataclasses

import pytest

from pipeline import datasets, inference, preflight


@pytest.fixture(scope="module")
def penguins():
    dataset = datasets.penguins()
    facts = preflight.check_dataset(dataset, features=True)
    return preflight.resolved(dataset, facts), facts


def test_rows_with_the_label_keep_it_as_text_and_need_the_fixed_shape_features(penguins, write_csv):
    dataset, facts = penguins
    path = write_csv(
        "rows.csv",
        "species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year\n"
        "Adelie,Dream,39.1,18.7,181,3750,male,2007\n",
    )
    rows = inference.check_infer_data(path.rsplit("/", 1)[0], dataset, facts)
    assert rows.columns[0] == "species" and rows.label_present
    types = dict(rows.column_types)
    assert types["species"] == "string"  # passed through, not read by the model
    assert types["bill_length_mm"] == "float" and types["year"] == "int"
    # The curated schema gives island and year a shape: serving's parse needs them.
    assert rows.required_columns == ("island", "year")


def test_inferred_schema_requires_the_columns_complete_in_training():
    dataset = dataclasses.replace(datasets.penguins(), schema_path=None)
    facts = preflight.check_dataset(dataset, features=True)
    # Inferred from all rows, as ExampleGen infers them.
    assert dict(facts.feature_types)["bill_length_mm"] == "float"
    # A value in every row: TFX's shape inference makes them fixed-shape (sex and the
    # measurements are missing in some rows).
    assert inference.required_features(dataset, facts) == ("island", "year")
    flat = dataclasses.replace(dataset, infer_feature_shape=False)
    assert inference.required_features(flat, facts) == ()


def test_mismatching_columns_are_one_line_naming_them(penguins, write_csv):
    dataset, facts = penguins
    path = write_csv("rows.csv", "island;bill_length_mm;colour\nDream;39.1;blue\n")
    with pytest.raises(preflight.InputError) as error:
        inference.check_infer_data(path.rsplit("/", 1)[0], dataset, facts)
    message = str(error.value)
    assert "\n" not in message
    assert "missing column(s) ['bill_depth_mm', 'flipper_length_mm', 'body_mass_g', 'sex', " in (
        message
    )
    assert "unexpected column(s) ['colour']" in message


def test_images_and_a_file_instead_of_a_directory_are_refused(penguins, write_csv):
    dataset, facts = penguins
    path = write_csv("rows.csv", "island\nDream\n")
    with pytest.raises(preflight.InputError, match="takes the directory"):
        inference.check_infer_data(path, dataset, facts)
    images = preflight.ImageFolderFacts(files=(), classes=(), total_bytes=0)
    with pytest.raises(preflight.InputError, match="for CSV data"):
        inference.check_infer_data(path, dataset, images)
