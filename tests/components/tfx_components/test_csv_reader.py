from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from tfx_bsl.coders import example_coder

from components.tfx_components.example_gen import csv_reader
from pipeline import preflight

NULLS = ("", "NA")


def parse(text: str, expected=None, path="f.csv"):
    return csv_reader.read_csv_as_strings(path, text.encode(), NULLS, expected)


def test_ragged_rows_are_rejected_with_their_line_numbers():
    parsed = parse("a,b,c\n1,x,2.5\n2,y\n3,NA,NA\n4,z,1,9\n5,w,0.5\n")
    assert parsed.table.num_rows == 3
    assert [(r.line, r.reason) for r in parsed.rejected] == [
        (3, "expected 3 fields, found 2"),
        (5, "expected 3 fields, found 4"),
    ]
    # Kept rows keep their physical line numbers although rows before them were skipped.
    assert parsed.lines.tolist() == [2, 4, 6]
    assert parsed.table.column("b").to_pylist() == ["x", None, "w"]


def test_header_mismatch_names_the_file_and_columns():
    with pytest.raises(csv_reader.CsvFormatError, match=r"f\.csv.*missing column\(s\) \['c'\]"):
        parse("a,b\n1,2\n", expected=["a", "b", "c"])
    with pytest.raises(csv_reader.CsvFormatError, match=r"unexpected column\(s\) \['d'\]"):
        parse("a,b,c,d\n1,2,3,4\n", expected=["a", "b", "c"])


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("a,a\n1,2\n", r"duplicate column name\(s\) \['a'\]"),
        ("a,,c\n1,2,3\n", "empty column name"),
    ],
)
def test_unusable_files_raise_clear_errors(text, message):
    with pytest.raises(csv_reader.CsvFormatError, match=message):
        parse(text)


def test_type_inference_and_promotion_across_files():
    parsed = parse("i,f,s,m\n1,1.5,x,NA\n2,2,y,NA\n")
    types = csv_reader.infer_column_types(parsed)
    assert types == {"i": "int", "f": "float", "s": "string", "m": "int"}
    unified = csv_reader.unify_column_types([types, {"i": "float", "m": "string"}])
    assert unified == {"i": "float", "f": "float", "s": "string", "m": "string"}


def test_unconvertible_cells_reject_their_row_and_name_the_column():
    parsed = parse("n,s\n1.5,a\nabc,b\nNA,c\n2,d\n")
    batch, rejected, keep = csv_reader.convert_table(parsed, {"n": "float", "s": "string"})
    assert batch.num_rows == 3
    assert keep.to_pylist() == [True, False, True, True]
    assert [str(r) for r in rejected] == ["f.csv:3: column 'n': 'abc' is not a float"]
    examples = [
        tf.train.Example.FromString(e)
        for e in example_coder.RecordBatchToExamplesEncoder().encode(batch)
    ]
    assert list(examples[0].features.feature["n"].float_list.value) == [1.5]
    assert examples[0].features.feature["s"].bytes_list.value == [b"a"]
    # A missing cell becomes a feature without values (read as missing downstream).
    assert examples[1].features.feature["n"].WhichOneof("kind") is None
    assert list(examples[2].features.feature["n"].float_list.value) == [2.0]


def test_hash_buckets_are_deterministic_and_split_by_ratio():
    rows = pa.table({"a": [str(i) for i in range(4000)], "b": ["x"] * 4000})
    first = csv_reader.hash_buckets(rows, 100)
    assert np.array_equal(first, csv_reader.hash_buckets(rows, 100))
    splits = csv_reader.split_of_buckets(first, [75, 25])
    assert set(np.unique(splits)) == {0, 1}
    assert 0.72 < np.mean(splits == 0) < 0.78
    # The same row lands in the same bucket wherever it is read.
    assert csv_reader.hash_buckets(rows.slice(10, 1), 100)[0] == first[10]


def test_schema_column_types(penguins_schema_path):
    schema = preflight.load_schema(penguins_schema_path)
    types = csv_reader.schema_column_types(schema)
    assert types["species"] == "string"
    assert types["bill_length_mm"] == "float"
    assert types["body_mass_g"] == "int"


def _read_as_ranges(path, data: bytes, range_bytes: int):
    import io

    ranges = csv_reader.plan_ranges(path, len(data), io.BytesIO(data), range_bytes)
    parts = [
        csv_reader.read_csv_as_strings(
            path,
            csv_reader.read_range_bytes(r, io.BytesIO(data)),
            NULLS,
            None,
            line_offset=r.line_offset,
        )
        for r in ranges
    ]
    return ranges, parts


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_ranges_of_a_file_read_every_row_once_at_its_line(newline):
    rows = []
    for i in range(400):
        if i % 37 == 5:
            rows.append(f'{i},"a quoted{newline}line break, and ""quotes""",x')
        elif i % 41 == 9:
            rows.append(f"{i},ragged")
        else:
            rows.append(f"{i},{i},v{i}")
    text = newline.join(["id,a,b", *rows]) + newline
    data = text.encode()
    ranges, parts = _read_as_ranges("f.csv", data, 300)
    assert len(ranges) > 5 and ranges[0].first_line == 2
    ids = [i for part in parts for i in part.table.column("id").to_pylist()]
    assert ids == [str(i) for i in range(400) if i % 41 != 9]
    quoted = [v for part in parts for v in part.table.column("a").to_pylist() if "quoted" in v]
    assert quoted == [f'a quoted{newline}line break, and "quotes"'] * len(quoted) and quoted
    # Line numbers as reading the whole file gives them: rows, the header being line 1.
    whole = csv_reader.read_csv_as_strings("f.csv", data, NULLS, None)
    assert [(r.line, r.reason) for part in parts for r in part.rejected] == [
        (r.line, r.reason) for r in whole.rejected
    ]
    assert [int(line) for part in parts for line in part.lines] == [int(x) for x in whole.lines]
    # Row i is line i + 2 (the quoted line break of row 5 does not count as a line).
    assert whole.rejected[0].line == 9 + 2


@pytest.mark.parametrize(
    "data",
    [b"id,a\r1,2\r3,4\r" * 50, b"id,a\n" + b"1,2\n" * 100, b"id,a\n" + b"1,2\n" * 100 + b"5,6"],
    ids=["bare-cr", "small", "no-final-newline"],
)
def test_files_without_usable_cuts_or_small_are_one_range(data):
    import io

    limit = len(data) + 1 if b"\r" not in data else 64
    ranges = csv_reader.plan_ranges("f.csv", len(data), io.BytesIO(data), limit)
    assert ranges == [csv_reader.FileRange("f.csv")]


def test_a_last_row_without_a_line_break_is_read_from_the_last_range():
    data = b"id,a\n" + b"".join(b"%d,2\n" % i for i in range(200)) + b"999,6"
    ranges, parts = _read_as_ranges("f.csv", data, 100)
    assert len(ranges) > 3
    ids = [i for part in parts for i in part.table.column("id").to_pylist()]
    assert ids == [str(i) for i in range(200)] + ["999"]
