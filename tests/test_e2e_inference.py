"""--infer_data end to end, as `python pipeline/run_local.py ... --infer_data DIR` runs it: rows
without labels read by the project's CSV ExampleGen (bad rows rejected and listed), predicted by
TFX's BulkInferrer with the blessed model, written as a CSV of the input columns plus the
prediction; the same predictions as pipeline.predict on the same rows; a rerun fully cached; a
model that is not blessed predicts nothing; a file whose columns do not match is refused before
any component runs."""

from __future__ import annotations

import csv
import json
import os

import pytest

from pipeline import predict
from pipeline.datasets import regression as regression_data
from pipeline.mlmd import connection, records
from tests.docs import pages
from tests.test_e2e_local import explain, run_local

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

LABEL = "species"
# The penguins' numbers are read as floats and ints: cells written as the model reads them.
BAD_FLOAT_ROW = ["Biscoe", "not-a-number", "17.0", "190", "3500", "male", "2008"]
# year is a fixed-shape feature of the curated schema: the model's parse needs it in every row.
NO_YEAR_ROW = ["Dream", "40.1", "18.2", "192", "3600", "female", ""]


def _penguin_rows(penguins_csv: str, count: int) -> tuple[list[str], list[list[str]]]:
    """The first `count` complete penguins, without the label column."""
    with open(penguins_csv, newline="") as handle:
        rows = list(csv.DictReader(handle))
    columns = [name for name in rows[0] if name != LABEL]
    complete = [r for r in rows if all(r[c] not in ("", "NA") for c in columns)]
    return columns, [[row[c] for c in columns] for row in complete[:count]]


def _summary_value(stdout: str, key: str) -> str:
    return stdout.split(f"  {key}:")[1].split("\n")[0].strip()


@pytest.fixture(scope="module")
def penguin_inference(tmp_path_factory, penguins_csv):
    tmp = tmp_path_factory.mktemp("infer")
    columns, rows = _penguin_rows(penguins_csv, 40)
    rows_dir = tmp / "rows"
    rows_dir.mkdir()
    path = rows_dir / "new_penguins.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows[:20])
        writer.writerow(BAD_FLOAT_ROW)  # line 22
        writer.writerows(rows[20:])
        writer.writerow(NO_YEAR_ROW)  # line 43
    # csv.md's command, as the page shows it, in a sandbox (./tfx_output).
    command = pages.command("docs/csv.md", "--infer_data ROWS")
    sandbox = pages.Sandbox(tmp / "sandbox")
    first = sandbox.run(command, {"ROWS": str(rows_dir)})
    second = sandbox.run(command, {"ROWS": str(rows_dir)})
    return {
        "first": first,
        "second": second,
        "path": str(path),
        "columns": columns,
        "rows": rows,
        "base": sandbox.output_root / "penguins-pipeline",
    }


def test_rows_in_equal_rows_predicted_plus_rejected_and_bad_rows_listed(penguin_inference):
    first = penguin_inference["first"]
    assert first.returncode == 0, explain(first)
    assert "rows to predict: *.csv in" in first.stdout
    assert "InferCsvExampleGen executed" in first.stdout
    assert "BulkInferrer executed" in first.stdout
    predictions = _summary_value(first.stdout, "predictions")
    assert "(42 row(s) read = 40 predicted + 2 rejected)" in predictions, first.stdout
    listing = _summary_value(first.stdout, "rejected rows to predict").split("listed in ")[1]
    with open(listing) as handle:
        listed = {row["line"]: row for row in map(json.loads, handle)}
    assert sorted(listed) == [22, 43], listed
    assert listed[22]["file"] == penguin_inference["path"]
    assert "column 'bill_length_mm': 'not-a-number' is not a float" in listed[22]["reason"]
    assert (
        "column 'year' (the model requires a value in every row) is empty" in (listed[43]["reason"])
    )


def test_predictions_csv_has_input_columns_class_and_probabilities_like_predict_py(
    penguin_inference,
):
    first = penguin_inference["first"]
    assert first.returncode == 0, explain(first)
    path = _summary_value(first.stdout, "predictions").split(" (")[0]
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        table = list(reader)
    columns = penguin_inference["columns"]
    classes = ["Adelie", "Gentoo", "Chinstrap"]
    assert header[: len(columns)] == columns
    assert header[len(columns)] == "predicted_species"
    assert sorted(header[len(columns) + 1 :]) == sorted(f"probability_{c}" for c in classes)
    assert len(table) == 40
    # Every input row is there once, its cells as they were read (numbers as the model reads
    # them: 39.1 as a float stays 39.1).
    by_input = {tuple(row[: len(columns)]): row[len(columns) :] for row in table}
    expected_inputs = {
        tuple(
            str(float(cell)) if name.startswith("bill_") else cell
            for name, cell in zip(columns, row, strict=True)
        )
        for row in penguin_inference["rows"]
    }
    assert set(by_input) == expected_inputs
    # pipeline.predict on the same file with the pushed model: same class, same probability.
    model_dir = predict.resolve_model_dir(str(penguin_inference["base"] / "serving_model"))
    results = list(predict.predict_csv(model_dir, penguin_inference["path"]))
    rejected = sorted(line for line, text, _ in results if text is None)
    assert rejected == [22, 43]
    with open(penguin_inference["path"], newline="") as handle:
        source = list(csv.reader(handle))
    compared = 0
    for line, text, _ in results:
        if text is None:
            continue
        cells = source[line - 1]
        key = tuple(
            str(float(cell)) if name.startswith("bill_") else cell
            for name, cell in zip(columns, cells, strict=True)
        )
        predicted, *probabilities = by_input[key]
        values = [float(p) for p in probabilities]
        assert abs(sum(values) - 1.0) < 1e-4, values
        name, probability = text.split("=", 1)[1].split("\t")
        assert predicted == name
        assert abs(max(values) - float(probability)) < 1e-3
        compared += 1
    assert compared == 40


