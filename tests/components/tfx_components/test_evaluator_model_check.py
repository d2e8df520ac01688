"""The Evaluator's check of the candidate model against the EvalConfig (model_check): a missing
signature, preprocessing function, label or prediction key is one line naming --eval_config."""

from __future__ import annotations

import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from google.protobuf import json_format, text_format

from components.tfx_components.evaluator import executor, model_check

TFX_STYLE = """
model_specs {
  signature_name: "serving_default"
  label_key: "species_xf"
  preprocessing_function_names: "transform_features"
}
metrics_specs { metrics { class_name: "SparseCategoricalAccuracy" } }
"""
SIGNATURES = {
    "serving_default": (["examples"], ["outputs"]),
    "transform_features": (["examples"], ["body_mass_g_xf", "species_xf"]),
}


def config(text: str = TFX_STYLE) -> tfma.EvalConfig:
    return text_format.Parse(text, tfma.EvalConfig())


def test_a_model_with_the_config_s_signatures_and_label_passes():
    model_check.check(config(), SIGNATURES, set(), {"species", "body_mass_g"})
    # The label may also be a raw feature of the examples (no preprocessing function).
    raw = config('model_specs { label_key: "species" }')
    model_check.check(raw, {"serving_default": ([], ["outputs"])}, set(), {"species"})


def test_the_examples_are_read_only_for_a_label_no_preprocessing_function_returns():
    def unread() -> set[str]:
        raise AssertionError("examples read")

    model_check.check(config(), SIGNATURES, set(), unread)
    with pytest.raises(model_check.EvalConfigMismatch, match="label_key 'species'"):
        model_check.check(
            config(TFX_STYLE.replace("species_xf", "species")), SIGNATURES, set(), lambda: {"x"}
        )


def test_no_transform_features_signature_is_one_line_naming_eval_config():
    only_serving = {"serving_default": SIGNATURES["serving_default"]}
    with pytest.raises(model_check.EvalConfigMismatch) as error:
        model_check.check(config(), only_serving, set(), {"species"})
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "the EvalConfig's preprocessing_function_names names 'transform_features', which the "
        "model does not have (its signatures: serving_default); give --eval_config FILE"
    )


def test_a_missing_signature_name_is_named():
    with pytest.raises(model_check.EvalConfigMismatch, match=r"signature_name 'serve' is not a"):
        model_check.check(
            config(TFX_STYLE.replace('"serving_default"', '"serve"')), SIGNATURES, set(), set()
        )


def test_a_label_no_function_returns_and_no_example_holds_is_named_with_the_outputs():
    with pytest.raises(model_check.EvalConfigMismatch) as error:
        model_check.check(
            config(TFX_STYLE.replace("species_xf", "tips_xf")), SIGNATURES, set(), {"species"}
        )
    assert str(error.value).startswith(
        "the EvalConfig's label_key 'tips_xf' is neither an output of transform_features "
        "(outputs: body_mass_g_xf, species_xf) nor a feature of the eval examples; give "
        "--eval_config FILE"
    )


def test_what_the_proto_cannot_tell_is_not_refused():
    # A preprocessing tf.function saved as an attribute (TFMA accepts it): outputs unknown.
    only_serving = {"serving_default": SIGNATURES["serving_default"]}
    model_check.check(config(), only_serving, {"transform_features"}, {"species"})
    # No examples read: the label is not judged.
    model_check.check(config(TFX_STYLE.replace("species_xf", "x")), SIGNATURES, set(), set())
    # The baseline's spec is not the candidate's.
    baseline = config('model_specs { name: "b" is_baseline: true signature_name: "nope" }')
    model_check.check(baseline, SIGNATURES, set(), set())


def test_a_prediction_key_the_serving_signature_lacks_is_named():
    two = {"serving_default": (["examples"], ["logits", "probabilities"])}
    text = 'model_specs { prediction_key: "scores" }'
    with pytest.raises(model_check.EvalConfigMismatch, match=r"prediction_key 'scores' is not an"):
        model_check.check(config(text), two, set(), set())


def _save_model(path: str, with_transform: bool) -> None:
    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            return {"outputs": tf.zeros([tf.size(examples), 3])}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def transform(self, examples):
            return {"species_xf": tf.zeros([tf.size(examples)], tf.int64)}

    model = Model()
    signatures = {"serving_default": model.serve}
    if with_transform:
        signatures["transform_features"] = model.transform
    tf.saved_model.save(model, path, signatures=signatures)


