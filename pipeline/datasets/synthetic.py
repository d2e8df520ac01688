"""Synthetic tabular data at scale: `python -m pipeline.datasets.synthetic --rows N --out DIR`.

6 numeric columns (some values missing), 3 string columns with 5, 50 and 1000 distinct values,
and a 3-class string label that a linear model learns from them. Vectorized with numpy and
written with pyarrow's CSV writer: 1M rows in seconds, identical bytes for the same seed.
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
    import pyarrow.compute as pc

    if rows < 1 or files < 1:
        raise ValueError(f"rows and files must be >= 1, got rows={rows}, files={files}")
    os.makedirs(out_dir, exist_ok=True)
    per_file = [rows // files + (1 if i < rows % files else 0) for i in range(files)]
    paths = []
    for index, count in enumerate(per_file):
        path = os.path.join(out_dir, f"part-{index:05d}-of-{files:05d}.csv")
        table = synth_table(count, seed, index)
        # One joined string per row, unquoted (no value contains a comma), nulls as empty fields.
        lines = pc.binary_join_element_wise(
            *(pc.cast(column, "string") for column in table.columns),
            ",",
            null_handling="replace",
        )
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(",".join(table.column_names) + "\n")
            handle.write("\n".join(lines.to_pylist()))
            handle.write("\n")
        paths.append(path)
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
    args = parser.parse_args(argv)
    paths = write_synth(args.out, args.rows, args.files, args.seed)
    size = sum(os.path.getsize(p) for p in paths)
    print(
        f"wrote {args.rows} rows in {len(paths)} file(s), {size / 1e6:.1f} MB, under {args.out}; "
        f"run: python pipeline/run_local.py --data {args.out} --label {SYNTH_LABEL_KEY} "
        f"--schema schemas/{SYNTH}/schema.pbtxt"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
