"""The rare class of a 90/10 dataset with and without --class_weight balanced.

    python -m benchmarks.class_weight [--rows N] [--work_dir DIR]

Generated two-class data (pipeline.datasets.imbalanced: 10% rare rows whose features sit 1.5
standard deviations away) run through the whole local pipeline twice at default flags, then
with --class_weight balanced. Reported from each run's Evaluator output (TFMA's confusion matrix
on the eval split): the rare class's recall and precision, the accuracy, the accuracy skill over
the majority-class guess and whether the model was blessed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from benchmarks import common

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(data_dir: str, output_root: str, *flags: str) -> dict:
    from pipeline.datasets import imbalanced
    from pipeline.local import summary as run_summary
    from pipeline.mlmd import connection, evaluation, records

    result = subprocess.run(
        [
            sys.executable,
            os.path.join(PROJECT_ROOT, "pipeline", "run_local.py"),
            "--data",
            data_dir,
            "--label",
            imbalanced.LABEL,
            "--output_root",
            output_root,
            *flags,
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        check=False,
        env=common.child_env(),
    )
    if result.returncode not in (0, 3):
        raise RuntimeError(f"run_local exited {result.returncode}:\n{result.stderr[-3000:]}")
    store = connection.open_store(
        os.path.join(output_root, "imbalanced-pipeline", "metadata.sqlite")
    )
    [evaluated] = store.get_artifacts_by_type("ModelEvaluation")
    [graph] = store.get_artifacts_by_type("TransformGraph")
    [model] = [m for m in store.get_artifacts_by_type("Model") if "Trainer" in m.uri]
    detail = evaluation.classification_detail(evaluated.uri, evaluation.class_names(graph.uri))
    rare = next(row for row in detail["per_class"] if row["class"] == imbalanced.RARE)
    metrics = evaluation.overall_metrics(evaluated.uri)
    return {
        "recall": rare["recall"] or 0.0,
        "precision": rare["precision"] or 0.0,
        "accuracy": metrics["sparse_categorical_accuracy"],
        "skill": metrics["accuracy_skill"],
        # Shown with --class_weight balanced, where it is the blessing measure.
        "balanced_skill": metrics.get("balanced_accuracy_skill"),
        "blessed": result.returncode == 0,
        "weights": records.custom_value(model, run_summary.CLASS_WEIGHTS_PROPERTY),
    }


def measure(work_dir: str, rows: int) -> dict[str, dict]:
    from pipeline.datasets import imbalanced

    data_dir = os.path.join(work_dir, "imbalanced")
    imbalanced.write_classes(data_dir, rows, minority=0.1, separation=1.5, seed=7)
    return {
        "default": _run(data_dir, os.path.join(work_dir, "default")),
        "balanced": _run(
            data_dir, os.path.join(work_dir, "balanced"), "--class_weight", "balanced"
        ),
    }


def rows_of(measured: dict[str, dict]) -> list[common.Row]:
    default, balanced = measured["default"], measured["balanced"]

    def note(run: dict) -> str:
        return (
            f"precision {run['precision']:.3f}, accuracy {run['accuracy']:.4f}, accuracy skill "
            f"{run['skill']:.3f}"
            + (
                f", balanced-accuracy skill {run['balanced_skill']:.3f}"
                if run["balanced_skill"] is not None
                else ""
            )
            + f", {'blessed' if run['blessed'] else 'not blessed'}"
        )

    return [
        common.Row(
            "90/10 rare-class recall, --class_weight balanced vs default",
            balanced["recall"],
            default["recall"],
            "recall",
            target=1.0,
            note=f"balanced: {note(balanced)}; default: {note(default)}; weights "
            f"{balanced['weights']}",
        )
    ]


def run(quick: bool, work_dir: str | None = None) -> list[common.Row]:
    """Rows for `python -m benchmarks all`."""
    work_dir = work_dir or tempfile.mkdtemp(prefix="class-weight-bench-")
    return rows_of(measure(work_dir, 1000 if quick else 2000))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.class_weight")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="class-weight-bench-")
    measured = measure(work_dir, args.rows)
    for name, values in measured.items():
        print(name, values)
    table = rows_of(measured)
    print(common.format_table(table))
    return 1 if any(row.passed is False for row in table) else 0


if __name__ == "__main__":
    sys.exit(main())