def _write_examples(split_dir) -> None:
    split_dir.mkdir(parents=True)
    example = tf.train.Example()
    example.features.feature["species"].int64_list.value.append(1)
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    with tf.io.TFRecordWriter(str(split_dir / "data_tfrecord-00000.gz"), options) as writer:
        writer.write(example.SerializeToString())


def test_the_executor_checks_the_candidate_saved_model_and_the_eval_examples(tmp_path):
    from tfx.types import standard_artifacts

    model_dir = tmp_path / "model"
    _save_model(str(model_dir / "Format-Serving"), with_transform=False)
    _write_examples(tmp_path / "examples" / "Split-eval")
    signatures, attributes = model_check.saved_model_interface(str(model_dir / "Format-Serving"))
    assert signatures == {"serving_default": (["examples"], ["outputs"])}
    assert "transform" in attributes and "transform_features" not in attributes
    assert model_check.example_feature_names(str(tmp_path / "examples" / "Split-eval")) == {
        "species"
    }
    model = standard_artifacts.Model()
    model.uri = str(model_dir)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    examples.split_names = '["eval"]'
    properties = {
        "eval_config": json_format.MessageToJson(config()),
        "example_splits": '["eval"]',
    }
    inputs = {"model": [model], "examples": [examples]}
    with pytest.raises(model_check.EvalConfigMismatch, match="'transform_features', which the"):
        executor.check_candidate(inputs, properties)
    _save_model(str(tmp_path / "good" / "Format-Serving"), with_transform=True)
    model.uri = str(tmp_path / "good")
    executor.check_candidate(inputs, properties)


def test_a_model_without_transform_label_has_the_config_read_the_label_from_transform_features(
    tmp_path,
):
    """The project's EvalConfig reads the label from transform_label; a baseline (or cached
    candidate) exported before that signature existed turns it into transform_features for
    the run, every other field as it was; with every model having it, nothing changes."""
    from tfx.types import standard_artifacts

    label_only = config(TFX_STYLE.replace('"transform_features"', '"transform_label"'))
    properties = {"eval_config": json_format.MessageToJson(label_only), "other": "kept"}

    def model(name: str, signatures: dict):
        module = tf.Module()
        for key, function in signatures.items():
            setattr(module, key, function)
        tf.saved_model.save(module, str(tmp_path / name / "Format-Serving"), signatures=signatures)
        artifact = standard_artifacts.Model()
        artifact.uri = str(tmp_path / name)
        return artifact

    examples = tf.TensorSpec([None], tf.string, name="examples")
    serve = tf.function(lambda examples: {"outputs": tf.zeros([tf.size(examples), 3])})
    label = tf.function(lambda examples: {"species_xf": tf.zeros([tf.size(examples)], tf.int64)})
    new = model(
        "new",
        {
            "serving_default": serve.get_concrete_function(examples),
            "transform_label": label.get_concrete_function(examples),
        },
    )
    old = model(
        "old",
        {
            "serving_default": serve.get_concrete_function(examples),
            "transform_features": label.get_concrete_function(examples),
        },
    )

    assert executor.label_signature_for([new], properties) is properties
    changed = executor.label_signature_for([new, old], properties)
    assert changed["other"] == "kept"
    read = json_format.Parse(changed["eval_config"], tfma.EvalConfig())
    assert list(read.model_specs[0].preprocessing_function_names) == ["transform_features"]
    expected = config()
    assert read == expected
    # A config that does not name transform_label (a user's --eval_config) is left alone.
    tfx_style = {"eval_config": json_format.MessageToJson(config())}
    assert executor.label_signature_for([old], tfx_style) is tfx_style


def test_feature_names_are_read_across_files_up_to_the_limit(tmp_path):
    """The first `limit` examples in file order, GZIP or not, their names united."""
    split = tmp_path / "Split-eval"
    split.mkdir()

    def write(name: str, features: list[str], compression: str) -> None:
        options = tf.io.TFRecordOptions(compression_type=compression)
        with tf.io.TFRecordWriter(str(split / name), options) as writer:
            for feature in features:
                example = tf.train.Example()
                example.features.feature[feature].float_list.value.append(1.0)
                writer.write(example.SerializeToString())

    write("data-00000.gz", ["a", "b"], "GZIP")
    write("data-00001", ["c"], "")
    assert model_check.example_feature_names(str(split)) == {"a", "b", "c"}
    assert model_check.example_feature_names(str(split), limit=1) == {"a"}
    assert model_check.example_feature_names(str(split), limit=2) == {"a", "b"}
    assert model_check.example_feature_names(str(tmp_path / "empty")) == set()