def test_inference_result_in_mlmd_and_rerun_fully_cached(penguin_inference):
    first, second = penguin_inference["first"], penguin_inference["second"]
    assert second.returncode == 0, explain(second)
    assert "0 component(s) executed, 11 reused from cache" in second.stdout
    assert _summary_value(second.stdout, "predictions") == _summary_value(
        first.stdout, "predictions"
    )
    store = connection.open_store(str(penguin_inference["base"] / "metadata.sqlite"))
    [result] = store.get_artifacts_by_type("InferenceResult")
    assert records.custom_value(result, "blessed") == 1
    assert records.custom_value(result, "num_rows_predicted") == 40
    assert records.custom_value(result, "num_rows_read") == 42
    assert records.custom_value(result, "num_rows_rejected") == 2
    assert records.custom_value(result, "predictions_csv_uri") == os.path.join(
        result.uri, "predictions.csv"
    )


def test_a_file_whose_columns_do_not_match_is_refused_before_any_component(tmp_path, penguins_csv):
    columns, rows = _penguin_rows(penguins_csv, 5)
    rows_dir = tmp_path / "rows"
    rows_dir.mkdir()
    kept = [name for name in columns if name != "bill_length_mm"] + ["colour"]
    with open(rows_dir / "rows.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(kept)
        for row in rows:
            cells = dict(zip(columns, row, strict=True))
            writer.writerow([cells.get(name, "blue") for name in kept])
    out = tmp_path / "out"
    result = run_local("--output_root", str(out), "--infer_data", str(rows_dir))
    assert result.returncode == 2, explain(result)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: --infer_data "), line
    assert "missing column(s) ['bill_length_mm']" in line
    assert "unexpected column(s) ['colour']" in line
    assert not (out / "penguins-pipeline" / "pipeline_root").exists()


def test_regression_predicts_label_units_and_a_model_not_blessed_predicts_nothing(tmp_path):
    """scikit-learn's diabetes data; the rows to predict keep the patient id (an identifier left
    out of the features) and the label column: both passed through to the output unread."""
    source = regression_data.write_diabetes(str(tmp_path / "source"))
    with open(os.path.join(source, regression_data.DIABETES_FILE), newline="") as handle:
        rows = list(csv.DictReader(handle))
    for name, chosen in (("train", rows[:400]), ("rows", rows[400:])):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "patients.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["patient", *rows[0]])
            for index, row in enumerate(chosen):
                writer.writerow([f"patient-{name}-{index:04d}", *row.values()])
    label = regression_data.DIABETES_LABEL
    common = ["--data", str(tmp_path / "train"), "--label", label, "--epochs", "10"]
    common += ["--output_root", str(tmp_path / "out"), "--infer_data", str(tmp_path / "rows")]
    strict = run_local(*common, "--min_regression_skill", "0.95")
    assert strict.returncode == 3, explain(strict)
    assert f"the label column {label!r} is not read by the model and is kept" in strict.stdout
    assert "BulkInferrer executed" in strict.stdout
    assert (
        "predictions:   none: the model is not blessed, so BulkInferrer predicted nothing"
        in strict.stdout
    )
    base = tmp_path / "out" / "train-pipeline"
    store = connection.open_store(str(base / "metadata.sqlite"))
    [unblessed] = store.get_artifacts_by_type("InferenceResult")
    assert records.custom_value(unblessed, "blessed") == 0
    assert os.listdir(unblessed.uri) == []

    blessed = run_local(*common)
    assert blessed.returncode == 0, explain(blessed)
    assert "(42 row(s) read = 42 predicted + 0 rejected)" in blessed.stdout, blessed.stdout
    path = _summary_value(blessed.stdout, "predictions").split(" (")[0]
    with open(path, newline="") as handle:
        table = list(csv.DictReader(handle))
    assert list(table[0])[:2] == ["patient", "age"] and list(table[0])[-1] == f"predicted_{label}"
    by_patient = {row["patient"]: row for row in table}
    assert sorted(by_patient) == [f"patient-rows-{i:04d}" for i in range(42)]
    # The label is passed through as it was written; the prediction in its units.
    assert by_patient["patient-rows-0000"][label] == rows[400][label]
    model_dir = predict.resolve_model_dir(str(base / "serving_model"))
    for line, text, _ in predict.predict_csv(model_dir, str(tmp_path / "rows" / "patients.csv")):
        value = float(text.split("=", 1)[1])
        assert 25 < value < 346
        predicted = float(by_patient[f"patient-rows-{line - 2:04d}"][f"predicted_{label}"])
        assert abs(predicted - value) < 1e-3 * max(1.0, abs(value)), (line, predicted, value)
