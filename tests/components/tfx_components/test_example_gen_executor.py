"""The sharded CSV ExampleGen executor, run directly through its Beam pipeline."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from components.tfx_components.example_gen import executor
from tests.components.helpers import (
    IN_MEMORY,
    MULTI_PROCESSING,
    read_split,
    run_executor,
    shards_of,
)

GOOD_ROWS = "".join(f"{i},{i * 0.5},{'ab'[i % 2]}\n" for i in range(40))


@pytest.mark.parametrize("beam_args", [IN_MEMORY, MULTI_PROCESSING], ids=["in_memory", "multi"])
def test_counts_shards_and_inferred_types(tmp_path, write_csv, beam_args):
    write_csv("a.csv", "id,x,c\n" + GOOD_ROWS)
    write_csv("b.csv", "id,x,c\n40,NA,a\n41,1.5,NA\n")
    examples = run_executor(tmp_path, write_csv.dir, num_shards=3, beam_args=beam_args)

    train_files, train = read_split(examples, "train")
    eval_files, evaluation = read_split(examples, "eval")
    # Three shards per split: one file each in-process, one part per worker bundle otherwise.
    for files in (train_files, eval_files):
        assert shards_of(files) == [f"data_tfrecord-{i:05d}-of-00003" for i in range(3)]
        assert len(files) == 3 if beam_args == IN_MEMORY else len(files) >= 3
    assert len(train) + len(evaluation) == 42
    counts = json.loads(examples.get_string_custom_property("split_example_counts"))
    assert counts == {"train": len(train), "eval": len(evaluation)}
    assert examples.get_int_custom_property("num_rows_read") == 42
    assert examples.get_int_custom_property("num_rows_rejected") == 0
    assert 0 < len(evaluation) < len(train)
    ids = sorted(e.features.feature["id"].int64_list.value[0] for e in train + evaluation)
    assert ids == list(range(42))
    by_id = {e.features.feature["id"].int64_list.value[0]: e for e in train + evaluation}
    assert by_id[40].features.feature["x"].WhichOneof("kind") is None  # "NA" is missing
    assert list(by_id[41].features.feature["x"].float_list.value) == [1.5]


def test_split_is_deterministic(tmp_path, write_csv):
    write_csv("a.csv", "id,x,c\n" + GOOD_ROWS)

    def eval_ids(run):
        _, evaluation = read_split(run_executor(tmp_path / run, write_csv.dir), "eval")
        return sorted(e.features.feature["id"].int64_list.value[0] for e in evaluation)

    assert eval_ids("first") == eval_ids("second")


def test_rejected_rows_fail_the_run_and_are_listed(tmp_path, write_csv):
    write_csv("a.csv", "id,x,c\n" + GOOD_ROWS + "99,1.0\n")
    bad = write_csv("b.csv", "id,x,c\n1,oops,a\n2,2.0,b\n")
    with pytest.raises(executor.TooManyRejectedRowsError) as error:
        run_executor(
            tmp_path, write_csv.dir, column_types={"id": "int", "x": "float", "c": "string"}
        )
    message = str(error.value)
    assert "2 of 43 CSV row(s) rejected" in message
    assert f"{bad}:2: column 'x': 'oops' is not a float" in message
    assert "a.csv:42: expected 3 fields, found 2" in message


def test_the_rejected_rows_listing_survives_the_failed_run(tmp_path, write_csv):
    write_csv("a.csv", "id,x,c\n" + GOOD_ROWS + "99,1.0\n")
    with pytest.raises(executor.TooManyRejectedRowsError) as error:
        run_executor(tmp_path, write_csv.dir)
    # TFX removes a failed execution's output folder; the listing is beside it, not inside.
    shutil.rmtree(tmp_path / "examples")
    listing = os.path.join(f"{tmp_path / 'examples'}-{executor.REJECTED_DIR}", "rejected.jsonl")
    assert listing in str(error.value)
    assert "--max_rejected_fraction" in str(error.value)
    rejected = executor.read_rejected_rows(listing)
    assert [(os.path.basename(r.file), r.line) for r in rejected] == [("a.csv", 42)]


def test_rejected_rows_within_the_allowed_fraction_are_recorded(tmp_path, write_csv):
    write_csv("a.csv", "id,x,c\n" + GOOD_ROWS + "99,1.0\n")
    examples = run_executor(tmp_path, write_csv.dir, max_rejected=0.1)
    _, train = read_split(examples, "train")
    _, evaluation = read_split(examples, "eval")
    assert len(train) + len(evaluation) == 40
    assert examples.get_int_custom_property("num_rows_read") == 41
    assert examples.get_int_custom_property("num_rows_rejected") == 1
    rejected = executor.read_rejected_rows(examples.get_string_custom_property("rejected_rows_uri"))
    assert [(os.path.basename(r.file), r.line) for r in rejected] == [("a.csv", 42)]


def test_rows_without_label_are_rejected_and_listed(tmp_path, write_csv):
    path = write_csv("a.csv", "id,x,c\n" + GOOD_ROWS + "98,1.0,\n99,2.0,NA\n")
    with pytest.raises(executor.TooManyRejectedRowsError) as error:
        run_executor(tmp_path / "strict", write_csv.dir, label_key="c")
    message = str(error.value)
    assert "2 of 42 CSV row(s) rejected" in message and "--max_rejected_fraction" in message
    assert f"{path}:42: column 'c' (the label) is empty" in message
    examples = run_executor(tmp_path / "lenient", write_csv.dir, label_key="c", max_rejected=0.1)
    _, train = read_split(examples, "train")
    _, evaluation = read_split(examples, "eval")
    assert len(train) + len(evaluation) == 40
    assert all(e.features.feature["c"].bytes_list.value for e in train + evaluation)


def test_semicolons_and_excluded_columns(tmp_path, write_csv):
    write_csv("a.csv", "id;note;x;c\n" + "".join(f"{i};n {i};{i * 0.5};a\n" for i in range(40)))
    examples = run_executor(
        tmp_path, write_csv.dir, delimiter=";", excluded_columns=json.dumps(["note"])
    )
    _, train = read_split(examples, "train")
    assert train and all(set(e.features.feature) == {"id", "x", "c"} for e in train)
    assert train[0].features.feature["x"].float_list.value


@pytest.mark.parametrize("beam_args", [IN_MEMORY, MULTI_PROCESSING], ids=["in_memory", "multi"])
def test_a_large_file_is_read_as_ranges_with_the_same_rows_and_lines(
    tmp_path, write_csv, beam_args, monkeypatch
):
    """A file larger than csv_reader.RANGE_BYTES is read as ranges (bounded memory per task):
    every row once, quoted line breaks and commas kept whole, rejected rows at their file line."""
    from components.tfx_components.example_gen import csv_reader

    lines = ["id,x,c"]
    bad_lines = {}
    for i in range(3000):
        if i % 250 == 7:
            lines.append(f"{i},1.0")  # ragged
            bad_lines[len(lines)] = "expected 3 fields, found 2"
        elif i % 250 == 11:
            lines.append(f"{i},oops,a")
            bad_lines[len(lines)] = "column 'x': 'oops' is not a float"
        elif i % 100 == 3:
            lines.append(f'{i},{i * 0.5},"two, ""quoted"" parts"')
        else:
            lines.append(f"{i},{i * 0.5},{'ab'[i % 2]}")
    path = write_csv("big.csv", "\n".join(lines) + "\n")
    monkeypatch.setattr(csv_reader, "RANGE_BYTES", 2048)
    with open(path, "rb") as handle:
        assert len(csv_reader.plan_ranges(path, os.path.getsize(path), handle, 2048)) > 10
    with pytest.raises(executor.TooManyRejectedRowsError) as error:
        run_executor(
            tmp_path,
            write_csv.dir,
            num_shards=2,
            beam_args=beam_args,
            column_types={"id": "int", "x": "float", "c": "string"},
        )
    message = str(error.value)
    assert f"{len(bad_lines)} of 3000 CSV row(s) rejected" in message
    rejected = executor.read_rejected_rows(message.split("all are listed in ")[1].split(":\n")[0])
    assert {row.line: row.reason for row in rejected} == bad_lines
    assert all(row.file == path for row in rejected)

    examples = run_executor(
        tmp_path / "allowed",
        write_csv.dir,
        num_shards=2,
        beam_args=beam_args,
        column_types={"id": "int", "x": "float", "c": "string"},
        max_rejected=0.5,
    )
    _, train = read_split(examples, "train")
    _, evaluation = read_split(examples, "eval")
    by_id = {e.features.feature["id"].int64_list.value[0]: e for e in train + evaluation}
    bad_ids = {int(lines[line - 1].split(",")[0]) for line in bad_lines}
    assert sorted(by_id) == sorted(set(range(3000)) - bad_ids)
    assert by_id[103].features.feature["c"].bytes_list.value == [b'two, "quoted" parts']
    assert examples.get_int_custom_property("num_rows_read") == 3000
    assert examples.get_int_custom_property("num_rows_rejected") == len(bad_lines)
