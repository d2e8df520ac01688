"""Runs killed for real (SIGKILL during Transform, then during Trainer) and interrupted (SIGINT
during Evaluator) resume: finished components come from the cache, the killed one runs again
from scratch, and nothing a killed execution half-wrote is read or left behind."""

from __future__ import annotations

import os
import signal
import time

import pytest
from ml_metadata.proto import metadata_store_pb2 as mlmd

from pipeline.local import guard as run_guard
from pipeline.mlmd import connection
from tests.reliability.helpers import (
    Run,
    kill,
    node_states,
    store_is_consistent,
    wait_for_running_execution,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_killed_and_interrupted_runs_resume_without_reading_partial_output(tmp_path):
    out = str(tmp_path / "out")
    metadata = os.path.join(out, "penguins-pipeline", "metadata.sqlite")
    # Five training steps do not always beat the majority-class guess by the default skill;
    # blessing is not the point (-1 is below any accuracy skill on penguins' eval split).
    args = ("--output_root", out, "--min_classification_skill", "-1")

    first = Run(*args, log_path=str(tmp_path / "run1.log"))
    first.wait_for("Transform started")
    wait_for_running_execution(metadata, "Transform")
    time.sleep(3)  # inside tf.Transform's analysis
    kill(first)
    store = connection.open_store(metadata)
    [transform] = [
        e for e in store.get_executions() if e.last_known_state == mlmd.Execution.RUNNING
    ]
    # TFX 1.16 registers no output artifact before an execution publishes: the partial output
    # exists only on disk, under <node>/<output key>/<execution id>.
    transform_dir = os.path.join(out, "penguins-pipeline", "pipeline_root", "Transform")
    partial = [
        os.path.join(transform_dir, key, str(transform.id))
        for key in os.listdir(transform_dir)
        if os.path.isdir(os.path.join(transform_dir, key, str(transform.id)))
    ]
    assert partial, "the killed Transform left partial output"

    second = Run(*args, log_path=str(tmp_path / "run2.log"))
    second.wait_for("Trainer started")
    trainer_id = wait_for_running_execution(metadata, "Trainer")
    assert "Recovered 1 execution(s)" in second.output
    assert f"Transform (execution {transform.id}" in second.output
    for name in ("CsvExampleGen", "StatisticsGen", "ExampleValidator"):
        assert f"{name} cached" in second.output, second.output
    assert "Transform executed" in second.output
    assert not any(os.path.exists(uri) for uri in partial), "partial output left on disk"
    # Still inside the Trainer: the penguins' whole Trainer takes 3-4 s on 2 cores, and a 2 s
    # wait here once let it finish (the run was then killed in BaselineModel).
    time.sleep(0.5)
    kill(second)

    third = Run(*args, log_path=str(tmp_path / "run3.log"))
    third.wait_for("Evaluator started")
    evaluator_id = wait_for_running_execution(metadata, "Evaluator")
    assert "Recovered 1 execution(s)" in third.output
    assert f"Trainer (execution {trainer_id}" in third.output
    assert "Transform cached" in third.output and "Trainer executed" in third.output
    interrupted_at = time.monotonic()
    third.signal(signal.SIGINT)
    assert third.wait(30) == run_guard.EXIT_INTERRUPTED
    assert time.monotonic() - interrupted_at < 15, "Ctrl-C took too long"
    assert "Interrupted. Finished: " in third.output and "Trainer (executed)" in third.output
    assert "stopped: Evaluator" in third.output
    assert "python pipeline/run_local.py " in third.output

    fourth = Run(*args, log_path=str(tmp_path / "run4.log"))
    assert fourth.wait() == 0, fourth.output
    assert f"Evaluator (execution {evaluator_id}" in fourth.output, fourth.output
    assert "Trainer cached" in fourth.output
    assert "blessed:       yes" in fourth.output and "not pushed" not in fourth.output

    assert store_is_consistent(metadata) == []
    runs = node_states(metadata)
    assert len(runs) == 4
    assert runs[0]["Transform"] == "FAILED" and runs[1]["Transform"] == "COMPLETE"
    assert runs[1]["Trainer"] == "FAILED" and runs[2]["Trainer"] == "COMPLETE"
    assert runs[2]["Evaluator"] == "FAILED" and runs[3]["Evaluator"] == "COMPLETE"
    store = connection.open_store(metadata)
    abandoned = [
        e for e in store.get_executions() if run_guard.ABANDONED_PROPERTY in e.custom_properties
    ]
    assert len(abandoned) == 3
    assert all(e.last_known_state == mlmd.Execution.FAILED for e in abandoned)
