"""Synthetic tabular data at scale: `python -m pipeline.datasets.synthetic --rows N --out DIR`.

6 numeric columns (some values missing), 3 string columns with 5, 50 and 1000 distinct values,
and a 3-class string label that a linear model learns from them. Vectorized with numpy and
written with pyarrow's CSV writer: 1M rows in seconds, identical bytes for the same seed.

A flights-like regression (`--flights`, `write_flights`): nycflights13's `flights` columns
(18 and the arrival delay; text columns of 16, 3, 105, 4,044 and 6,935 values: carrier, origin,
dest, the tail number and an hourly timestamp; an integer flight code; 2.8 % of the rows without
the label), the shape of the issue-30 and issue-46 measurements of training on long tables;
`--cardinality` scales the tail numbers and the timestamps.

Wide tables (`write_wide`): any number of columns, half text with 8 values each, half numeric
(every other one with missing values), and a 3-class label learnt from a few of them; the shape
of the issue-30 measurements of Transform's cost per column (benchmarks.wide_transform).
"""

from __future__ import annotations

import os

from pipeline.datasets import SYNTH

SYNTH_LABEL_KEY = "label"
SYNTH_NUMERIC = tuple(f"num_{i}" for i in range(6))
SYNTH_CATEGORICAL = (("cat_5", 5), ("cat_50", 50), ("cat_1000", 1000))
SYNTH_CLASSES = ("low", "mid", "high")
# Fraction of missing cells per numeric column (num_0 is never missing).
SYNTH_MISSING = (0.0, 0.02, 0.05, 0.1, 0.02, 0.05)
# Class logits = numeric features @ weights + a per-cat_5 effect + noise.
_SYNTH_WEIGHTS = (
    (2.0, -1.5, 0.0),
    (0.0, 1.5, -1.5),
    (-1.0, 0.0, 1.0),
    (0.5, -0.5, 0.0),
    (0.0, 0.0, 0.0),
    (0.0, 0.0, 0.0),
)
_SYNTH_CAT_EFFECT = (
    (1.0, 0.0, -1.0),
    (0.0, 1.0, 0.0),
    (-1.0, 0.0, 1.0),
    (0.5, -0.5, 0.0),
    (0.0, 0.0, 0.0),
)
_SYNTH_NOISE = 0.5


def synth_columns() -> list[str]:
    return [*SYNTH_NUMERIC, *(name for name, _ in SYNTH_CATEGORICAL), SYNTH_LABEL_KEY]


