from __future__ import annotations

import pytest

from pipeline import datasets, preflight
from pipeline.config import DatasetConfig


def dataset(data_root, label="species", schema_path=None):
    return DatasetConfig(name="t", data_root=data_root, label_key=label, schema_path=schema_path)


def test_penguins_pass_with_schema_types():
    facts = preflight.check_dataset(datasets.penguins())
    assert [f.rsplit("/", 1)[-1] for f in facts.files] == ["penguins.csv"]
    assert facts.columns[0] == "species"
    assert dict(facts.column_types)["bill_length_mm"] == "float"
    assert [name for name, _ in facts.column_types] == list(facts.columns)  # file order


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
    from pipeline.datasets import images as image_data

    root = image_data.write_synthetic(str(tmp_path / "jpeg"), 4, 16, 2, seed=3)
    digits = datasets.user_images(root, 32, schema_path=datasets.curated_schema_path("digits"))
    facts = preflight.check_images(digits)
    assert len(facts.files) == 4 and len(facts.classes) == 2
    csv_schema = datasets.user_images(root, 32, schema_path=datasets.penguins().schema_path)
    lacking = r"lacks the image feature\(s\) \['class_name', 'image'\] \(--schema\)"
    with pytest.raises(preflight.InputError, match=lacking):
        preflight.check_images(csv_schema)


# --- issue 19: tasks, label checks, column roles, delimiters ---------------------------------


def csv_dataset(data_root, label="y", task="auto", **fields):
    return DatasetConfig(name="t", data_root=data_root, label_key=label, task=task, **fields)


def rows(header: str, values, sep=","):
    return header + "\n" + "".join(sep.join(map(str, row)) + "\n" for row in values)


@pytest.mark.parametrize(
    "labels, task",
    [
        (["a", "b", "a", "c"], "classification"),  # strings
        ([0, 1, 1, 0], "classification"),  # integer-coded classes
        ([3, 5, 4, 9, 7, 6, 8, 3], "classification"),  # a few integers (ratings)
        ([18.0, 15.5, 36.1, 24.0], "regression"),  # miles per gallon
        (list(range(100, 160, 4)), "regression"),  # many distinct integers
    ],
)
def test_auto_task_from_the_label_values(write_csv, labels, task):
    write_csv("a.csv", rows("x,y", [(i, label) for i, label in enumerate(labels)]))
    assert preflight.check_dataset(csv_dataset(write_csv.dir)).task == task


def test_forced_task_is_kept_and_text_cannot_be_regressed(write_csv):
    write_csv("a.csv", rows("x,y", [(1, 0), (2, 1), (3, 1)]))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir, task="regression"))
    assert facts.task == "regression"
    write_csv("a.csv", rows("x,y", [(1, "a"), (2, "b")]))
    with pytest.raises(preflight.InputError, match=r"holds text \('a'\).*--task classification"):
        preflight.check_dataset(csv_dataset(write_csv.dir, task="regression"))


@pytest.mark.parametrize(
    "text, message",
    [
        (rows("x,y", [(1, "a"), (2, "a"), (3, "a")]), r"one distinct value \('a'\) in 3 row"),
        (rows("x,y", [(1, ""), (2, "NA")]), r"label column 'y' \(--label\) has no values"),
        ("x,y\n", r"has a header row but no data rows"),
        (rows("y", [("a",), ("b",)]), r"no feature columns to predict 'y' from"),
    ],
)
def test_label_and_shape_checks_name_the_file_and_what_to_do(write_csv, text, message):
    path = write_csv("a.csv", text)
    with pytest.raises(preflight.InputError, match=message) as error:
        preflight.check_dataset(csv_dataset(write_csv.dir))
    assert path in str(error.value) and "\n" not in str(error.value)


def test_constant_regression_target_is_refused(write_csv):
    write_csv("a.csv", rows("x,y", [(1, 2.5), (2, 2.5)]))
    with pytest.raises(preflight.InputError, match="nothing to regress"):
        preflight.check_dataset(csv_dataset(write_csv.dir, task="regression"))


def test_rows_without_label_are_counted(write_csv):
    write_csv("a.csv", rows("x,y", [(1, "a"), (2, ""), (3, "b")]))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir))
    assert (facts.rows, facts.rows_without_label) == (3, 1)


def test_data_flag_given_a_file_says_to_pass_the_directory(write_csv):
    path = write_csv("a.csv", rows("x,y", [(1, "a")]))
    with pytest.raises(preflight.InputError) as error:
        preflight.check_dataset(csv_dataset(path))
    message = str(error.value)
    assert message.startswith("--data takes the directory") and f"--data {write_csv.dir}" in message


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_delimiter_is_sniffed(write_csv, sep):
    write_csv("a.csv", rows(sep.join(["x", "note", "y"]), [(1, "p q", "a"), (2, "r", "b")], sep))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir))
    assert facts.delimiter == sep and facts.columns == ("x", "note", "y")


