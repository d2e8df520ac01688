"""What a local run prints: the start lines from the typed pre-flight facts (input, Beam mode,
strategy, task, columns left out), the blessing in words, and the inferred schema exported with
the excluded columns as DISABLED features."""

from __future__ import annotations

import dataclasses
import io

from pipeline import config as config_lib
from pipeline import datasets, preflight
from pipeline.local import report


def _start_lines(config, facts) -> list[str]:
    out = io.StringIO()
    report.print_start(config, facts, "/logs/run.log", out)
    return out.getvalue().splitlines()


def test_start_lines_for_the_penguins(tmp_path):
    facts = preflight.check_dataset(datasets.penguins())
    dataset = preflight.resolved(datasets.penguins(), facts)
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path))
    lines = _start_lines(config, facts)
    megabytes = f"{facts.total_bytes / 1e6:.1f} MB"
    assert lines[0] == (
        f"Pipeline {config.pipeline_name}: 1 CSV file(s), {megabytes} from {dataset.data_root}"
    )
    assert lines[1].startswith(f"  Beam {config.beam.describe()}; strategy mirrored; log: ")
    assert lines[1].endswith("log: /logs/run.log")
    assert lines[2:] == ["  task classification (label 'species', --task); comma-separated"]


def test_start_lines_name_excluded_columns_identifiers_and_unlabelled_rows(tmp_path, write_csv):
    names = [f"p{i:03d}" for i in range(30)]
    text = "id;x;year;y\n" + "".join(
        f"{name};{i % 4};2020;{'' if i in (2, 7) else 'ab'[i % 2]}\n"
        for i, name in enumerate(names)
    )
    write_csv("rows.csv", text)
    dataset = datasets.user_csv(write_csv.dir, "y", excluded_columns=("year",))
    facts = preflight.check_dataset(dataset)
    config = config_lib.local_config(
        dataset=preflight.resolved(dataset, facts), output_root=str(tmp_path)
    )
    assert _start_lines(config, facts)[2:] == [
        "  task classification (label 'y', --task); semicolon-separated",
        "  excluded columns: year",
        "  left out as likely identifiers (near-unique text): id (30 distinct in 30); "
        "--keep_columns id keeps them as features",
        "  2 row(s) have no label: ExampleGen rejects and lists them (--max_rejected_fraction)",
    ]


def test_start_lines_name_timestamp_columns_and_the_flag_that_keeps_them(tmp_path, write_csv):
    text = "when,x,y\n" + "".join(
        f"2013-01-{1 + i % 28:02d} {i % 24:02d}:00:00,{i % 4},{'ab'[i % 2]}\n" for i in range(30)
    )
    write_csv("rows.csv", text)
    dataset = datasets.user_csv(write_csv.dir, "y")
    facts = preflight.check_dataset(dataset)
    config = config_lib.local_config(
        dataset=preflight.resolved(dataset, facts), output_root=str(tmp_path)
    )
    assert config.dataset.timestamp_columns == ("when",)
    assert _start_lines(config, facts)[3:] == [
        "  read as timestamps (hour, day of week, time): when; "
        "--keep_text_columns when keeps them as text",
    ]


def test_start_lines_for_image_folders_have_no_column_lines(tmp_path):
    from pipeline.datasets import images as image_data

    root = image_data.write_synthetic(str(tmp_path / "jpeg"), 4, 16, 2, seed=3)
    dataset = datasets.user_images(root, 32)
    facts = preflight.check_images(dataset)
    config = config_lib.local_config(
        dataset=preflight.resolved(dataset, facts), output_root=str(tmp_path)
    )
    lines = _start_lines(config, facts)
    assert len(lines) == 2
    assert lines[0].startswith(f"Pipeline {config.pipeline_name}: 4 image file(s) in 2 class")


def test_training_in_words():
    training = config_lib.TrainingConfig
    assert report.describe_training(training()) == "mirrored"
    assert (
        report.describe_training(training(strategy="parameter_server", workers=2, ps=1))
        == "parameter_server (2 worker(s), 1 ps)"
    )
    assert (
        report.describe_training(training(strategy="mirrored", cpu_devices=2))
        == "mirrored (2 logical CPU devices)"
    )


def _summary(blessed, failures=()):
    from pipeline.local import summary as run_summary

    return run_summary.RunSummary(
        components=[],
        metrics={},
        blessed=blessed,
        pushed_model=None,
        example_counts={},
        rows_rejected=0,
        inferred_schema_uri=None,
        metadata_path="m",
        blessing_failures=list(failures),
    )


def test_not_blessed_names_the_failed_condition_and_its_flag(tmp_path):
    from pipeline import config as config_lib
    from pipeline import datasets

    dataset = datasets.user_csv(str(tmp_path), "y", task="regression")
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path))
    below = {"metric": "mean_squared_error_skill", "value": 0.05, "is_diff": False, "message": ""}
    text = report.describe_blessing(_summary(False, [below]), config)
    assert text.startswith("NO: ") and "0.0500 is below 0.1 (--min_regression_skill" in text
    regressed = {**below, "value": -0.02, "is_diff": True}
    text = report.describe_blessing(_summary(False, [regressed]), config)
    assert "changed by -0.0200 against the previous blessed model" in text
    penguins = config_lib.local_config(dataset=datasets.penguins(), output_root=str(tmp_path))
    skill = {**below, "metric": "accuracy_skill", "value": -0.1304}
    summary = _summary(False, [skill])
    summary.metrics = {"sparse_categorical_accuracy": 0.9106, "majority_class_accuracy": 0.9209}
    assert report.describe_blessing(summary, penguins) == (
        "NO: accuracy skill over the majority-class guess -0.1304 is below 0.1 (accuracy 0.9106 "
        "against 0.9209 for always answering the majority class) (--min_classification_skill "
        "sets it)"
    )
    assert report.describe_blessing(_summary(True), penguins) == (
        "yes (accuracy skill over the majority-class guess >= 0.1, no regression against the "
        "previous blessed model)"
    )
    # --accuracy_threshold: an extra condition, named with its flag when it fails.
    strict = dataclasses.replace(penguins, accuracy_threshold=0.95)
    accuracy = {**below, "metric": "sparse_categorical_accuracy", "value": 0.93}
    text = report.describe_blessing(_summary(False, [accuracy]), strict)
    assert text == "NO: accuracy 0.9300 is below 0.95 (--accuracy_threshold sets it)"
    assert report.describe_blessing(_summary(True), strict).startswith(
        "yes (accuracy skill over the majority-class guess >= 0.1, accuracy >= 0.95, no regr"
    )


