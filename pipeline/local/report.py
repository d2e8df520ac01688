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
    if config.inference is not None:
        from pipeline import inference

        out.write(f"  {inference.describe(config.inference, config.dataset.label_key)}\n")
    from pipeline import user_code

    for line in user_code.describe(config.user_code):
        out.write(f"  Your code: {line}\n")
    from pipeline import tuning

    launcher = tuning.job_launcher(config)
    kind = type(launcher).KIND if launcher is not None else ""
    for line in tuning.describe(config.tuning, config.user_code, kind):
        out.write(f"  {line}\n")
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
    for kind in (preflight.NEAR_UNIQUE_TEXT, preflight.ROW_NUMBERS):
        found = [i for i in identifiers if i.kind == kind]
        if not found:
            continue
        listed = ", ".join(f"{i.name} ({i.distinct} distinct in {i.values})" for i in found)
        what = "consecutive distinct integers" if kind == preflight.ROW_NUMBERS else kind
        out.write(
            f"  left out as likely identifiers ({what}): {listed}; "
            f"--keep_columns {','.join(i.name for i in found)} keeps them as features\n"
        )
    if dataset.timestamp_columns:
        listed = ", ".join(dataset.timestamp_columns)
        out.write(
            f"  read as timestamps (hour, day of week, time): {listed}; "
            f"--keep_text_columns {','.join(dataset.timestamp_columns)} keeps them as text\n"
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
    for line in describe_classes(summary):
        out.write(f"  {line}\n")
    if summary.tuning:
        out.write(f"  tuning:        {describe_tuning(summary.tuning, config)}\n")
    out.write(f"  blessed:       {describe_blessing(summary, config)}\n")
    out.write(f"  pushed model:  {summary.pushed_model or 'not pushed'}\n")
    for line in describe_predictions(summary):
        out.write(f"  {line}\n")
    out.write(f"  MLMD:          {summary.metadata_path}\n")


def describe_predictions(summary: RunSummary) -> list[str]:
    """--infer_data: where the predictions are and the row accounting, or why there are none."""
    result = summary.inference
    if result is None:
        return []
    if result.get("blessed") != 1:
        return [
            "predictions:   none: the model is not blessed, so BulkInferrer predicted nothing "
            "(--infer_data)"
        ]
    read, rejected = result.get("num_rows_read"), result.get("num_rows_rejected")
    lines = [
        f"predictions:   {result.get('predictions_csv_uri')} ({read} row(s) read = "
        f"{result.get('num_rows_predicted')} predicted + {rejected} rejected)"
    ]
    if rejected:
        lines.append(f"rejected rows to predict: listed in {result.get('rejected_rows_uri')}")
    return lines


def describe_tuning(tuning: dict, config: config_lib.PipelineConfig) -> str:
    """The Tuner's trials (and where their default came from), the best score and point."""
    tune = config.tuning
    trials = f"{tuning.get('trials')} trial(s)"
    if tune.trials_from and tuning.get("trials") is not None:
        trials += f" (--max_trials default {tune.max_trials}, from {tune.trials_from})"
    steps = f"{tune.steps} step(s) each" + (
        f" (--tune_steps default, {tune.steps_from})" if tune.steps_from else ""
    )
    if tuning.get("workers", 1) > 1:
        steps += f", {tuning['workers']} workers"
        if tuning.get("launcher") not in (None, "", "processes"):
            steps += f" (a {tuning['launcher']} job)"
        if tuning.get("restarts"):
            steps += f" ({tuning['restarts']} restarted)"
    score = tuning.get("best_score")
    best = f"best {tuning.get('objective')} {score:.4f}" if score is not None else "no score"
    values = ", ".join(
        f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in sorted(tuning.get("best", {}).items())
    )
    return f"{trials}, {steps}; {best}: {values}"


SKILL_WORDS = "accuracy skill over the majority-class guess"
BALANCED_SKILL_WORDS = "balanced-accuracy skill over the majority-class guess (--class_weight)"


def _class_name(summary: RunSummary, index: int) -> str:
    names = summary.class_names
    if index < 0:
        return "(none)"
    return names[index] if index < len(names) else str(index)


def _mean_predictor(metrics: dict[str, float]) -> str | None:
    """Regression: the errors of predicting the training mean, in the label's units, from the
    model's and the two standardized ratios (components.ml.metrics)."""
    needed = (
        "mean_absolute_error",
        "root_mean_squared_error",
        "mean_squared_error_skill",
        "standardized_absolute_error",
        "mean_predictor_standardized_absolute_error",
    )
    if not all(name in metrics for name in needed) or metrics["mean_squared_error_skill"] >= 1:
        return None
    if not metrics["standardized_absolute_error"]:
        return None
    mae = metrics["mean_absolute_error"] * (
        metrics["mean_predictor_standardized_absolute_error"]
        / metrics["standardized_absolute_error"]
    )
    rmse = metrics["root_mean_squared_error"] / (1 - metrics["mean_squared_error_skill"]) ** 0.5
    return (
        f"baseline:      predicting the training mean: MAE {mae:.4g}, RMSE {rmse:.4g} (label "
        f"units); the model MAE {metrics['mean_absolute_error']:.4g}, RMSE "
        f"{metrics['root_mean_squared_error']:.4g}"
    )


def describe_classes(summary: RunSummary) -> list[str]:
    """Classification: the majority-class guess beside the model, each class's precision and
    recall, the confusion matrix (rows: actual class, columns: predicted), the class weights.
    Regression: the training mean's errors beside the model's."""
    lines = []
    metrics = summary.metrics
    if "majority_class_accuracy" in metrics:
        guess = _class_name(summary, 0) if summary.class_names else "the majority class"
        lines.append(
            f"baseline:      always answering {guess!r} (the training split's majority class): "
            f"accuracy {metrics['majority_class_accuracy']:.4f}; the model "
            f"{metrics.get('sparse_categorical_accuracy', float('nan')):.4f}, accuracy skill "
            f"{metrics.get('accuracy_skill', float('nan')):.4f}"
            + (
                f", balanced-accuracy skill {metrics['balanced_accuracy_skill']:.4f}"
                if "balanced_accuracy_skill" in metrics
                else ""
            )
        )
    mean_line = _mean_predictor(metrics)
    if mean_line:
        lines.append(mean_line)
    if summary.class_weights:
        weights = ", ".join(f"{name} {w:.3f}" for name, w in summary.class_weights.items())
        lines.append(f"class weights: {weights} (--class_weight)")
    if not summary.confusion:
        return lines
    from pipeline.mlmd import evaluation

    def ratio(value):
        return "-" if value is None else f"{value:.4f}"

    per_class = evaluation.per_class(summary.confusion)
    lines.append(
        "per class:     "
        + "; ".join(
            f"{_class_name(summary, row['class'])} precision {ratio(row['precision'])} recall "
            f"{ratio(row['recall'])} ({row['support']:g} eval)"
            for row in per_class
        )
    )
    classes = summary.confusion["classes"]
    counts = summary.confusion["counts"]
    predicted = classes + ([-1] if any(p == -1 for _, p in counts) else [])
    names = [_class_name(summary, c) for c in predicted]
    first = max(len("actual \\ predicted"), *(len(_class_name(summary, c)) for c in classes))
    widths = [max(len(name), 5) for name in names]
    header = "actual \\ predicted".ljust(first) + "".join(
        f" {name:>{width}}" for name, width in zip(names, widths, strict=True)
    )
    lines.append(f"confusion:     {header}")
    for actual in classes:
        cells = "".join(
            f" {counts.get((actual, p), 0):>{width}g}"
            for p, width in zip(predicted, widths, strict=True)
        )
        lines.append(f"               {_class_name(summary, actual).ljust(first)}{cells}")
    return lines


def blessing_conditions(config: config_lib.PipelineConfig) -> list[tuple[str, str, float, str]]:
    """(metric, how it reads, its lower bound, the flag that sets it) of each value threshold the
    Evaluator applies to the project's model (pipeline.builder)."""
    if config.dataset.task == "regression":
        return [
            (
                "mean_squared_error_skill",
                "skill over predicting the training mean (1 - MSE / MSE of the mean)",
                config.min_regression_skill,
                "--min_regression_skill",
            )
        ]
    if config.user_code.run_fn or config.user_code.eval_config:
        from pipeline import builder

        bound = config.accuracy_threshold
        return [
            (
                "sparse_categorical_accuracy",
                "accuracy",
                builder.USER_RUN_FN_ACCURACY if bound is None else bound,
                "--accuracy_threshold",
            )
        ]
    balanced = config.training.class_weight == "balanced"
    conditions = [
        (
            "balanced_accuracy_skill" if balanced else "accuracy_skill",
            BALANCED_SKILL_WORDS if balanced else SKILL_WORDS,
            config.min_classification_skill,
            "--min_classification_skill",
        )
    ]
    if config.accuracy_threshold is not None:
        conditions.append(
            (
                "sparse_categorical_accuracy",
                "accuracy",
                config.accuracy_threshold,
                "--accuracy_threshold",
            )
        )
    return conditions


def describe_blessing(summary: RunSummary, config: config_lib.PipelineConfig) -> str:
    """yes/NO and the conditions; for NO, each failed condition with its value and the flag (or
    check) that decides it."""
    if config.user_code.eval_config:
        return _describe_user_blessing(summary, config.user_code.eval_config)
    conditions = blessing_conditions(config)
    text = ", ".join(f"{what} >= {bound:g}" for _, what, bound, _ in conditions)
    text += ", no regression against the previous blessed model"
    if summary.blessed is None:
        return f"unknown ({text})"
    if summary.blessed:
        return f"yes ({text})"
    by_metric = {metric: (what, bound, flag) for metric, what, bound, flag in conditions}
    reasons = []
    for failure in summary.blessing_failures:
        value = failure["value"]
        if failure["is_diff"]:
            reasons.append(
                f"{failure['metric']} changed by {value:+.4f} against the previous blessed model "
                "(no regression allowed; the previous model stays the one served)"
            )
        elif failure["metric"] in by_metric:
            what, bound, flag = by_metric[failure["metric"]]
            reasons.append(
                f"{what} {value:.4f} is below {bound:g}{_guess(summary, failure)} ({flag} sets it)"
            )
        else:
            reasons.append(f"{failure['metric']}: {failure['message']}")
    return "NO: " + ("; ".join(reasons) or f"failed one of: {text}")


def eval_config_conditions(eval_config_text: str) -> list[str]:
    """The thresholds of a user's --eval_config in words: each metric's value bounds, then
    whether any metric must not regress against the previous blessed model."""
    import tensorflow_model_analysis as tfma
    from google.protobuf import text_format

    eval_config = text_format.Parse(eval_config_text, tfma.EvalConfig())
    conditions, change = [], False
    for spec in eval_config.metrics_specs:
        for metric in spec.metrics:
            threshold = metric.threshold
            if threshold.HasField("value_threshold"):
                bounds = threshold.value_threshold
                if bounds.HasField("lower_bound"):
                    conditions.append(f"{metric.class_name} >= {bounds.lower_bound.value:g}")
                if bounds.HasField("upper_bound"):
                    conditions.append(f"{metric.class_name} <= {bounds.upper_bound.value:g}")
            change = change or threshold.HasField("change_threshold")
    if change:
        conditions.append("no regression against the previous blessed model")
    return conditions


def _describe_user_blessing(summary: RunSummary, eval_config_text: str) -> str:
    """yes/NO against the thresholds of the user's --eval_config, which replaces the project's."""
    text = ", ".join(eval_config_conditions(eval_config_text)) or "no thresholds"
    text += ", from --eval_config"
    if summary.blessed is None:
        return f"unknown ({text})"
    if summary.blessed:
        return f"yes ({text})"
    reasons = []
    for failure in summary.blessing_failures:
        if failure["is_diff"]:
            reasons.append(
                f"{failure['metric']} changed by {failure['value']:+.4f} against the previous "
                "blessed model (no regression allowed; the previous model stays the one served)"
            )
        else:
            reasons.append(f"{failure['metric']}: {failure['message']} (--eval_config sets it)")
    return "NO: " + ("; ".join(reasons) or f"failed one of: {text}")


def _guess(summary: RunSummary, failure: dict) -> str:
    """For the skill: the accuracy beside the guess's, so that the number reads."""
    metrics = summary.metrics
    if failure["metric"] != "accuracy_skill" or "majority_class_accuracy" not in metrics:
        return ""
    return (
        f" (accuracy {metrics.get('sparse_categorical_accuracy', float('nan')):.4f} against "
        f"{metrics['majority_class_accuracy']:.4f} for always answering the majority class)"
    )


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
    if summary.restored_features:
        out.write(
            "    column(s) with values in some split(s) only, features typed from those values "
            f"(TFX's SchemaGen would deprecate them): {', '.join(summary.restored_features)}\n"
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