def test_forced_delimiter_that_leaves_one_column_gets_a_hint(write_csv):
    write_csv("a.csv", rows("x;y", [(1, "a"), (2, "b")], ";"))
    with pytest.raises(preflight.InputError, match=r"containing semicolons: pass --delimiter ';'"):
        preflight.check_dataset(csv_dataset(write_csv.dir), delimiter=",")


def test_near_unique_strings_are_left_out_unless_kept(write_csv):
    values = [(f"2024-01-{i:02d}", f"p{i}", i % 3, "ab"[i % 2]) for i in range(1, 31)]
    write_csv("a.csv", rows("date,name,x,y", values))
    # A date is read as a timestamp (numbers), not taken for an identifier.
    facts = preflight.check_dataset(csv_dataset(write_csv.dir))
    assert facts.excluded_columns == ("name",) and facts.timestamps == ("date",)
    # Kept as text, the near-unique dates are an identifier again.
    as_text = preflight.check_dataset(csv_dataset(write_csv.dir), keep_text_columns=("date",))
    assert as_text.excluded_columns == ("date", "name") and as_text.timestamps == ()
    assert [identifier.name for identifier in as_text.identifiers] == ["date", "name"]
    kept = preflight.check_dataset(
        csv_dataset(write_csv.dir), keep_columns=("date",), keep_text_columns=("date",)
    )
    assert kept.excluded_columns == ("name",)
    excluded = preflight.check_dataset(
        csv_dataset(write_csv.dir, excluded_columns=("x",)), keep_columns=("name",)
    )
    assert excluded.excluded_columns == ("x",)


def test_excluded_column_must_exist(write_csv):
    write_csv("a.csv", rows("x,y", [(1, "a"), (2, "b")]))
    with pytest.raises(preflight.InputError, match=r"--exclude_columns names column\(s\) \['z'\]"):
        preflight.check_dataset(csv_dataset(write_csv.dir, excluded_columns=("z",)))


def test_curated_schema_marks_a_column_excluded(tmp_path, penguins_csv, penguins_schema_path):
    import shutil

    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(penguins_csv, data / "penguins.csv")
    schema = preflight.load_schema(penguins_schema_path)
    [year] = [f for f in schema.feature if f.name == "year"]
    year.lifecycle_stage = schema_pb2.DISABLED
    path = tmp_path / "schema.pbtxt"
    path.write_text(text_format.MessageToString(schema))
    facts = preflight.check_dataset(csv_dataset(str(data), "species", schema_path=str(path)))
    assert facts.excluded_columns == ("year",) and "year" not in dict(facts.column_types)
    # Deleting the column from the schema instead is refused, naming the flag that allows it.
    schema.feature.remove(year)
    path.write_text(text_format.MessageToString(schema))
    with pytest.raises(preflight.InputError, match=r"\['year'\] not in the schema .*--exclude"):
        preflight.check_dataset(csv_dataset(str(data), "species", schema_path=str(path)))
    facts = preflight.check_dataset(
        csv_dataset(str(data), "species", schema_path=str(path), excluded_columns=("year",))
    )
    assert facts.excluded_columns == ("year",)


def test_cluster_settings_come_from_the_flags_and_the_schema(tmp_path, penguins_schema_path):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = preflight.load_schema(penguins_schema_path)
    [year] = [f for f in schema.feature if f.name == "year"]
    year.lifecycle_stage = schema_pb2.DISABLED
    path = tmp_path / "schema.pbtxt"
    path.write_text(text_format.MessageToString(schema))
    settings = preflight.cluster_csv_settings("species", str(path), "auto", None, ("notes",))
    assert (settings["task"], settings["delimiter"]) == ("classification", ",")
    assert settings["excluded_columns"] == ("notes", "year")
    assert "year" not in dict(settings["column_types"])
    with pytest.raises(preflight.InputError, match="pass --task classification or --task"):
        preflight.cluster_csv_settings("body_mass_g", str(path), "auto", None)
    assert (
        preflight.cluster_csv_settings("body_mass_g", str(path), "regression", ";")["task"]
        == "regression"
    )
    with pytest.raises(preflight.InputError, match="cannot be regressed"):
        preflight.cluster_csv_settings("species", str(path), "regression", None)


# --- the typed pre-flight result on real data: the penguins CSV (palmerpenguins) -------------


