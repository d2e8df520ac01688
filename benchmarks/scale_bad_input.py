"""Bad input at scale: a large synthetic CSV with malformed rows spread through it, through the
whole pipeline; every rejected row listed with file:line, counts exact, memory bounded.

    python -m benchmarks.scale_bad_input [--quick] [--work_dir DIR] [--rows N] [--bad N]
                                         [--files N]

Writes N rows of the synthetic CSV (pipeline.datasets.synthetic, 16 files per million rows, or
--files), then replaces a few thousand data lines, spread over every file and through each (and
on both sides of every cut where ExampleGen reads a file over 16 MB as ranges), with malformed
rows of five kinds (a field missing, a field too many, an unparseable number, an empty label,
an unparseable number and an empty label in one row) and records each one's file, line and the
reason ExampleGen must give. Then `python pipeline/run_local.py` on it in a fresh process, as
benchmarks.scale_memory runs it (uncached, `--beam_mode auto`, bounded training steps) with
`--max_rejected_fraction` above the injected fraction, and compares what the run recorded with
what was injected: the Examples artifact's counts in MLMD (rows read = written + rejected,
rejected = injected) and its rejected-rows listing, line by line. Peak resident memory is summed
over the process tree and sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile

import numpy as np

from benchmarks import common, scale, scale_memory

FULL_ROWS = 10_000_000
QUICK_ROWS = 200_000
FULL_BAD_ROWS = 5_000
QUICK_BAD_ROWS = 2_000
# Above the injected fraction (at most 1 %), so that the run goes on to the end.
MAX_REJECTED_FRACTION = 0.02
SEED = 7

# The synthetic CSV's columns, in file order: num_0 .. num_5, cat_5, cat_50, cat_1000, label.
_NUM_COLUMNS = 10
_LABEL_INDEX = _NUM_COLUMNS - 1
KINDS = ("field_missing", "field_extra", "bad_number", "empty_label", "bad_number_and_label")


@dataclasses.dataclass(frozen=True)
class Injected:
    """One data line replaced by a malformed row, and the rejection ExampleGen must record."""

    file: str
    line: int
    kind: str
    reason: str


def _malformed(fields: list[str], kind: str) -> tuple[list[str], str]:
    """A synthetic row's fields -> the malformed row's fields and the reason for rejecting it
    (csv_reader's wording)."""
    fields = list(fields)
    if kind == "field_missing":
        return fields[:-1], f"expected {_NUM_COLUMNS} fields, found {_NUM_COLUMNS - 1}"
    if kind == "field_extra":
        return [*fields, "extra"], f"expected {_NUM_COLUMNS} fields, found {_NUM_COLUMNS + 1}"
    if kind == "bad_number":
        fields[1] = "1.2.3"
        return fields, "column 'num_1': '1.2.3' is not a float"
    if kind == "empty_label":
        fields[_LABEL_INDEX] = ""
        return fields, "column 'label' (the label) is empty"
    if kind == "bad_number_and_label":
        fields[3] = "twelve"
        fields[_LABEL_INDEX] = ""
        return fields, (
            "column 'num_3': 'twelve' is not a float; column 'label' (the label) is empty"
        )
    raise ValueError(f"unknown kind {kind!r}")


# String columns (cat_1000, cat_50, cat_5): what a malformed row is padded or trimmed in, so
# that it keeps the byte length of the row it replaces. A string cell never makes a rejection
# reason, and byte offsets stay those of the clean file (range_boundary_lines stays exact).
_FILLER_INDEXES = (8, 7, 6)


def _same_length(fields: list[str], length: int) -> list[str]:
    fields = list(fields)
    delta = len(",".join(fields)) - length
    if delta < 0:
        fields[_FILLER_INDEXES[0]] += " " * -delta
    for index in _FILLER_INDEXES:
        if delta <= 0:
            break
        cut = min(delta, len(fields[index]))
        fields[index] = fields[index][: len(fields[index]) - cut]
        delta -= cut
    if delta > 0:
        raise ValueError(f"cannot keep the row at {length} bytes: {fields}")
    return fields


def inject_malformed_rows(
    paths: list[str], count: int, seed: int = SEED, forced: dict[str, list[int]] | None = None
) -> list[Injected]:
    """Replaces `count` data lines of the CSV files (header on line 1, one row per line, as
    pipeline.datasets.synthetic writes them) with malformed rows: the `forced` lines
    ({file: [line]}), the first and last data line of the first file, and the rest chosen
    uniformly over all files' rows; kinds in turn. Each malformed row has the byte length of
    the row it replaces, so the files' sizes, rows and byte offsets are unchanged. Returns what
    was injected, sorted by file and line."""
    line_counts = []
    for path in paths:
        with open(path, "rb") as handle:
            line_counts.append(handle.read().count(b"\n") - 1)
    total = sum(line_counts)
    starts = np.concatenate([[0], np.cumsum(line_counts)])
    required = {0, line_counts[0] - 1}
    for path, forced_lines in (forced or {}).items():
        index = paths.index(path)
        if not all(2 <= line <= line_counts[index] + 1 for line in forced_lines):
            raise ValueError(f"{path} has no data line among some of {forced_lines}")
        required.update(int(starts[index]) + line - 2 for line in forced_lines)
    if not len(required) <= count <= total or line_counts[0] < 2:
        raise ValueError(f"cannot inject {count} malformed rows into {line_counts} rows")
    rng = np.random.default_rng(seed)
    pool = np.setdiff1d(np.arange(total), sorted(required))
    chosen = sorted([*required, *rng.choice(pool, count - len(required), replace=False).tolist()])
    injected: list[Injected] = []
    for index, path in enumerate(paths):
        rows = [r - starts[index] for r in chosen if starts[index] <= r < starts[index + 1]]
        if not rows:
            continue
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        for row in rows:
            kind = KINDS[len(injected) % len(KINDS)]
            line = int(row) + 2  # 1-based, after the header
            fields, reason = _malformed(lines[line - 1].split(","), kind)
            lines[line - 1] = ",".join(_same_length(fields, len(lines[line - 1])))
            injected.append(Injected(path, line, kind, reason))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines))
    return injected


