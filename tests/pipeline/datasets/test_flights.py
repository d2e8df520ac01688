"""The flights look-alike (`python -m pipeline.datasets.synthetic --flights`): nycflights13's
columns and cardinalities, the --cardinality knob, rows without the label, determinism."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from pipeline.datasets import synthetic as synth_data


def _read(paths) -> pa.Table:
    options = pacsv.ConvertOptions(strings_can_be_null=True)
    return pa.concat_tables(pacsv.read_csv(path, convert_options=options) for path in paths)


def _distinct(table: pa.Table, name: str) -> int:
    return len({value for value in table.column(name).to_pylist() if value is not None})


def test_real_tables_columns_and_cardinalities():
    table = synth_data.flights_table(60_000, seed=0)
    assert tuple(table.column_names) == synth_data.FLIGHTS_COLUMNS
    assert len(table.column_names) == 19
    assert _distinct(table, "carrier") == 16
    assert _distinct(table, "origin") == 3
    assert _distinct(table, "dest") == 105
    # Thousands of values: 60,000 draws of 4,044 tails and 6,935 hours see nearly all of them.
    assert 3_900 <= _distinct(table, "tailnum") <= 4_044
    assert 6_400 <= _distinct(table, "time_hour") <= 6_935
    assert 3_700 <= _distinct(table, "flight") <= 3_844
    assert pa.types.is_integer(table.schema.field("flight").type)
    rows = table.num_rows
    assert table.column("tailnum").null_count / rows == pytest.approx(0.0075, abs=0.002)
    assert table.column("arr_delay").null_count / rows == pytest.approx(0.028, abs=0.003)
    # Cancelled rows have no departure; every row without a departure has no label either.
    no_departure = table.column("dep_delay").is_null().to_pylist()
    no_label = table.column("arr_delay").is_null().to_pylist()
    assert any(no_departure) and all(b for a, b in zip(no_departure, no_label, strict=True) if a)
    # time_hour is the row's date and scheduled hour.
    for row in table.slice(0, 200).to_pylist():
        stamp = datetime.datetime.strptime(row["time_hour"], "%Y-%m-%d %H:%M:%S")
        assert (stamp.year, stamp.month, stamp.day, stamp.hour) == (
            row["year"],
            row["month"],
            row["day"],
            row["hour"],
        )
        assert row["sched_dep_time"] == row["hour"] * 100 + row["minute"]


def test_cardinality_scales_the_many_valued_text_columns_only():
    small = synth_data.flights_table(20_000, seed=0, cardinality=0.025)
    assert _distinct(small, "tailnum") == 101
    assert _distinct(small, "time_hour") == 9 * 19
    for name, size in (("carrier", 16), ("origin", 3), ("dest", 105)):
        assert _distinct(small, name) == size
    assert synth_data.flights_cardinalities(0.5) == {
        "carrier": 16,
        "origin": 3,
        "dest": 105,
        "tailnum": 2_022,
        "time_hour": 182 * 19,
    }
    with pytest.raises(ValueError, match="cardinality must be > 0"):
        synth_data.flights_table(10, seed=0, cardinality=0)


def test_same_seed_same_bytes_other_seed_or_cardinality_other_bytes(tmp_path):
    def files(name, **kwargs):
        paths = synth_data.write_flights(str(tmp_path / name), rows=2_000, files=2, **kwargs)
        return [open(path, "rb").read() for path in paths]

    first = files("a", seed=3, cardinality=0.5)
    assert len(first) == 2
    assert first == files("b", seed=3, cardinality=0.5)
    assert first != files("c", seed=4, cardinality=0.5)
    assert first != files("d", seed=3, cardinality=1.0)


def test_cli_writes_the_table_and_names_the_reject_fraction(tmp_path, capsys):
    out = tmp_path / "flights"
    assert (
        synth_data.main(
            ["--flights", "--rows", "3000", "--files", "3", "--out", str(out)]
            + ["--cardinality", "0.1", "--seed", "2"]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "--label arr_delay --max_rejected_fraction 0.05" in printed
    paths = sorted(str(path) for path in out.glob("*.csv"))
    assert len(paths) == 3
    table = _read(paths)
    assert table.num_rows == 3_000
    expected = synth_data.flights_table(3_000, seed=2, cardinality=0.1)
    assert table.column("tailnum").to_pylist() == expected.column("tailnum").to_pylist()
    assert _distinct(table, "tailnum") <= 404
    with pytest.raises(SystemExit):
        synth_data.main(["--rows", "10", "--out", str(tmp_path / "x"), "--cardinality", "2"])