def _penguin_lines(penguins_csv) -> list[bytes]:
    with open(penguins_csv, "rb") as handle:
        return handle.read().split(b"\n")


def _penguin_rows(penguins_csv) -> list[list[str]]:
    import csv

    with open(penguins_csv, newline="") as handle:
        return list(csv.reader(handle))


def test_penguins_facts_with_the_curated_schema(penguins_csv):
    import dataclasses
    import os

    facts = preflight.check_dataset(datasets.penguins())
    header, *data = _penguin_rows(penguins_csv)
    assert isinstance(facts, preflight.CsvFacts)
    assert facts.files == (penguins_csv,)
    assert facts.columns == tuple(header)
    assert facts.total_bytes == os.path.getsize(penguins_csv)
    assert facts.rows == len(data) and facts.rows > 300
    assert facts.rows_without_label == sum(1 for row in data if not row[0])
    # Every column in file order, typed by schemas/penguins/schema.pbtxt.
    assert [name for name, _ in facts.column_types] == header
    types = dict(facts.column_types)
    assert (types["species"], types["bill_length_mm"], types["flipper_length_mm"]) == (
        "string",
        "float",
        "int",
    )
    assert (facts.task, facts.delimiter) == ("classification", ",")
    assert facts.excluded_columns == () and facts.identifiers == ()
    assert facts.description == "1 CSV file(s)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.task = "regression"  # type: ignore[misc]
    resolved = preflight.resolved(datasets.penguins(), facts)
    assert resolved.column_types == facts.column_types and resolved.task == "classification"


def test_penguins_facts_inferred_with_blank_labels_an_identifier_and_semicolons(
    write_csv, penguins_csv
):
    header, *data = _penguin_rows(penguins_csv)
    blanked = {3, 50, 200}
    lines = [";".join(["penguin_id", *header])]
    for index, row in enumerate(data):
        label = "" if index in blanked else row[0]
        lines.append(";".join([f"p-{index:04d}", label, *row[1:]]))
    path = write_csv("penguins.csv", "\n".join(lines) + "\n")
    dataset = csv_dataset(write_csv.dir, "species", excluded_columns=("year",))
    facts = preflight.check_dataset(dataset)
    assert facts.files == (path,) and facts.columns == ("penguin_id", *header)
    assert (facts.rows, facts.rows_without_label) == (len(data), len(blanked))
    assert facts.column_types == ()  # ExampleGen infers them
    assert (facts.task, facts.delimiter) == ("classification", ";")
    assert facts.identifiers == (preflight.Identifier("penguin_id", len(data), len(data)),)
    assert facts.excluded_columns == ("year", "penguin_id")
    resolved = preflight.resolved(dataset, facts)
    assert (resolved.delimiter, resolved.excluded_columns) == (";", ("year", "penguin_id"))


def test_penguins_facts_leave_a_ragged_row_out_of_the_count(write_csv, penguins_csv):
    lines = _penguin_lines(penguins_csv)
    lines[5] += b",one too many"
    write_csv("penguins.csv", b"\n".join(lines))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir, "species"))
    assert facts.rows == len(_penguin_rows(penguins_csv)) - 2  # the header and the ragged row


def test_a_bad_penguins_row_names_the_file_and_the_line(write_csv, penguins_csv):
    lines = _penguin_lines(penguins_csv)
    assert lines[10].startswith(b"Adelie,Torgersen,")
    lines[10] = lines[10].replace(b"Torgersen", b"Torg\xffersen")
    path = write_csv("penguins.csv", b"\n".join(lines))
    with pytest.raises(preflight.InputError) as error:
        preflight.check_dataset(csv_dataset(write_csv.dir, "species"))
    assert str(error.value).startswith(f"{path}: line 11 is not UTF-8 text")


def test_a_renamed_penguins_column_names_the_file_and_both_columns(
    write_csv, penguins_csv, penguins_schema_path
):
    lines = _penguin_lines(penguins_csv)
    lines[0] = lines[0].replace(b"bill_length_mm", b"bill_len")
    path = write_csv("penguins.csv", b"\n".join(lines))
    dataset = csv_dataset(write_csv.dir, "species", schema_path=penguins_schema_path)
    with pytest.raises(preflight.InputError) as error:
        preflight.check_dataset(dataset)
    message = str(error.value)
    assert message.startswith(f"{path}: does not match schema {penguins_schema_path}")
    assert "missing column(s) ['bill_length_mm']" in message
    assert "column(s) ['bill_len'] not in the schema" in message