def range_boundary_lines(paths: list[str], range_bytes: int) -> dict[str, list[int]]:
    """{file: lines} on either side of every cut where ExampleGen reads the file as ranges of
    range_bytes (csv_reader.plan_ranges): the last row of a range and the first two of the next
    (inject_malformed_rows keeps byte offsets, so the cuts stay where they are). Empty for files
    no larger than range_bytes (read whole)."""
    from components.tfx_components.example_gen import csv_reader

    lines: dict[str, list[int]] = {}
    for path in paths:
        with open(path, "rb") as handle:
            ranges = csv_reader.plan_ranges(path, os.path.getsize(path), handle, range_bytes)
            handle.seek(0)
            last_line = handle.read().count(b"\n")
        cuts = [r.first_line for r in ranges[1:]]
        if cuts:
            near = {line + d for line in cuts for d in (-1, 0, 1)}
            lines[path] = sorted(line for line in near if 2 <= line <= last_line)
    return lines


def read_listing(uri: str) -> list[dict]:
    """The rejected-rows listing ExampleGen writes (JSON lines: file, line, reason)."""
    with open(uri) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def compare(injected: list[Injected], listing: list[dict]) -> dict:
    """How the listing matches what was injected, line by line (file, line and reason)."""
    expected = {(i.file, i.line): i.reason for i in injected}
    found = {(r["file"], int(r["line"])): r["reason"] for r in listing}
    matched = [key for key, reason in expected.items() if found.get(key) == reason]
    return {
        "listed": len(listing),
        "listed_distinct": len(found),
        "matched": len(matched),
        "wrong_reason": sorted(k for k in expected if k in found and found[k] != expected[k]),
        "not_listed": sorted(k for k in expected if k not in found),
        "not_injected": sorted(k for k in found if k not in expected),
    }


def bad_data(
    work_dir: str, rows: int, bad: int, files: int | None = None
) -> tuple[str, list[Injected]]:
    """The synthetic CSV files (default: 16 per million rows, at least 4) with `bad` malformed
    rows, some at the cuts where ExampleGen reads a large file as ranges; written once per
    (rows, bad, files)."""
    from components.tfx_components.example_gen import csv_reader
    from pipeline.datasets import synthetic as synth_data

    files = files or max(4, round(scale.FILES_PER_MILLION * rows / 1_000_000))
    name = f"synth-{rows}-in-{files}-bad-{bad}"
    data_dir = os.path.join(work_dir, name)
    manifest = os.path.join(work_dir, f"{name}.injected.json")
    if os.path.isdir(data_dir) and os.path.exists(manifest):
        with open(manifest) as handle:
            return data_dir, [Injected(**item) for item in json.load(handle)]
    paths = synth_data.write_synth(data_dir, rows, files, seed=0)
    forced = range_boundary_lines(paths, csv_reader.RANGE_BYTES)
    injected = inject_malformed_rows(paths, bad, forced=forced)
    with open(manifest, "w") as handle:
        json.dump([dataclasses.asdict(i) for i in injected], handle)
    return data_dir, injected


def measure(data_dir: str, work_dir: str, rows: int) -> dict:
    from pipeline.mlmd import records

    result, pipeline_dir = scale_memory.run_pipeline(
        data_dir,
        work_dir,
        f"bad-{rows}",
        f"scale-bad-input-{rows}",
        ("--max_rejected_fraction", str(MAX_REJECTED_FRACTION)),
    )
    db, executions, seconds = common.component_executions(pipeline_dir)
    assert "CsvExampleGen" in executions, "no CsvExampleGen execution in MLMD"
    [examples] = db.outputs_by_type(executions["CsvExampleGen"].id)["Examples"]
    listing_uri = records.custom_value(examples, "rejected_rows_uri")
    return {
        "rows": rows,
        "wall_s": result.seconds,
        "peak_rss": result.peak_rss_bytes,
        "seconds": seconds,
        "read": records.custom_value(examples, "num_rows_read"),
        "rejected": records.custom_value(examples, "num_rows_rejected"),
        "written": json.loads(records.custom_value(examples, "split_example_counts")),
        "listing_uri": listing_uri,
        "listing_printed": listing_uri in result.stdout,
        "workers": scale.auto_workers(data_dir),
    }


