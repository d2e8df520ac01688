"""The cache never serves a stale result: on a copy of the project, edits to preprocessing, the
model, a custom component's executor and the curated schema rerun exactly the components that
depend on them (asserted from ML Metadata), a comment-only edit and no edit rerun nothing, and
the console says why each component reran."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pipeline import run_local
from pipeline.mlmd import connection, records
from tests.pipeline_components import CSV_COMPONENTS

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPONENTS = set(CSV_COMPONENTS)
# A new model is a new candidate: its baseline is looked up again.
AFTER_MODEL = {"Trainer", "BaselineModel", "Evaluator", "Pusher"}


class Project:
    """A copy of the project's packages and schemas; runs import it, not the installed one."""

    def __init__(self, root):
        self.root = str(root)
        for name in ("components", "pipeline", "schemas"):
            shutil.copytree(
                os.path.join(PROJECT_ROOT, name),
                os.path.join(self.root, name),
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        self.output_root = os.path.join(self.root, "out")

    def edit(self, path: str, old: str, new: str) -> None:
        path = os.path.join(self.root, path)
        with open(path) as handle:
            text = handle.read()
        assert text.count(old) == 1, f"{old!r} must occur once in {path}"
        with open(path, "w") as handle:
            handle.write(text.replace(old, new))

    def run(self) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [
                sys.executable,
                os.path.join(self.root, "pipeline", "run_local.py"),
                "--output_root",
                self.output_root,
                "--epochs",
                "2",
            ],
            capture_output=True,
            text=True,
            cwd=self.root,
            env=dict(os.environ, PYTHONPATH=self.root),
            timeout=900,
            check=False,
        )
        # A retrained model may not be blessed against the previous one (exit EXIT_NOT_PUSHED):
        # what is cached is the point here, not the blessing.
        assert result.returncode in (0, run_local.EXIT_NOT_PUSHED), (
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
        )
        return result

    def executed_in_last_run(self) -> set[str]:
        store = connection.open_store(
            os.path.join(self.output_root, "penguins-pipeline", "metadata.sqlite")
        )
        last = list(records.Store(store).node_states_by_run().values())[-1]
        assert set(last) >= COMPONENTS, last
        assert all(last[name] in ("COMPLETE", "CACHED") for name in COMPONENTS), last
        return {name for name in COMPONENTS if last[name] == "COMPLETE"}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = Project(tmp_path_factory.mktemp("project"))
    project.run()
    assert project.executed_in_last_run() == COMPONENTS
    return project


# Order matters: each step starts from the state the previous one left.
STEPS = [
    ("nothing", None, set(), []),
    (
        "preprocessing",
        ("components/ml/preprocessing.py", "NUM_OOV_BUCKETS = 1", "NUM_OOV_BUCKETS = 2"),
        {"Transform"} | AFTER_MODEL,
        ["Transform reran: code changed: components/ml/preprocessing.py"],
    ),
    (
        "model",
        (
            "components/ml/model.py",
            'x = keras.layers.Dense(units, activation="relu")(x)',
            'x = keras.layers.Dense(units, activation="tanh")(x)',
        ),
        AFTER_MODEL,
        ["Trainer reran: code changed: components/ml/model.py"],
    ),
    (
        "comment only",
        ("components/ml/model.py", "# float32 output even", "# (reworded) float32 output even"),
        set(),
        [],
    ),
    (
        "custom executor",
        (
            "components/tfx_components/validation/executor.py",
            "class DataAnomaliesError(RuntimeError):",
            "class DataAnomaliesError(ValueError):",
        ),
        {"ExampleValidator"},
        ["ExampleValidator reran: code changed: components/tfx_components/validation/executor.py"],
    ),
    (
        "curated schema",
        (
            "schemas/penguins/schema.pbtxt",
            'name: "bill_length_mm"\n  type: FLOAT',
            'name: "bill_length_mm"\n  type: FLOAT\n  annotation { tag: "length" }',
        ),
        COMPONENTS - {"CsvExampleGen", "StatisticsGen"},
        ["ImportSchemaGen reran: curated schema changed"],
    ),
]


@pytest.mark.parametrize(("what", "edit", "expected", "lines"), STEPS, ids=[s[0] for s in STEPS])
def test_an_edit_reruns_exactly_what_depends_on_it(project, what, edit, expected, lines):
    if edit is not None:
        project.edit(*edit)
    result = project.run()
    assert project.executed_in_last_run() == expected, result.stdout
    for line in lines:
        assert line in result.stdout, result.stdout
    if not expected:
        assert "0 component(s) executed, 9 reused from cache" in result.stdout
