"""CSV file -> typed Arrow table -> serialized tf.Examples, in bulk, every bad row accounted for.

Plain functions (no Beam, no TFX) so tests reach them directly. The Beam executor maps them over
files. Parsing and type conversion are done by pyarrow and the tf.Example encoding by tfx_bsl's
C++ encoder; Python only touches individual rows on the error path.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import hashlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

INT, FLOAT, STRING = "int", "float", "string"
# tf.Example value types: int64_list, float_list, bytes_list.
_ARROW_VALUE_TYPES = {INT: pa.int64(), FLOAT: pa.float32(), STRING: pa.large_binary()}
# Promotion order when files (or rows) disagree: int < float < string.
_RANK = {INT: 0, FLOAT: 1, STRING: 2}
# Field separators recognised in a header row, most usual first (sniff_delimiter).
DELIMITERS = (",", ";", "\t", "|")
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}


class CsvFormatError(ValueError):
    """A whole file is unusable (unreadable, no header, columns not as expected)."""


@dataclasses.dataclass(frozen=True)
class RejectedRow:
    """One input row that was not turned into an example, and why."""

    file: str
    line: int
    reason: str

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclasses.dataclass
class ParsedFile:
    """A CSV file read as strings: the kept rows, their physical line numbers, the rejects."""

    path: str
    table: pa.Table
    lines: np.ndarray
    rejected: list[RejectedRow]


def sniff_delimiter(header_line: str) -> str:
    """The separator of a header row: of comma, semicolon, tab and pipe, the one that splits it
    into the most fields outside quotes (comma on a tie, and for a one-column header)."""
    counts = {d: len(next(csv.reader([header_line], delimiter=d), [])) for d in DELIMITERS}
    best = max(DELIMITERS, key=lambda d: (counts[d], -DELIMITERS.index(d)))
    return best if counts[best] > 1 else ","


def first_line(data: bytes) -> str:
    """The header row as text (BOM removed; old Mac files end lines with a bare \\r)."""
    return data.replace(b"\r", b"\n", 1).split(b"\n", 1)[0].decode("utf-8-sig")


def one_column_hint(names: Sequence[str], delimiter: str) -> str:
    """For a header read as one column that contains another separator: what to pass."""
    if len(names) != 1:
        return ""
    found = [d for d in DELIMITERS if d != delimiter and d in names[0]]
    if not found:
        return ""
    shown = "'\\t'" if found[0] == "\t" else repr(found[0])
    return (
        f"; the header reads as one column containing {DELIMITER_NAMES[found[0]]}s: "
        f"pass --delimiter {shown}"
    )


def read_csv_as_strings(
    path: str,
    data: bytes,
    null_values: Sequence[str],
    expected_columns: Sequence[str] | None,
    *,
    delimiter: str = ",",
    excluded_columns: Sequence[str] = (),
    line_offset: int = 0,
) -> ParsedFile:
    """Parses CSV bytes with every column as string; ragged rows are rejected, not fatal.
    excluded_columns are dropped after parsing (and are not part of expected_columns).
    line_offset: data is the header row followed by a range of the file's rows (FileRange);
    every reported line number of a row is moved by it to the row's line in the file."""
    if not data.strip():
        raise CsvFormatError(f"{path}: the file is empty (a header row is required)")
    if not data.endswith((b"\n", b"\r")):
        # pyarrow 10's reader can spin forever on a last line with no line break (seen on a
        # header-only file); a final newline changes no row.
        data += b"\n"
    _check_utf8(path, data, line_offset=line_offset)
    ragged: list[RejectedRow] = []

    def on_invalid_row(row) -> str:
        ragged.append(
            RejectedRow(
                path,
                int(row.number) + line_offset if row.number is not None else -1,
                f"expected {row.expected_columns} fields, found {row.actual_columns}",
            )
        )
        return "skip"

    all_columns = _header(path, data, delimiter)
    columns = [name for name in all_columns if name not in set(excluded_columns)]
    if expected_columns is not None and set(columns) != set(expected_columns):
        raise CsvFormatError(
            f"{path}: header does not match the schema: "
            + _describe_column_mismatch(columns, list(expected_columns))
        )
    if len(set(all_columns)) != len(all_columns):
        duplicates = sorted({c for c in all_columns if all_columns.count(c) > 1})
        raise CsvFormatError(f"{path}: duplicate column name(s) {duplicates}")

    def read(block_size: int | None) -> pa.Table:
        ragged.clear()
        return pacsv.read_csv(
            io.BytesIO(data),
            # Single-threaded so that rejected rows carry their physical line number.
            read_options=pacsv.ReadOptions(use_threads=False, block_size=block_size),
            parse_options=pacsv.ParseOptions(
                delimiter=delimiter, invalid_row_handler=on_invalid_row
            ),
            convert_options=pacsv.ConvertOptions(
                null_values=list(null_values),
                strings_can_be_null=True,
                column_types={name: pa.string() for name in all_columns},
                include_columns=columns,
            ),
        )

    try:
        try:
            table = read(None)
        except pa.ArrowInvalid as error:
            if "straddl" not in str(error):
                raise
            # A row longer than a block (1 MB): read the file as one block.
            table = read(len(data) + 1)
    except (pa.ArrowInvalid, UnicodeDecodeError) as error:
        raise CsvFormatError(f"{path}: not a readable CSV file: {error}") from error
    return ParsedFile(
        path, table, _kept_row_lines(table.num_rows, ragged, first=2 + line_offset), ragged
    )


