"""The Evaluator's batched path (evaluator.batched) against TFMA's, on one small model and data:
every metric value, the diff metrics against a baseline, the validation result, the blessing and
eval_config.json as TFMA reads them; and which EvalConfigs go to TFMA, with the reason logged."""

from __future__ import annotations

import json
import os
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from google.protobuf import json_format

from components.tfx_components.evaluator import batched, batched_metrics, executor
from pipeline import builder, datasets
from pipeline import config as config_lib

LABEL = "delay"
ROWS = 2_500  # three record batches of batched.BATCH_ROWS, over two files


def regression_config(tmp_path, min_skill: float = 0.25) -> tfma.EvalConfig:
    dataset = datasets.user_csv(str(tmp_path), LABEL, task="regression")
    config = config_lib.local_config(
        dataset=dataset, output_root=str(tmp_path), min_regression_skill=min_skill
    )
    return builder.eval_config(config)


def save_model(path: str, slope: float, noise: float) -> None:
    """A SavedModel with the project's signatures over serialized tf.Examples: serving_default
    (prediction in the label's units and z-scored: training mean 10, deviation 4) and
    transform_label (the z-scored label)."""
    spec = {"x": tf.io.FixedLenFeature([], tf.float32), LABEL: tf.io.VarLenFeature(tf.float32)}

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            parsed = tf.io.parse_example(examples, spec)
            x = parsed["x"]
            prediction = 10.0 + slope * x + noise * tf.sin(37.0 * x)
            return {
                "prediction": prediction[:, None],
                "prediction_xf": ((prediction - 10.0) / 4.0)[:, None],
            }

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def label(self, examples):
            parsed = tf.io.parse_example(examples, spec)
            label = tf.sparse.to_dense(parsed[LABEL])[:, 0]
            return {f"{LABEL}_xf": (label - 10.0) / 4.0}

    model = Model()
    tf.saved_model.save(
        model,
        os.path.join(path, "Format-Serving"),
        signatures={"serving_default": model.serve, "transform_label": model.label},
    )


def write_examples(split_dir: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=ROWS).astype(np.float32)
    delay = 10.0 + 3.0 * x + rng.normal(scale=1.0, size=ROWS)
    write_split(split_dir, floats={"x": x, LABEL: delay})


def write_split(split_dir: str, floats: dict, ints: dict | None = None) -> None:
    """ROWS examples of those float and int64 columns in two GZIP'd TFRecord shards, as
    Transform writes a split."""
    os.makedirs(split_dir)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    for shard, rows in enumerate(np.array_split(np.arange(ROWS), 2)):
        name = os.path.join(split_dir, f"data_tfrecord-0000{shard}-of-00002.gz")
        with tf.io.TFRecordWriter(name, options) as writer:
            for row in rows:
                example = tf.train.Example()
                for column, values in floats.items():
                    example.features.feature[column].float_list.value.append(values[row])
                for column, values in (ints or {}).items():
                    example.features.feature[column].int64_list.value.append(int(values[row]))
                writer.write(example.SerializeToString())


def evaluate(tmp_path, name: str, eval_config, baseline: str | None, path: str):
    """The project's Evaluator executor on the data and models under tmp_path, on the batched
    path or (path="tfma") TFMA's; the output and blessing directories."""
    from tfx.dsl.components.base import base_beam_executor
    from tfx.types import standard_artifacts

    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    examples.split_names = '["eval"]'
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / "candidate")
    inputs = {"examples": [examples], "model": [model]}
    if baseline:
        base = standard_artifacts.Model()
        base.uri = str(tmp_path / baseline)
        inputs["baseline_model"] = [base]
    evaluation = standard_artifacts.ModelEvaluation()
    evaluation.uri = str(tmp_path / name / "evaluation")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(tmp_path / name / "blessing")
    os.makedirs(blessing.uri)
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=["--runner=DirectRunner", "--direct_running_mode=in_memory"],
        tmp_dir=str(tmp_path / name / "tmp"),
    )
    properties = {
        "eval_config": json_format.MessageToJson(eval_config),
        "example_splits": '["eval"]',
    }
    outputs = {"evaluation": [evaluation], "blessing": [blessing]}
    with mock.patch.object(executor.logging, "info") as info:
        if path == "tfma":
            with mock.patch.object(batched, "plan", return_value="the test asks for TFMA"):
                executor.Executor(context).Do(inputs, outputs, properties)
        else:
            executor.Executor(context).Do(inputs, outputs, properties)
    said = " ".join(str(call.args[0]) % call.args[1:] for call in info.call_args_list)
    return evaluation.uri, blessing, said


