"""The whole local pipeline on generated tabular data (`python -m pipeline.datasets.synthetic`),
as a user runs it with --data/--label/--schema: every row accounted for, transformed shards as
configured, and a model that learns the synthetic label."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from pipeline import datasets
from pipeline.datasets import synthetic as synth_data
from pipeline.mlmd import connection, records

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = 5_000


def test_synthetic_data_end_to_end(tmp_path):
    data_dir = tmp_path / "synth"
    synth_data.write_synth(str(data_dir), rows=ROWS, files=4, seed=1)
    output_root = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"),
            "--output_root",
            str(output_root),
            "--data",
            str(data_dir),
            "--label",
            synth_data.SYNTH_LABEL_KEY,
            "--schema",
            datasets.curated_schema_path(datasets.SYNTH),
            "--train_steps",
            "300",
            "--accuracy_threshold",
            "0.7",
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    store = connection.open_store(str(output_root / "synth-pipeline" / "metadata.sqlite"))
    examples = [a for a in store.get_artifacts_by_type("Examples") if "CsvExampleGen" in a.uri]
    counts = json.loads(records.custom_value(examples[0], "split_example_counts"))
    assert sum(counts.values()) == ROWS
    transformed = [a for a in store.get_artifacts_by_type("Examples") if "Transform" in a.uri]
    shards = glob.glob(os.path.join(transformed[0].uri, "Split-train", "*.gz"))
    assert len(shards) == 4
    assert os.listdir(output_root / "synth-pipeline" / "serving_model")  # blessed and pushed
