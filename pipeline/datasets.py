"""Datasets the pipeline knows: the embedded penguins CSV and users' own CSV directories."""

from __future__ import annotations

import os

from components import features
from pipeline.config import DatasetConfig

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMAS_DIR = os.path.join(PROJECT_ROOT, "schemas")
PENGUINS = "penguins"


def penguins_data_root() -> str:
    """palmerpenguins ships its CSV inside the package: real data with nothing downloaded."""
    import palmerpenguins

    return os.path.join(os.path.dirname(palmerpenguins.__file__), "data")


def curated_schema_path(dataset_name: str) -> str | None:
    path = os.path.join(SCHEMAS_DIR, dataset_name, "schema.pbtxt")
    return path if os.path.isfile(path) else None


def penguins() -> DatasetConfig:
    return DatasetConfig(
        name=PENGUINS,
        data_root=penguins_data_root(),
        # The package also ships penguins-raw.csv (other columns); read only the standard file.
        file_pattern="penguins.csv",
        label_key=features.PENGUINS_LABEL_KEY,
        schema_path=curated_schema_path(PENGUINS),
    )


def user_csv(
    data_root: str, label_key: str, name: str | None = None, schema_path: str | None = None
) -> DatasetConfig:
    data_root = os.path.abspath(data_root)
    name = name or os.path.basename(data_root.rstrip(os.sep)) or "csv"
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=label_key,
        schema_path=os.path.abspath(schema_path) if schema_path else curated_schema_path(name),
    )


# --- Image classification: folders of JPEG/PNG files, one sub-folder per class -----------------

DIGITS = "digits"
# Side of the square digits are resized to (they are written as 32x32 JPEG files).
DIGITS_IMAGE_SIZE = 32


def add_image_flags(parser) -> None:
    """--image_size and --image_model, as the local and the Kubeflow runner take them."""
    from pipeline import config as config_lib

    parser.add_argument(
        "--image_size",
        type=int,
        default=DIGITS_IMAGE_SIZE,
        help="images are resized to this square in the transform graph",
    )
    parser.add_argument(
        "--image_model",
        choices=config_lib.IMAGE_MODELS,
        default=config_lib.TrainingConfig().image_model,
        help="image classifier: small_cnn (fast on CPU) or mobilenet_v2 (weights=None)",
    )


def digits(output_root: str, image_size: int = DIGITS_IMAGE_SIZE) -> DatasetConfig:
    """scikit-learn's 1,797 handwritten digits, written once as JPEG files under
    <output_root>/data/digits/<digit>/ (nothing downloaded: they ship inside scikit-learn)."""
    from pipeline import image_data

    data_root = image_data.write_digits(os.path.join(os.path.abspath(output_root), "data", DIGITS))
    return DatasetConfig(
        name=DIGITS,
        data_root=data_root,
        label_key=features.IMAGE_LABEL_KEY,
        schema_path=curated_schema_path(DIGITS),
        kind="images",
        image_size=image_size,
    )


def user_images(
    data_root: str, image_size: int, name: str | None = None, schema_path: str | None = None
) -> DatasetConfig:
    data_root = os.path.abspath(data_root)
    name = name or os.path.basename(data_root.rstrip(os.sep)) or "images"
    return DatasetConfig(
        name=name,
        data_root=data_root,
        label_key=features.IMAGE_LABEL_KEY,
        schema_path=os.path.abspath(schema_path) if schema_path else curated_schema_path(name),
        kind="images",
        image_size=image_size,
    )


# --- Synthetic tabular data at scale (`python -m pipeline.datasets synth ...`) ------------------
# 6 numeric columns (some values missing), 3 string columns with 5, 50 and 1000 distinct values,
# and a 3-class string label that a linear model learns from them. Vectorized with numpy and
# written with pyarrow's CSV writer: 1M rows in seconds, identical bytes for the same seed.

SYNTH = "synth"
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


def synth(data_root: str) -> DatasetConfig:
    """A directory written by write_synth, with its curated schema."""
    return user_csv(
        data_root, SYNTH_LABEL_KEY, name=SYNTH, schema_path=curated_schema_path(SYNTH)
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pipeline.datasets")
    commands = parser.add_subparsers(dest="command", required=True)
    synth_parser = commands.add_parser(
        "synth", help="write a synthetic tabular CSV dataset (numeric + categorical, 3 classes)"
    )
    synth_parser.add_argument("--rows", type=int, required=True)
    synth_parser.add_argument("--files", type=int, default=16)
    synth_parser.add_argument("--seed", type=int, default=0)
    synth_parser.add_argument("--out", required=True, help="output directory")
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
