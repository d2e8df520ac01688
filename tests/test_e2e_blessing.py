"""Blessing against the majority-class guess, end to end on generated CSV data at default flags
(`python pipeline/run_local.py --data DIR --label COL` in a fresh process):

- 95/5 classes whose features carry no signal: the model is no better than always answering the
  majority class (accuracy skill about 0), so it is not blessed (exit 3), although its accuracy
  is about 0.95;
- 60/40 classes that one feature separates: blessed and pushed.

Both files (pipeline.datasets.imbalanced) carry a row-number column (1..N, shuffled), which the
pre-flight check leaves out.
The summary's figures are compared with TFMA's own reading of the Evaluator's output
(tfma.load_eval_result) and checked against each other (the confusion matrix's cells against
the accuracy and the guess's accuracy)."""

from __future__ import annotations

import concurrent.futures
import re

import pytest

from pipeline.datasets import imbalanced
from pipeline.mlmd import connection, evaluation
from tests.test_e2e_local import explain, run_local

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROWS = 600


def summary_metrics(stdout: str) -> dict[str, float]:
    line = next(line for line in stdout.splitlines() if line.startswith("  eval metrics:"))
    pairs = line.split(":", 1)[1].split(", ")
    return {name: float(value) for name, value in (pair.strip().rsplit(" ", 1) for pair in pairs)}


def evaluation_uri(output_root, name: str) -> str:
    store = connection.open_store(str(output_root / f"{name}-pipeline" / "metadata.sqlite"))
    [evaluated] = store.get_artifacts_by_type("ModelEvaluation")
    return evaluated.uri


def tfma_overall(uri: str) -> dict[str, float]:
    """TFMA's own reading of its output: the overall slice's metrics by name (an aggregated
    one, which TFMA names "micro_average: true\\n_auc", as `auc_micro_average`)."""
    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(uri)
    [by_output] = [metrics for key, metrics in result.slicing_metrics if key == ()]
    values = {}
    for sub_keys in by_output.values():
        for metrics in sub_keys.values():
            for name, value in metrics.items():
                number = value.get("doubleValue", value.get("boundedValue", {}).get("value"))
                if name.startswith("micro_average"):
                    name = name.rsplit("_", 1)[-1] + "_micro_average"
                if number is not None:
                    values[name] = float(number)
    return values


def tfma_confusion(uri: str) -> dict[tuple[int, int], float]:
    """TFMA's own reading of its confusion-matrix plot: {(actual, predicted): examples}."""
    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(uri)
    [plots] = [plots for key, plots in result.plots if key == ()]
    [matrix] = plots[""][""]["multiClassConfusionMatrixAtThresholds"]["matrices"]
    return {
        (e.get("actualClassId", 0), e.get("predictedClassId", 0)): e["numWeightedExamples"]
        for e in matrix["entries"]
    }


def test_no_signal_95_5_is_not_blessed_and_strong_signal_60_40_is(tmp_path):
    imbalanced.write_classes(str(tmp_path / "nosignal"), ROWS, minority=0.05, separation=0, seed=1)
    imbalanced.write_classes(str(tmp_path / "signal"), ROWS, minority=0.4, separation=4, seed=2)
    out = tmp_path / "out"

    def run(name: str):
        return run_local(
            "--data", str(tmp_path / name), "--label", "label", "--output_root", str(out)
        )

    # Two pipelines (two stores under one output root) side by side: each run is mostly
    # single-threaded start-up and per-component work, so together they take less wall time.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        flat, strong = pool.map(run, ["nosignal", "signal"])
    assert flat.returncode == 3, explain(flat)
    assert (
        f"left out as likely identifiers (consecutive distinct integers): row ({ROWS} distinct "
        f"in {ROWS}); --keep_columns row keeps them as features" in flat.stdout
    )
    metrics = summary_metrics(flat.stdout)
    assert metrics["majority_class_accuracy"] > 0.9, flat.stdout
    assert metrics["accuracy_skill"] < 0.1, flat.stdout
    assert "blessed:       NO: accuracy skill over the majority-class guess" in flat.stdout
    assert "(--min_classification_skill sets it)" in flat.stdout
    assert "baseline:      always answering 'common' (the training split's majority" in flat.stdout

    assert strong.returncode == 0, explain(strong)
    metrics = summary_metrics(strong.stdout)
    assert 0.5 < metrics["majority_class_accuracy"] < 0.7, strong.stdout
    assert metrics["accuracy_skill"] > 0.5, strong.stdout
    assert (
        "blessed:       yes (accuracy skill over the majority-class guess >= 0.1" in strong.stdout
    )

    # The summary's figures are TFMA's (printed to 4 decimals).
    uri = evaluation_uri(out, "signal")
    tfma_values = tfma_overall(uri)
    for name in (
        "sparse_categorical_accuracy",
        "accuracy_skill",
        "majority_class_accuracy",
        "sparse_categorical_crossentropy",
        "auc_micro_average",
    ):
        assert metrics[name] == pytest.approx(tfma_values[name], abs=6e-5), name
    # TFMA's confusion matrix (a plot) agrees with its metrics: the diagonal is the accuracy,
    # class 0's row (the training majority) the guess's accuracy.
    matrix = evaluation.confusion_matrix(uri)
    ours = {cell: n for cell, n in matrix["counts"].items() if n}
    assert ours == {cell: n for cell, n in tfma_confusion(uri).items() if n}
    counts, total = matrix["counts"], sum(matrix["counts"].values())
    assert total == metrics["example_count"]
    hits = sum(n for (actual, predicted), n in counts.items() if actual == predicted)
    assert hits / total == pytest.approx(metrics["sparse_categorical_accuracy"], abs=6e-5)
    majority = sum(n for (actual, _), n in counts.items() if actual == 0)
    assert majority / total == pytest.approx(metrics["majority_class_accuracy"], abs=6e-5)
    # Per-class lines and the drawn matrix, with the class names.
    per_class = re.search(
        r"per class: +common precision [01]\.\d{4} recall [01]\.\d{4}", strong.stdout
    )
    assert per_class, strong.stdout
    assert re.search(r"confusion: +actual \\ predicted +common +rare", strong.stdout), strong.stdout