def _check_utf8(path: str, data: bytes, chunk_bytes: int = 16 << 20, line_offset: int = 0) -> None:
    """Every column is read as text: a byte that is not UTF-8 stops the file, naming its line
    (pyarrow would fail too, but without the line, or inside the ragged-row handler)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for start in range(0, len(data), chunk_bytes):
        try:
            chunk = data[start : start + chunk_bytes]
            decoder.decode(chunk, final=start + chunk_bytes >= len(data))
        except UnicodeDecodeError as error:
            offset = start + error.start - len(decoder.getstate()[0])
            line = data.count(b"\n", 0, max(offset, 0)) + 1
            line += line_offset if line > 1 else 0
            raise CsvFormatError(
                f"{path}: line {line} is not UTF-8 text ({error.reason} at byte {offset})"
            ) from error


def _header(path: str, data: bytes, delimiter: str = ",") -> list[str]:
    try:
        text = first_line(data)
        names = next(csv.reader([text], delimiter=delimiter), [])
    except UnicodeDecodeError as error:
        raise CsvFormatError(f"{path}: header row is not UTF-8 text: {error}") from error
    except csv.Error as error:
        raise CsvFormatError(f"{path}: header row is not readable CSV: {error}") from error
    if text.count('"') % 2:
        # pyarrow 10 can hang on a header whose quote never closes.
        raise CsvFormatError(f"{path}: header row has an unterminated quote: {text!r}")
    if not names or any(not name.strip() for name in names):
        raise CsvFormatError(f"{path}: header row has an empty column name: {text!r}")
    return names


def _describe_column_mismatch(found: list[str], expected: list[str]) -> str:
    missing = [c for c in expected if c not in found]
    unexpected = [c for c in found if c not in expected]
    details = []
    if missing:
        details.append(f"missing column(s) {missing}")
    if unexpected:
        details.append(f"unexpected column(s) {unexpected}")
    return "; ".join(details) or f"columns in order {found}, expected {expected}"


def _kept_row_lines(num_kept: int, ragged: Sequence[RejectedRow], first: int = 2) -> np.ndarray:
    """Physical line of each kept row, the first row at line `first` (2 after the header;
    assumes no newlines inside quotes)."""
    skipped = sorted(r.line for r in ragged if r.line > 0)
    lines = np.arange(num_kept, dtype=np.int64) + first
    # Each skipped line pushes every later kept row down by one.
    for line in skipped:
        lines[lines >= line] += 1
    return lines


# Files larger than this are read as ranges of about this many bytes (FileRange): what one task
# holds in memory (the bytes, their Arrow table and encoded examples: about 10x) stays bounded
# however large a file is, and one large file is spread over workers.
RANGE_BYTES = 16 << 20
_SCAN_BYTES = 8 << 20


@dataclasses.dataclass(frozen=True)
class FileRange:
    """Rows of one CSV file: bytes [start, end) of it (end -1: to the end of the file), whose
    first row is line first_line (lines count rows, the header being line 1, as pyarrow numbers
    them: the physical line unless an earlier field holds a line break); header_bytes: the
    length of the header row, read again for every range. The whole file: start 0, end -1,
    first_line 1, header_bytes 0."""

    path: str
    start: int = 0
    end: int = -1
    first_line: int = 1
    header_bytes: int = 0

    @property
    def whole_file(self) -> bool:
        return self.header_bytes == 0

    @property
    def line_offset(self) -> int:
        """What read_csv_as_strings adds to a line of header + range to make it a file line."""
        return 0 if self.whole_file else self.first_line - 2

    def describe(self) -> str:
        if self.whole_file:
            return self.path
        end = "end" if self.end < 0 else str(self.end)
        return f"{self.path} bytes {self.start}-{end} (from line {self.first_line})"


def plan_ranges(path: str, size: int, handle, range_bytes: int = RANGE_BYTES) -> list[FileRange]:
    """The file as ranges of about range_bytes, cut after a line break that is outside quotes
    (an even number of '"' before it; CSV escapes a quote by doubling it), reading it once in
    chunks. handle: the file opened for binary reading. A file no larger than range_bytes, or
    with no usable line break, is one whole-file range."""
    whole = [FileRange(path)]
    if size <= range_bytes:
        return whole
    header_bytes = 0
    cuts: list[tuple[int, int]] = []  # (byte after the cut's line break, lines before it)
    offset = quotes = lines = 0
    target = range_bytes
    while True:
        chunk = handle.read(_SCAN_BYTES)
        if not chunk:
            break
        data = np.frombuffer(chunk, dtype=np.uint8)
        breaks = np.flatnonzero(data == 10)
        quote_at = np.flatnonzero(data == 34)
        # Quotes before each line break: outside quotes where even.
        outside = np.flatnonzero((quotes + np.searchsorted(quote_at, breaks)) % 2 == 0)
        positions = offset + breaks[outside]
        if not header_bytes and len(positions):
            header_bytes = int(positions[0]) + 1
            cuts.append((header_bytes, 1))
        found = int(np.searchsorted(positions, max(target, header_bytes)))
        while found < len(positions):
            position = int(positions[found])
            # Rows before the byte after this break (the header counted): line numbers count
            # rows as pyarrow's do, a quoted line break being part of its row.
            cuts.append((position + 1, lines + found + 1))
            target = position + 1 + range_bytes
            found = int(np.searchsorted(positions, target))
        quotes += len(quote_at)
        lines += len(outside)
        offset += len(chunk)
    if not header_bytes or len(cuts) < 2:
        return whole
    # The last range runs to the end of the file (a cut at its very end leaves nothing after).
    if cuts[-1][0] >= size:
        cuts.pop()
    ranges = []
    for (start, before), following in zip(cuts, [*cuts[1:], None], strict=True):
        end = following[0] if following else -1
        ranges.append(FileRange(path, start, end, before + 1, header_bytes))
    return ranges if len(ranges) > 1 else whole


def read_range_bytes(file_range: FileRange, handle) -> bytes:
    """Header row + the range's rows (or the whole file), from the file opened for reading."""
    if file_range.whole_file:
        return handle.read()
    header = handle.read(file_range.header_bytes)
    handle.seek(file_range.start)
    size = -1 if file_range.end < 0 else file_range.end - file_range.start
    return header + handle.read(size)