def accounting_errors(measured: dict, injected: list[Injected], matched: dict) -> list[str]:
    """Every way the run's counts or listing differ from what was injected (empty: exact)."""
    rows, read, rejected = measured["rows"], measured["read"], measured["rejected"]
    written = sum(measured["written"].values())
    errors = []
    if read != rows:
        errors.append(f"rows read {read} != rows in the files {rows}")
    if rejected != len(injected):
        errors.append(f"rows rejected {rejected} != injected {len(injected)}")
    if written + rejected != read:
        errors.append(f"written {written} + rejected {rejected} != read {read}")
    if written != rows - len(injected):
        errors.append(f"written {written} != rows - injected {rows - len(injected)}")
    for key in ("wrong_reason", "not_listed", "not_injected"):
        if matched[key]:
            errors.append(f"{len(matched[key])} {key.replace('_', ' ')}: {matched[key][:3]}")
    if matched["listed"] != matched["listed_distinct"]:
        errors.append(f"{matched['listed'] - matched['listed_distinct']} line(s) listed twice")
    if not measured["listing_printed"]:
        errors.append("run_local did not print the listing's path")
    return errors


def run(
    quick: bool,
    work_dir: str | None = None,
    rows: int | None = None,
    bad: int | None = None,
    files: int | None = None,
) -> list[common.Row]:
    rows = rows or (QUICK_ROWS if quick else FULL_ROWS)
    bad = bad or (QUICK_BAD_ROWS if quick else FULL_BAD_ROWS)
    # Absolute: the listing names files by the path ExampleGen read them from.
    work_dir = os.path.abspath(work_dir or tempfile.mkdtemp(prefix="scale-bad-input-"))
    print(f"  scale_bad_input: {rows:,} rows, {bad:,} malformed: writing data ...", flush=True)
    data_dir, injected = bad_data(work_dir, rows, bad, files)
    print(f"  scale_bad_input: {rows:,} rows: whole pipeline ...", flush=True)
    measured = measure(data_dir, work_dir, rows)
    matched = compare(injected, read_listing(measured["listing_uri"]))
    errors = accounting_errors(measured, injected, matched)
    print(
        f"  scale_bad_input: {json.dumps(measured)}; listing: "
        f"{json.dumps({k: v if isinstance(v, int) else len(v) for k, v in matched.items()})}",
        flush=True,
    )
    size = f"{rows:,} rows, {len(injected):,} malformed"
    written = sum(measured["written"].values())
    example_gen_s = measured["seconds"].get("CsvExampleGen", 0.0)
    return [
        common.Row(
            f"bad input: rows rejected vs injected, {size}",
            measured["rejected"],
            len(injected),
            "rows",
            note=f"read {measured['read']:,} = written {written:,} + rejected "
            f"{measured['rejected']:,} (MLMD); must equal the injected exactly",
        ),
        common.Row(
            f"bad input: listed file:line + reason matching the injected, {size}",
            matched["matched"],
            len(injected),
            "rows",
            1.0,
            note=f"listing {measured['listing_uri']} ({matched['listed']:,} lines; path "
            f"{'printed' if measured['listing_printed'] else 'NOT printed'} by run_local)",
        ),
        common.Row(
            f"bad input: count or listing mismatches (path printed too), {size}",
            len(errors),
            None,
            "errors",
            0,
            higher_is_better=False,
            note="; ".join(errors) or "none: counts and listing exact",
        ),
        common.Row(
            f"bad input: whole pipeline peak RSS, {size} ({scale.mode_name(measured['workers'])})",
            measured["peak_rss"] / 2**30,
            None,
            "GiB",
            scale_memory.TARGET_PEAK_GIB,
            higher_is_better=False,
        ),
        common.Row(
            f"bad input: whole pipeline wall time, {size}",
            measured["wall_s"],
            None,
            "s",
            note=f"CsvExampleGen {example_gen_s:.1f} s ({rows / max(example_gen_s, 1e-9):,.0f} "
            f"rows/s); per component (MLMD) {json.dumps(measured['seconds'])}",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--bad", type=int, default=None, help="malformed rows to inject")
    parser.add_argument(
        "--files",
        type=int,
        default=None,
        help="CSV files to write (default 16 per million rows; 1: one large file, which "
        "ExampleGen reads as 16 MB ranges)",
    )
    args = parser.parse_args(argv)
    print(common.format_table(run(args.quick, args.work_dir, args.rows, args.bad, args.files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