def metrics_of(uri: str) -> dict:
    [result] = tfma.load_metrics(uri)
    assert not result.slice_key.single_slice_keys
    return {
        json_format.MessageToJson(item.key, sort_keys=True): item.value.double_value.value
        for item in result.metric_keys_and_values
    }


def assert_same_evaluation(tmp_path, tfma_run, batched_run) -> tfma.ValidationResult:
    (tfma_uri, tfma_blessing, tfma_said), (ours_uri, ours_blessing, ours_said) = (
        tfma_run,
        batched_run,
    )
    assert "TFMA's per-example evaluation, since the test asks for TFMA" in tfma_said
    assert "batched evaluation over record batches" in ours_said
    expected, got = metrics_of(tfma_uri), metrics_of(ours_uri)
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        # TFMA's Keras metrics (the skill, RMSE, the standardized errors) sum in float32.
        assert got[key] == pytest.approx(value, rel=2e-6, abs=1e-7), key
    # Validation: the same verdict and the same failures, as TFMA's loader reads them.
    tfma_validation = tfma.load_validation_result(tfma_uri)
    ours = tfma.load_validation_result(ours_uri)
    assert ours.validation_ok == tfma_validation.validation_ok
    assert ours.validation_details == tfma_validation.validation_details
    failures = [
        [(f.metric_key.name, f.metric_key.is_diff) for f in s.failures]
        for s in ours.metric_validations_per_slice
    ]
    expected_failures = [
        [(f.metric_key.name, f.metric_key.is_diff) for f in s.failures]
        for s in tfma_validation.metric_validations_per_slice
    ]
    assert failures == expected_failures
    # The blessing artifact, as TFX's Evaluator writes it.
    assert os.listdir(ours_blessing.uri) == os.listdir(tfma_blessing.uri)
    assert ours_blessing.mlmd_artifact.custom_properties == (
        tfma_blessing.mlmd_artifact.custom_properties
    )
    # The files TFMA writes, and its whole reading of them.
    assert sorted(os.listdir(ours_uri)) == sorted(os.listdir(tfma_uri))
    with (
        open(os.path.join(ours_uri, "eval_config.json")) as ours_file,
        open(os.path.join(tfma_uri, "eval_config.json")) as tfma_file,
    ):
        assert json.load(ours_file) == json.load(tfma_file)
    assert tfma.load_eval_result(ours_uri).plots == tfma.load_eval_result(tfma_uri).plots
    return ours


def test_batched_and_tfma_agree_on_every_metric_and_the_blessing(tmp_path):
    write_examples(str(tmp_path / "examples" / "Split-eval"))
    save_model(str(tmp_path / "candidate"), slope=3.0, noise=0.5)
    save_model(str(tmp_path / "better"), slope=3.0, noise=0.1)
    eval_config = regression_config(tmp_path)

    # No baseline: the skill's value threshold only; blessed.
    alone = [evaluate(tmp_path, f"alone-{p}", eval_config, None, p) for p in ("tfma", "batched")]
    validation = assert_same_evaluation(tmp_path, *alone)
    assert validation.validation_ok
    assert metrics_of(alone[1][0])[
        json_format.MessageToJson(
            tfma.metrics.MetricKey(
                "example_count", output_name="prediction", example_weighted=False
            ).to_proto(),
            sort_keys=True,
        )
    ] == float(ROWS)

    # A better baseline: the candidate's skill drops (the diff metric fails the change
    # threshold); not blessed, on both paths alike, with every diff metric compared.
    against = [evaluate(tmp_path, f"vs-{p}", eval_config, "better", p) for p in ("tfma", "batched")]
    validation = assert_same_evaluation(tmp_path, *against)
    assert not validation.validation_ok
    [per_slice] = validation.metric_validations_per_slice
    assert [(f.metric_key.name, f.metric_key.is_diff) for f in per_slice.failures] == [
        ("mean_squared_error_skill", True)
    ]
    diffs = [key for key in metrics_of(against[1][0]) if '"isDiff": true' in key]
    assert len(diffs) == 6

    # A bar the model does not reach: not blessed by the value threshold.
    strict = regression_config(tmp_path, min_skill=0.99)
    high = [evaluate(tmp_path, f"strict-{p}", strict, None, p) for p in ("tfma", "batched")]
    assert not assert_same_evaluation(tmp_path, *high).validation_ok


