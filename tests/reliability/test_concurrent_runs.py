"""Two local runs started together on different data into one output root and one SQLite MLMD
file: the second waits for the first (the run lock), both succeed, and each run's artifacts and
lineage are its own."""

from __future__ import annotations

import os

import pytest
from ml_metadata.proto import metadata_store_pb2 as mlmd

from pipeline import datasets, run_local
from pipeline.mlmd import connection
from tests.reliability.helpers import Run, node_states, store_is_consistent

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _write_half(penguins_csv: str, directory, keep_even: bool) -> str:
    with open(penguins_csv) as source:
        lines = source.read().splitlines()
    rows = [line for i, line in enumerate(lines[1:]) if (i % 2 == 0) == keep_even]
    directory.mkdir()
    (directory / "penguins.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    return str(directory)


def test_two_runs_at_once_share_a_store_safely(tmp_path, penguins_csv):
    out = str(tmp_path / "out")
    schema = datasets.curated_schema_path(datasets.PENGUINS)
    common = ("--output_root", out, "--pipeline_name", "shared", "--label", "species")
    common += ("--schema", schema, "--min_classification_skill", "-1")
    runs = []
    for name, even in (("even", True), ("odd", False)):
        data = _write_half(penguins_csv, tmp_path / name, even)
        runs.append(Run(*common, "--data", data, log_path=str(tmp_path / f"{name}.log")))
    codes = [run.wait() for run in runs]
    # Both runs complete; the later one may train a model that is not blessed (it must not be
    # worse than the first run's pushed model), which exits EXIT_NOT_PUSHED, not an error.
    assert all(code in (0, run_local.EXIT_NOT_PUSHED) for code in codes), "\n".join(
        run.output for run in runs
    )
    waited = [run for run in runs if "Waiting: another run (PID" in run.output]
    assert len(waited) == 1, "exactly one run waits for the other"

    metadata = os.path.join(out, "shared", "metadata.sqlite")
    assert store_is_consistent(metadata) == []
    states = node_states(metadata)
    assert len(states) == 2
    for run_states in states:
        # Different data: nothing is reused across the two runs.
        assert run_states["CsvExampleGen"] == "COMPLETE"
        assert run_states["Trainer"] == "COMPLETE" and run_states["Pusher"] == "COMPLETE"

    # Lineage: in each run, the Trainer's input comes from that run's own Transform, which read
    # that run's own ExampleGen output.
    store = connection.open_store(metadata)
    examples_by_run = []
    for context in store.get_contexts_by_type("pipeline_run"):
        executions = {e.id for e in store.get_executions_by_context(context.id)}
        events = store.get_events_by_execution_ids(list(executions))
        inputs = {e.artifact_id for e in events if e.type == mlmd.Event.INPUT}
        outputs = {e.artifact_id for e in events if e.type == mlmd.Event.OUTPUT}
        # Every artifact read in this run (but the imported schema and the resolved baseline)
        # was written in this run.
        foreign = [
            a
            for a in store.get_artifacts_by_id(list(inputs - outputs))
            if a.type_id
            not in {
                store.get_artifact_type("Schema").id,
                store.get_artifact_type("Model").id,
                store.get_artifact_type("ModelBlessing").id,
            }
        ]
        assert foreign == [], foreign
        examples_by_run.append(
            {
                a.uri
                for a in store.get_artifacts_by_id(list(outputs))
                if a.type_id == store.get_artifact_type("Examples").id
            }
        )
    assert not examples_by_run[0] & examples_by_run[1]
