"""Evaluator executor that treats an empty baseline artifact as no baseline.

BaselineModel always produces its artifact (a KFP task cannot leave an output out); on a first
run it holds no model. TFX's Evaluator would fail to load it, so the empty artifact is removed
from the inputs and the run is evaluated as TFX evaluates one without a baseline (the value
threshold only). A staged user module (custom metrics named by the user's EvalConfig) is made
importable first, here and in the Beam SDK workers (components.user_code), and TFMA's eager
Keras metric updates skip AutoGraph (components.compat). Everything else is TFX's executor,
through super(). A model exported before the transform_label signature (a baseline, or a
cached candidate) has the EvalConfig read the label from transform_features instead
(label_signature_for). Before it, the candidate model is checked against the EvalConfig
(model_check: a missing signature or label is one line naming --eval_config, not a TFMA
traceback).
"""

from __future__ import annotations

from typing import Any

from tfx.components.evaluator import executor as tfx_executor
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import json_utils, path_utils

from components import compat, user_code
from components.ml import features
from components.tfx_components import baseline
from components.tfx_components.evaluator import model_check

BASELINE_MODEL_KEY = standard_component_specs.BASELINE_MODEL_KEY
MODEL_KEY = standard_component_specs.MODEL_KEY
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
EVAL_CONFIG_KEY = standard_component_specs.EVAL_CONFIG_KEY
EXAMPLE_SPLITS_KEY = standard_component_specs.EXAMPLE_SPLITS_KEY


def present_baselines(models: list) -> list:
    """The baseline artifacts that hold a SavedModel."""
    return [m for m in models if baseline.has_saved_model(path_utils.serving_model_path(m.uri))]


def check_candidate(input_dict, exec_properties: dict[str, Any]) -> None:
    """model_check.check on the candidate SavedModel and the first eval split's examples."""
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    text = exec_properties.get(EVAL_CONFIG_KEY)
    models = list(input_dict.get(MODEL_KEY) or [])
    if not text or not models:
        return
    eval_config = json_format.Parse(text, tfma.EvalConfig())
    signatures, attributes = model_check.saved_model_interface(
        path_utils.serving_model_path(models[0].uri)
    )
    splits = json_utils.loads(exec_properties.get(EXAMPLE_SPLITS_KEY) or "null") or ["eval"]
    examples = list(input_dict.get(EXAMPLES_KEY) or [])

    def raw_features() -> set[str]:  # read only for a label no preprocessing function returns
        if not examples:
            return set()
        return model_check.example_feature_names(artifact_utils.get_split_uri(examples, splits[0]))

    model_check.check(eval_config, signatures, attributes, raw_features)


def label_signature_for(models: list, exec_properties: dict[str, Any]) -> dict[str, Any]:
    """exec_properties with the EvalConfig's preprocessing function transform_label replaced by
    transform_features (the whole transform graph, whose outputs include the same transformed
    label) when one of the models (candidate or baseline) was exported before transform_label
    existed. TFMA applies one list of preprocessing functions to every model; the metrics are
    the same either way, transform_label only spares TFMA every other transformed column."""
    text = exec_properties.get(EVAL_CONFIG_KEY)
    if not text or features.TRANSFORM_LABEL_SIGNATURE not in text:
        return exec_properties
    for model in models:
        signatures, _ = model_check.saved_model_interface(path_utils.serving_model_path(model.uri))
        if features.TRANSFORM_LABEL_SIGNATURE not in signatures:
            break
    else:
        return exec_properties
    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    eval_config = json_format.Parse(text, tfma.EvalConfig())
    for spec in eval_config.model_specs:
        names = [
            features.TRANSFORM_SIGNATURE if name == features.TRANSFORM_LABEL_SIGNATURE else name
            for name in spec.preprocessing_function_names
        ]
        del spec.preprocessing_function_names[:]
        spec.preprocessing_function_names.extend(names)
    return {**exec_properties, EVAL_CONFIG_KEY: json_format.MessageToJson(eval_config)}


class Executor(tfx_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties: dict[str, Any]):  # noqa: N802
        # TFMA metrics of a user's --eval_config defined in their module's folder: importable
        # here (where TFMA builds the computations) and in the SDK workers (which run them).
        user_code.prepare_beam_executor(self, exec_properties)
        inputs = dict(input_dict)
        present = present_baselines(list(inputs.pop(BASELINE_MODEL_KEY, None) or []))
        if present:
            inputs[BASELINE_MODEL_KEY] = present
        exec_properties = label_signature_for(
            [*(inputs.get(MODEL_KEY) or []), *present], exec_properties
        )
        check_candidate(input_dict, exec_properties)
        # Keras metrics updated eagerly without AutoGraph's source conversion (compat says why).
        with compat.tfma_keras_metrics_without_autograph():
            return super().Do(inputs, output_dict, exec_properties)
