"""Property test: arbitrary bytes as a user's CSV file never get past the pre-flight check and
the CSV reader as an unexplained exception. Each file either reads (every row kept or rejected
with file:line: reason) or stops with an InputError / CsvFormatError that names the file."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from components.tfx_components.example_gen import csv_reader
from pipeline import preflight
from pipeline.config import DatasetConfig

NULLS = ("", "NA", "NaN", "nan", "null", "NULL")
LABEL = "label"
# How many generated files the property tests tried, reported in docs/reliability.md.
TRIED = {"files": 0}

# Building blocks of hostile files: cells with quotes, separators, newlines, BOMs, bytes that are
# not UTF-8, huge fields; rows of the wrong length; headers with duplicates or empty names.
_cell_text = st.one_of(
    st.sampled_from(["", "NA", "1", "-2.5", "1e309", "nan", "x", "Adelie", '"', '""', "a,b"]),
    st.text(max_size=12),
    st.text(alphabet=',"\r\n\t ;\\', max_size=6),
)
_cell_bytes = st.one_of(
    _cell_text.map(lambda s: s.encode("utf-8")),
    st.binary(max_size=8),
    st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\x80abc", b"\x00", b'"unterminated']),
    st.integers(min_value=100_000, max_value=2_000_000).map(lambda n: b"y" * n),
)
_names = st.one_of(
    st.sampled_from([LABEL, "a", "b", "c", "", " ", "a", "\ufeffa", '"q"', "é"]),
    st.text(min_size=0, max_size=6),
)


@st.composite
def csv_files(draw) -> bytes:
    if draw(st.integers(min_value=0, max_value=2)):
        # Mostly a usable header, so that the rows behind it get explored too.
        header = [LABEL, *draw(st.lists(st.sampled_from("abcd"), unique=True, max_size=4))]
    else:
        header = draw(st.lists(_names, min_size=0, max_size=5))
        if draw(st.booleans()):
            header = [LABEL, *header]
    bom = draw(st.sampled_from([b"", b"", b"\xef\xbb\xbf"]))
    newline = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    lines = [b",".join(name.encode("utf-8", "surrogatepass") for name in header)]
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        width = draw(st.integers(min_value=0, max_value=len(header) + 2))
        lines.append(b",".join(draw(_cell_bytes) for _ in range(width)))
    data = bom + newline.join(lines)
    if draw(st.booleans()):
        data += newline
    return data


def ingest(data_dir: str) -> dict:
    """What a run does with the files before any component: pre-flight, then (as ExampleGen's
    workers do) parse, infer types, convert, hash-split every file."""
    dataset = DatasetConfig(name="hostile", data_root=data_dir, label_key=LABEL)
    facts = preflight.check_dataset(dataset)
    parsed_files = []
    for path in facts.files:
        with open(path, "rb") as handle:
            parsed_files.append(
                csv_reader.read_csv_as_strings(
                    path,
                    handle.read(),
                    NULLS,
                    [c for c in facts.columns if c not in facts.excluded_columns],
                    delimiter=facts.delimiter,
                    excluded_columns=facts.excluded_columns,
                )
            )
    types = csv_reader.unify_column_types(csv_reader.infer_column_types(p) for p in parsed_files)
    kept = rejected = 0
    for parsed in parsed_files:
        batch, bad, keep = csv_reader.convert_table(parsed, types, [LABEL])
        csv_reader.hash_buckets(parsed.table.filter(keep), 4)
        kept += batch.num_rows
        rejected += len(parsed.rejected) + len(bad)
        for row in parsed.rejected + bad:
            assert row.file == parsed.path and row.reason
    return {"kept": kept, "rejected": rejected}


def check_outcome(data_dir: str, path: str) -> str:
    TRIED["files"] += 1
    try:
        ingest(data_dir)
    except (preflight.InputError, csv_reader.CsvFormatError) as error:
        message = str(error)
        assert path in message, f"error does not name the file: {message}"
        assert "\n" not in message.strip() or "Traceback" not in message
        return "stopped"
    return "read"


@pytest.fixture
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hostile"))


@settings(
    max_examples=1000,
    deadline=5000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(data=csv_files())
@example(data=b"")
@example(data=b"label,a\n")
@example(data=b"\xef\xbb\xbflabel,a\nx,1\n")
@example(data=b"label,a,a\nx,1,2\n")
@example(data=b"label,a\nx,1,2,3\ny\n")
@example(data=b'label,a\n"x,1\ny,2\n')
@example(data=b"label,a\n\xff\xfe,1\n")
@example(data=b"label,\xff\nx,1\n")
@example(data=b"label,a\nx," + b"9" * 1_000_000 + b"\n")
@example(data=b"label,a\nx,1\n" + b"y," + b"7" * 3_000_000 + b"\n")  # a row longer than a block
@example(data=b"label")  # no line break: pyarrow 10 hung here
@example(data=b'label,"\xc2\xa9,x\r\n\r\n[,e\r\n')  # unterminated header quote: it hung here
@example(data=b"label,a\rx,1\ry,2\r")  # old Mac line ends
def test_any_file_reads_or_stops_with_a_message_naming_it(data_dir, data):
    path = os.path.join(data_dir, "input.csv")
    with open(path, "wb") as handle:
        handle.write(data)
    check_outcome(data_dir, path)


@settings(
    max_examples=200,
    deadline=5000,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(first=csv_files(), second=csv_files())
def test_two_files_read_or_stop_naming_one_of_them(data_dir, first, second):
    paths = [os.path.join(data_dir, name) for name in ("a.csv", "b.csv")]
    for path, data in zip(paths, (first, second), strict=True):
        with open(path, "wb") as handle:
            handle.write(data)
    TRIED["files"] += 1
    try:
        ingest(data_dir)
    except (preflight.InputError, csv_reader.CsvFormatError) as error:
        assert any(path in str(error) for path in paths), str(error)