def test_image_folder_facts(tmp_path):
    import os

    from pipeline.datasets import images as image_data

    root = image_data.write_synthetic(str(tmp_path / "jpeg"), 6, 16, 3, seed=1)
    facts = preflight.check_images(datasets.user_images(root, 32))
    assert isinstance(facts, preflight.ImageFolderFacts)
    assert facts.classes == ("class_00", "class_01", "class_02")
    on_disk = sorted(
        os.path.join(root, name, file)
        for name in facts.classes
        for file in os.listdir(os.path.join(root, name))
    )
    assert sorted(facts.files) == on_disk and len(on_disk) == 6
    assert facts.total_bytes == sum(os.path.getsize(path) for path in facts.files) > 0
    assert facts.description == "6 image file(s) in 3 class folder(s)"
    dataset = datasets.user_images(root, 32)
    assert preflight.resolved(dataset, facts).column_types == ()


def test_row_numbers_are_left_out_unless_kept(write_csv):
    # A shuffled 1..30 row index; a count column of distinct but gapped integers is a feature,
    # as is an index with a gap filled twice.
    order = [(i * 7) % 30 + 1 for i in range(30)]
    values = [(order[i], i * 3, i % 5, "ab"[i % 2]) for i in range(30)]
    write_csv("a.csv", rows("row,count,x,y", values))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir))
    assert facts.identifiers == (preflight.Identifier("row", 30, 30, preflight.ROW_NUMBERS),)
    assert facts.excluded_columns == ("row",)
    kept = preflight.check_dataset(csv_dataset(write_csv.dir), keep_columns=("row",))
    assert kept.excluded_columns == () and kept.identifiers == ()


@pytest.mark.parametrize(
    "column",
    [
        [i + 1 for i in range(29)] + [29],  # one value twice: not all distinct
        [i + 1 for i in range(29)] + [""],  # a missing cell
        [i + 1 for i in range(18)],  # too few rows to tell
    ],
)
def test_columns_that_are_not_row_numbers_stay_features(write_csv, column):
    write_csv("a.csv", rows("row,y", [(value, "ab"[i % 2]) for i, value in enumerate(column)]))
    assert preflight.check_dataset(csv_dataset(write_csv.dir)).excluded_columns == ()


def test_a_curated_schema_keeps_a_row_number_column(write_csv, tmp_path):
    write_csv("a.csv", rows("row,y", [(i + 1, "ab"[i % 2]) for i in range(30)]))
    schema = tmp_path / "schema.pbtxt"
    schema.write_text('feature { name: "row" type: INT }\nfeature { name: "y" type: BYTES }\n')
    facts = preflight.check_dataset(csv_dataset(write_csv.dir, schema_path=str(schema)))
    assert facts.excluded_columns == () and facts.identifiers == ()


def test_rows_without_label_beyond_the_allowed_fraction_stop_before_any_component(write_csv):
    write_csv("a.csv", rows("x,y", [(i % 4, "" if i < 3 else "ab"[i % 2]) for i in range(20)]))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir))
    preflight.check_rows_without_label(facts, 0.15)  # 3 of 20 is within 15%
    with pytest.raises(preflight.InputError) as error:
        preflight.check_rows_without_label(facts, 0.1)
    message = str(error.value)
    assert message.startswith(f"3 of 20 row(s) (15.0%) in {write_csv.dir}/a.csv have no value")
    assert "--max_rejected_fraction 0.1" in message and "to at least 0.15" in message
    assert "\n" not in message


def test_timestamp_columns_are_found_by_parsing_every_value(write_csv):
    values = [
        (f"2013-{1 + i % 12:02d}-{1 + i % 28:02d} {i % 24:02d}:00:00", f"2013-01-{1 + i % 9:02d}",
         f"2013-02-{1 + i % 28:02d}", "ab"[i % 2])
        for i in range(40)
    ]  # fmt: skip
    # One impossible date (Feb 30) in the last row: that column stays text.
    values.append(("2013-03-01 05:00:00", "2013-01-02", "2013-02-30", "a"))
    write_csv("a.csv", rows("time_hour,day,bad,y", values))
    facts = preflight.check_dataset(csv_dataset(write_csv.dir))
    assert facts.timestamps == ("time_hour", "day")
    resolved = preflight.resolved(csv_dataset(write_csv.dir), facts)
    assert resolved.timestamp_columns == ("time_hour", "day")
    kept = preflight.check_dataset(csv_dataset(write_csv.dir), keep_text_columns=("day",))
    assert kept.timestamps == ("time_hour",)
    with pytest.raises(
        preflight.InputError, match=r"--keep_text_columns names column\(s\) \['when'\]"
    ):
        preflight.check_dataset(csv_dataset(write_csv.dir), keep_text_columns=("when",))
