"""What a local run prints before and after it runs: the input, the Beam mode, the strategy and
the columns at the start; the summary, the blessing in words, the inferred schema to curate and
the not-pushed notice at the end; a failed component in one block. (The lines during the run
are pipeline.local.progress's.)"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, TextIO

from pipeline import config as config_lib
from pipeline import datasets, preflight

if TYPE_CHECKING:
    from pipeline.local.summary import RunSummary


def print_start(
    config: config_lib.PipelineConfig,
    facts: preflight.Facts,
    log_path: str,
    out: TextIO,
) -> None:
    """The input and where it is, the Beam mode, the strategy, the log file; then the columns."""
    out.write(
        f"Pipeline {config.pipeline_name}: {facts.description}, "
        f"{facts.total_bytes / 1e6:.1f} MB from {config.dataset.data_root}\n"
        f"  Beam {config.beam.describe()}; "
        f"strategy {describe_training(config.training)}; log: {log_path}\n"
    )
    describe_columns(config.dataset, facts, out)
    from pipeline import user_code

    for line in user_code.describe(config.user_code):
        out.write(f"  Your code: {line}\n")
    out.flush()


def describe_training(training: config_lib.TrainingConfig) -> str:
    if training.strategy == "parameter_server":
        return f"parameter_server ({training.workers} worker(s), {training.ps} ps)"
    if training.strategy == "multi_worker_mirrored":
        return f"multi_worker_mirrored ({training.workers} worker(s))"
    if training.cpu_devices > 1:
        return f"{training.strategy} ({training.cpu_devices} logical CPU devices)"
    return training.strategy


def describe_columns(
    dataset: config_lib.DatasetConfig,
    facts: preflight.Facts,
    out: TextIO,
) -> None:
    """The task, the label and the columns left out of the features (and how to keep them)."""
    if not isinstance(facts, preflight.CsvFacts):
        return
    delimiter = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}.get(
        dataset.delimiter, repr(dataset.delimiter)
    )
    out.write(
        f"  task {dataset.task} (label {dataset.label_key!r}, --task); {delimiter}-separated\n"
    )
    identifiers = facts.identifiers
    names = {identifier.name for identifier in identifiers}
    others = [c for c in dataset.excluded_columns if c not in names]
    if others:
        out.write(f"  excluded columns: {', '.join(others)}\n")
    if identifiers:
        listed = ", ".join(f"{i.name} ({i.distinct} distinct in {i.values})" for i in identifiers)
        out.write(
            f"  left out as likely identifiers (near-unique text): {listed}; "
            f"--keep_columns {','.join(i.name for i in identifiers)} keeps them as features\n"
        )
    if facts.rows_without_label:
        out.write(
            f"  {facts.rows_without_label} row(s) have no label: ExampleGen rejects and "
            "lists them (--max_rejected_fraction)\n"
        )


def print_failure(component: str | None, reason: str, log_path: str, err: TextIO) -> None:
    """A component (or the pipeline) failed: which, why, and the full log."""
    err.write(f"\nerror: {component or 'the pipeline'} failed: {reason}\n  full log: {log_path}\n")


def print_summary(
    summary: RunSummary, config: config_lib.PipelineConfig, seconds: float, out: TextIO
) -> None:
    executed = sum(1 for c in summary.components if c["status"] == "executed")
    cached = sum(1 for c in summary.components if c["status"] == "cached")
    out.write(
        f"\nPipeline {config.pipeline_name} finished in {seconds:.1f}s: "
        f"{executed} component(s) executed, {cached} reused from cache.\n"
    )
    if summary.example_counts:
        counts = ", ".join(f"{name} {n}" for name, n in summary.example_counts.items())
        unit = "files" if config.dataset.is_images else "rows"
        out.write(f"  examples:      {counts}; {unit} rejected: {summary.rows_rejected}\n")
        if summary.rows_rejected and summary.rejected_listing:
            out.write(f"  rejected {unit}: listed in {summary.rejected_listing}\n")
    if summary.metrics:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in sorted(summary.metrics.items()))
        out.write(f"  eval metrics:  {metrics}\n")
    out.write(f"  blessed:       {describe_blessing(summary, config)}\n")
    out.write(f"  pushed model:  {summary.pushed_model or 'not pushed'}\n")
    out.write(f"  MLMD:          {summary.metadata_path}\n")


# Per task: the metric the Evaluator thresholds, how it reads, and the flag that sets its bound.
_BLESSING_CONDITION = {
    "classification": ("sparse_categorical_accuracy", "accuracy", "--accuracy_threshold"),
    "regression": (
        "mean_squared_error_skill",
        "skill over predicting the training mean (1 - MSE / MSE of the mean)",
        "--min_regression_skill",
    ),
}


def describe_blessing(summary: RunSummary, config: config_lib.PipelineConfig) -> str:
    """yes/NO and the conditions; for NO, each failed condition with its value and the flag (or
    check) that decides it."""
    metric, what, flag = _BLESSING_CONDITION[config.dataset.task]
    bound = (
        config.accuracy_threshold
        if config.dataset.task == "classification"
        else config.min_regression_skill
    )
    conditions = f"{what} >= {bound}, no regression against the previous blessed model"
    if summary.blessed is None:
        return f"unknown ({conditions})"
    if summary.blessed:
        return f"yes ({conditions})"
    reasons = []
    for failure in summary.blessing_failures:
        value = failure["value"]
        if failure["is_diff"]:
            reasons.append(
                f"{what} changed by {value:+.4f} against the previous blessed model (no "
                "regression allowed; the previous model stays the one served)"
            )
        elif failure["metric"] == metric:
            reasons.append(f"{what} {value:.4f} is below {bound} ({flag} sets it)")
        else:
            reasons.append(f"{failure['metric']}: {failure['message']}")
    return "NO: " + ("; ".join(reasons) or f"failed one of: {conditions}")


def export_inferred_schema(
    summary: RunSummary, config: config_lib.PipelineConfig, out: TextIO
) -> None:
    """A run without a curated schema: the inferred one, copied beside the pipeline root, and
    how to curate it."""
    if config.dataset.schema_path or not summary.inferred_schema_uri:
        return
    target_dir = os.path.join(os.path.dirname(config.pipeline_root), "inferred_schema")
    os.makedirs(target_dir, exist_ok=True)
    target = os.path.join(target_dir, "schema.pbtxt")
    excluded = config.dataset.excluded_columns
    if excluded:
        write_schema_with_excluded(summary.inferred_schema_uri, excluded, target)
    else:
        shutil.copyfile(summary.inferred_schema_uri, target)
    curated = os.path.join(datasets.SCHEMAS_DIR, config.dataset.name, "schema.pbtxt")
    out.write(
        f"  inferred schema: {target}\n"
        f"    review it (types, domains, presence), then curate it into {curated};\n"
        f"    later runs import it and validate new data against it.\n"
    )
    if excluded:
        out.write(
            f"    columns left out are in it as `lifecycle_stage: DISABLED`: {', '.join(excluded)}"
            "\n    (delete that line to make one a feature)\n"
        )


def write_schema_with_excluded(source: str, excluded, target: str) -> None:
    """The inferred schema plus the excluded columns (which ExampleGen never wrote, so SchemaGen
    never saw) as DISABLED features: curated as it is, it reads the same CSV files."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = preflight.load_schema(source)
    for name in excluded:
        feature = schema.feature.add(name=name, type=schema_pb2.BYTES)
        feature.lifecycle_stage = schema_pb2.DISABLED
    with open(target, "w") as handle:
        handle.write(text_format.MessageToString(schema))


def print_not_pushed(exit_code: int, out: TextIO) -> None:
    out.write(
        f"  exit code {exit_code}: a model was trained but not pushed (not blessed); "
        "the serving directory is unchanged\n"
    )