CLASS_LABEL = "kind"


def classification_config(
    tmp_path, min_skill: float = 0.1, class_weight: str = "none"
) -> tfma.EvalConfig:
    """The project's classifier EvalConfig (pipeline.builder.classification_eval_config):
    example count, accuracy, accuracy skill, the majority-class accuracy, log loss, the
    confusion-matrix plot, AUC micro-averaged over the classes; with class_weight balanced the
    balanced-accuracy skill too."""
    from components.training.settings import TrainingConfig

    dataset = datasets.user_csv(str(tmp_path), CLASS_LABEL, task="classification")
    config = config_lib.local_config(
        dataset=dataset,
        output_root=str(tmp_path),
        min_classification_skill=min_skill,
        training=TrainingConfig(class_weight=class_weight),
    )
    return builder.eval_config(config)


def class_scores(x, y, classes: int):
    """Each class's true score at (x, y): class 0 the most frequent."""
    angles = [2.0 * np.pi * k / classes for k in range(classes)]
    return [np.cos(a) * x + np.sin(a) * y + (0.6 if k == 0 else 0.0) for k, a in enumerate(angles)]


def save_classifier(path: str, classes: int, noise: float, sharpness: float = 2.0) -> None:
    """A SavedModel as the project's classifier has: serving_default gives softmax
    `probabilities` [examples, classes], transform_label the class index `kind_xf`."""
    spec = {
        "x": tf.io.FixedLenFeature([], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.float32),
        CLASS_LABEL: tf.io.VarLenFeature(tf.int64),
    }

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            parsed = tf.io.parse_example(examples, spec)
            x, y = parsed["x"], parsed["y"]
            scores = tf.stack(class_scores(x, y, classes), axis=1)
            wobble = noise * tf.stack(
                [tf.sin(13.0 * (k + 1) * x + 7.0 * y) for k in range(classes)], axis=1
            )
            return {"probabilities": tf.nn.softmax(sharpness * (scores + wobble))}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def label(self, examples):
            parsed = tf.io.parse_example(examples, spec)
            return {f"{CLASS_LABEL}_xf": tf.sparse.to_dense(parsed[CLASS_LABEL])[:, 0]}

    model = Model()
    tf.saved_model.save(
        model,
        os.path.join(path, "Format-Serving"),
        signatures={"serving_default": model.serve, "transform_label": model.label},
    )


def write_class_examples(split_dir: str, classes: int) -> None:
    rng = np.random.default_rng(1)
    x, y = (rng.normal(size=ROWS).astype(np.float32) for _ in range(2))
    scores = np.stack(class_scores(x, y, classes), axis=1)
    kind = np.argmax(scores + rng.normal(scale=0.7, size=scores.shape), axis=1)
    write_split(split_dir, floats={"x": x, "y": y}, ints={CLASS_LABEL: kind})


# Values both paths compute from the same integers: the count; AUC (TFMA's derived computation
# itself, on a calibration histogram whose label and example sums are integer counts, so
# bucket for bucket the same); and the count ratios, which tf-keras divides in float32, i.e.
# the float32 rounding of the exact quotient, as the batched path's float64 quotient rounded to
# float32 is (double rounding through 53 bits is innocuous for division into 24: 53 >= 2*24+2).
EXACT = {
    "example_count",
    "auc",
    "sparse_categorical_accuracy",
    "majority_class_accuracy",
    "accuracy_skill",
}


def assert_exact_where_integers(run) -> None:
    tfma_metrics, batched_metrics = metrics_of(run[0][0]), metrics_of(run[1][0])
    for key, value in tfma_metrics.items():
        if json.loads(key)["name"] in EXACT and '"isDiff": true' not in key:
            assert batched_metrics[key] == value, key


