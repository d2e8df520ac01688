"""pipeline.mlmd.evaluation reads an Evaluator's output without importing TFMA: its metrics and
failed thresholds must be what TFMA's own loaders (tfma.load_eval_result,
tfma.load_validation_result) make of the same files."""

from __future__ import annotations

import json
import os

import pytest

from pipeline.mlmd import evaluation
from tests.pipeline.mlmd import tfx_store

# (model name, output name, metric, value, is_diff); a value given as a tuple is a bounded one.
ONE_MODEL = [
    ("", "", "example_count", 90.0, False),
    ("", "", "sparse_categorical_accuracy", 0.95, False),
]
WITH_BASELINE = [
    ("", "", "example_count", 95.0, False),  # model-independent
    ("candidate", "", "sparse_categorical_accuracy", 0.97, False),
    ("baseline", "", "sparse_categorical_accuracy", 0.95, False),
    ("candidate", "", "sparse_categorical_accuracy", 0.02, True),
]
# The regression pipeline's evaluation: the prediction in the label's units and z-scored.
TWO_OUTPUTS = [
    ("", "prediction", "example_count", 100.0, False),
    ("", "prediction", "mean_absolute_error", 41.5, False),
    ("", "normalized_prediction", "example_count", 100.0, False),
    ("", "normalized_prediction", "mean_squared_error_skill", (0.31, 0.28, 0.35), False),
]
TWO_MODELS_NO_CHANGE = [
    ("first", "", "mean_absolute_error", 1.0, False),
    ("second", "", "mean_absolute_error", 2.0, False),
]
CASES = {
    "one model": (ONE_MODEL, {"example_count": 90.0, "sparse_categorical_accuracy": 0.95}),
    "candidate against a baseline": (
        WITH_BASELINE,
        {
            "example_count": 95.0,
            "sparse_categorical_accuracy": 0.97,
            "sparse_categorical_accuracy_diff": 0.02,
        },
    ),
    "two outputs": (
        TWO_OUTPUTS,
        {
            "prediction/example_count": 100.0,
            "normalized_prediction/example_count": 100.0,
            "mean_absolute_error": 41.5,
            "mean_squared_error_skill": 0.31,
        },
    ),
    "two models, neither the candidate": (TWO_MODELS_NO_CHANGE, {}),
}


def _set_value(target, value) -> None:
    if isinstance(value, tuple):
        point, lower, upper = value
        target.bounded_value.value.value = point
        target.bounded_value.lower_bound.value = lower
        target.bounded_value.upper_bound.value = upper
    else:
        target.double_value.value = value


def write_output(uri: str, entries: list[tuple], failures: list[tuple] = ()) -> None:
    """An Evaluator output directory: the overall slice's metrics (plus what must not count: a
    per-class metric, another slice), and a validation result with the given failures
    (metric, value, is_diff, message)."""
    from tensorflow_model_analysis.proto import metrics_for_slice_pb2, validation_result_pb2

    os.makedirs(uri, exist_ok=True)
    models = sorted({model for model, *_ in entries if model})
    specs = [{"name": m, "isBaseline": m == "baseline"} for m in models] or [{}]
    with open(os.path.join(uri, "eval_config.json"), "w") as handle:
        json.dump({"evalConfig": {"modelSpecs": specs}, "version": "0.47.1"}, handle)
    overall = metrics_for_slice_pb2.MetricsForSlice()
    for model, output, name, value, is_diff in entries:
        entry = overall.metric_keys_and_values.add()
        entry.key.name, entry.key.model_name, entry.key.output_name = name, model, output
        entry.key.is_diff = is_diff
        _set_value(entry.value, value)
    per_class = overall.metric_keys_and_values.add()
    per_class.key.name, per_class.key.model_name = entries[0][2], entries[0][0]
    per_class.key.output_name = entries[0][1]
    per_class.key.sub_key.class_id.value = 1
    per_class.value.double_value.value = 0.5
    sliced = metrics_for_slice_pb2.MetricsForSlice()
    sliced.CopyFrom(overall)
    key = sliced.slice_key.single_slice_keys.add()
    key.column, key.bytes_value = "island", b"Dream"
    for entry in sliced.metric_keys_and_values:
        _set_value(entry.value, 123.0)
    tfx_store._write_records(
        os.path.join(uri, "metrics-00000-of-00001.tfrecord"),
        [sliced.SerializeToString(), overall.SerializeToString()],
    )
    validation = validation_result_pb2.ValidationResult(validation_ok=not failures)
    if failures:
        failed = validation.metric_validations_per_slice.add()
        for name, value, is_diff, message in failures:
            failure = failed.failures.add()
            failure.metric_key.name, failure.metric_key.is_diff = name, is_diff
            _set_value(failure.metric_value, value)
            failure.metric_threshold.value_threshold.lower_bound.value = 0.9
            failure.message = message
    tfx_store._write_records(
        os.path.join(uri, "validations.tfrecord"), [validation.SerializeToString()]
    )


