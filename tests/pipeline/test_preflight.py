from __future__ import annotations

import pytest

from pipeline import datasets, preflight
from pipeline.config import DatasetConfig


def dataset(data_root, label="species", schema_path=None):
    return DatasetConfig(name="t", data_root=data_root, label_key=label, schema_path=schema_path)


def test_penguins_pass_with_schema_types():
    facts = preflight.check_dataset(datasets.penguins())
    assert [f.rsplit("/", 1)[-1] for f in facts["files"]] == ["penguins.csv"]
    assert facts["columns"][0] == "species"
    assert facts["column_types"]["bill_length_mm"] == "float"
    assert list(facts["column_types"]) == facts["columns"]  # file order


def test_missing_directory(tmp_path):
    missing = r"data directory .*nope does not exist \(--data\)"
    with pytest.raises(preflight.InputError, match=missing):
        preflight.check_dataset(dataset(str(tmp_path / "nope")))


def test_directory_without_csv_files(write_csv):
    write_csv("notes.txt", "hello")
    with pytest.raises(preflight.InputError, match=r"no files match '\*\.csv'"):
        preflight.check_dataset(dataset(write_csv.dir))


def test_missing_label_names_file_and_column(write_csv):
    path = write_csv("a.csv", "x,y\n1,2\n")
    with pytest.raises(preflight.InputError) as error:
        preflight.check_dataset(dataset(write_csv.dir, label="species"))
    assert "label column 'species' (--label)" in str(error.value)
    assert path in str(error.value)


def test_files_with_different_headers(write_csv):
    write_csv("a.csv", "x,species\n1,a\n")
    second = write_csv("b.csv", "x,z,species\n1,2,a\n")
    with pytest.raises(preflight.InputError, match=rf"{second}: columns \['x', 'z', 'species'\]"):
        preflight.check_dataset(dataset(write_csv.dir))


def test_columns_not_matching_the_schema(write_csv, penguins_schema_path):
    path = write_csv("a.csv", "species,island,bill_length_mm,weight\nAdelie,Dream,1.0,3\n")
    with pytest.raises(preflight.InputError) as error:
        preflight.check_dataset(dataset(write_csv.dir, schema_path=penguins_schema_path))
    message = str(error.value)
    assert path in message
    assert (
        "missing column(s) ['bill_depth_mm', 'flipper_length_mm', 'body_mass_g', 'sex', "
        "'year']" in message
    )
    assert "column(s) ['weight'] not in the schema" in message


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "the file is empty"),
        (b"\xff\xfe,x\n1,2\n", "header row is not UTF-8"),
        (b"a,a,species\n1,2,x\n", r"duplicate column name\(s\) \['a'\]"),
        (b"a,,species\n1,2,x\n", "empty column name"),
    ],
)
def test_unusable_files_name_the_file(write_csv, content, message):
    path = write_csv("bad.csv", content)
    with pytest.raises(preflight.InputError, match=message) as error:
        preflight.check_dataset(dataset(write_csv.dir))
    assert str(error.value).startswith(path)


def test_malformed_schema_file(tmp_path, write_csv):
    write_csv("a.csv", "x,species\n1,a\n")
    schema = tmp_path / "schema.pbtxt"
    schema.write_text("feature { name: \n")
    with pytest.raises(preflight.InputError, match=r"schema .*schema\.pbtxt: not a readable"):
        preflight.check_dataset(dataset(write_csv.dir, schema_path=str(schema)))


def test_image_folders_with_a_schema_lacking_the_image_features(tmp_path):
    from pipeline import image_data

    root = image_data.write_synthetic(str(tmp_path / "jpeg"), 4, 16, 2, seed=3)
    digits = datasets.user_images(root, 32, schema_path=datasets.curated_schema_path("digits"))
    facts = preflight.check_images(digits)
    assert len(facts["files"]) == 4 and len(facts["classes"]) == 2
    csv_schema = datasets.user_images(root, 32, schema_path=datasets.penguins().schema_path)
    lacking = r"lacks the image feature\(s\) \['class_name', 'image'\] \(--schema\)"
    with pytest.raises(preflight.InputError, match=lacking):
        preflight.check_images(csv_schema)