def synth_table(rows: int, seed: int, file_index: int = 0):
    """One file's rows as a pyarrow Table; the same (rows, seed, file_index) gives the same
    table. Missing cells are nulls (written as empty CSV fields)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng([seed, file_index])
    numeric = rng.standard_normal((rows, len(SYNTH_NUMERIC)))
    # Different scales and offsets, so that Transform's z-scoring matters.
    numeric = numeric * np.array([1.0, 10.0, 0.1, 5.0, 2.0, 100.0]) + np.array(
        [0.0, 50.0, -1.0, 3.0, 0.0, 1000.0]
    )
    standardized = (numeric - np.array([0.0, 50.0, -1.0, 3.0, 0.0, 1000.0])) / np.array(
        [1.0, 10.0, 0.1, 5.0, 2.0, 100.0]
    )
    codes = [rng.integers(0, size, rows) for _, size in SYNTH_CATEGORICAL]
    logits = (
        standardized @ np.array(_SYNTH_WEIGHTS)
        + np.array(_SYNTH_CAT_EFFECT)[codes[0]]
        + _SYNTH_NOISE * rng.standard_normal((rows, len(SYNTH_CLASSES)))
    )
    label = np.array(SYNTH_CLASSES)[np.argmax(logits, axis=1)]
    columns = {}
    for i, name in enumerate(SYNTH_NUMERIC):
        missing = rng.random(rows) < SYNTH_MISSING[i]
        # Four decimals: realistic CSV text (about 62 bytes a row in all).
        columns[name] = pa.array(np.round(numeric[:, i], 4), mask=missing)
    for (name, size), code in zip(SYNTH_CATEGORICAL, codes, strict=True):
        prefix = "abc"[[n for n, _ in SYNTH_CATEGORICAL].index(name)]
        vocabulary = np.array([f"{prefix}{v}" for v in range(size)])
        columns[name] = pa.array(vocabulary[code])
    columns[SYNTH_LABEL_KEY] = pa.array(label)
    return pa.table(columns)


def write_synth(out_dir: str, rows: int, files: int, seed: int) -> list[str]:
    """Writes `rows` rows as `files` CSV files part-00000-of-0000F.csv under out_dir."""
    if rows < 1 or files < 1:
        raise ValueError(f"rows and files must be >= 1, got rows={rows}, files={files}")
    os.makedirs(out_dir, exist_ok=True)
    per_file = [rows // files + (1 if i < rows % files else 0) for i in range(files)]
    paths = []
    for index, count in enumerate(per_file):
        path = os.path.join(out_dir, f"part-{index:05d}-of-{files:05d}.csv")
        _write_csv(path, synth_table(count, seed, index))
        paths.append(path)
    return paths


def _write_csv(path: str, table) -> None:
    """One joined string per row, unquoted (no value contains a comma), nulls as empty fields."""
    import pyarrow.compute as pc

    lines = pc.binary_join_element_wise(
        *(pc.cast(column, "string") for column in table.columns),
        ",",
        null_handling="replace",
    )
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(",".join(table.column_names) + "\n")
        handle.write("\n".join(lines.to_pylist()))
        handle.write("\n")


WIDE_TEXT_VALUES = 8
WIDE_MISSING = 0.05


def wide_columns(columns: int) -> tuple[list[str], list[str]]:
    """(text, numeric) column names of a wide table of `columns` feature columns."""
    if columns < 2:
        raise ValueError(f"a wide table needs at least 2 feature columns, got {columns}")
    text = [f"t_{i:03d}" for i in range(columns // 2)]
    numeric = [f"n_{i:03d}" for i in range(columns - columns // 2)]
    return text, numeric


def wide_table(rows: int, columns: int, seed: int):
    """A pyarrow Table of `columns` feature columns and the label: text columns t_* with
    WIDE_TEXT_VALUES values (v0..v7, t_001 missing in WIDE_MISSING of the rows), numeric
    columns n_* at different scales (odd ones missing in WIDE_MISSING of the rows); the label
    is the argmax of n_000, n_001 and t_000's effect plus noise."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng([seed, columns])
    text, numeric = wide_columns(columns)
    values = rng.standard_normal((rows, len(numeric)))
    scales = 10.0 ** rng.integers(-1, 3, len(numeric))
    offsets = rng.integers(-5, 5, len(numeric)) * scales
    codes = rng.integers(0, WIDE_TEXT_VALUES, (rows, len(text)))
    effect = np.array([[1.5, 0.0, -1.5], [0.0, 1.5, 0.0]])[codes[:, 0] % 2]
    logits = np.zeros((rows, 3))
    logits[:, 0] += 2.0 * values[:, 0]
    if len(numeric) > 1:
        logits[:, 1] += 2.0 * values[:, 1]
    logits += effect + 0.5 * rng.standard_normal((rows, 3))
    table = {}
    vocabulary = np.array([f"v{v}" for v in range(WIDE_TEXT_VALUES)])
    for i, name in enumerate(text):
        missing = rng.random(rows) < WIDE_MISSING if i == 1 else None
        table[name] = pa.array(vocabulary[codes[:, i]], mask=missing)
    for i, name in enumerate(numeric):
        missing = rng.random(rows) < WIDE_MISSING if i % 2 else None
        table[name] = pa.array(np.round(values[:, i] * scales[i] + offsets[i], 4), mask=missing)
    table[SYNTH_LABEL_KEY] = pa.array(np.array(SYNTH_CLASSES)[np.argmax(logits, axis=1)])
    return pa.table(table)