def tfma_overall_metrics(uri: str) -> dict[str, float]:
    """The overall slice's metrics of the model tfma.load_eval_result picks, by name, "<output>/"
    in front of a name two outputs share."""
    import tensorflow_model_analysis as tfma

    result = tfma.load_eval_result(uri)
    by_output = next((m for key, m in result.slicing_metrics if key == ()), {})
    counts: dict[str, int] = {}
    for values in by_output.values():
        for name in values.get("", {}):
            counts[name] = counts.get(name, 0) + 1
    metrics = {}
    for output, values in by_output.items():
        for name, value in values.get("", {}).items():
            key = f"{output}/{name}" if output and counts[name] > 1 else name
            if "doubleValue" in value:
                metrics[key] = float(value["doubleValue"])
            elif "boundedValue" in value:
                metrics[key] = float(value["boundedValue"]["value"])
    return metrics


@pytest.mark.parametrize("case", list(CASES))
def test_overall_metrics_are_tfma_s(case, tmp_path):
    entries, expected = CASES[case]
    uri = str(tmp_path / "evaluation")
    write_output(uri, entries)
    assert evaluation.overall_metrics(uri) == pytest.approx(expected)
    assert evaluation.overall_metrics(uri) == pytest.approx(tfma_overall_metrics(uri))


def test_metrics_by_model_keep_the_baseline_apart(tmp_path):
    uri = str(tmp_path / "evaluation")
    write_output(uri, WITH_BASELINE)
    by_model = evaluation.overall_metrics_by_model(uri)
    assert by_model["baseline"] == {"sparse_categorical_accuracy": 0.95}
    assert by_model["candidate"]["sparse_categorical_accuracy_diff"] == pytest.approx(0.02)


def test_validation_failures_are_tfma_s(tmp_path):
    import tensorflow_model_analysis as tfma

    uri = str(tmp_path / "evaluation")
    failures = [
        ("sparse_categorical_accuracy", 0.85, False, "below the lower bound"),
        ("sparse_categorical_accuracy", (-0.01, -0.02, 0.0), True, "worse than the baseline"),
    ]
    write_output(uri, WITH_BASELINE, failures)
    found = evaluation.validation_failures(uri)
    assert [(f["metric"], f["is_diff"], f["message"]) for f in found] == [
        (name, is_diff, message) for name, _, is_diff, message in failures
    ]
    assert [f["value"] for f in found] == pytest.approx([0.85, -0.01])
    assert found[0]["threshold"] == "value_threshold { lower_bound { value: 0.9 } }"
    loaded = tfma.load_validation_result(uri)
    assert [
        (f.metric_key.name, f.metric_key.is_diff, f.message)
        for per_slice in loaded.metric_validations_per_slice
        for f in per_slice.failures
    ] == [(f["metric"], f["is_diff"], f["message"]) for f in found]


def test_no_validation_result_no_failures(tmp_path):
    uri = str(tmp_path / "evaluation")
    write_output(uri, ONE_MODEL)
    os.remove(os.path.join(uri, "validations.tfrecord"))
    assert evaluation.validation_failures(uri) == []
    assert evaluation.overall_metrics(uri) == pytest.approx(CASES["one model"][1])
