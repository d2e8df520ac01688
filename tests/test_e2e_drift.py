"""Schema drift between runs: a good run on penguin CSV with the curated schema, then one run per
kind of drift in the same output root and MLMD store. Each drifted run stops before Trainer with
a message that names the problem, and MLMD shows no new Trainer execution."""

from __future__ import annotations

import csv
import shutil

import pytest

from pipeline import datasets
from pipeline.mlmd import connection, records
from tests.docs import pages
from tests.test_e2e_local import explain

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _rows(penguins_csv: str) -> tuple[list[str], list[list[str]]]:
    with open(penguins_csv, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        return header, list(reader)


def _write(path: str, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _set(header, rows, column: str, value: str, every: int = 10) -> list[list[str]]:
    index = header.index(column)
    changed = [list(row) for row in rows]
    for number, row in enumerate(changed):
        if number % every == 0:
            row[index] = value
    return changed


def _drop(header, rows, column: str):
    index = header.index(column)
    return header[:index] + header[index + 1 :], [r[:index] + r[index + 1 :] for r in rows]


DRIFTS = {
    # name: (make(header, rows) -> (header, rows), exit code, failing stage, expected text)
    "new_column": (
        lambda h, r: (h + ["tag"], [row + ["x"] for row in r]),
        2,
        None,
        "column(s) ['tag'] not in the schema",
    ),
    "dropped_column": (lambda h, r: _drop(h, r, "sex"), 2, None, "missing column(s) ['sex']"),
    "type_change": (
        lambda h, r: (h, _set(h, r, "body_mass_g", "heavy")),
        1,
        "CsvExampleGen",
        "body_mass_g",
    ),
    "new_category": (
        lambda h, r: (h, _set(h, r, "island", "Atlantis")),
        1,
        "ExampleValidator",
        "island",
    ),
    "missing_where_required": (
        lambda h, r: (h, _set(h, r, "year", "NA", every=5)),
        1,
        "ExampleValidator",
        "year",
    ),
    "out_of_range": (
        lambda h, r: (h, _set(h, r, "body_mass_g", "-5")),
        1,
        "ExampleValidator",
        "body_mass_g",
    ),
}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, penguins_csv):
    """csv.md's run with a curated schema (`--schema schema.pbtxt`, here the penguins' curated
    one), DIR a copy of the penguins CSV; each drifted run is the same command again."""
    sandbox = pages.Sandbox(tmp_path_factory.mktemp("drift"))
    data = sandbox.root / "penguins_data"
    data.mkdir()
    shutil.copy(penguins_csv, data / "penguins.csv")
    shutil.copy(datasets.curated_schema_path(datasets.PENGUINS), sandbox.root / "schema.pbtxt")
    command = pages.command("docs/csv.md", "--schema schema.pbtxt")
    values = {"DIR": str(data), "COLUMN": "species"}

    def run():
        return sandbox.run(command, values)

    result = run()
    assert result.returncode == 0, explain(result)
    return {"root": sandbox.output_root, "data": data, "run": run}


def _trainer_executions(root) -> int:
    store = records.Store(
        connection.open_store(str(root / "penguins_data-pipeline" / "metadata.sqlite"))
    )
    return sum(
        1
        for run in store.runs()
        for execution in store.executions(run)
        if store.node_of(execution) == "Trainer"
    )


@pytest.mark.parametrize("kind", sorted(DRIFTS))
def test_drift_stops_before_trainer_and_names_the_problem(good_run, penguins_csv, kind):
    make, exit_code, stage, expected = DRIFTS[kind]
    header, rows = make(*_rows(penguins_csv))
    _write(str(good_run["data"] / "penguins.csv"), header, rows)
    try:
        result = good_run["run"]()
    finally:
        shutil.copy(penguins_csv, good_run["data"] / "penguins.csv")
    assert result.returncode == exit_code, explain(result)
    assert expected in result.stderr, explain(result)
    if stage:
        assert f"error: {stage} failed" in result.stderr, explain(result)
    assert "Trainer started" not in result.stdout
    assert _trainer_executions(good_run["root"]) == 1
