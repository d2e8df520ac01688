"""The synthetic tabular generator: deterministic, the promised columns and missing rates, and a
label a linear model learns."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from pipeline import datasets
from pipeline.datasets import synthetic as synth_data


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    def files(name, seed):
        paths = synth_data.write_synth(str(tmp_path / name), rows=3_000, files=3, seed=seed)
        return [open(path, "rb").read() for path in paths]

    first = files("a", seed=7)
    assert first == files("b", seed=7)
    assert first != files("c", seed=8)
    assert len(first) == 3


def test_columns_types_cardinalities_and_missing_rates(tmp_path):
    paths = synth_data.write_synth(str(tmp_path), rows=40_000, files=4, seed=0)
    assert sorted(paths) == sorted(glob.glob(os.path.join(tmp_path, "*.csv")))
    table = pa.concat_tables(pacsv.read_csv(path) for path in paths)
    assert table.column_names == synth_data.synth_columns()
    assert table.num_rows == 40_000
    for name, rate in zip(synth_data.SYNTH_NUMERIC, synth_data.SYNTH_MISSING, strict=True):
        missing = table.column(name).null_count / table.num_rows
        assert missing == pytest.approx(rate, abs=0.01), name
    for name, size in synth_data.SYNTH_CATEGORICAL:
        assert table.column(name).null_count == 0
        distinct = len(set(table.column(name).to_pylist()))
        assert distinct == size or (size == 1000 and distinct > 990), name
    labels = table.column(synth_data.SYNTH_LABEL_KEY).to_pylist()
    shares = {c: labels.count(c) / len(labels) for c in synth_data.SYNTH_CLASSES}
    assert all(share > 0.15 for share in shares.values()), shares


def test_label_is_learnable_well_above_chance(tmp_path):
    from sklearn.linear_model import LogisticRegression

    table = synth_data.synth_table(20_000, seed=3)
    numeric = np.stack(
        [table.column(n).to_numpy() for n in synth_data.SYNTH_NUMERIC], axis=1
    ).astype(np.float64)
    numeric = np.where(np.isnan(numeric), np.nanmean(numeric, axis=0), numeric)
    numeric = (numeric - numeric.mean(axis=0)) / numeric.std(axis=0)
    cat_5 = np.array(table.column("cat_5").to_pylist())
    one_hot = (cat_5[:, None] == np.unique(cat_5)[None, :]).astype(np.float64)
    x = np.concatenate([numeric, one_hot], axis=1)
    y = np.array(table.column(synth_data.SYNTH_LABEL_KEY).to_pylist())
    classifier = LogisticRegression(max_iter=500).fit(x[:15_000], y[:15_000])
    accuracy = classifier.score(x[15_000:], y[15_000:])
    majority = max(np.mean(y[15_000:] == c) for c in synth_data.SYNTH_CLASSES)
    assert accuracy > 0.8 and accuracy > majority + 0.3, (accuracy, majority)


def test_curated_schema_matches_the_columns():
    from components.tfx_components.example_gen.csv_reader import schema_column_types
    from pipeline import preflight

    path = datasets.curated_schema_path(datasets.SYNTH)
    assert path is not None
    types = schema_column_types(preflight.load_schema(path))
    assert sorted(types) == sorted(synth_data.synth_columns())
    assert {types[n] for n in synth_data.SYNTH_NUMERIC} == {"float"}


def test_cli_writes_the_files_and_rejects_bad_sizes(tmp_path, capsys):
    assert synth_data.main(["--rows", "100", "--files", "2", "--out", str(tmp_path)]) == 0
    assert len(glob.glob(os.path.join(tmp_path, "*.csv"))) == 2
    assert "--label label" in capsys.readouterr().out
    with pytest.raises(ValueError, match="rows and files must be >= 1"):
        synth_data.write_synth(str(tmp_path / "x"), rows=0, files=1, seed=0)
