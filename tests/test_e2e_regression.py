"""A user's regression CSV end to end, as `python pipeline/run_local.py --data DIR --label COL`
runs it in a fresh process: scikit-learn's diabetes data (real, shipped inside scikit-learn),
written as a semicolon-separated file with a patient-id column and two rows without a label.
--task auto picks regression; the id is left out as a likely identifier; the unlabeled rows are
rejected within --max_rejected_fraction; the model is blessed against predicting the training
mean, pushed, and predicts in the label's units; a stricter bound blocks the push (exit 3)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from pipeline.datasets import regression as regression_data
from pipeline.mlmd import connection, evaluation, records
from tests.test_e2e_local import PROJECT_ROOT, explain, run_local

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def write_user_csv(source_dir: str, data_dir) -> list[dict]:
    with open(os.path.join(source_dir, regression_data.DIABETES_FILE), newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[5][regression_data.DIABETES_LABEL] = ""
    rows[17][regression_data.DIABETES_LABEL] = "NA"
    data_dir.mkdir()
    with open(data_dir / "patients.csv", "w", newline="") as handle:
        writer = csv.writer(handle, delimiter=";")
        writer.writerow(["patient", *rows[0]])
        for index, row in enumerate(rows):
            writer.writerow([f"patient-{index:04d}", *row.values()])
    return rows


def test_regression_run_blesses_pushes_and_predicts_in_label_units(tmp_path):
    source = regression_data.write_diabetes(str(tmp_path / "source"))
    rows = write_user_csv(source, tmp_path / "diabetes")
    out = tmp_path / "out"
    common = [
        "--data",
        str(tmp_path / "diabetes"),
        "--label",
        regression_data.DIABETES_LABEL,
        "--output_root",
        str(out),
        "--epochs",
        "10",
        "--max_rejected_fraction",
        "0.01",
    ]
    first = run_local(*common)
    assert first.returncode == 0, explain(first)
    stdout = first.stdout
    assert "task regression (label 'progression', --task); semicolon-separated" in stdout
    assert "likely identifiers (near-unique text): patient (442 distinct in 442)" in stdout
    assert "--keep_columns patient keeps them" in stdout
    assert "2 row(s) have no label" in stdout and "rows rejected: 2" in stdout
    # Where they are listed, one JSON line each with file, line and reason.
    listing = stdout.split("rejected rows: listed in ")[1].split()[0]
    with open(listing) as handle:
        listed = [json.loads(line) for line in handle]
    assert len(listed) == 2
    assert all(row["reason"].endswith("(the label) is empty") for row in listed)
    assert "blessed:       yes (skill over predicting the training mean" in stdout
    for metric in ("mean_absolute_error", "root_mean_squared_error", "mean_squared_error_skill"):
        assert metric in stdout
    # No CUDA plugin-registration noise, no tracebacks after the summary.
    assert "Unable to register" not in first.stderr and "Exception ignored" not in first.stderr

    base = out / "diabetes-pipeline"
    store = connection.open_store(str(base / "metadata.sqlite"))
    [evaluated] = store.get_artifacts_by_type("ModelEvaluation")
    metrics = evaluation.overall_metrics(evaluated.uri)
    assert metrics["mean_squared_error_skill"] > 0.2, metrics
    assert 20 < metrics["mean_absolute_error"] < 70, metrics  # progression runs 25..346
    # The training mean's errors beside the model's, in the label's units: larger (skill > 0).
    baseline = stdout.split("baseline:      predicting the training mean: MAE ")[1]
    mean_mae = float(baseline.split(",")[0])
    assert mean_mae > metrics["mean_absolute_error"], stdout
    [pushed] = store.get_artifacts_by_type("PushedModel")
    assert records.custom_value(pushed, "pushed") == 1

    requests = tmp_path / "requests.csv"
    with open(requests, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows[:20])
    predicted = subprocess.run(
        [sys.executable, "-m", "pipeline.predict", "--model", str(base / "serving_model")]
        + ["--csv", str(requests)],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=300,
        check=False,
    )
    assert predicted.returncode == 0, explain(predicted)
    lines = predicted.stdout.splitlines()
    assert len(lines) == 20 and lines[0].startswith(f"{requests}:2\tprogression=")
    values = [float(line.rsplit("=", 1)[1]) for line in lines]
    assert all(0 < value < 400 for value in values), values

    strict = run_local(*common, "--min_regression_skill", "0.95")
    assert strict.returncode == 3, explain(strict)
    assert "0 component(s) executed" not in strict.stdout
    assert "is below 0.95 (--min_regression_skill sets it)" in strict.stdout
    assert "exit code 3: a model was trained but not pushed" in strict.stdout
