"""Bad input at scale: 200,000 synthetic rows with 2,000 malformed rows at known lines, spread
over four files of 3 MB (each parsed in several of pyarrow's 1 MB blocks), through
ShardedCsvExampleGen's executor, once reading each file whole and once as 1 MB ranges (as a
file over 16 MB is read; malformed rows on both sides of every cut). Every injected row must be
rejected and listed with its own file, line and reason, and the counts must be exact (rows read
= written + rejected, rejected = injected, and the shards hold exactly the rows written)."""

from __future__ import annotations

import collections
import json
import os

import pytest
import tensorflow as tf

from benchmarks import scale_bad_input
from components.tfx_components.example_gen import csv_reader
from pipeline import datasets, preflight
from pipeline.datasets import synthetic as synth_data
from tests.components.helpers import IN_MEMORY, run_executor

ROWS = 200_000
FILES = 4
BAD = 2_000
SMALL_RANGE_BYTES = 1 << 20


@pytest.fixture(scope="module")
def bad_csv(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("bad-at-scale"))
    paths = synth_data.write_synth(data_dir, ROWS, FILES, seed=0)
    clean_sizes = [os.path.getsize(path) for path in paths]
    near_cuts = scale_bad_input.range_boundary_lines(paths, SMALL_RANGE_BYTES)
    injected = scale_bad_input.inject_malformed_rows(paths, BAD, seed=3, forced=near_cuts)
    return data_dir, paths, injected, clean_sizes


def test_injection_replaces_lines_at_the_recorded_places(bad_csv):
    _, paths, injected, clean_sizes = bad_csv
    assert len(injected) == BAD
    assert len({(i.file, i.line) for i in injected}) == BAD
    # Every file holds some, every kind is there, and the edges of a file are among them.
    assert {i.file for i in injected} == set(paths)
    kinds = collections.Counter(i.kind for i in injected)
    assert kinds == {kind: BAD // len(scale_bad_input.KINDS) for kind in scale_bad_input.KINDS}
    assert {(paths[0], 2), (paths[0], ROWS // FILES + 1)} <= {(i.file, i.line) for i in injected}
    assert [os.path.getsize(path) for path in paths] == clean_sizes
    # Malformed rows keep the files' byte offsets, and so sit at every cut of the 1 MB ranges
    # the second test reads.
    at = {(i.file, i.line) for i in injected}
    for path in paths:
        with open(path, "rb") as handle:
            ranges = csv_reader.plan_ranges(path, os.path.getsize(path), handle, SMALL_RANGE_BYTES)
        for cut in ranges[1:]:
            assert (path, cut.first_line - 1) in at and (path, cut.first_line) in at, cut
    lines = {}
    for path in paths:
        with open(path) as handle:
            lines[path] = handle.read().split("\n")
    assert sum(len(text) - 2 for text in lines.values()) == ROWS  # header, trailing ""
    for item in injected[:: BAD // 50]:
        fields = lines[item.file][item.line - 1].split(",")
        expected_fields = {"field_missing": 9, "field_extra": 11}.get(item.kind, 10)
        assert len(fields) == expected_fields, item
        if item.kind in ("empty_label", "bad_number_and_label"):
            assert fields[-1] == "", item


@pytest.mark.slow
@pytest.mark.parametrize("range_bytes", [None, SMALL_RANGE_BYTES], ids=["whole", "1MB_ranges"])
def test_every_malformed_row_is_listed_with_its_line_and_the_counts_are_exact(
    tmp_path, bad_csv, monkeypatch, range_bytes
):
    data_dir, paths, injected, _ = bad_csv
    if range_bytes:
        monkeypatch.setattr(csv_reader, "RANGE_BYTES", range_bytes)
        for path in paths:
            with open(path, "rb") as handle:
                size = os.path.getsize(path)
                assert len(csv_reader.plan_ranges(path, size, handle, range_bytes)) >= 3
    schema_path = datasets.curated_schema_path(datasets.SYNTH)
    assert schema_path is not None
    schema = preflight.load_schema(schema_path)
    examples = run_executor(
        tmp_path,
        data_dir,
        num_shards=4,
        column_types=csv_reader.schema_column_types(schema),
        max_rejected=0.02,
        beam_args=IN_MEMORY,
        label_key="label",
    )
    read = examples.get_int_custom_property("num_rows_read")
    rejected = examples.get_int_custom_property("num_rows_rejected")
    written = json.loads(examples.get_string_custom_property("split_example_counts"))
    assert (read, rejected) == (ROWS, BAD)
    assert sum(written.values()) == ROWS - BAD
    listing_uri = examples.get_string_custom_property("rejected_rows_uri")
    # Beside the Examples folder, not inside it (it survives a failed run).
    assert os.path.dirname(os.path.dirname(listing_uri)) == os.path.dirname(examples.uri)
    listing = scale_bad_input.read_listing(listing_uri)
    assert len(listing) == BAD
    found = {(row["file"], row["line"]): row["reason"] for row in listing}
    expected = {(i.file, i.line): i.reason for i in injected}
    assert found == expected
    comparison = scale_bad_input.compare(injected, listing)
    assert comparison["matched"] == BAD and not comparison["not_injected"]
    # What the shards hold is the rest, exactly, and no malformed row made it in.
    for split, count in written.items():
        files = read_split_files(examples.uri, split)
        records = tf.data.TFRecordDataset(files, compression_type="GZIP")
        assert int(records.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)) == count


def read_split_files(examples_uri: str, split: str) -> list[str]:
    folder = os.path.join(examples_uri, f"Split-{split}")
    return sorted(os.path.join(folder, name) for name in os.listdir(folder))


def test_the_benchmarks_check_finds_every_difference():
    """benchmarks.scale_bad_input passes only when counts and listing are exact."""
    injected = [
        scale_bad_input.Injected(
            "a.csv", line, "empty_label", "column 'label' (the label) is empty"
        )
        for line in (2, 5, 9)
    ]
    exact = [{"file": i.file, "line": i.line, "reason": i.reason} for i in injected]
    measured = {
        "rows": 100,
        "read": 100,
        "rejected": 3,
        "written": {"train": 70, "eval": 27},
        "listing_printed": True,
    }
    assert (
        scale_bad_input.accounting_errors(
            measured, injected, scale_bad_input.compare(injected, exact)
        )
        == []
    )
    listing = [
        {**exact[0], "reason": "expected 10 fields, found 9"},  # wrong reason
        exact[2],
        exact[2],  # listed twice
        {"file": "a.csv", "line": 7, "reason": "x"},  # not injected; line 5 not listed
    ]
    wrong = {**measured, "read": 101, "rejected": 4, "written": {"train": 70, "eval": 26}}
    errors = scale_bad_input.accounting_errors(
        {**wrong, "listing_printed": False}, injected, scale_bad_input.compare(injected, listing)
    )
    assert len(errors) == 9, errors  # each check above once