def test_summary_lines_for_classes_name_the_guess_the_classes_and_the_weights():
    summary = _summary(True)
    summary.metrics = {
        "sparse_categorical_accuracy": 0.9,
        "majority_class_accuracy": 0.8,
        "accuracy_skill": 0.5,
    }
    summary.class_names = ["no", "yes"]
    summary.confusion = {"classes": [0, 1], "counts": {(0, 0): 8.0, (1, 1): 1.0, (1, 0): 1.0}}
    summary.class_weights = {"no": 0.625, "yes": 2.5}
    assert report.describe_classes(summary) == [
        "baseline:      always answering 'no' (the training split's majority class): accuracy "
        "0.8000; the model 0.9000, accuracy skill 0.5000",
        "class weights: no 0.625, yes 2.500 (--class_weight)",
        "per class:     no precision 0.8889 recall 1.0000 (8 eval); yes precision 1.0000 "
        "recall 0.5000 (2 eval)",
        "confusion:     actual \\ predicted    no   yes",
        "               no                     8     0",
        "               yes                    1     1",
    ]


def test_exported_inferred_schema_lists_excluded_columns_as_disabled(tmp_path):
    from tensorflow_metadata.proto.v0 import schema_pb2

    from pipeline import preflight

    source = tmp_path / "inferred.pbtxt"
    source.write_text('feature { name: "x" type: INT }\nfeature { name: "y" type: BYTES }\n')
    target = tmp_path / "schema.pbtxt"
    report.write_schema_with_excluded(str(source), ("date", "name"), str(target))
    schema = preflight.load_schema(str(target))
    stages = {f.name: f.lifecycle_stage for f in schema.feature}
    assert stages == {
        "x": schema_pb2.UNKNOWN_STAGE,
        "y": schema_pb2.UNKNOWN_STAGE,
        "date": schema_pb2.DISABLED,
        "name": schema_pb2.DISABLED,
    }


def test_summary_line_for_regression_gives_the_training_mean_errors_in_label_units():
    summary = _summary(True)
    # MAE 40 at 0.5 standard deviations, the mean's 0.8: 64; RMSE 50 at skill 0.36: 50 / 0.8.
    summary.metrics = {
        "mean_absolute_error": 40.0,
        "root_mean_squared_error": 50.0,
        "mean_squared_error_skill": 0.36,
        "standardized_absolute_error": 0.5,
        "mean_predictor_standardized_absolute_error": 0.8,
    }
    assert report.describe_classes(summary) == [
        "baseline:      predicting the training mean: MAE 64, RMSE 62.5 (label units); the "
        "model MAE 40, RMSE 50"
    ]


# The blessing line of a run with the user's --eval_config states that config's thresholds
# (TFX's taxi example's BinaryAccuracy on a float label is not the project's regression skill).
TAXI_EVAL_CONFIG = """
model_specs { signature_name: "serving_default" label_key: "tips_xf"
              preprocessing_function_names: "transform_features" }
slicing_specs {}
metrics_specs { metrics { class_name: "BinaryAccuracy" threshold {
  value_threshold { lower_bound { value: 0.6 } }
  change_threshold { direction: HIGHER_IS_BETTER absolute { value: -1e-10 } } } } }
metrics_specs { metrics { class_name: "MeanSquaredError" threshold {
  value_threshold { upper_bound { value: 2.5 } } } } }
"""


def _eval_config_run(tmp_path):
    dataset = datasets.user_csv(str(tmp_path), "tips", task="regression")
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path))
    user = dataclasses.replace(config.user_code, eval_config=TAXI_EVAL_CONFIG)
    return dataclasses.replace(config, user_code=user)


def test_the_blessing_line_states_the_user_s_eval_config_thresholds(tmp_path):
    config = _eval_config_run(tmp_path)
    assert report.eval_config_conditions(TAXI_EVAL_CONFIG) == [
        "BinaryAccuracy >= 0.6",
        "MeanSquaredError <= 2.5",
        "no regression against the previous blessed model",
    ]
    assert report.describe_blessing(_summary(True), config) == (
        "yes (BinaryAccuracy >= 0.6, MeanSquaredError <= 2.5, no regression against the "
        "previous blessed model, from --eval_config)"
    )
    below = {
        "metric": "binary_accuracy",
        "value": 0.55,
        "is_diff": False,
        "message": "value 0.55 is below the lower bound 0.6",
    }
    assert report.describe_blessing(_summary(False, [below]), config) == (
        "NO: binary_accuracy: value 0.55 is below the lower bound 0.6 (--eval_config sets it)"
    )
    regressed = {**below, "value": -0.01, "is_diff": True}
    assert "changed by -0.0100 against the previous blessed model" in (
        report.describe_blessing(_summary(False, [regressed]), config)
    )