@pytest.mark.parametrize("classes", [3, 2])
def test_batched_and_tfma_agree_on_the_classifier_s_metrics_and_blessing(tmp_path, classes):
    """The project's classification EvalConfig, multiclass (3 classes, as the penguins) and
    binary (2 softmax columns, as a binary CSV label): every metric, the confusion-matrix plot,
    validation and blessing as TFMA's. Tolerances as assert_same_evaluation's (rel 2e-6): the
    log loss and the balanced-accuracy skill are tf-keras float32 sums (n terms summed pairwise
    in float32 have a relative error within log2(n) * 2**-24, 7e-7 for n = 2,500, plus one float32
    add per batch), computed per example here in float32 as tf-keras does and summed in float64;
    the diff metrics are those values' differences. EXACT ones are compared bit for bit."""
    write_class_examples(str(tmp_path / "examples" / "Split-eval"), classes)
    save_classifier(str(tmp_path / "candidate"), classes, noise=0.6)
    save_classifier(str(tmp_path / "better"), classes, noise=0.1)
    eval_config = classification_config(tmp_path)
    assert isinstance(batched.plan(defaults(eval_config)), batched.Plan)

    alone = [evaluate(tmp_path, f"alone-{p}", eval_config, None, p) for p in ("tfma", "batched")]
    assert assert_same_evaluation(tmp_path, *alone).validation_ok
    assert_exact_where_integers(alone)
    names = {json.loads(key)["name"] for key in metrics_of(alone[1][0])}
    assert names == {
        "example_count",
        "sparse_categorical_accuracy",
        "accuracy_skill",
        "majority_class_accuracy",
        "sparse_categorical_crossentropy",
        "auc",
    }
    [plots] = tfma.load_eval_result(alone[1][0]).plots
    matrices = plots[1][""][""]["multiClassConfusionMatrixAtThresholds"]["matrices"]
    assert sum(e["numWeightedExamples"] for e in matrices[0]["entries"]) == ROWS

    # A better baseline: the accuracy's no-regression diff fails; not blessed on both paths.
    against = [evaluate(tmp_path, f"vs-{p}", eval_config, "better", p) for p in ("tfma", "batched")]
    validation = assert_same_evaluation(tmp_path, *against)
    assert not validation.validation_ok
    [per_slice] = validation.metric_validations_per_slice
    assert ("sparse_categorical_accuracy", True) in [
        (f.metric_key.name, f.metric_key.is_diff) for f in per_slice.failures
    ]
    assert_exact_where_integers(against)
    diffs = [key for key in metrics_of(against[1][0]) if '"isDiff": true' in key]
    assert len(diffs) == 6

    # A skill bar the model does not reach.
    strict = classification_config(tmp_path, min_skill=0.99)
    high = [evaluate(tmp_path, f"strict-{p}", strict, None, p) for p in ("tfma", "batched")]
    assert not assert_same_evaluation(tmp_path, *high).validation_ok

    if classes == 3:
        # --class_weight balanced: the balanced-accuracy skill holds the bar (and its diff).
        balanced = classification_config(tmp_path, class_weight="balanced")
        runs = [evaluate(tmp_path, f"bal-{p}", balanced, "better", p) for p in ("tfma", "batched")]
        validation = assert_same_evaluation(tmp_path, *runs)
        assert not validation.validation_ok
        assert "balanced_accuracy_skill" in {
            json.loads(key)["name"] for key in metrics_of(runs[1][0])
        }


def defaults(eval_config, baseline: bool = False):
    return tfma.utils.update_eval_config_with_defaults(
        eval_config, has_baseline=baseline, rubber_stamp=True
    )


def test_the_project_s_regression_config_is_planned_with_tfma_s_keys(tmp_path):
    plan = batched.plan(defaults(regression_config(tmp_path), baseline=True))
    assert isinstance(plan, batched.Plan)
    assert {(t.model_name, t.output_name, t.label_key, t.prediction_key) for t in plan.targets} == {
        (model, output, label, output)
        for model in ("candidate", "baseline")
        for output, label in (("prediction", LABEL), ("prediction_xf", f"{LABEL}_xf"))
    }
    assert len(plan.keys) == 12 and not any(key.is_diff for key in plan.keys)


