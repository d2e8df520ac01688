"""Data that drifts from the curated penguins schema never reaches the Trainer: each kind of drift
stops the run with a message that names it. Columns added or dropped stop in the pre-flight check
(nothing starts); a type change stops in ExampleGen (rows rejected, listed by file:line); a new
category value and missing values where the schema requires presence stop in ExampleValidator."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys

import pytest

from pipeline import datasets
from tests.reliability.helpers import FAST, PROJECT_ROOT, RUN_LOCAL, node_states

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _drift(rows: list[dict], kind: str) -> list[dict]:
    if kind == "new_column":
        return [{**row, "colour": "grey"} for row in rows]
    if kind == "dropped_column":
        return [{k: v for k, v in row.items() if k != "year"} for row in rows]
    if kind == "type_change":  # an int column now holds decimals
        return [{**row, "body_mass_g": f"{row['body_mass_g']}.5"} for row in rows]
    if kind == "new_category":
        return [
            {**row, "sex": "unknown" if i % 10 == 0 else row["sex"]} for i, row in enumerate(rows)
        ]
    if kind == "missing_values":  # island is required (presence min_fraction 1.0)
        return [
            {**row, "island": "NA" if i % 10 == 0 else row["island"]} for i, row in enumerate(rows)
        ]
    raise ValueError(kind)


# kind -> (exit code, where it stops, text the message must contain)
DRIFTS = {
    "new_column": (2, None, "column(s) ['colour'] not in the schema"),
    "dropped_column": (2, None, "missing column(s) ['year']"),
    "type_change": (1, "CsvExampleGen", "column 'body_mass_g': '3750.5' is not an int"),
    "new_category": (1, "ExampleValidator", "feature 'sex': ENUM_TYPE_UNEXPECTED_STRING_VALUES"),
    "missing_values": (
        1,
        "ExampleValidator",
        "feature 'island': INVALID_FEATURE_SHAPE, FEATURE_TYPE_LOW_FRACTION_PRESENT",
    ),
}


@pytest.mark.parametrize("kind", sorted(DRIFTS))
def test_drift_stops_before_trainer_naming_the_anomaly(kind, tmp_path, penguins_csv):
    with open(penguins_csv, newline="") as source:
        rows = list(csv.DictReader(source))
    drifted = _drift(rows, kind)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(drifted[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(drifted)
    data_dir = tmp_path / "penguins"
    data_dir.mkdir()
    (data_dir / "penguins.csv").write_text(text.getvalue())
    out = tmp_path / "out"
    schema = datasets.curated_schema_path(datasets.PENGUINS)
    result = subprocess.run(
        [sys.executable, RUN_LOCAL, *FAST, "--data", str(data_dir), "--label", "species"]
        + ["--schema", schema, "--output_root", str(out)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=600,
        check=False,
    )
    code, stage, message = DRIFTS[kind]
    report = f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
    assert result.returncode == code, report
    assert message in result.stderr, report
    assert "Trainer started" not in result.stdout and "Transform started" not in result.stdout
    metadata = os.path.join(out, "penguins-pipeline", "metadata.sqlite")
    if stage is None:  # stopped before any component
        assert "Traceback" not in result.stderr and not os.path.exists(metadata)
        return
    assert f"error: {stage} failed" in result.stderr, report
    [states] = node_states(metadata)
    assert states[stage] == "FAILED" and "Trainer" not in states and "Transform" not in states