def infer_column_type(values: pa.ChunkedArray) -> str:
    """The narrowest of int/float/string that every non-missing value converts to."""
    present = values.drop_null()
    for candidate in (INT, FLOAT):
        try:
            pc.cast(present, pa.int64() if candidate == INT else pa.float64())
            return candidate
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return STRING


def infer_column_types(parsed: ParsedFile) -> dict[str, str]:
    table = parsed.table
    return {name: infer_column_type(table.column(name)) for name in table.schema.names}


def unify_column_types(per_file: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Merges per-file types, promoting int -> float -> string where files disagree."""
    unified: dict[str, str] = {}
    for types in per_file:
        for name, column_type in types.items():
            current = unified.get(name)
            if current is None or _RANK[column_type] > _RANK[current]:
                unified[name] = column_type
    return unified


def _convert_column(values: pa.ChunkedArray, column_type: str) -> tuple[pa.Array, np.ndarray]:
    """Casts one string column; returns the typed column and a mask of rows that failed."""
    values = values.combine_chunks()
    if column_type == STRING:
        return values.cast(pa.large_binary()), np.zeros(len(values), dtype=bool)
    target = pa.int64() if column_type == INT else pa.float64()
    try:
        return pc.cast(values, target), np.zeros(len(values), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    # Slow path, only when some cell is bad: find which rows, null them, report them.
    convert = int if column_type == INT else float
    bad = np.zeros(len(values), dtype=bool)
    cleaned: list[int | float | None] = []
    for i, cell in enumerate(values.to_pylist()):
        if cell is None:
            cleaned.append(None)
            continue
        try:
            cleaned.append(convert(cell.strip()))
        except ValueError:
            bad[i] = True
            cleaned.append(None)
    return pa.array(cleaned, type=target), bad


def convert_table(
    parsed: ParsedFile,
    column_types: Mapping[str, str],
    required_columns: Sequence[str] = (),
    why_required: str = "the label",
) -> tuple[pa.RecordBatch, list[RejectedRow], pa.Array]:
    """Typed list columns ready for tf.Example encoding; rows with an unconvertible cell, or
    with no value in a required column (the label; for rows to predict, a column the model
    needs in every row: `why_required` says which), rejected.

    Returns the record batch of kept rows, the rejected rows, and the keep mask over the parsed
    rows (to line kept rows up with their raw text).
    """
    names = parsed.table.schema.names
    unknown = [n for n in names if n not in column_types]
    if unknown:
        raise CsvFormatError(f"{parsed.path}: column(s) {unknown} have no known type")
    typed = {}
    row_errors: dict[int, list[str]] = {}
    for name in names:
        column_type = column_types[name]
        array, bad = _convert_column(parsed.table.column(name), column_type)
        for index in np.flatnonzero(bad):
            cell = parsed.table.column(name)[int(index)].as_py()
            row_errors.setdefault(int(index), []).append(
                f"column {name!r}: {cell!r} is not {'an' if column_type == INT else 'a'} "
                f"{column_type}"
            )
        typed[name] = array
    for name in required_columns:
        missing = (
            parsed.table.column(name).is_null().combine_chunks().to_numpy(zero_copy_only=False)
        )
        for index in np.flatnonzero(missing):
            row_errors.setdefault(int(index), []).append(
                f"column {name!r} ({why_required}) is empty"
            )
    keep = np.ones(parsed.table.num_rows, dtype=bool)
    rejected = []
    for index, reasons in sorted(row_errors.items()):
        keep[index] = False
        rejected.append(RejectedRow(parsed.path, int(parsed.lines[index]), "; ".join(reasons)))
    keep_mask = pa.array(keep)
    arrays = [_to_list_array(typed[name].filter(keep_mask), column_types[name]) for name in names]
    return pa.RecordBatch.from_arrays(arrays, names), rejected, keep_mask


def hash_buckets(raw_rows: pa.Table, num_buckets: int) -> np.ndarray:
    """A deterministic bucket per row from its raw cell text (independent of type inference,
    column order of the encoder, process or machine), for hash-bucket splits."""
    if raw_rows.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    cells = [pc.fill_null(raw_rows.column(name), "\x00") for name in raw_rows.schema.names]
    joined = pc.binary_join_element_wise(*cells, "\x1f")
    return np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(row.encode(), digest_size=8).digest(), "little")
            % num_buckets
            for row in joined.to_pylist()
        ),
        dtype=np.int64,
        count=raw_rows.num_rows,
    )


def split_of_buckets(buckets: np.ndarray, split_sizes: Sequence[int]) -> np.ndarray:
    """Bucket -> split index, splits taking consecutive bucket ranges of the given sizes."""
    splits = np.searchsorted(np.cumsum(split_sizes), buckets, side="right")
    # numpy is read partly untyped (pyproject's mypy overrides), which makes mypy pick
    # searchsorted's scalar overload; an array of buckets gives an array.
    return splits  # type: ignore[return-value]


def _to_list_array(values: pa.Array, column_type: str) -> pa.LargeListArray:
    """[v0, null, v2] -> [[v0], null, [v2]]: a missing cell becomes a missing feature."""
    values = values.cast(_ARROW_VALUE_TYPES[column_type])
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(valid)]).astype(np.int64)
    return pa.LargeListArray.from_arrays(
        pa.array(offsets), values.drop_null(), mask=pa.array(~valid)
    )


def schema_column_types(schema) -> dict[str, str]:
    """Column types from a TFMD schema proto: INT -> int, FLOAT -> float, BYTES -> string."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    kinds = {schema_pb2.INT: INT, schema_pb2.FLOAT: FLOAT, schema_pb2.BYTES: STRING}
    return {feature.name: kinds[feature.type] for feature in schema.feature}