def test_what_the_batched_path_does_not_compute_goes_to_tfma_with_the_reason(tmp_path):
    config = regression_config(tmp_path)
    sliced = tfma.EvalConfig()
    sliced.CopyFrom(config)
    sliced.slicing_specs.add(feature_keys=["origin"])
    assert batched.plan(defaults(sliced)) == (
        "the EvalConfig has slicing specs other than the overall slice"
    )
    user = tfma.EvalConfig()
    user.CopyFrom(config)
    user.model_specs[0].preprocessing_function_names[:] = ["transform_features"]
    assert "reads its label through transform_features" in str(batched.plan(defaults(user)))
    other = tfma.EvalConfig()
    other.CopyFrom(config)
    other.metrics_specs[0].metrics.add(class_name="MeanAbsolutePercentageError")
    assert batched.plan(defaults(other)) == (
        "metric MeanAbsolutePercentageError is not one the batched path computes"
    )
    # The project's classifier is batched; AUC macro-averaged (binarized per class) is TFMA's.
    classifier = builder.eval_config(
        config_lib.local_config(dataset=datasets.penguins(), output_root=str(tmp_path))
    )
    assert isinstance(batched.plan(defaults(classifier)), batched.Plan)
    macro = tfma.EvalConfig()
    macro.CopyFrom(classifier)
    macro.metrics_specs[1].aggregate.CopyFrom(tfma.AggregationOptions(macro_average=True))
    macro.metrics_specs[1].binarize.CopyFrom(tfma.BinarizationOptions(class_ids={"values": [0, 1]}))
    assert batched.plan(defaults(macro)) == (
        "a metrics spec binarizes, groups by query or weighs examples"
    )
    other_class = tfma.EvalConfig()
    other_class.CopyFrom(classifier)
    other_class.metrics_specs[0].metrics.add(class_name="Precision")
    assert batched.plan(defaults(other_class)) == (
        "metric Precision is not one the batched path computes"
    )


def test_a_label_missing_from_an_example_is_named(tmp_path):
    import pyarrow as pa

    batch = pa.RecordBatch.from_arrays(
        [pa.array([[1.0], [], [2.0]], type=pa.list_(pa.float32()))], names=[LABEL]
    )
    with pytest.raises(batched.EvaluationInputError, match="example 1 of a batch has 0 values"):
        batched.raw_column(batch, LABEL)
    assert batched.raw_column(batch, "absent") is None


def test_the_evaluator_s_cache_key_follows_the_batched_code(tmp_path):
    """The Evaluator's fingerprint (its cache key's code part) holds this module's digest: an
    edit to the batched path reruns the Evaluator instead of serving an older evaluation."""
    from pipeline import fingerprints

    dataset = datasets.user_csv(str(tmp_path), LABEL, task="regression")
    config = config_lib.local_config(dataset=dataset, output_root=str(tmp_path))
    [evaluator] = [c for c in builder.create_pipeline(config).components if c.id == "Evaluator"]
    code = fingerprints.fingerprint(evaluator)["code"]
    for module in (batched, batched_metrics):
        path = os.path.relpath(module.__file__, fingerprints.PROJECT_ROOT)
        assert code[path] == fingerprints.source_closure([batched.__name__])[path]


def test_a_class_label_the_model_cannot_score_is_named():
    """A label outside the model's classes stops the batched path naming the example; -1 (a
    class the training split lacked) counts as wrong for accuracy but has no log loss."""
    scores = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]], np.float32)
    with pytest.raises(batched.EvaluationInputError, match="example 2 of a batch has label"):
        batched_metrics.target_sums({"classes": True}, np.array([0.0, 1.0, 3.0]), scores, "k")
    sums = batched_metrics.target_sums({"classes": (0.0,)}, np.array([0.0, -1.0, 2.0]), scores, "k")
    assert batched_metrics.KERAS["sparse_categorical_accuracy"][1](sums) == pytest.approx(2 / 3)
    with pytest.raises(
        batched.EvaluationInputError, match="example 1 of a batch has label 'k' = -1"
    ):
        batched_metrics.target_sums({"crossentropy": True}, np.array([0.0, -1.0, 2.0]), scores, "k")
    one_column = scores[:, :1]
    with pytest.raises(batched.EvaluationInputError, match="one probability per class"):
        batched_metrics.target_sums({"classes": True}, np.array([0.0, 1.0, 0.0]), one_column, "k")


def test_no_eval_examples_is_not_blessed_with_the_missing_slice_named(tmp_path):
    """No examples: no overall slice, which TFMA's own CombineValidations reports as a missing
    slice and not ok; the files are there for TFMA's loaders."""
    plan = batched.plan(defaults(regression_config(tmp_path)))
    assert isinstance(plan, batched.Plan)
    out = str(tmp_path / "evaluation")
    batched.write_results(None, plan, {"": "model"}, out)
    validation = tfma.load_validation_result(out)
    assert not validation.validation_ok
    assert list(validation.missing_slices) == [tfma.SlicingSpec()]
    assert tfma.load_metrics(out) is not None and not list(tfma.load_metrics(out))
    assert sorted(os.listdir(out)) == [
        "attributions-00000-of-00001.tfrecord",
        "eval_config.json",
        "metrics-00000-of-00001.tfrecord",
        "plots-00000-of-00001.tfrecord",
        "validations.tfrecord",
    ]