def wide_schema(columns: int) -> str:
    """The schema.pbtxt of a wide table, as a reviewed one reads (every column one value a row
    where present; missing ones allowed where the generator leaves values out)."""
    text, numeric = wide_columns(columns)
    entries = []
    for kind, names in (("BYTES", [*text, SYNTH_LABEL_KEY]), ("FLOAT", numeric)):
        for name in names:
            may_miss = name == "t_001" or (name.startswith("n_") and int(name[2:]) % 2 == 1)
            fraction = 0.8 if may_miss else 1.0
            entries.append(
                f'feature {{\n  name: "{name}"\n  type: {kind}\n'
                f"  presence {{ min_fraction: {fraction} min_count: 1 }}\n"
                "  value_count { min: 1 max: 1 }\n}\n"
            )
    return "".join(entries)


def write_wide(out_dir: str, rows: int, columns: int, seed: int = 0) -> tuple[str, str]:
    """One CSV file of a wide table under out_dir/data and its schema; (data_dir, schema)."""
    data_dir = os.path.join(out_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    _write_csv(os.path.join(data_dir, "wide.csv"), wide_table(rows, columns, seed))
    schema_path = os.path.join(out_dir, "schema.pbtxt")
    with open(schema_path, "w", encoding="utf-8") as handle:
        handle.write(wide_schema(columns))
    return data_dir, schema_path


FLIGHTS_LABEL_KEY = "arr_delay"
# nycflights13's `flights` (336,776 rows): its columns in its order, and the distinct values of
# its text columns and its integer flight code.
FLIGHTS_COLUMNS = (
    "year", "month", "day", "dep_time", "sched_dep_time", "dep_delay", "arr_time",
    "sched_arr_time", "arr_delay", "carrier", "flight", "tailnum", "origin", "dest", "air_time",
    "distance", "hour", "minute", "time_hour",
)  # fmt: skip
FLIGHTS_CARRIERS = 16
FLIGHTS_ORIGINS = ("EWR", "JFK", "LGA")
FLIGHTS_DESTINATIONS = 105
FLIGHTS_FLIGHT_CODES = 3_844
FLIGHTS_TAIL_NUMBERS = 4_044
FLIGHTS_DAYS = 365
FLIGHTS_HOURS = tuple(range(5, 24))  # scheduled departures 05:00-23:59: 19 hours a day
# Rows without the label: cancelled (no departure, no arrival) and diverted (no arrival);
# 9,430 of 336,776 (2.8 %) in the real table, so a run needs --max_rejected_fraction 0.05.
FLIGHTS_CANCELLED = 0.0245
FLIGHTS_DIVERTED = 0.0035
# Rows without a tail number (mostly cancelled flights; 0.75 % in the real table).
FLIGHTS_NO_TAIL = 0.0075


def flights_cardinalities(cardinality: float = 1.0) -> dict[str, int]:
    """The distinct values the look-alike draws each text column from: carrier, origin and dest as
    the real table's; tailnum and time_hour (days x 19 hourly slots) scaled by `cardinality`
    (1.0: the real table's 4,044 and 6,935; 0.025: about 100 and 171)."""
    if not cardinality > 0:
        raise ValueError(f"cardinality must be > 0, got {cardinality}")
    days = max(1, round(FLIGHTS_DAYS * cardinality))
    return {
        "carrier": FLIGHTS_CARRIERS,
        "origin": len(FLIGHTS_ORIGINS),
        "dest": FLIGHTS_DESTINATIONS,
        "tailnum": max(1, round(FLIGHTS_TAIL_NUMBERS * cardinality)),
        "time_hour": days * len(FLIGHTS_HOURS),
    }


def flights_table(rows: int, seed: int, cardinality: float = 1.0):
    """A pyarrow Table shaped like nycflights13's `flights` (its 19 columns in its order; the
    label, the arrival delay in minutes: a regression): dates and scheduled times over
    flights_cardinalities' days, a carrier of 16, an origin of 3, a destination of 105 (each
    with its distance), an integer flight code of 3,844, a tail number (`N123AB`; each plane
    flies for one carrier and has its own delay; missing in 0.75 % of the rows) and the hourly
    timestamp `time_hour` (`2013-01-01 05:00:00`; a day's weather delays every flight of it);
    the departure delay is heavy tailed, and cancelled (2.45 %: no dep/arr times, delays or air
    time) and diverted (0.35 %: no arrival) rows have no label. The same (rows, seed,
    cardinality) gives the same table."""
    import numpy as np
    import pyarrow as pa

    sizes = flights_cardinalities(cardinality)
    days = sizes["time_hour"] // len(FLIGHTS_HOURS)
    rng = np.random.default_rng([seed, rows])
    # Per-value effects depend on the seed and the cardinality only (not the rows).
    fixed = np.random.default_rng([seed, sizes["tailnum"], days])
    day_index = rng.integers(0, days, rows)
    date = np.datetime64("2013-01-01") + day_index
    year = date.astype("datetime64[Y]").astype(np.int64) + 1970
    month = date.astype("datetime64[M]").astype(np.int64) % 12 + 1
    day = (date - date.astype("datetime64[M]")).astype(np.int64) + 1
    hour = rng.choice(np.array(FLIGHTS_HOURS), rows)
    minute = rng.integers(0, 60, rows)
    tail = rng.integers(0, sizes["tailnum"], rows)
    tail_carrier = fixed.integers(0, FLIGHTS_CARRIERS, sizes["tailnum"])
    carrier = tail_carrier[tail]
    origin = rng.integers(0, len(FLIGHTS_ORIGINS), rows)
    dest = rng.integers(0, FLIGHTS_DESTINATIONS, rows)
    codes = np.sort(fixed.choice(np.arange(1, 8_501), FLIGHTS_FLIGHT_CODES, replace=False))
    flight = codes[rng.integers(0, FLIGHTS_FLIGHT_CODES, rows)]
    route_distance = np.random.default_rng(seed).integers(80, 4_000, FLIGHTS_DESTINATIONS)
    distance = route_distance[dest] + 20 * origin
    air_time = np.round(distance / 8.0 + 15 + rng.normal(0, 8, rows)).astype(np.int64)
    day_weather = fixed.exponential(6.0, days)
    # Late departures: most flights near on time, a long tail later in the day and on bad days.
    dep_delay = np.round(
        rng.exponential(10 + hour + day_weather[day_index], rows) - rng.exponential(8, rows)
    ).astype(np.int64)
    carrier_effect = np.random.default_rng(seed + 1).normal(0, 6, FLIGHTS_CARRIERS)
    tail_effect = fixed.normal(0, 3, sizes["tailnum"])
    arr_delay = np.round(
        dep_delay
        - 6
        + 0.004 * distance
        + carrier_effect[carrier]
        + tail_effect[tail]
        + 0.3 * day_weather[day_index]
        + rng.normal(0, 9, rows)
    ).astype(np.int64)
    outcome = rng.random(rows)
    cancelled = outcome < FLIGHTS_CANCELLED
    no_arrival = outcome < FLIGHTS_CANCELLED + FLIGHTS_DIVERTED
    no_tail = rng.random(rows) < FLIGHTS_NO_TAIL
    sched_dep = hour * 100 + minute
    dep_minutes = (hour * 60 + minute + np.maximum(dep_delay, -30)) % 1440
    arr_minutes = (dep_minutes + air_time + 20) % 1440
    sched_arr = (hour * 60 + minute + air_time + 20) % 1440
    letters = np.array(list("ABCDEFGHJKLMNPRSTUVWXYZ"))
    tail_names = np.array(
        [
            f"N{100 + (i * 7919) % 900}{letters[i % 23]}{letters[(i // 23) % 23]}"
            + ("" if i < 23 * 23 * 900 else str(i))
            for i in range(sizes["tailnum"])
        ]
    )
    hours = np.char.zfill(hour.astype(str), 2)
    time_hour = np.char.add(np.char.add(date.astype(str), " "), np.char.add(hours, ":00:00"))
    table = {
        "year": year,
        "month": month,
        "day": day,
        "dep_time": pa.array((dep_minutes // 60) * 100 + dep_minutes % 60, mask=cancelled),
        "sched_dep_time": sched_dep,
        "dep_delay": pa.array(dep_delay, mask=cancelled),
        "arr_time": pa.array((arr_minutes // 60) * 100 + arr_minutes % 60, mask=no_arrival),
        "sched_arr_time": (sched_arr // 60) * 100 + sched_arr % 60,
        FLIGHTS_LABEL_KEY: pa.array(arr_delay, mask=no_arrival),
        "carrier": pa.array(np.array([f"C{c:02d}" for c in range(FLIGHTS_CARRIERS)])[carrier]),
        "flight": flight,
        "tailnum": pa.array(tail_names[tail], mask=no_tail),
        "origin": pa.array(np.array(FLIGHTS_ORIGINS)[origin]),
        "dest": pa.array(np.array([f"D{d:03d}" for d in range(FLIGHTS_DESTINATIONS)])[dest]),
        "air_time": pa.array(air_time, mask=no_arrival),
        "distance": distance,
        "hour": hour,
        "minute": minute,
        "time_hour": pa.array(time_hour),
    }
    assert tuple(table) == FLIGHTS_COLUMNS
    return pa.table(table)


def write_flights(
    out_dir: str, rows: int, files: int = 1, seed: int = 0, cardinality: float = 1.0
) -> list[str]:
    """flights_table's rows in `files` CSV files under out_dir (flights-00000.csv, ...)."""
    if rows < 1 or files < 1:
        raise ValueError(f"rows and files must be >= 1, got rows={rows}, files={files}")
    os.makedirs(out_dir, exist_ok=True)
    table = flights_table(rows, seed, cardinality)
    paths = []
    for index in range(files):
        start, end = index * rows // files, (index + 1) * rows // files
        paths.append(os.path.join(out_dir, f"flights-{index:05d}.csv"))
        _write_csv(paths[-1], table.slice(start, end - start))
    return paths


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m pipeline.datasets.synthetic",
        description="write a synthetic tabular CSV dataset (numeric + categorical, 3 classes)",
    )
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--flights",
        action="store_true",
        help=f"a flights-like regression table instead (19 columns, label {FLIGHTS_LABEL_KEY})",
    )
    parser.add_argument(
        "--cardinality",
        type=float,
        default=1.0,
        help="with --flights: scales the distinct values of the text columns tailnum and "
        "time_hour (1.0: the real table's 4,044 and 6,935; 0.025: about 100 and 171)",
    )
    args = parser.parse_args(argv)
    if args.cardinality != 1.0 and not args.flights:
        parser.error("--cardinality applies to --flights tables only")
    if args.flights:
        paths = write_flights(args.out, args.rows, args.files, args.seed, args.cardinality)
        run = f"--data {args.out} --label {FLIGHTS_LABEL_KEY} --max_rejected_fraction 0.05"
    else:
        paths = write_synth(args.out, args.rows, args.files, args.seed)
        run = f"--data {args.out} --label {SYNTH_LABEL_KEY} --schema schemas/{SYNTH}/schema.pbtxt"
    size = sum(os.path.getsize(p) for p in paths)
    print(
        f"wrote {args.rows} rows in {len(paths)} file(s), {size / 1e6:.1f} MB, under {args.out}; "
        f"run: python pipeline/run_local.py {run}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
